"""A run's state told in a few lines, for ``runs show`` and ``events RUN --at N``."""

from pathlib import Path
from typing import Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.states import RunState
from overbrainer.events.target_kinds import facts_of
from overbrainer.plurals import plural, word
from overbrainer.projections.files import run_dir
from overbrainer.projections.spend import recorded_spend
from overbrainer.projections.words import (
    duration_text,
    job_shape,
    metrics_text,
    model_ready_text,
    pod_status_text,
    shown_path,
    size_text,
)
from overbrainer.runpod.clocks import offset_text
from overbrainer.train.metrics import MetricsSummary, format_epoch, format_loss


def job_dir_label(kind: str) -> str:
    """What the directory a run's job runs in is called, for the target ``kind`` the run
    recorded: on this machine (the local target) it is no remote one."""
    return "job dir" if facts_of(kind).runs_here else "remote dir"


def summary_lines(state: RunLog, checkpoints_bytes: int | None = None) -> list[str]:
    """The run's record and its pod, one fact per line; ``checkpoints_bytes``: the disk
    the checkpoints home take, when it was measured."""
    r, p = state.run, state.pod
    if not state.exists:
        return ["(no run yet)"]
    lines = [
        f"run {r.run_id}: {r.state}" + (f" ({r.message})" if r.message else ""),
        f"  target     {r.target} ({r.kind}), {job_dir_label(r.kind)} {r.remote_dir}",
    ]
    if r.base_model:
        ready = r.model
        how = (
            f"; {model_ready_text(bool(ready['cached']), float(ready['seconds']))}" if ready else ""
        )
        lines.append(f"  model      {r.adapter} of {r.base_model}{how}")
    if r.processes != 1:
        lines.append(f"  shape      {job_shape(r.processes, r.parallelism)}")
    lines.append(f"  created    {r.created_at}")
    lines.append(f"  updated    {r.updated_at} (after {plural(r.version, 'event')})")
    if r.job:
        lines.append(
            f"  job        pid {r.job['pid']} in {r.job['dir']}"
            + (f", container {r.job['container']}" if r.job.get("container") else "")
        )
    if r.cancel_pending:
        lines.append("  cancel     requested, waiting for the command following the run")
    elif r.cancel_requested:
        lines.append("  cancel     requested")
    if r.stop_pending:
        lines.append("  stop       requested, waiting for the command following the run")
    elif r.stop_requested:
        lines.append("  stop       requested (save a checkpoint and stop)")
    if r.detached:
        lines.append("  following  detached (the job kept running)")
    metrics = metrics_text(r.metrics) if r.metrics else ""
    if metrics:
        lines.append(f"  metrics    {metrics}")
    if r.artifacts:
        lines.append(
            f"  artifacts  {plural(int(r.artifacts['files']), 'file')}, "
            f"{size_text(int(r.artifacts['bytes']))}, verified"
        )
    if r.checkpoint:
        lines.append(
            f"  checkpoint step {r.checkpoint['step']} in runs/{r.run_id}/{r.checkpoint['path']}"
            f", verified: `overbrainer train --resume-from {r.run_id}` goes on from it"
        )
    if r.checkpoints or r.pruned:
        lines.append(
            f"  checkpoints {checkpoints_text(r.checkpoints, r.pruned, checkpoints_bytes)}"
        )
    if r.volume_checkpoints:
        steps = ", ".join(str(c["step"]) for c in r.volume_checkpoints)
        lines.append(f"  on volume  checkpoints of step {steps}, each recorded whole")
    if r.resumed_from:
        lines.append(
            f"  resumed    from run {r.resumed_from['run']}, checkpoint-{r.resumed_from['step']}"
            + (
                " on the network volume (nothing uploaded from home)"
                if r.resumed_from.get("from_volume")
                else ""
            )
        )
    lines += recovery_lines(state)
    if r.note:
        lines.append(f"  note       {r.note}")
    if r.files_removed is not None:
        when = str(r.files_removed.get("at") or "")[:16].replace("T", " ")
        freed = size_text(int(r.files_removed.get("bytes") or 0))
        lines.append(
            f"  files      removed from this machine at {when} UTC ({freed} freed); the events stay"
        )
    if r.clock_offset is not None:
        lines.append(f"  clock      {offset_text(r.clock_offset)} Runpod's (times recorded off)")
    if p.pod_id or p.attempts:
        rate = f", ${p.cost_per_hour:.2f}/h" if p.cost_per_hour is not None else ""
        lines.append(
            f"  pod        {p.pod_id or '(none)'}: {pod_status_text(p.status)}"
            f" ({p.gpu_type or '?'}, {p.data_center or '?'}{rate})"
            + (", kept (--keep-pod)" if p.keep else "")
        )
        lines.append(
            "  attempts   "
            + "; ".join(f"{a['n']} {a['gpu_type']}: {a['result'] or 'sent'}" for a in p.attempts)
        )
        if p.spend is not None:
            spent = recorded_spend(state) or f"~${p.spend:.2f}"
            lines.append(f"  spend      {spent} over {duration_text(p.uptime_seconds or 0)}")
        if p.strays:
            lines.append("  strays     " + ", ".join(sorted(p.strays)))
        lines += cluster_lines(p.cluster)
    if p.volume is not None:
        lines.append(f"  volume     {volume_text(p.volume)}")
    return lines


