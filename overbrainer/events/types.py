"""The event catalogue: every transition of a run and of its pod.

Events are plain frozen dataclasses of JSON primitives. They know nothing of storage: the
store wraps each in an envelope with its time and actor. A name (``run.Created``,
``pod.Deleted``) identifies a type in the log, so renaming a class never breaks history.
"""

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Literal

# The states live apart (a reader of the runs view needs them, not the events); named here
# too, as they always were.
from overbrainer.events.states import ALIVE as ALIVE
from overbrainer.events.states import FINAL_STATES as FINAL_STATES
from overbrainer.events.states import PodState as PodState
from overbrainer.events.states import RunState as RunState

JsonValue = str | int | float | bool | None | list[Any] | dict[str, Any]

# Why a pod was deleted (each produced by one or more paths of
# ``overbrainer.targets.runpod.delete``, whose docstring says which), and who deleted it.
DeleteReason = Literal[
    "retrieved",
    "interrupted",
    "not_ready",
    "duplicate",
    "deadline",
    "cost_cap",
    "refused",
    "requested",
    "cancelled",
    "failed",
    "lost",
]
DeletedBy = Literal["client", "watchdog", "pod_rm", "found_gone"]


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base of every event: ``name`` is its stable identifier in the log.

    Each event type is a frozen dataclass whose equality, hash and repr are these, written
    once as a dataclass would generate them: generating them for every type of the
    catalogue cost `events RUN` a third of what it adds to Python's start-up.
    """

    name: ClassVar[str] = ""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _compared(self) == _compared(other)

    def __hash__(self) -> int:
        return hash(_compared(self))

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr
        )
        return f"{self.__class__.__qualname__}({shown})"

    def fields(self) -> dict[str, Any]:
        """The event's payload as JSON primitives (a state given as an enum: its value)."""
        return {
            k: v.value if isinstance(v, Enum) else v for k, v in dataclasses.asdict(self).items()
        }


def _compared(event: object) -> tuple[Any, ...]:
    return tuple(getattr(event, f.name) for f in dataclasses.fields(event) if f.compare)  # type: ignore[arg-type]


