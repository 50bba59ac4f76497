"""What each pod and cluster on the account is to this store's runs: pure decisions over
one listing.

Used by ``pod ls`` (a note per pod, and per cluster with its members beneath), the orphan
warning at ``train`` (the pods and clusters nothing will delete) and ``pod rm`` (which pods
and clusters belong to a run). A cluster belongs to the run its name carries (it is named
like the run's pods, ``overbrainer-<run>-<attempt>``); its members are listed under it,
never as pods of their own. No I/O here.
"""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from overbrainer.events.aggregate import RunLog
from overbrainer.events.ids import looks_like_run_id
from overbrainer.events.types import PodState, RunState
from overbrainer.plurals import word
from overbrainer.runpod.models import Cluster, Pod
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
        return status_of(self.pod) if self.pod else "-"

    @property
    def subject(self) -> str:
        """What the row is, as a warning names it: ``pod <id>``."""
        return f"pod {self.pod_id}"

    @property
    def cost_per_hour(self) -> float | None:
        """What the pod costs an hour, when listed with a price."""
        return (self.pod.cost or None) if self.pod else None


@dataclass(frozen=True)
class ClusterRow:
    """One cluster of ``pod ls``, with its listed member pods by rank. ``cluster`` is None
    when only its members were listed (the cluster listing lacked it)."""

    run_id: str | None
    cluster_id: str
    note: Note
    cluster: Cluster | None = None
    members: tuple[Pod, ...] = ()
    started_by: str | None = None

    @property
    def status(self) -> str:
        """Its members' status (``RUNNING``, or ``1 EXITED, 1 RUNNING`` when they differ),
        or ``-`` with none listed."""
        counts: dict[str, int] = {}
        for pod in self.members:
            counts[status_of(pod)] = counts.get(status_of(pod), 0) + 1
        if len(counts) <= 1:
            return next(iter(counts), "-")
        return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))

    @property
    def subject(self) -> str:
        """What the row is, as a warning names it: ``cluster <id> (pods a, b)``."""
        return f"cluster {self.cluster_id}{pods_text(p.id for p in self.members)}"

    @property
    def cost_per_hour(self) -> float | None:
        """What its listed members cost an hour together (None: none with a price)."""
        return sum(p.cost for p in self.members) or None


def status_of(pod: Pod) -> str:
    """Runpod's status of a listed pod, as it said it."""
    return pod.raw_status or pod.status.value


def pods_text(pod_ids: Iterable[str]) -> str:
    """`` (pods a, b)`` (`` (pod a)``), or nothing for none."""
    ids = list(pod_ids)
    return f" ({word(len(ids), 'pod')} {', '.join(ids)})" if ids else ""


def member_rank(pod: Pod) -> int | None:
    """A cluster member's node rank (None: not assigned yet, or not a member)."""
    return pod.cluster.rank if pod.cluster is not None else None


def run_of(pod: Pod) -> str | None:
    """The run ID a pod carries in its environment (its run marker), if a valid one."""
    marker = pod.env.get(RUN_MARKER)
    return marker if marker and looks_like_run_id(marker) else None


def cluster_run(name: str) -> str | None:
    """The run ID a cluster's name carries (``overbrainer-<run>-<attempt>``, named as the
    run's pods are), if a valid one."""
    if not name.startswith(NAME_PREFIX):
        return None
    run_id, _, attempt = name.removeprefix(NAME_PREFIX).rpartition("-")
    return run_id if attempt.isdigit() and looks_like_run_id(run_id) else None


def clusters_of_run(run_id: str, listed: Iterable[Cluster]) -> list[Cluster]:
    """The clusters of run ``run_id`` among ``listed``, found by their names."""
    return [cluster for cluster in listed if cluster_run(cluster.name) == run_id]


def is_ours(pod: Pod) -> bool:
    """Whether the pod is overbrainer's: it carries a run marker or is named like ours."""
    return run_of(pod) is not None or pod.name.startswith(NAME_PREFIX)


