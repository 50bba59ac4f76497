"""What a command appends to a run's log, decided on the log as it is at the append.

Pure functions: a run's state (and what the command knows) in, the events to append or a
verdict out. The journal calls a decision on the fresh state inside its append, so a
command that lost a race with another (a second follower, ``pod rm``, ``train cancel``)
decides again on what that one recorded, and no fact is recorded twice or over a run that
has ended. Each is tested as a table, with no I/O.
"""

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from overbrainer.events import types as ev
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.types import PodState, RunState

NOT_RETRIEVED = "artifacts not retrieved"
"""How a run's note begins when its results are not home (a later retrieval clears it)."""

Events = list[ev.Event]


# ---- the run's job ---------------------------------------------------------------------


def start_job(state: RunLog, started: ev.JobStarted) -> Events:
    """Record the job's start, unless another command ended the run meanwhile."""
    return [started] if state.run.state == RunState.preparing else []


def fail_before_job(
    state: RunLog,
    message: str,
    *,
    stage: str | None = None,
    outcome: RunState = RunState.failed,
) -> Events:
    """End a run whose job never started: ``outcome`` (failed, or cancelled) with
    ``message``, after ``run.Interrupted`` at ``stage`` when a signal stopped it. Nothing
    for a run whose job started, or that ended."""
    if state.run.state != RunState.preparing:
        return []
    events: Events = [] if stage is None else [ev.Interrupted(stage=stage)]
    return [*events, ev.RunEnded(state=outcome, message=message)]


def interrupted_at(state: RunLog, stage: str) -> Events:
    """Note where a signal stopped a run before its job started (its end comes later)."""
    return [ev.Interrupted(stage=stage)] if state.run.state == RunState.preparing else []


def end_run(state: RunLog, outcome: RunState, message: str) -> Events:
    """End the run ``outcome``, unless it has ended."""
    return [] if state.final else [ev.RunEnded(state=outcome, message=message)]


def adopt_or_fail_start(
    state: RunLog,
    *,
    job_dir: str,
    pid: int | None,
    container: str | None,
    stopped: bool,
    who: str,
) -> Events:
    """A run its dead starter (``who``) left preparing: adopt the job it spawned (``pid``,
    still running), or fail the run saying why none runs. Nothing once somebody else
    settled it."""
    if state.run.state != RunState.preparing:
        return []
    if pid is not None and not stopped:
        return [ev.JobStarted(job_dir=job_dir, pid=pid, container=container)]
    why = (
        "its job was stopped because its start could not be recorded"
        if stopped
        else "nothing runs on the target"
    )
    message = f"{who} stopped before the run's job started (killed or crashed); {why}"
    return [ev.RunEnded(state=RunState.failed, message=message)]


def detach(state: RunLog, reason: str) -> Events:
    """Record that following stopped while the job keeps running (with the metrics so
    far); nothing for a run that is not running."""
    if state.run.state != RunState.running:
        return []
    return [ev.Detached(reason=reason, metrics=state.run.metrics)]


def follow(state: RunLog, *, seen: int) -> Events:
    """Claim the following of the run (``run.Followed``), decided on its log as it was at
    version ``seen``: an event appended since (another claim among them) refuses it, and
    the claimant reads the log again (see ``overbrainer.events.claims``)."""
    if state.run.version != seen:
        raise InvalidTransition(
            f"run {state.run.run_id} changed while its follower was read "
            f"(event {state.run.version}, not {seen})"
        )
    return [ev.Followed()]


# ---- cancels -----------------------------------------------------------------------------


def request_cancel(state: RunLog) -> Events:
    """A cancel this command carries out itself (once per run)."""
    return [] if state.final or state.run.cancel_requested else [ev.CancelRequested()]


def ask_cancel(state: RunLog) -> Events:
    """A cancel asked of whichever command takes it (the run's follower, the command
    starting its pod); one already asked or under way is joined, not asked twice."""
    if state.final or state.run.cancel_requested:
        return []
    return [ev.CancelRequested(relay="asked")]


def ask_cancel_again(state: RunLog) -> Events:
    """A cancel taken but not carried out (the job could not be reached): asked again,
    so the next look takes it."""
    if state.final or state.run.cancel_pending:
        return []
    return [ev.CancelRequested(relay="asked")]


def take_cancel(state: RunLog) -> Events:
    """Say a cancel asked through the log is taken (the asker waits for this)."""
    if state.final or not state.run.cancel_pending:
        return []
    return [ev.CancelRequested(relay="taken")]


# ---- save and stop ----------------------------------------------------------------------


def can_stop(state: RunLog) -> bool:
    """Whether the run has a job that a save-and-stop request can reach (it runs)."""
    return state.run.state == RunState.running


