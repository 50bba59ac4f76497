"""What each pod on the account is to this store's runs: pure decisions over one listing.

Used by ``pod ls`` (a note per pod), the orphan warning at ``train`` (the pods nothing will
delete) and ``pod rm`` (which pods belong to a run). No I/O here.
"""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from overbrainer.events.aggregate import RunLog
from overbrainer.events.ids import looks_like_run_id
from overbrainer.events.types import PodState, RunState
from overbrainer.runpod.models import Pod
from overbrainer.runpod.pod_scripts import RUN_MARKER

NAME_PREFIX = "overbrainer-"


class Note(StrEnum):
    """How a pod stands against the runs of this store."""

    in_progress = "in progress"
    abandoned = "abandoned while starting"
    ended_not_deleted = "ended but not deleted"
    kept = "kept"
    awaiting_retrieval = "awaiting retrieval"
    stray = "stray"
    not_in_store = "not in this store"
    no_marker = "no marker"
    gone = "gone"


# Pods nothing will delete: the orphan warning at `train` names these.
UNATTENDED = frozenset(
    {Note.ended_not_deleted, Note.stray, Note.not_in_store, Note.no_marker, Note.abandoned}
)


@dataclass(frozen=True)
class Row:
    """One line of ``pod ls``: a listed pod (or a recorded one the listing lacks)."""

    run_id: str | None
    pod_id: str
    note: Note
    pod: Pod | None = None
    # Who started the pod's run and where (``alice@laptop-a``), when the store knows it.
    started_by: str | None = None

    @property
    def status(self) -> str:
        """Runpod's status, or ``-`` for a pod the listing lacks."""
        return (self.pod.raw_status or self.pod.status.value) if self.pod else "-"


def run_of(pod: Pod) -> str | None:
    """The run ID a pod carries in its environment (its run marker), if a valid one."""
    marker = pod.env.get(RUN_MARKER)
    return marker if marker and looks_like_run_id(marker) else None


def is_ours(pod: Pod) -> bool:
    """Whether the pod is overbrainer's: it carries a run marker or is named like ours."""
    return run_of(pod) is not None or pod.name.startswith(NAME_PREFIX)


def classify(pod: Pod, state: RunLog | None, *, abandoned: bool = False) -> Note:
    """The note for a listed pod of overbrainer, given its run's state (None: not in store)
    and whether the command starting the run is provably gone (``starting.judge``)."""
    run_id = run_of(pod)
    if run_id is None:
        return Note.no_marker
    if state is None or not state.exists:
        return Note.not_in_store
    recorded = state.pod
    if pod.id in recorded.strays or pod.id not in recorded.pods:
        return Note.stray
    gone = (PodState.deleted, PodState.deleting)
    if pod.id != recorded.pod_id or recorded.pods.get(pod.id) in gone:
        # A pod the run moved past (a not-ready attempt) or deleted, still listed.
        return Note.ended_not_deleted
    if recorded.status == PodState.kept:
        return Note.kept
    if recorded.status == PodState.awaiting_retrieval:
        return Note.awaiting_retrieval
    if state.final:
        return Note.ended_not_deleted
    if abandoned and state.run.state == RunState.preparing:
        return Note.abandoned
    return Note.in_progress


def rows(
    pods: Iterable[Pod],
    states: Callable[[str], RunLog | None],
    recorded: Mapping[str, RunLog] | None = None,
    abandoned: Collection[str] = (),
) -> list[Row]:
    """A row per overbrainer pod of the listing, then one per pod the store says may exist
    that the listing lacks (``gone``, to be confirmed before it is recorded deleted).
    ``abandoned``: the runs whose starting command is provably gone."""
    out: list[Row] = []
    seen: set[str] = set()
    for pod in pods:
        if not is_ours(pod):
            continue
        run_id = run_of(pod)
        state = states(run_id) if run_id else None
        note = classify(pod, state, abandoned=run_id in abandoned)
        out.append(Row(run_id=run_id, pod_id=pod.id, note=note, pod=pod))
        seen.add(pod.id)
    for run_id, state in (recorded or {}).items():
        for pod_id, status in state.pod.pods.items():
            if pod_id not in seen and status != PodState.deleted:
                out.append(Row(run_id=run_id, pod_id=pod_id, note=Note.gone))
    return out


def orphan_warnings(found: Iterable[Row]) -> list[str]:
    """One warning per pod nothing will delete; never deletes anything."""
    warnings = []
    for row in found:
        if row.note not in UNATTENDED:
            continue
        rate = f" (${row.pod.cost:.2f}/h)" if row.pod and row.pod.cost else ""
        owner = f"of run {row.run_id}" if row.run_id else "named like overbrainer's"
        if row.note is Note.abandoned:
            # Its starter is provably gone: ending it needs no --force.
            warnings.append(
                f"pod {row.pod_id} {owner}{rate} was {row.note.value}: the `overbrainer "
                f"train` starting it is gone, and only its watchdog's boot grace bounds it; "
                f"end the run with `overbrainer pod rm {row.run_id}`"
            )
            continue
        fix = f"`overbrainer pod rm {row.run_id} --force`" if row.run_id else "the Runpod console"
        warnings.append(
            f"pod {row.pod_id} {owner}{rate} is {row.note.value}: nothing will "
            f"delete it; remove it with {fix}"
        )
    return warnings
