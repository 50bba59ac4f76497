"""One sentence per event. ``train`` prints the events it appends through ``describe`` as
they happen, and ``events RUN`` replays them through it, so both tell the same story."""

import json
from collections.abc import Callable
from typing import Any

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.recorded import Recorded
from overbrainer.plurals import plural, word
from overbrainer.projections.words import duration_text, job_shape, model_ready_text, size_text
from overbrainer.runpod.clocks import offset_text
from overbrainer.runpod.volume_layout import VOLUME_MOUNT
from overbrainer.train.metrics import MetricsSummary, format_loss


def _rate(rate: float | None) -> str:
    return f"${rate:.2f}/h" if rate is not None else "rate unknown"


def _money(amount: float | None) -> str:
    return f"${amount:.2f}" if amount is not None else "unknown"


def _metrics(metrics: dict[str, Any]) -> str:
    summary = MetricsSummary.from_dict(metrics)
    parts = []
    if summary.step is not None:
        total = summary.max_steps
        parts.append(f"step {summary.step}/{total}" if total else f"step {summary.step}")
    for key, value in (("loss", summary.loss), ("eval_loss", summary.eval_loss)):
        if value is not None:
            parts.append(f"{key} {format_loss(value)}")
    return ", ".join(parts)


_CANCEL_TEXT = {
    "asked": "cancel requested of the command following the run",
    "taken": "cancel taken by the command following the run: stopping its job",
}


_STOP_TEXT = {
    "asked": "stop requested of the command following the run (save a checkpoint and stop)",
    "taken": "stop taken by the command following the run: the job saves a checkpoint and stops",
}


def _created(e: ev.RunCreated, s: RunLog | None) -> str:
    keep = ", keeping its pod (--keep-pod)" if e.keep_pod else ""
    model = f" {e.adapter} of {e.base_model}" if e.base_model else ""
    resumed = ""
    if e.resumed_from:
        resumed = (
            f", resuming run {e.resumed_from.get('run')} from checkpoint-"
            f"{e.resumed_from.get('step')}"
        )
    shape = ""
    if e.processes != 1:
        shape = f", {job_shape(e.processes, e.parallelism)}"
    return f"created run {e.run_id}:{model} on target {e.target} ({e.kind}){shape}{keep}{resumed}"


def _job_started(e: ev.JobStarted, s: RunLog | None) -> str:
    where = f" in container {e.container}" if e.container else ""
    return f"started the job (pid {e.pid}{where}) in {e.job_dir}"


def _ended(e: ev.RunEnded, s: RunLog | None) -> str:
    why = f": {e.message}" if e.message and e.message != e.state else ""
    numbers = _metrics(e.metrics)
    return f"run {e.state}{why}" + (f" ({numbers})" if numbers else "")


def _followed(e: ev.Followed, s: RunLog | None) -> str:
    return "a command took over following the run (`events -v` names it)"


def _detached(e: ev.Detached, s: RunLog | None) -> str:
    numbers = _metrics(e.metrics)
    # The log is where a user whose terminal went away learns how to go on: the same words
    # as the command's last ones (where the job runs, and both ways on).
    run_id = s.run.run_id if s else None
    pod_id = s.pod.pod_id if s else None
    hint = f": `overbrainer train attach {run_id}` follows it again" if run_id else ""
    if run_id and pod_id:
        hint += f", `overbrainer pod rm {run_id}` deletes the pod"
    return (
        f"stopped following ({e.reason}); the job keeps running"
        + (f" on pod {pod_id}" if pod_id else "")
        + (f" at {numbers}" if numbers else "")
        + hint
    )


def _artifacts(e: ev.ArtifactsRetrieved, s: RunLog | None) -> str:
    return f"retrieved {plural(e.files, 'file')} ({size_text(e.bytes)}), every checksum verified"