# ---- run -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class RunCreated(Event):
    """A run was created: what it trains, where, and a digest of the settings used."""

    name: ClassVar[str] = "run.Created"
    run_id: str
    target: str
    kind: str
    remote_dir: str
    settings_digest: str
    base_model: str = ""
    adapter: str = ""
    keep_pod: bool = False
    resumed_from: dict[str, Any] | None = None
    """The checkpoint the run starts from, ``{"run": ID, "step": N}`` (None: from scratch)."""
    processes: int | None = 1
    """How many processes the job runs (None: one per GPU it sees, counted as it starts)."""
    parallelism: str | None = None
    """How its processes share the model (``ddp``, ``zero2``, ``zero3``, ``fsdp``; None:
    one process, nothing shared)."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class JobStarted(Event):
    """The job was spawned on the target and its pid recorded."""

    name: ClassVar[str] = "run.JobStarted"
    job_dir: str
    pid: int
    container: str | None = None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class RunEnded(Event):
    """The run reached a final state."""

    name: ClassVar[str] = "run.Ended"
    state: str
    message: str | None = None
    exit_code: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CancelRequested(Event):
    """Somebody asked for the run's job to stop.

    ``relay`` is empty when the asking command stops the job itself; ``asked`` when it
    cannot reach the job (the run's files live in another checkout, maybe on another host)
    and leaves it to the command following the run; ``taken`` when that follower took the
    request and is stopping the job. Older readers ignore the field.
    """

    name: ClassVar[str] = "run.CancelRequested"
    relay: str = ""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class StopRequested(Event):
    """Somebody asked the run's job to save a checkpoint and stop (``train stop``).

    ``relay`` as for :class:`CancelRequested`: empty when the asking command wrote the
    request on the target itself; ``asked`` when it left that to the command following
    the run; ``taken`` when that follower wrote it.
    """

    name: ClassVar[str] = "run.StopRequested"
    relay: str = ""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Stalled(Event):
    """The run's job stalled: it wrote no metrics line for ``silent_minutes`` (``[training]
    stall_minutes``; before its first line, ``first_line``, ``first_step_minutes``), the
    last at ``last_step`` (None: none with a step). Recorded by the command following it,
    which then asks the job to save and stop and, past the stop grace, cancels it."""

    name: ClassVar[str] = "run.Stalled"
    silent_minutes: float
    last_step: int | None = None
    first_line: bool = False


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ModelReady(Event):
    """The job's first step made the base model ready in its ``HF_HOME`` before the
    trainer started: found there (``cached``: downloaded by an earlier run on the same
    cache, a network volume's) or downloaded, ready ``seconds`` after the step began;
    ``at``: when, on the target's clock (each job's record its own). Recorded by the
    command following the run; a base model that is a local path records nothing."""

    name: ClassVar[str] = "run.ModelReady"
    cached: bool
    seconds: float
    at: str = ""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CheckpointRetrieved(Event):
    """A checkpoint of the job (``path``, run-relative, saved at ``step``) came home and
    matched the target's manifest: the run can be resumed from it."""

    name: ClassVar[str] = "run.CheckpointRetrieved"
    step: int
    path: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CheckpointOnVolume(Event):
    """A checkpoint of the job (``path``, run-relative, saved at ``step``) is whole on the
    project's network volume, where the job saved it: ``files`` files whose manifest's
    digest is ``manifest_digest`` (``exec.manifest.manifest_digest``). A new pod resumes
    from it when it still matches."""

    name: ClassVar[str] = "run.CheckpointOnVolume"
    step: int
    path: str
    files: int
    manifest_digest: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ResumedFromVolume(Event):
    """The checkpoint a resumed run starts from (``train --resume-from``: checkpoint
    ``step`` of run ``source``) is the one on the project's network volume, found on the
    new pod as it was recorded: nothing of it is uploaded from home."""

    name: ClassVar[str] = "run.ResumedFromVolume"
    source: str
    step: int


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CheckpointPruned(Event):
    """A checkpoint brought home earlier (``path``, run-relative, saved at ``step``) was
    removed from this machine: only the last ``[training] keep_checkpoints`` stay. Recorded
    before the folder goes, so the log never claims a checkpoint that is not home."""

    name: ClassVar[str] = "run.CheckpointPruned"
    step: int
    path: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Interrupted(Event):
    """Ctrl-C before the job existed: ``stage`` says where it stopped."""

    name: ClassVar[str] = "run.Interrupted"
    stage: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Detached(Event):
    """The command stopped following; the job keeps running."""

    name: ClassVar[str] = "run.Detached"
    reason: str = "interrupted"
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Followed(Event):
    """A command took over following the run (``train attach``, ``supervise``): the
    process in its actor is the run's follower until it detaches or is gone, and another
    command that finds it alive leaves the run to it (``overbrainer.events.claims``)."""

    name: ClassVar[str] = "run.Followed"


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ArtifactsRetrieved(Event):
    """The job's results came home and matched the target's manifest."""

    name: ClassVar[str] = "run.ArtifactsRetrieved"
    files: int
    bytes: int
    manifest_digest: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class NoteAdded(Event):
    """A note on the run (for instance: artifacts not retrieved)."""

    name: ClassVar[str] = "run.NoteAdded"
    note: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class NoteCleared(Event):
    """The run's note no longer holds."""

    name: ClassVar[str] = "run.NoteCleared"


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ClockOffset(Event):
    """The clock of the machine running a command is far from Runpod's (by the ``Date`` of
    its API's answers): the times this command records are off by ``offset_seconds``
    (positive: ahead). Nothing that bounds a pod depends on it."""

    name: ClassVar[str] = "run.ClockOffset"
    offset_seconds: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class FilesRemoved(Event):
    """The run's directory on this machine (``runs/<id>/``: its output, checkpoints, logs
    and keys; ``bytes`` on disk) is removed by ``runs rm`` or ``runs gc``. Recorded before
    the directory goes: a removal cut short (a killed process) is finished by running the
    command again. The run's events stay; ``runs ls`` lists it only with ``--all``."""

    name: ClassVar[str] = "run.FilesRemoved"
    bytes: int


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ClockJumped(Event):
    """The monotonic clock of the machine following the run jumped (a laptop waking, a VM
    restored): Runpod's time carried on it since Runpod's last answer was ``seconds`` off
    (positive: ahead) when Runpod's clock was read again. A bound that seemed due by it was
    not by Runpod's clock, and nothing was done about it."""

    name: ClassVar[str] = "run.ClockJumped"
    seconds: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Recovering(Event):
    """The run's pod was lost before its job ended (``reason`` says how; ``pod_id`` the
    pod lost): the run goes on, on a new pod, as recovery ``attempt`` of
    ``max_recoveries``. The run is starting a pod again until :class:`Recovered`.
    ``last_step``: the last training step the job was seen at (None: unknown)."""

    name: ClassVar[str] = "run.Recovering"
    reason: str
    attempt: int
    max_recoveries: int
    pod_id: str | None = None
    last_step: int | None = None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Recovered(Event):
    """The run's job runs again, on pod ``pod_id``, resumed from the checkpoint of
    ``resumed_step`` (0: from the start); ``lost_steps``: the steps done since that
    checkpoint on the lost pod, done again now (None: unknown). ``from_volume``: the
    checkpoint was the one on the project's network volume (nothing uploaded from home);
    otherwise the copy at home was uploaded."""

    name: ClassVar[str] = "run.Recovered"
    attempt: int
    pod_id: str
    resumed_step: int
    lost_steps: int | None = None
    from_volume: bool = False