def request_stop(state: RunLog) -> Events:
    """A save-and-stop this command writes on the target itself (once per run; joined
    when one was asked already)."""
    if not can_stop(state) or state.run.stop_requested:
        return []
    return [ev.StopRequested()]


def ask_stop(state: RunLog) -> Events:
    """A save-and-stop asked of whichever command follows the run (it cannot be reached
    from here); one already asked or under way is joined."""
    if not can_stop(state) or state.run.stop_requested:
        return []
    return [ev.StopRequested(relay="asked")]


def take_stop(state: RunLog) -> Events:
    """Say a save-and-stop asked through the log was written on the target."""
    if state.final or not state.run.stop_pending:
        return []
    return [ev.StopRequested(relay="taken")]


# ---- stalls -----------------------------------------------------------------------------


def record_stall(
    state: RunLog, *, silent_minutes: float, last_step: int | None, first_line: bool
) -> Events:
    """A running job that wrote no metrics line for too long; once per run (a stall
    recorded already, or a run that is not running, records nothing)."""
    if state.run.state != RunState.running or state.run.stalled is not None:
        return []
    return [ev.Stalled(silent_minutes=silent_minutes, last_step=last_step, first_line=first_line)]


# ---- checkpoints brought home while the job runs --------------------------------------


def model_ready(state: RunLog, ready: ev.ModelReady) -> Events:
    """How the job made its base model ready, once per job (its ``at``), while it runs."""
    if state.run.state != RunState.running:
        return []
    if state.run.model is not None and state.run.model.get("at") == ready.at:
        return []
    return [ready]


def checkpoint_home(state: RunLog, step: int, path: str) -> Events:
    """A checkpoint came home and matched the target's manifest; nothing when the log
    has it home already (another follower brought it)."""
    if step in state.run.checkpoints:
        return []
    return [ev.CheckpointRetrieved(step=step, path=path)]


def checkpoint_on_volume(state: RunLog, step: int, path: str, *, files: int, digest: str) -> Events:
    """A checkpoint is whole on the network volume with the manifest of ``digest``;
    nothing when the log has it so already (another follower recorded it)."""
    for known in state.run.volume_checkpoints:
        if known["step"] == step and known["manifest_digest"] == digest:
            return []
    return [ev.CheckpointOnVolume(step=step, path=path, files=files, manifest_digest=digest)]


def resumed_from_volume(state: RunLog, source: str, step: int) -> Events:
    """The run's job resumes from checkpoint ``step`` of run ``source`` on the network
    volume; nothing once the run is no longer preparing its job (another command ended
    it: what it does next is its own to say)."""
    if state.run.state != RunState.preparing:
        return []
    return [ev.ResumedFromVolume(source=source, step=step)]


def checkpoint_pruned(state: RunLog, step: int, path: str) -> Events:
    """A checkpoint home is about to be removed; nothing when the log does not have it
    home (another command pruned it)."""
    if step not in state.run.checkpoints:
        return []
    return [ev.CheckpointPruned(step=step, path=path)]


# ---- removing a run's files ------------------------------------------------------------


def files_removed(state: RunLog, size: int) -> Events:
    """The run's directory is about to be removed (``runs rm``/``runs gc``); nothing when
    the log has it removed already (a removal cut short, finished now). A run that is not
    ended, or whose pod may still exist, is refused by the fold (another command changed
    it since the command decided)."""
    if state.run.files_removed is not None:
        return []
    return [ev.FilesRemoved(bytes=size)]


# ---- results and the run's end -------------------------------------------------------


def retrieved(state: RunLog, *, files: int, size: int, digest: str) -> Events:
    """The results came home verified; a note saying they had not is cleared."""
    events: Events = [ev.ArtifactsRetrieved(files=files, bytes=size, manifest_digest=digest)]
    if state.run.note and state.run.note.startswith(NOT_RETRIEVED):
        events.append(ev.NoteCleared())
    return events


