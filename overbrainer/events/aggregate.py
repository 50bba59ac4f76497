"""The run aggregate: a run's and its pod's state as a fold of the run's events.

Pure: no I/O, no clock. ``apply`` refuses an event that does not follow from the state
(``InvalidTransition``), so a command that re-decides after a concurrent append never
records a transition twice.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from overbrainer.events.states import ALIVE, FINAL_STATES, PodState, RunState
from overbrainer.events.target_kinds import KindFacts, facts_of

if TYPE_CHECKING:
    # The event types are built only once an event is folded: a state read back from the
    # runs view (``runs ls``) needs none of them.
    from overbrainer.events import types as ev


class InvalidTransition(ValueError):
    """An event that cannot follow the current state of its run."""


@dataclass
class PodView:
    """The pod side of a run: its attempts, its current pod and every pod it ever had."""

    keep: bool = False
    host_public_key: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    pod_id: str | None = None
    status: PodState = PodState.none
    gpu_type: str | None = None
    data_center: str | None = None
    cost_per_hour: float | None = None
    created_at: str | None = None
    deadline: str | None = None
    # The current pod has cost 95 % of its cap (pod.CostCapNear).
    cost_cap_near: bool = False
    endpoint: dict[str, Any] | None = None
    verdict: str | None = None
    delete_reason: str | None = None
    deleted_by: str | None = None
    uptime_seconds: float | None = None
    spend: float | None = None
    # Every pod id this run ever had, with its last known status here.
    pods: dict[str, PodState] = field(default_factory=dict)
    strays: dict[str, str] = field(default_factory=dict)
    # What each pod of the run cost, by pod id: ``created_at`` (Runpod's clock), ``rate``
    # (USD/h), ``gone_at`` (when recorded gone), ``ended_at`` (Runpod's clock, from its
    # uptime, when known), ``estimate`` (rate × uptime), and what Runpod ``billed`` with
    # ``billed_final`` and ``billed_period``.
    costs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The network volume the run's pods mount (pod.VolumeAttached): {"id", "name",
    # "data_center", "created", "size_gb"}.
    volume: dict[str, Any] | None = None
    # The longest its files from home may take to go up, with no event, before the create.
    volume_fill_seconds: float = 0.0
    # The current pod's cluster, when the run has one (pod.ClusterCreated): {"id",
    # "nodes", "gpus_per_node", "members": [{"pod_id", "rank", "ip"}, ...] by rank once
    # ranked (pod.ClusterRanked), else []}.
    cluster: dict[str, Any] | None = None

    def may_bill(self) -> bool:
        """Whether some pod of this run may still exist (and bill)."""
        return (
            self.status in ALIVE
            or bool(self.strays)
            or any(status in ALIVE for status in self.pods.values())
        )

    def state_of(self, pod_id: str) -> PodState | None:
        """What the log says of pod ``pod_id`` of this run (None: never heard of)."""
        return self.pods.get(pod_id)

    def deleted(self, pod_id: str) -> bool:
        """Whether pod ``pod_id`` is recorded deleted."""
        return self.pods.get(pod_id) == PodState.deleted


@dataclass
class RunView:
    """A run's state: what ``run.json`` holds."""

    run_id: str = ""
    state: RunState = RunState.none
    target: str = ""
    kind: str = ""
    remote_dir: str = ""
    settings_digest: str = ""
    base_model: str = ""
    adapter: str = ""
    keep_pod: bool = False
    # The checkpoint this run started from: {"run": ID, "step": N}.
    resumed_from: dict[str, Any] | None = None
    # The job's shape: its processes (None: one per GPU it saw) and how they share the
    # model (None: one process).
    processes: int | None = 1
    parallelism: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    job: dict[str, Any] | None = None
    message: str | None = None
    exit_code: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    cancel_requested: bool = False
    # A cancel asked of the run's follower (from a checkout that cannot reach the job) and
    # not taken yet: the next command following the run stops the job.
    cancel_pending: bool = False
    # A save-and-stop asked of the job (``train stop``); ``stop_pending``: asked of the
    # run's follower and not written on the target yet.
    stop_requested: bool = False
    stop_pending: bool = False
    # The job stalled (wrote no metrics line for too long): {"minutes", "step", "at"}.
    stalled: dict[str, Any] | None = None
    interrupted_stage: str | None = None
    detached: bool = False
    artifacts: dict[str, Any] | None = None
    # The last checkpoint home and verified ({"step", "path", "at"}): what a resume starts
    # from.
    checkpoint: dict[str, Any] | None = None
    # The steps of the checkpoints home (retrieved, not pruned since), and of those pruned.
    checkpoints: list[int] = field(default_factory=list)
    pruned: list[int] = field(default_factory=list)
    # The checkpoints whole on the project's network volume, by step order ({"step",
    # "path", "files", "manifest_digest", "at"}): what a new pod resumes from.
    volume_checkpoints: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    # This machine's clock minus Runpod's, as the last command that found it far off
    # recorded it (seconds); the times it recorded are off by as much.
    clock_offset: float | None = None
    # The run's directory was removed (``runs rm``/``runs gc``): {"at", "bytes"}.
    files_removed: dict[str, Any] | None = None
    # Each recovery of the run on a new pod, its pod lost ({"attempt", "reason",
    # "lost_pod", "last_step", "at", "pod_id", "resumed_step", "lost_steps",
    # "recovered_at", "from_volume"}), and how many the target allowed as the last one
    # began.
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    max_recoveries: int | None = None
    # How the base model was made ready for the latest job ({"cached", "seconds", "at"}):
    # found in the cache, or downloaded.
    model: dict[str, Any] | None = None
    version: int = 0

    @property
    def kind_facts(self) -> KindFacts:
        """What the run's recorded target kind says: whether its job runs on this machine,
        whether it has a pod."""
        return facts_of(self.kind)