def _attempt_sent(e: ev.AttemptSent, s: RunLog | None) -> str:
    # Older logs carry an absolute deadline here; newer ones the bound the pod counts itself.
    if e.max_hours is not None:
        bound = f"max_hours {e.max_hours:g} from its creation"
    else:
        bound = f"deadline {e.deadline or 'unknown'}"
    if e.max_cost_usd is not None:
        bound += f", max_cost_usd {_money(e.max_cost_usd)}"
    price = f" at {_rate(e.price_per_hour)}" if e.price_per_hour is not None else ""
    if e.nodes > 1:
        return (
            f"attempt {e.n}: asking Runpod for cluster {e.pod_name} of {e.nodes} pods on "
            f"{e.gpu_type}{price} for every node ({bound})"
        )
    return f"attempt {e.n}: asking Runpod for pod {e.pod_name} on {e.gpu_type}{price} ({bound})"


_SHOWN_CANDIDATES = 3  # the rest is counted; ``events -v`` has every one


def _candidate(c: dict[str, Any], e: ev.CandidatesChosen) -> str:
    text = str(c.get("gpu_type"))
    rate = c.get("price_per_hour")
    if isinstance(rate, int | float):
        text += f" {_rate(float(rate))}"
    hours = c.get("max_hours")
    if c.get("shortened") and isinstance(hours, int | float):
        text += f" (deadline {round(float(hours), 2):g} h by max_cost_usd {_money(e.max_cost_usd)})"
    return text


def _candidates(e: ev.CandidatesChosen, s: RunLog | None) -> str:
    how = "cheapest first" if e.source == "auto" else "as listed"
    tried = [_candidate(c, e) for c in e.candidates[:_SHOWN_CANDIDATES]]
    if len(e.candidates) > _SHOWN_CANDIDATES:
        tried.append(f"+{len(e.candidates) - _SHOWN_CANDIDATES} more")
    text = f"GPU types to try, {how}: {', '.join(tried)}"
    if e.left:
        text += f"; {len(e.left)} left out (events -v says why)"
    return text


def _capacity_awaited(e: ev.CapacityAwaited, s: RunLog | None) -> str:
    types = " or ".join(e.gpu_types) or "the GPU types"
    where = ", ".join(e.data_centers) or "any data center"
    return (
        f"no capacity for {e.gpu_count} × {types} in {where} (try {e.walks}): trying again "
        f"in {duration_text(e.seconds)}, waiting until {e.until} at the latest"
    )


def _volume_attached(e: ev.VolumeAttached, s: RunLog | None) -> str:
    size = f", {e.size_gb} GB" if e.size_gb is not None else ""
    done = "created" if e.created else "using"
    return (
        f"{done} network volume {e.volume_name} ({e.volume_id}{size}) in {e.data_center}: "
        f"the run's pods mount it at {VOLUME_MOUNT} and are created only there"
    )


def _cluster_ranked(e: ev.ClusterRanked, s: RunLog | None) -> str:
    nodes = ", ".join(f"node {m.get('rank')} pod {m.get('pod_id')}" for m in e.members)
    return f"cluster {e.cluster_id} ranked its nodes: {nodes}"


def _data_on_volume(e: ev.DataOnVolume, s: RunLog | None) -> str:
    how = "through the S3 API" if e.via == "s3" else "through the pod"
    said = [
        f"{f.get('path')} "
        + (f"sent ({size_text(int(f.get('size', 0)))})" if f.get("sent") else "already there")
        for f in e.files
    ]
    text = f"the run's data on the network volume {how}, verified: {', '.join(said) or 'none'}"
    if e.checkpoint is not None:
        c = e.checkpoint
        text += (
            f"; resume checkpoint-{c.get('step')} of run {c.get('run')}: "
            f"{plural(int(c.get('sent', 0)), 'file')} sent, {c.get('files', 0)} in all"
        )
    return text


def _attempt_resolved(e: ev.AttemptResolved, s: RunLog | None) -> str:
    pod = f" pod {e.pod_id}" if e.pod_id else ""
    detail = f": {e.detail}" if e.detail else ""
    return f"attempt {e.n} {e.result.replace('_', ' ')}{pod}{detail}"


def _pod_created(e: ev.PodCreated, s: RunLog | None) -> str:
    where = ", ".join(x for x in (e.gpu_type, e.data_center, _rate(e.cost_per_hour)) if x)
    deadline = f", deleted by {e.deadline} at the latest" if e.deadline else ""
    return f"created pod {e.pod_id} ({where}){deadline}; waiting for SSH"