def record_end(
    state: RunLog,
    *,
    outcome: RunState,
    message: str | None,
    exit_code: int | None,
    metrics: Mapping[str, Any],
    home: bool,
    problem: str = "",
    checkpoint: tuple[int, str] | None = None,
) -> Events:
    """The run's end as its job's end decided it (``outcome``), its results home or not
    (``home``; ``problem`` says why not); ``checkpoint``: the step and path of the
    checkpoint a stopped job saved, home and verified with the results.

    A would-be success (or a stop) whose results are not home stays running with a note
    saying why, so ``train attach`` collects again — a stop's checkpoint is what it is
    for; any other end is recorded, noting results not home. Nothing once another command
    recorded the end: its result stands.
    """
    if state.final:
        return []
    if outcome in (RunState.succeeded, RunState.stopped) and not home:
        note = f"{NOT_RETRIEVED}: {problem}"
        return [] if state.run.note == note else [ev.NoteAdded(note=note)]
    events: Events = []
    if checkpoint is not None and home:
        step, path = checkpoint
        # Brought home again with the results (a background fetch may have brought it
        # first): recorded once.
        if step not in state.run.checkpoints:
            events.append(ev.CheckpointRetrieved(step=step, path=path))
    events.append(
        ev.RunEnded(state=outcome, message=message, exit_code=exit_code, metrics=dict(metrics))
    )
    if not home and state.run.note is None:
        events.append(ev.NoteAdded(note=f"{NOT_RETRIEVED}: {problem}"))
    return events


def _fail_without_results(state: RunLog, message: str, why: str) -> Events:
    events: Events = [ev.RunEnded(state=RunState.failed, message=message)]
    if state.run.artifacts is None and state.run.note is None:
        events.append(ev.NoteAdded(note=f"{NOT_RETRIEVED}: {why}"))
    return events


def pod_gone(
    state: RunLog,
    pod_id: str,
    bound: str | None = None,
    *,
    uptime_seconds: float | None = None,
    spend: float | None = None,
) -> Events:
    """The run's pod was found gone (``found_gone``, with what it cost until it was found
    so, when known; by its watchdog, for ``bound``, when the bound it keeps — ``deadline``
    or ``cost_cap`` — had passed); a run still going fails with it, its job gone too."""
    events: Events = []
    if not state.pod.deleted(pod_id):
        if bound is None:
            events.append(
                ev.PodDeleted(
                    pod_id=pod_id, by="found_gone", uptime_seconds=uptime_seconds, spend=spend
                )
            )
        else:
            events.append(ev.PodDeleted(pod_id=pod_id, by="watchdog", reason=bound))
    if state.run.state in (RunState.preparing, RunState.running):
        message = f"pod {pod_id} no longer exists; the job went with it"
        if bound is not None:
            at = "its cost cap" if bound == "cost_cap" else "its deadline"
            message = f"pod {pod_id} reached {at} and its watchdog deleted it; the job went with it"
        events += _fail_without_results(state, message, f"pod {pod_id} is gone")
    return events


def pod_lost(
    state: RunLog, pod_id: str, uptime_seconds: float | None, spend: float | None
) -> Events:
    """The run's pod was found gone, lost under its job (no bound its watchdog keeps had
    passed), and the run is to be recovered: the pod is recorded gone with what it cost
    until now (Runpod's clock), and the run does not fail."""
    if state.pod.deleted(pod_id):
        return []
    return [
        ev.PodDeleted(pod_id=pod_id, by="found_gone", uptime_seconds=uptime_seconds, spend=spend)
    ]


def recovering(state: RunLog, recovering: ev.Recovering) -> Events:
    """Begin recovery ``recovering.attempt`` of a running run whose pod was lost; nothing
    when another command ended the run or began that recovery meanwhile."""
    if state.run.state != RunState.running or len(state.run.recoveries) >= recovering.attempt:
        return []
    return [recovering]


def recovered(state: RunLog, recovered: ev.Recovered) -> Events:
    """The recovery under way has its job running on its new pod."""
    last = state.run.recoveries[-1] if state.run.recoveries else None
    if state.run.state != RunState.running or last is None or last["pod_id"] is not None:
        return []
    return [recovered]


def fail_lost(state: RunLog, message: str) -> Events:
    """A run whose pod was lost and that is not recovered fails, its results not home."""
    if state.final:
        return []
    return _fail_without_results(state, message, "its pod was lost before the job ended")


def fail_past_deadline(state: RunLog, message: str) -> Events:
    """The job was still followed past its pod's deadline: the run fails (``message``
    says how), its results not home."""
    if state.final:
        return []
    return _fail_without_results(state, message, "the pod passed its deadline")


def fail_at_cost_cap(state: RunLog, message: str, why: str) -> Events:
    """The pod reached its cost cap while its job could not be stopped and collected
    (``why``): the run fails (``message`` says how), its results not home."""
    if state.final:
        return []
    return _fail_without_results(state, message, why)


# ---- the run's pod -------------------------------------------------------------------


def cost_cap_near(state: RunLog, pod_id: str, max_cost_usd: float, rate: float) -> Events:
    """The run's pod ``pod_id`` has cost 95 % of its cap: recorded once, while it lives."""
    pod = state.pod
    if (
        pod.pod_id != pod_id
        or pod.cost_cap_near
        or pod.state_of(pod_id) in (PodState.deleting, PodState.deleted)
    ):
        return []
    return [ev.CostCapNear(pod_id=pod_id, max_cost_usd=max_cost_usd, cost_per_hour=rate)]