def classify(pod: Pod, state: RunLog | None, *, abandoned: bool = False) -> Note:
    """The note for a listed pod of overbrainer, given its run's state (None: not in store)
    and whether the command starting the run is provably gone (``starting.judge``)."""
    run_id = run_of(pod)
    if run_id is not None and state is not None and state.exists:
        recorded = state.pod
        if pod.id in recorded.strays or pod.id not in recorded.pods:
            return Note.stray
        gone = (PodState.deleted, PodState.deleting)
        if pod.id != recorded.pod_id or recorded.pods.get(pod.id) in gone:
            # A pod the run moved past (a not-ready attempt) or deleted, still listed.
            return Note.ended_not_deleted
    return classify_run(run_id, state, abandoned=abandoned)


def classify_run(run_id: str | None, state: RunLog | None, *, abandoned: bool = False) -> Note:
    """The note for the run's own pod, or for a listed cluster of overbrainer, from the run
    it carries (``run_id``, None: no valid one) and that run's state (None: not in store):
    in progress while its run is, ended but not deleted once it ended."""
    if run_id is None:
        return Note.no_marker
    if state is None or not state.exists:
        return Note.not_in_store
    recorded = state.pod
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
    ``abandoned``: the runs whose starting command is provably gone. A cluster's member is
    no row here (:func:`cluster_rows` shows it under its cluster)."""
    out: list[Row] = []
    seen: set[str] = set()
    for pod in pods:
        if pod.cluster is not None:
            seen.add(pod.id)  # a cluster's member shows under its cluster
            continue
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


def cluster_rows(
    clusters: Iterable[Cluster],
    pods: Iterable[Pod],
    states: Callable[[str], RunLog | None],
    abandoned: Collection[str] = (),
) -> list[ClusterRow]:
    """A row per overbrainer cluster (named like ours, or with a member of ours), with its
    members among ``pods`` by rank; a cluster only its members show (the cluster listing
    lacked it) gets its row too, so that no billing member goes unseen."""
    members: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.cluster is not None:
            members.setdefault(pod.cluster.cluster_id, []).append(pod)
    known = {cluster.id: cluster for cluster in clusters}
    out: list[ClusterRow] = []
    for cluster_id in [*known, *(c for c in members if c not in known)]:
        cluster = known.get(cluster_id)
        listed = members.get(cluster_id, [])
        run_id = cluster_run(cluster.name) if cluster is not None else None
        run_id = run_id or next(filter(None, map(run_of, listed)), None)
        named = cluster is not None and cluster.name.startswith(NAME_PREFIX)
        if run_id is None and not named and not any(map(is_ours, listed)):
            continue
        state = states(run_id) if run_id else None
        note = classify_run(run_id, state, abandoned=run_id in abandoned)
        ranked = sorted(listed, key=lambda pod: (member_rank(pod) is None, member_rank(pod) or 0))
        out.append(ClusterRow(run_id, cluster_id, note, cluster, tuple(ranked)))
    return out


def orphan_warnings(found: Iterable[Row | ClusterRow]) -> list[str]:
    """One warning per pod or cluster nothing will delete; never deletes anything."""
    warnings = []
    for row in found:
        if row.note not in UNATTENDED:
            continue
        rate = f" (${row.cost_per_hour:.2f}/h)" if row.cost_per_hour else ""
        owner = f"of run {row.run_id}" if row.run_id else "named like overbrainer's"
        if row.note is Note.abandoned:
            # Its starter is provably gone: ending it needs no --force.
            warnings.append(
                f"{row.subject} {owner}{rate} was {row.note.value}: the `overbrainer "
                f"train` starting it is gone, and only its watchdog's boot grace bounds it; "
                f"end the run with `overbrainer pod rm {row.run_id}`"
            )
            continue
        fix = f"`overbrainer pod rm {row.run_id} --force`" if row.run_id else "the Runpod console"
        warnings.append(
            f"{row.subject} {owner}{rate} is {row.note.value}: nothing will "
            f"delete it; remove it with {fix}"
        )
    return warnings