def _jumped(e: ev.ClockJumped, s: RunLog | None) -> str:
    pod = f"pod {s.pod.pod_id}" if s and s.pod.pod_id else "the pod"
    return (
        f"this machine's clock jumped ({offset_text(e.seconds)} Runpod's); {pod} is within "
        "its bound by Runpod's clock: following went on"
    )


def _recovering(e: ev.Recovering, s: RunLog | None) -> str:
    # The reason names what was lost: a pod gone, stopped or without GPUs, a job stalled.
    seen = f" (the job last seen at step {e.last_step})" if e.last_step is not None else ""
    return f"recovery {e.attempt}/{e.max_recoveries} on a new pod: {e.reason}{seen}"


def _recovered(e: ev.Recovered, s: RunLog | None) -> str:
    start = f"step {e.resumed_step}" if e.resumed_step else "the start (no checkpoint home)"
    if e.from_volume:
        start += " on the network volume (nothing uploaded from home)"
    lost = f"; {e.lost_steps} steps done again" if e.lost_steps is not None else ""
    return f"recovery {e.attempt}: the job runs on pod {e.pod_id}, resumed from {start}{lost}"


def _endpoint(e: ev.EndpointSeen, s: RunLog | None) -> str:
    return f"pod {e.pod_id} answers SSH at {e.user}@{e.host}:{e.port}"


def _clock(e: ev.ClockOffset, s: RunLog | None) -> str:
    return (
        f"this machine's clock is {offset_text(e.offset_seconds)} Runpod's: the times this "
        "command records are off by as much"
    )


def _deleted(e: ev.PodDeleted, s: RunLog | None) -> str:
    by = {
        "client": "by overbrainer",
        "watchdog": "by its watchdog",
        "pod_rm": "by pod rm",
        "found_gone": "found gone",
    }.get(e.by, e.by)
    if e.reason in ("deadline", "cost_cap"):
        by += " at its " + ("deadline" if e.reason == "deadline" else "cost cap")
    what = _pod_or_cluster(e.pod_id, s)
    return f"{what} deleted ({by}) after {duration_text(e.uptime_seconds)}, spend {_money(e.spend)}"


def _stalled(e: ev.Stalled, s: RunLog | None) -> str:
    minutes = f"{e.silent_minutes:g} {word(e.silent_minutes, 'minute')}"
    if e.first_line:
        return f"stalled: the job wrote no metrics line in the {minutes} since it started"
    at = "" if e.last_step is None else f" (last at step {e.last_step})"
    return f"stalled: the job wrote no metrics line for {minutes}{at}"


def _billed(e: ev.PodBilled, s: RunLog | None) -> str:
    final = "" if e.final else " so far (Runpod's billing may still be catching up)"
    return f"Runpod billed {_money(e.amount)} for {_pod_or_cluster(e.pod_id, s)}{final}"


def _pod_or_cluster(pod_id: str, s: RunLog | None) -> str:
    """``pod P``, or, for a cluster's primary (which goes, and is billed, only with its
    cluster), ``cluster C (every node)``."""
    cluster = None if s is None else s.pod.costs.get(pod_id, {}).get("cluster")
    return f"pod {pod_id}" if cluster is None else f"cluster {cluster} (every node)"