def pod_job_running(state: RunLog, pod_id: str) -> Events:
    """The job runs on pod ``pod_id`` — not over another command's end of the run or
    delete of the pod (following then finds the run ended and says so)."""
    if (
        state.run.state == RunState.running
        and state.pod.pod_id == pod_id
        and state.pod.state_of(pod_id) not in (PodState.deleting, PodState.deleted)
    ):
        return [ev.PodJobRunning(pod_id=pod_id)]
    return []


def endpoint_seen(state: RunLog, seen: ev.EndpointSeen) -> Events:
    """A new endpoint of the run's pod, unless another command recorded it first (or the
    run moved on to another pod)."""
    endpoint = {"host": seen.host, "port": seen.port, "user": seen.user}
    if state.pod.endpoint == endpoint or state.pod.pod_id != seen.pod_id:
        return []
    return [seen]


def keep_pod(state: RunLog, pod_id: str) -> Events:
    """A ``--keep-pod`` pod whose job ended: kept (once)."""
    return [] if state.pod.status == PodState.kept else [ev.PodKept(pod_id=pod_id)]


def await_retrieval(state: RunLog, pod_id: str, detail: str) -> Events:
    """A pod left to its watchdog's retrieve grace, the results not home (once)."""
    if state.pod.status == PodState.awaiting_retrieval:
        return []
    return [ev.AwaitingRetrieval(pod_id=pod_id, detail=detail)]


def pod_created(state: RunLog, pod_id: str, events: Events) -> Events:
    """A created pod's ``events`` — a fact even for a run another command ended (the pod
    exists and must be deleted) — unless that command found the pod by its marker first."""
    return [] if pod_id in state.pod.pods else events


def resolve_attempt(state: RunLog, resolved: ev.AttemptResolved) -> Events:
    """Resolve an attempt still open (nobody resolved it meanwhile)."""
    open_ = any(a["n"] == resolved.n and a.get("result") is None for a in state.pod.attempts)
    return [resolved] if open_ else []


# ---- deleting a pod ------------------------------------------------------------------


def joins_delete(state: RunLog, pod_id: str) -> bool:
    """Whether another command's delete of pod ``pod_id`` is recorded (and not done)."""
    return state.pod.state_of(pod_id) == PodState.deleting


def start_delete(state: RunLog, pod_id: str, reason: ev.DeleteReason) -> Events:
    """``pod.Deleting`` before a delete is sent; nothing for a pod recorded deleted, or
    whose delete another command recorded (one fact: that delete is joined)."""
    if state.pod.state_of(pod_id) in (PodState.deleted, PodState.deleting):
        return []
    return [ev.PodDeleting(pod_id=pod_id, reason=reason)]


def pod_deleted(state: RunLog, deleted: ev.PodDeleted) -> Events:
    """A pod confirmed gone, unless another command recorded it first."""
    return [] if state.pod.deleted(deleted.pod_id) else [deleted]


def pod_billed(state: RunLog, billed: ev.PodBilled) -> Events:
    """What Runpod billed for a pod of the run, unless a final amount is recorded already
    (another command read it) or this read says nothing new."""
    cost = state.pod.costs.get(billed.pod_id)
    if cost is not None and cost.get("billed_final"):
        return []
    if cost is not None and cost.get("billed") == billed.amount and not billed.final:
        return []
    return [billed]


# ---- the provisioning walk -----------------------------------------------------------


def overtaken(state: RunLog, live: str | None) -> bool:
    """Whether another command ended the run, or is deleting (or deleted) the pod
    ``live`` a provisioning walk holds: the walk then stops."""
    return state.final or (
        live is not None and state.pod.state_of(live) in (PodState.deleting, PodState.deleted)
    )


def unless_overtaken(state: RunLog, live: str | None, events: Events) -> Events:
    """``events``, unless the walk holding ``live`` was overtaken (see :func:`overtaken`)."""
    return [] if overtaken(state, live) else events


class Before(StrEnum):
    """What the last look at the log before a job starts on its pod says."""

    start = "start"  # nothing stands in the way
    overtaken = "overtaken"  # another command ended the run or is deleting its pod
    cancel = "cancel"  # a cancel was asked through the log: take it, start nothing


def before_start(state: RunLog) -> Before:
    """Whether a job may start on the run's ready pod (see :class:`Before`)."""
    pod_id = state.pod.pod_id
    if state.final or (pod_id is not None and state.pod.state_of(pod_id) == PodState.deleting):
        return Before.overtaken
    if state.run.cancel_pending:
        return Before.cancel
    return Before.start