# ---- pod -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class KeysGenerated(Event):
    """The run's client key and pod host key exist; only the host's public key is here."""

    name: ClassVar[str] = "pod.KeysGenerated"
    host_public_key: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class AttemptSent(Event):
    """A create request is about to leave (appended durably before it does).

    ``max_hours`` is the bound the pod is created with, counted on the pod from its
    creation; ``max_cost_usd`` its cost cap, if any (USD, at the pod's rate). ``deadline``
    is what older versions recorded instead: an absolute time computed on the client's
    clock (empty now; kept so that old logs read as they did).
    """

    name: ClassVar[str] = "pod.AttemptSent"
    n: int
    pod_name: str
    gpu_type: str
    deadline: str = ""
    max_hours: float | None = None
    # The pod's expected USD/h (the catalog's list price × its GPU count) when known; older
    # logs have none.
    price_per_hour: float | None = None
    max_cost_usd: float | None = None
    # A cluster of that many pods (every one of the GPU type) rather than one pod; the
    # price is then every node's.
    nodes: int = 1


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class AttemptResolved(Event):
    """What became of attempt ``n``."""

    name: ClassVar[str] = "pod.AttemptResolved"
    n: int
    result: str
    detail: str = ""
    pod_id: str | None = None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodCreated(Event):
    """Runpod placed the pod: the run's current pod from now on."""

    name: ClassVar[str] = "pod.Created"
    pod_id: str
    gpu_type: str
    data_center: str | None = None
    cost_per_hour: float | None = None
    created_at: str | None = None
    deadline: str | None = None
    """When the pod must be gone: Runpod's ``createdAt`` plus ``max_hours`` (Runpod's clock)."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ClusterCreated(Event):
    """The run's pods are the members of an Instant Cluster: ``pod_id`` (the run's pod in
    every other pod event) is its primary, node rank 0, through which the run is followed;
    deleting the run's pod deletes the whole cluster."""

    name: ClassVar[str] = "pod.ClusterCreated"
    cluster_id: str
    pod_id: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ClusterRanked(Event):
    """Every member of the cluster has its node rank: ``members`` is one ``{"pod_id",
    "rank", "ip"}`` per node, by rank (``ip``: its address on the cluster's network)."""

    name: ClassVar[str] = "pod.ClusterRanked"
    cluster_id: str
    members: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class EndpointSeen(Event):
    """The pod's direct SSH endpoint (it may change across restarts)."""

    name: ClassVar[str] = "pod.EndpointSeen"
    pod_id: str
    host: str
    port: int
    user: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodReady(Event):
    """SSH answered with the pinned key and the watchdog's verdict was read."""

    name: ClassVar[str] = "pod.Ready"
    pod_id: str
    verdict: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodJobRunning(Event):
    """The run's job runs on the pod."""

    name: ClassVar[str] = "pod.JobRunning"
    pod_id: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class AwaitingRetrieval(Event):
    """The job ended but its results are not home: the pod waits (bounded by its watchdog)."""

    name: ClassVar[str] = "pod.AwaitingRetrieval"
    pod_id: str
    detail: str = ""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodKept(Event):
    """--keep-pod: the pod stays until ``pod rm``."""

    name: ClassVar[str] = "pod.Kept"
    pod_id: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CostCapNear(Event):
    """The pod has cost 95 % of its cap (``max_cost_usd`` at ``cost_per_hour``, counted on
    Runpod's clock from its creation): at its cap it is deleted."""

    name: ClassVar[str] = "pod.CostCapNear"
    pod_id: str
    max_cost_usd: float
    cost_per_hour: float


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodDeleting(Event):
    """A delete is about to be sent (appended before it leaves)."""

    name: ClassVar[str] = "pod.Deleting"
    pod_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodDeleted(Event):
    """The pod is confirmed gone."""

    name: ClassVar[str] = "pod.Deleted"
    pod_id: str
    by: str
    uptime_seconds: float | None = None
    spend: float | None = None
    reason: str | None = None
    """Why, when no delete of overbrainer's said so: the bound the pod's watchdog kept
    (``deadline``, ``cost_cap``), inferred from Runpod's clock when the pod was found gone."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class StrayRecorded(Event):
    """A pod of this run that is not its current pod (a duplicate of an ambiguous create)."""

    name: ClassVar[str] = "pod.StrayRecorded"
    pod_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class StrayDropped(Event):
    """A stray pod is gone."""

    name: ClassVar[str] = "pod.StrayDropped"
    pod_id: str


# ---- pod: GPU candidates ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CandidatesChosen(Event):
    """The GPU types the pod will be tried on, in order, and why each other one was left out
    (appended before the first create).

    ``source`` is ``auto`` (chosen from Runpod's catalog) or ``list`` (the target's
    ``gpu_types``, priced from the catalog for ``max_cost_usd``). Each candidate is
    ``{gpu_type, price_per_hour, max_hours, shortened, stock}``: the pod's expected USD/h
    (all its GPUs), the bound it is created with (shorter than the target's ``max_hours``
    when ``max_cost_usd`` pays for less), and the catalog's stock where it was said. Each
    left-out type is ``{gpu_type, reason}``. The settings that chose them follow.
    """

    name: ClassVar[str] = "pod.CandidatesChosen"
    source: str
    candidates: list[dict[str, Any]]
    left: list[dict[str, Any]] = field(default_factory=list)
    max_hours: float | None = None
    min_vram_gb: int | None = None
    max_price_per_hour: float | None = None
    max_cost_usd: float | None = None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CapacityAwaited(Event):
    """No GPU type had capacity (``wait_for_capacity`` is set): the walk waits ``seconds``,
    then tries every type again. ``walks`` counts the walks that found none so far;
    ``until`` is when the wait ends at the latest (this machine's clock, UTC); what is
    awaited: ``gpu_count`` GPUs of one of ``gpu_types`` in ``data_centers`` (empty: any).
    """

    name: ClassVar[str] = "pod.CapacityAwaited"
    walks: int
    seconds: float
    until: str
    gpu_types: list[str] = field(default_factory=list)
    gpu_count: int = 1
    data_centers: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class VolumeAttached(Event):
    """The target's network volume (``volume = "NAME"``) the run's pods mount, found by
    its name or ``created`` for this run (appended before the first create; the pods are
    created only in its ``data_center``). ``fill_seconds``: the longest the run's files
    from home may then take to go up before the create (an upload appends nothing while
    it runs): another host's judgement of the starter's silence allows it."""

    name: ClassVar[str] = "pod.VolumeAttached"
    volume_id: str
    volume_name: str
    data_center: str
    created: bool
    size_gb: int | None = None
    fill_seconds: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class DataOnVolume(Event):
    """The run's data on its network volume by content (``overbrainer/blobs/sha256/<hex>``;
    the pod's run directory links to it), before the job starts: each file as ``{path,
    sha256, size, sent}`` (``sent``: uploaded for this run; else it was there already),
    verified there. ``via``: ``s3`` (Runpod's S3 API, before the pod was created) or
    ``pod`` (through the pod once it was ready). ``checkpoint``: a resume checkpoint from
    home put there through the S3 API, as ``{run, step, prefix, files, sent, bytes_sent}``
    (None: none)."""

    name: ClassVar[str] = "pod.DataOnVolume"
    via: str
    files: list[dict[str, Any]]
    bytes_sent: int = 0
    checkpoint: dict[str, Any] | None = None


# ---- what Runpod billed ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PodBilled(Event):
    """What Runpod's billing says a pod of the run cost (USD), beside overbrainer's own
    estimate on ``pod.Deleted``: the sum of the pod's billing records over the window
    asked, ``period_start`` to ``period_end`` (Runpod's clock, whole buckets), read at
    ``read_at`` (Runpod's clock). ``final``: read once the pod's usage had time to reach the
    billing (see ``overbrainer.runpod.billing``); otherwise a later read may find more."""

    name: ClassVar[str] = "pod.Billed"
    pod_id: str
    amount: float
    period_start: str
    period_end: str
    final: bool
    read_at: str = ""


CATALOGUE: dict[str, type[Event]] = {
    cls.name: cls
    for cls in (
        RunCreated,
        JobStarted,
        RunEnded,
        CancelRequested,
        StopRequested,
        Stalled,
        ModelReady,
        CheckpointRetrieved,
        CheckpointOnVolume,
        ResumedFromVolume,
        CheckpointPruned,
        Interrupted,
        Detached,
        Followed,
        ArtifactsRetrieved,
        NoteAdded,
        NoteCleared,
        ClockOffset,
        FilesRemoved,
        ClockJumped,
        Recovering,
        Recovered,
        KeysGenerated,
        AttemptSent,
        AttemptResolved,
        PodCreated,
        EndpointSeen,
        PodReady,
        PodJobRunning,
        AwaitingRetrieval,
        PodKept,
        CostCapNear,
        PodDeleting,
        PodDeleted,
        StrayRecorded,
        StrayDropped,
        CandidatesChosen,
        CapacityAwaited,
        VolumeAttached,
        ClusterCreated,
        ClusterRanked,
        DataOnVolume,
        PodBilled,
    )
}


class UnknownEvent(ValueError):
    """A stored event whose name this version does not know."""


def event_from(name: str, data: dict[str, Any]) -> Event:
    """Rebuild an event from its stored name and payload (unknown keys are ignored, so an
    older overbrainer can still read a newer log)."""
    cls = CATALOGUE.get(name)
    if cls is None:
        raise UnknownEvent(name)
    known = _FIELDS.get(cls)
    if known is None:
        known = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    if known.issuperset(data):
        return cls(**data)
    return cls(**{k: v for k, v in data.items() if k in known})


# Each event type's field names, found once (``events RUN`` rebuilds thousands of events).
_FIELDS: dict[type[Event], frozenset[str]] = {}