_SENTENCES: dict[type[ev.Event], Callable[[Any, RunLog | None], str]] = {
    ev.RunCreated: _created,
    ev.JobStarted: _job_started,
    ev.RunEnded: _ended,
    ev.CancelRequested: lambda e, s: _CANCEL_TEXT.get(e.relay, "cancel requested"),
    ev.StopRequested: lambda e, s: _STOP_TEXT.get(
        e.relay, "stop requested: the job saves a checkpoint and stops"
    ),
    ev.Stalled: _stalled,
    ev.CheckpointRetrieved: lambda e, s: (
        f"checkpoint of step {e.step} retrieved ({e.path}), every checksum verified"
    ),
    ev.CheckpointOnVolume: lambda e, s: (
        f"checkpoint of step {e.step} whole on the network volume ({e.path}, "
        f"{plural(e.files, 'file')}), its manifest recorded"
    ),
    ev.ResumedFromVolume: lambda e, s: (
        f"resumes from checkpoint-{e.step} of run {e.source} on the network volume (it "
        "matches its recorded manifest): nothing uploaded from home"
    ),
    ev.CheckpointPruned: lambda e, s: (
        f"checkpoint of step {e.step} removed from this machine ({e.path}): only the last "
        "ones are kept ([training] keep_checkpoints)"
    ),
    ev.FilesRemoved: lambda e, s: (
        f"the run's files removed from this machine ({size_text(e.bytes)} freed); its events stay"
    ),
    ev.Interrupted: lambda e, s: f"interrupted before the job started ({e.stage})",
    ev.Detached: _detached,
    ev.Followed: _followed,
    ev.ArtifactsRetrieved: _artifacts,
    ev.NoteAdded: lambda e, s: f"note: {e.note}",
    ev.NoteCleared: lambda e, s: "note cleared",
    ev.ClockOffset: _clock,
    ev.ClockJumped: _jumped,
    ev.Recovering: _recovering,
    ev.Recovered: _recovered,
    ev.KeysGenerated: lambda e, s: "generated the run's SSH client key and pod host key",
    ev.AttemptSent: _attempt_sent,
    ev.AttemptResolved: _attempt_resolved,
    ev.PodCreated: _pod_created,
    ev.EndpointSeen: _endpoint,
    ev.PodReady: lambda e, s: f"pod {e.pod_id} ready (watchdog: {e.verdict})",
    ev.ClusterCreated: lambda e, s: (
        f"cluster {e.cluster_id} created: {e.nodes} nodes of {e.gpus_per_node} GPU(s), its "
        f"primary pod {e.pod_id} (node 0); deleting the run's pod deletes every node"
    ),
    ev.ClusterRanked: _cluster_ranked,
    ev.PodJobRunning: lambda e, s: f"the job runs on pod {e.pod_id}",
    ev.AwaitingRetrieval: lambda e, s: (
        f"pod {e.pod_id} awaits retrieval of the results" + (f" ({e.detail})" if e.detail else "")
    ),
    ev.PodKept: lambda e, s: f"pod {e.pod_id} kept (--keep-pod); only `pod rm` removes it",
    ev.CostCapNear: lambda e, s: (
        f"pod {e.pod_id} has cost 95 % of its cap of {_money(e.max_cost_usd)} at "
        f"{_money(e.cost_per_hour)}/h (cost_cap_near)"
    ),
    ev.PodDeleting: lambda e, s: (
        f"deleting {_pod_or_cluster(e.pod_id, s)} ({e.reason.replace('_', ' ')})"
    ),
    ev.PodDeleted: _deleted,
    ev.StrayRecorded: lambda e, s: f"stray pod {e.pod_id} recorded ({e.reason})",
    ev.StrayDropped: lambda e, s: f"stray pod {e.pod_id} is gone",
    ev.CandidatesChosen: _candidates,
    ev.CapacityAwaited: _capacity_awaited,
    ev.VolumeAttached: _volume_attached,
    ev.DataOnVolume: _data_on_volume,
    ev.ModelReady: lambda e, s: f"base model {model_ready_text(e.cached, e.seconds)}",
    ev.PodBilled: _billed,
}


def describe(event: ev.Event, state: RunLog | None = None) -> str:
    """The sentence for ``event`` (``state`` is the run before it, when known)."""
    return _SENTENCES[type(event)](event, state)


def _field(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value and len(value) < 60 else json.dumps(value)
    return json.dumps(value, sort_keys=True)


def line(record: Recorded, state: RunLog | None = None, *, verbose: bool = False) -> str:
    """One ``events`` line: sequence, UTC time, name and sentence; ``verbose`` adds the
    event's fields and its actor."""
    time = record.at[:19].replace("T", " ") + "Z"
    text = f"{record.seq:>5}  {time}  {record.event.name:<22} {describe(record.event, state)}"
    if not verbose:
        return text
    fields = " ".join(
        f"{k}={_field(v)}" for k, v in record.event.fields().items() if v not in (None, "", {}, [])
    )
    actor = Actor.from_json(record.actor).describe()
    return f"{text}  [{fields}]  — {actor}"