def cluster_lines(cluster: dict[str, Any] | None) -> list[str]:
    """The run's cluster and its nodes by rank (rank 0 is the run's pod)."""
    if cluster is None:
        return []
    lines = [
        f"  cluster    {cluster['id']}: {cluster['nodes']} nodes of "
        f"{plural(int(cluster['gpus_per_node']), 'GPU')}"
    ]
    for member in cluster["members"]:
        ip = f" at {member['ip']}" if member.get("ip") else ""
        lines.append(f"  node {member['rank']:<6}pod {member['pod_id']}{ip}")
    if not cluster["members"]:
        lines.append("  nodes      not ranked yet")
    return lines


def volume_text(volume: dict[str, object]) -> str:
    """The network volume a run's pods mounted (``PodView.volume``), in a few words."""
    size = f", {volume['size_gb']} GB" if volume.get("size_gb") is not None else ""
    made = ", created by this run" if volume.get("created") else ""
    return f"{volume['name']} ({volume['id']}{size}) in {volume['data_center']}{made}"


def recovery_lines(state: RunLog) -> list[str]:
    """Each recovery of the run on a new pod: why (its pod gone, stopped or without GPUs,
    its job stalled), the new pod, the step it resumed from and the training done again."""
    lines = []
    for r in state.run.recoveries:
        head = f"  recovery   {r['attempt']}/{state.run.max_recoveries}: "
        lost = str(r["reason"])
        if r["pod_id"] is None:
            lines.append(f"{head}{lost}; starting a new pod")
            continue
        start = f"step {r['resumed_step']}" if r["resumed_step"] else "the start"
        if r.get("from_volume"):
            start += " on the network volume (nothing uploaded from home)"
        redone = (
            f", {plural(int(r['lost_steps']), 'step')} of training lost"
            if r["lost_steps"] is not None
            else ""
        )
        lines.append(f"{head}{lost}; on pod {r['pod_id']} from {start}{redone}")
    return lines


def resume_clause(state: RunLog) -> str:
    """``; its checkpoint of step N is home and verified: …`` for a run that ended with one
    to go on from (appended to the message of a run that failed), else nothing."""
    checkpoint = state.run.checkpoint
    if checkpoint is None:
        return ""
    step = checkpoint["step"]
    return (
        f"; its checkpoint of step {step} is home and verified: "
        f"`overbrainer train --resume-from {state.run.run_id}` goes on from checkpoint-{step}"
    )


def checkpoints_text(home: list[int], pruned: list[int], size: int | None) -> str:
    """``2 home (steps 6, 8; 2.1 MB); 2 removed (steps 2, 4)``."""
    steps = ", ".join(str(step) for step in home)
    text = f"{len(home)} home"
    if home:
        text += f" ({word(len(home), 'step')} {steps}"
        text += f"; {size_text(size)})" if size is not None else ")"
    if pruned:
        removed = ", ".join(str(step) for step in pruned)
        text += f"; {len(pruned)} removed ({word(len(pruned), 'step')} {removed})"
    return text


def attach_header(state: RunLog) -> str:
    """The first line of ``train attach``: the run, its target, and where it stands.

    ``attach: run ID on target NAME (KIND): STATE; job pid N since TIME; pod P (STATUS);
    last recorded step S/MAX, epoch E, loss L``, each part only when known.
    """
    r, p = state.run, state.pod
    parts = [f"attach: run {r.run_id} on target {r.target} ({r.kind}): {r.state}"]
    if r.job:
        since = f" since {r.job['started_at']}" if r.job.get("started_at") else ""
        parts.append(f"job pid {r.job['pid']}{since}")
    if p.pod_id:
        parts.append(f"pod {p.pod_id} ({pod_status_text(p.status)})")
    known = MetricsSummary.from_dict(r.metrics) if r.metrics else None
    if known is not None and known.step is not None:
        total = f"/{known.max_steps}" if known.max_steps is not None else ""
        seen = f"last recorded step {known.step}{total}"
        if known.epoch is not None:
            seen += f", epoch {format_epoch(known.epoch)}"
        if known.loss is not None:
            seen += f", loss {format_loss(known.loss)}"
        parts.append(seen)
    if r.note:
        # "artifacts not retrieved: WHY" is what this attach is about to fix: say it so.
        why = r.note.partition("artifacts not retrieved: ")[2]
        parts.append(f"results not home yet ({why})" if why else r.note)
    return "; ".join(parts)


def came_to(state: RunLog, project_dir: Path = Path()) -> str:
    """What an ended run came to, in a few words: ``succeeded; step 5/5, epoch 3, loss
    0.7143; output in runs/<id>/output`` (``failed: why``; a note when its results are not
    home). The output is named as :func:`shown_path` names it in ``project_dir``."""
    r = state.run
    text = r.state + (f": {r.message}" if r.message and r.message != r.state else "")
    metrics = metrics_text({k: v for k, v in r.metrics.items() if k != "learning_rate"})
    if metrics:
        text += f"; {metrics}"
    if r.note:
        text += f"; {r.note}"
    elif r.files_removed is not None:
        text += "; its files were removed from this machine"
    elif r.state == RunState.succeeded and r.artifacts is not None:
        output = run_dir(project_dir, r.run_id) / "output"
        text += f"; output in {shown_path(output, project_dir)}"
    if r.checkpoint is not None:
        text += f"; resumable from checkpoint-{r.checkpoint['step']}"
    return text


def nothing_left(state: RunLog) -> bool:
    """Whether an ended run needs no command any more: no pod of it may bill, and its
    results are home (or it never had a job)."""
    r = state.run
    home = r.job is None or (r.artifacts is not None and not r.note)
    return state.final and not state.pod.may_bill() and home