@dataclass
class RunLog:
    """The whole aggregate state: the run and its pod."""

    run: RunView = field(default_factory=RunView)
    pod: PodView = field(default_factory=PodView)

    @property
    def exists(self) -> bool:
        """Whether the run was created."""
        return self.run.state != RunState.none

    @property
    def final(self) -> bool:
        """Whether the run reached a final state."""
        return self.run.state in FINAL_STATES

    def copy(self) -> RunLog:
        """An independent copy (decisions try events on a copy first)."""
        return copy.deepcopy(self)

    def to_json(self) -> dict[str, Any]:
        """Both halves as JSON primitives."""
        return {"run": asdict(self.run), "pod": asdict(self.pod)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunLog:
        """The inverse of :meth:`to_json` (used by the runs view); data of another shape
        raises ``ValueError``, ``TypeError`` or ``KeyError``."""
        run, pod = dict(data["run"]), dict(data["pod"])
        if not isinstance(pod["pods"], dict):
            raise TypeError("pod.pods is not an object")
        run["state"] = RunState(run["state"])
        pod["status"] = PodState(pod["status"])
        pod["pods"] = {pod_id: PodState(status) for pod_id, status in pod["pods"].items()}
        return cls(run=RunView(**run), pod=PodView(**pod))

    def apply(self, event: ev.Event, at: str) -> None:
        """Fold ``event``, appended at ISO time ``at``, into this state."""
        handler = (_HANDLERS or _rules()).get(type(event))
        if not self.exists and handler is not _created:
            raise InvalidTransition(f"{event.name} before run.Created")
        if handler is None:  # pragma: no cover - every catalogue type has one
            raise InvalidTransition(f"no rule for {event.name}")
        handler(self, event, at)
        self.run.version += 1
        self.run.updated_at = at


def fold(records: Iterable[tuple[ev.Event, str]]) -> RunLog:
    """The state after ``records`` (events with their times), from nothing."""
    state = RunLog()
    for event, at in records:
        state.apply(event, at)
    return state


# ---- rules ----------------------------------------------------------------------------


def _created(s: RunLog, e: ev.RunCreated, at: str) -> None:
    if s.exists:
        raise InvalidTransition(f"run {s.run.run_id} already exists")
    s.run = RunView(
        run_id=e.run_id,
        state=RunState.preparing,
        target=e.target,
        kind=e.kind,
        remote_dir=e.remote_dir,
        settings_digest=e.settings_digest,
        base_model=e.base_model,
        adapter=e.adapter,
        keep_pod=e.keep_pod,
        resumed_from=dict(e.resumed_from) if e.resumed_from else None,
        processes=e.processes,
        parallelism=e.parallelism,
        created_at=at,
    )
    s.pod = PodView(keep=e.keep_pod)


def _job_started(s: RunLog, e: ev.JobStarted, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition(f"job started while the run is {s.run.state}")
    s.run.state = RunState.running
    s.run.job = {"dir": e.job_dir, "pid": e.pid, "container": e.container, "started_at": at}


def _ended(s: RunLog, e: ev.RunEnded, at: str) -> None:
    if s.final:
        raise InvalidTransition(f"run already {s.run.state}")
    if e.state not in FINAL_STATES:
        raise InvalidTransition(f"{e.state} is not a final state")
    s.run.cancel_pending = False  # nothing is left to stop
    s.run.stop_pending = False
    s.run.state = RunState(e.state)
    s.run.message = e.message
    s.run.exit_code = e.exit_code
    if e.metrics:
        s.run.metrics = dict(e.metrics)


def _cancel_requested(s: RunLog, e: ev.CancelRequested, at: str) -> None:
    s.run.cancel_requested = True
    if e.relay == "asked":
        s.run.cancel_pending = True
    elif e.relay == "taken":
        s.run.cancel_pending = False


def _stop_requested(s: RunLog, e: ev.StopRequested, at: str) -> None:
    if s.final:
        raise InvalidTransition(f"stop requested of a run that is {s.run.state}")
    s.run.stop_requested = True
    if e.relay == "asked":
        s.run.stop_pending = True
    elif e.relay == "taken":
        s.run.stop_pending = False


def _stalled(s: RunLog, e: ev.Stalled, at: str) -> None:
    if s.run.state != RunState.running:
        raise InvalidTransition(f"a job stalled while the run is {s.run.state}")
    s.run.stalled = {"minutes": e.silent_minutes, "step": e.last_step, "at": at}


def _checkpoint(s: RunLog, e: ev.CheckpointRetrieved, at: str) -> None:
    # Checkpoints may come home out of order (the newest first while a job runs): the last
    # one is the one of the highest step.
    if s.run.checkpoint is None or e.step >= s.run.checkpoint["step"]:
        s.run.checkpoint = {"step": e.step, "path": e.path, "at": at}
    s.run.checkpoints = sorted({*s.run.checkpoints, e.step})
    s.run.pruned = [step for step in s.run.pruned if step != e.step]


def _checkpoint_on_volume(s: RunLog, e: ev.CheckpointOnVolume, at: str) -> None:
    kept = [c for c in s.run.volume_checkpoints if c["step"] != e.step]
    kept.append(
        {
            "step": e.step,
            "path": e.path,
            "files": e.files,
            "manifest_digest": e.manifest_digest,
            "at": at,
        }
    )
    s.run.volume_checkpoints = sorted(kept, key=lambda c: int(c["step"]))


def _resumed_from_volume(s: RunLog, e: ev.ResumedFromVolume, at: str) -> None:
    source = s.run.resumed_from
    if s.run.state != RunState.preparing:
        raise InvalidTransition("where a resume starts from is found only before the job starts")
    if source is None or source.get("run") != e.source or source.get("step") != e.step:
        raise InvalidTransition(f"run {s.run.run_id} does not resume from {e.source}:{e.step}")
    s.run.resumed_from = {**source, "from_volume": True}


def _checkpoint_pruned(s: RunLog, e: ev.CheckpointPruned, at: str) -> None:
    if e.step not in s.run.checkpoints:
        raise InvalidTransition(f"checkpoint-{e.step} pruned, but it was never home")
    s.run.checkpoints = [step for step in s.run.checkpoints if step != e.step]
    s.run.pruned = sorted({*s.run.pruned, e.step})
    if s.run.checkpoint is not None and s.run.checkpoint["step"] == e.step:
        # The last one is never pruned by overbrainer; a log that says so has none left.
        s.run.checkpoint = None


def _files_removed(s: RunLog, e: ev.FilesRemoved, at: str) -> None:
    if not s.final:
        raise InvalidTransition(f"files of a run that is {s.run.state} removed")
    if s.pod.may_bill():
        raise InvalidTransition("files removed while a pod of the run may still exist")
    if s.run.files_removed is not None:
        raise InvalidTransition("the run's files were removed already")
    s.run.files_removed = {"at": at, "bytes": e.bytes}
    # Nothing of the run is home any more: no checkpoint to resume from.
    s.run.checkpoint = None
    s.run.checkpoints = []


def _interrupted(s: RunLog, e: ev.Interrupted, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("interrupted before the job, but the job had started")
    s.run.interrupted_stage = e.stage


def _detached(s: RunLog, e: ev.Detached, at: str) -> None:
    if s.run.state != RunState.running:
        raise InvalidTransition(f"detached from a run that is {s.run.state}")
    s.run.detached = True
    if e.metrics:
        s.run.metrics = dict(e.metrics)


def _followed(s: RunLog, e: ev.Followed, at: str) -> None:
    # Followed again: no longer detached.
    s.run.detached = False


def _artifacts(s: RunLog, e: ev.ArtifactsRetrieved, at: str) -> None:
    s.run.artifacts = {
        "files": e.files,
        "bytes": e.bytes,
        "manifest_digest": e.manifest_digest,
        "at": at,
    }


def _note_added(s: RunLog, e: ev.NoteAdded, at: str) -> None:
    s.run.note = e.note


def _note_cleared(s: RunLog, e: ev.NoteCleared, at: str) -> None:
    s.run.note = None


def _clock_offset(s: RunLog, e: ev.ClockOffset, at: str) -> None:
    s.run.clock_offset = e.offset_seconds


def _recovering(s: RunLog, e: ev.Recovering, at: str) -> None:
    if s.run.state != RunState.running:
        raise InvalidTransition(f"recovering a run that is {s.run.state}")
    if e.attempt != len(s.run.recoveries) + 1:
        raise InvalidTransition(
            f"recovery {e.attempt} after {len(s.run.recoveries)} recoveries of the run"
        )
    s.run.recoveries.append(
        {
            "attempt": e.attempt,
            "reason": e.reason,
            "lost_pod": e.pod_id,
            "last_step": e.last_step,
            "at": at,
            "pod_id": None,
            "resumed_step": None,
            "lost_steps": None,
            "recovered_at": None,
            "from_volume": False,
        }
    )
    s.run.max_recoveries = e.max_recoveries
    # The run starts a pod again: its job is gone with the lost pod.
    s.run.state = RunState.preparing
    s.run.job = None
    s.run.detached = False
    s.run.interrupted_stage = None


def _recovered(s: RunLog, e: ev.Recovered, at: str) -> None:
    if s.run.state != RunState.running:
        raise InvalidTransition(f"recovered a run that is {s.run.state}")
    last = s.run.recoveries[-1] if s.run.recoveries else None
    if last is None or last["attempt"] != e.attempt or last["pod_id"] is not None:
        raise InvalidTransition(f"recovery {e.attempt} was not under way")
    _current(s, e.pod_id, "recovered")
    last.update(
        pod_id=e.pod_id,
        resumed_step=e.resumed_step,
        lost_steps=e.lost_steps,
        recovered_at=at,
        from_volume=e.from_volume,
    )


def _nothing(s: RunLog, e: ev.Event, at: str) -> None:
    """An event that says what happened and changes no state (the log keeps it)."""


def _keys(s: RunLog, e: ev.KeysGenerated, at: str) -> None:
    s.pod.host_public_key = e.host_public_key


def _attempt_sent(s: RunLog, e: ev.AttemptSent, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("a pod is created only before the job starts")
    if s.pod.status not in (PodState.none, PodState.deleted):
        raise InvalidTransition(f"attempt {e.n} while pod {s.pod.pod_id} is {s.pod.status}")
    s.pod.attempts.append(
        {
            "n": e.n,
            "pod_name": e.pod_name,
            "gpu_type": e.gpu_type,
            "deadline": e.deadline or None,
            "max_hours": e.max_hours,
            "max_cost_usd": e.max_cost_usd,
            "sent_at": at,
            "result": None,
            "detail": "",
            "pod_id": None,
        }
    )
    s.pod.status = PodState.creating
    # Older logs carry the deadline here; now it comes with the pod (Runpod's createdAt).
    s.pod.deadline = e.deadline or None


def _attempt_resolved(s: RunLog, e: ev.AttemptResolved, at: str) -> None:
    for attempt in s.pod.attempts:
        if attempt["n"] == e.n:
            attempt.update(result=e.result, detail=e.detail, pod_id=e.pod_id)
            break
    else:
        raise InvalidTransition(f"attempt {e.n} was never sent")
    if s.pod.status == PodState.creating and e.result != "created":
        s.pod.status = (
            PodState.none
            if s.pod.pod_id is None
            else s.pod.pods.get(s.pod.pod_id, PodState.deleted)
        )


def _pod_created(s: RunLog, e: ev.PodCreated, at: str) -> None:
    s.pod.pod_id = e.pod_id
    s.pod.status = PodState.created
    s.pod.gpu_type = e.gpu_type
    s.pod.data_center = e.data_center
    s.pod.cost_per_hour = e.cost_per_hour
    s.pod.created_at = e.created_at or at
    if e.deadline:
        s.pod.deadline = e.deadline
    s.pod.endpoint = None
    s.pod.verdict = None
    s.pod.cost_cap_near = False
    s.pod.delete_reason = s.pod.deleted_by = None
    s.pod.uptime_seconds = s.pod.spend = None
    s.pod.cluster = None  # a cluster's is recorded with its primary (pod.ClusterCreated)
    s.pod.pods[e.pod_id] = PodState.created
    _cost(s, e.pod_id).update(created_at=s.pod.created_at, rate=e.cost_per_hour)


def _current(s: RunLog, pod_id: str, what: str) -> None:
    if s.pod.pod_id != pod_id:
        raise InvalidTransition(f"{what} for pod {pod_id}, not the run's pod {s.pod.pod_id}")


def _endpoint(s: RunLog, e: ev.EndpointSeen, at: str) -> None:
    _current(s, e.pod_id, "endpoint")
    s.pod.endpoint = {"host": e.host, "port": e.port, "user": e.user}


def _ready(s: RunLog, e: ev.PodReady, at: str) -> None:
    _current(s, e.pod_id, "ready")
    s.pod.verdict = e.verdict
    s.pod.status = s.pod.pods[e.pod_id] = PodState.ready


def _job_running(s: RunLog, e: ev.PodJobRunning, at: str) -> None:
    _current(s, e.pod_id, "job running")
    s.pod.status = s.pod.pods[e.pod_id] = PodState.job_running


def _awaiting(s: RunLog, e: ev.AwaitingRetrieval, at: str) -> None:
    _current(s, e.pod_id, "awaiting retrieval")
    s.pod.status = s.pod.pods[e.pod_id] = PodState.awaiting_retrieval


def _kept(s: RunLog, e: ev.PodKept, at: str) -> None:
    _current(s, e.pod_id, "kept")
    s.pod.status = s.pod.pods[e.pod_id] = PodState.kept


def _cost_cap_near(s: RunLog, e: ev.CostCapNear, at: str) -> None:
    _current(s, e.pod_id, "cost cap near")
    s.pod.cost_cap_near = True


def _deleting(s: RunLog, e: ev.PodDeleting, at: str) -> None:
    if s.pod.deleted(e.pod_id):
        raise InvalidTransition(f"pod {e.pod_id} is already deleted")
    s.pod.pods[e.pod_id] = PodState.deleting
    if s.pod.pod_id == e.pod_id:
        s.pod.status = PodState.deleting
        s.pod.delete_reason = e.reason


def _cost(s: RunLog, pod_id: str) -> dict[str, Any]:
    """The cost record of pod ``pod_id`` of the run (made empty on first sight)."""
    return s.pod.costs.setdefault(pod_id, empty_cost())


def empty_cost() -> dict[str, Any]:
    """A pod's cost record before anything of it is known."""
    return {
        "created_at": None,
        "rate": None,
        "gone_at": None,
        "ended_at": None,
        "estimate": None,
        "billed": None,
        "billed_final": False,
        "billed_period": None,
    }


def _deleted(s: RunLog, e: ev.PodDeleted, at: str) -> None:
    s.pod.pods[e.pod_id] = PodState.deleted
    s.pod.strays.pop(e.pod_id, None)
    cost = _cost(s, e.pod_id)
    cost.update(gone_at=at, estimate=e.spend)
    if e.uptime_seconds is not None and cost["created_at"]:
        cost["ended_at"] = _plus(cost["created_at"], e.uptime_seconds)
    if s.pod.pod_id == e.pod_id:
        s.pod.status = PodState.deleted
        s.pod.deleted_by = e.by
        if e.reason is not None and s.pod.delete_reason is None:
            s.pod.delete_reason = e.reason
        s.pod.uptime_seconds = e.uptime_seconds
        s.pod.spend = e.spend


def _plus(iso: str, seconds: float) -> str | None:
    from datetime import timedelta

    from overbrainer.utc import iso_utc, parse_utc

    moment = parse_utc(iso)
    return None if moment is None else iso_utc(moment + timedelta(seconds=seconds))


def _stray(s: RunLog, e: ev.StrayRecorded, at: str) -> None:
    s.pod.strays[e.pod_id] = e.reason
    s.pod.pods.setdefault(e.pod_id, PodState.stray)
    _cost(s, e.pod_id)


def _stray_dropped(s: RunLog, e: ev.StrayDropped, at: str) -> None:
    s.pod.strays.pop(e.pod_id, None)
    s.pod.pods[e.pod_id] = PodState.deleted
    _cost(s, e.pod_id)["gone_at"] = at


def _billed(s: RunLog, e: ev.PodBilled, at: str) -> None:
    if e.pod_id not in s.pod.pods:
        raise InvalidTransition(f"billing of pod {e.pod_id}, which the run never had")
    _cost(s, e.pod_id).update(
        billed=e.amount, billed_final=e.final, billed_period=[e.period_start, e.period_end]
    )


def _candidates(s: RunLog, e: ev.CandidatesChosen, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("GPU candidates are chosen only before the job starts")


def _capacity_awaited(s: RunLog, e: ev.CapacityAwaited, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("capacity is awaited only before the job starts")


def _cluster_created(s: RunLog, e: ev.ClusterCreated, at: str) -> None:
    if s.pod.pod_id != e.pod_id or s.pod.status != PodState.created:
        raise InvalidTransition(f"cluster {e.cluster_id} is recorded with its primary pod")
    # Runpod bills a cluster as one: what the primary's pod cost is read as the cluster's.
    _cost(s, e.pod_id)["cluster"] = e.cluster_id
    s.pod.cluster = {
        "id": e.cluster_id,
        "nodes": e.nodes,
        "gpus_per_node": e.gpus_per_node,
        "members": [],
    }


def _cluster_ranked(s: RunLog, e: ev.ClusterRanked, at: str) -> None:
    cluster = s.pod.cluster
    if cluster is None or cluster["id"] != e.cluster_id:
        raise InvalidTransition(f"cluster {e.cluster_id} is not the run's")
    if len(e.members) != cluster["nodes"]:
        raise InvalidTransition(
            f"cluster {e.cluster_id} has {cluster['nodes']} nodes, not {len(e.members)}"
        )
    cluster["members"] = [dict(member) for member in e.members]


def _model_ready(s: RunLog, e: ev.ModelReady, at: str) -> None:
    if s.run.state != RunState.running:
        raise InvalidTransition("the base model is made ready by a running job")
    s.run.model = {"cached": e.cached, "seconds": e.seconds, "at": e.at}


def _volume_attached(s: RunLog, e: ev.VolumeAttached, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("a network volume is attached only before the job starts")
    s.pod.volume = {
        "id": e.volume_id,
        "name": e.volume_name,
        "data_center": e.data_center,
        "created": e.created,
        "size_gb": e.size_gb,
    }
    s.pod.volume_fill_seconds = e.fill_seconds


def _data_on_volume(s: RunLog, e: ev.DataOnVolume, at: str) -> None:
    if s.run.state != RunState.preparing:
        raise InvalidTransition("the run's data is put on its volume only before the job starts")


# Each event type's rule, set on the first event folded (whole, by one assignment).
_HANDLERS: dict[type[ev.Event], Any] = {}


def _rules() -> dict[type[ev.Event], Any]:
    global _HANDLERS
    from overbrainer.events import types as ev

    _HANDLERS = {
        ev.RunCreated: _created,
        ev.JobStarted: _job_started,
        ev.RunEnded: _ended,
        ev.CancelRequested: _cancel_requested,
        ev.StopRequested: _stop_requested,
        ev.Stalled: _stalled,
        ev.ModelReady: _model_ready,
        ev.CheckpointRetrieved: _checkpoint,
        ev.CheckpointOnVolume: _checkpoint_on_volume,
        ev.ResumedFromVolume: _resumed_from_volume,
        ev.CheckpointPruned: _checkpoint_pruned,
        ev.Interrupted: _interrupted,
        ev.Detached: _detached,
        ev.Followed: _followed,
        ev.ArtifactsRetrieved: _artifacts,
        ev.NoteAdded: _note_added,
        ev.NoteCleared: _note_cleared,
        ev.ClockOffset: _clock_offset,
        ev.FilesRemoved: _files_removed,
        ev.ClockJumped: _nothing,
        ev.Recovering: _recovering,
        ev.Recovered: _recovered,
        ev.KeysGenerated: _keys,
        ev.AttemptSent: _attempt_sent,
        ev.AttemptResolved: _attempt_resolved,
        ev.PodCreated: _pod_created,
        ev.ClusterCreated: _cluster_created,
        ev.ClusterRanked: _cluster_ranked,
        ev.EndpointSeen: _endpoint,
        ev.PodReady: _ready,
        ev.PodJobRunning: _job_running,
        ev.AwaitingRetrieval: _awaiting,
        ev.PodKept: _kept,
        ev.CostCapNear: _cost_cap_near,
        ev.PodDeleting: _deleting,
        ev.PodDeleted: _deleted,
        ev.StrayRecorded: _stray,
        ev.StrayDropped: _stray_dropped,
        ev.CandidatesChosen: _candidates,
        ev.CapacityAwaited: _capacity_awaited,
        ev.VolumeAttached: _volume_attached,
        ev.DataOnVolume: _data_on_volume,
        ev.PodBilled: _billed,
    }
    return _HANDLERS
