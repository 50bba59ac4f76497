"""``pod ls`` and ``pod rm RUN [--force]``: the account's overbrainer pods and clusters
against this store's runs, and deleting every pod and cluster of a run.

``pod ls`` lists the account's pods (clusters' members included) and clusters once and
classifies each pod (``orphans.classify``) and cluster (``orphans.classify_run``, by the
run its name carries); a cluster's members show beneath it, never as pods of their own. A
pod the store says may exist but the listing lacks is looked up: confirmed gone (three "no
such pod" answers and a listing without it) it is recorded deleted (``found_gone``);
otherwise it is shown as it is.

``pod rm`` takes a run ID, never a pod ID. Without ``--force`` it refuses a run unknown to
the store (another checkout may own it), a run still starting its pod while the command
starting it may be alive (one provably gone left it *abandoned while starting*: it is
ended), and a run in progress whose pod is not recorded; for a run in progress with a
recorded pod it deletes the run's other pods, keeps the training pod and fails naming
both. Otherwise — and with ``--force`` always — it deletes every pod of the run (a kept one
too) and waits until each is gone; every pod is tried even when one fails, and a forced run
that was in progress is failed. The run's clusters (found by their names) go the way of its
pods: each deleted whole, and waited for until none of its pods is listed — or, for a run
in progress without ``--force``, kept. A cluster's member is never deleted alone (Runpod
refuses it): ``pod rm`` of a member's ID is refused naming its cluster and ``pod rm RUN``.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import UnknownRun
from overbrainer.events.types import PodState, RunState
from overbrainer.plurals import word
from overbrainer.runpod.client import RunpodError
from overbrainer.runpod.decide import rate_text
from overbrainer.runpod.models import Cluster, Pod, PodStatus
from overbrainer.runpod.orphans import (
    ClusterRow,
    Note,
    Row,
    classify,
    cluster_rows,
    cluster_run,
    clusters_of_run,
    member_rank,
    orphan_warnings,
    pods_text,
    rows,
    run_of,
    status_of,
)
from overbrainer.targets.runpod.delete import (
    Deleted,
    DeletedCluster,
    delete_cluster,
    delete_pod,
    delete_unrecorded,
    forget_key_if_done,
)
from overbrainer.targets.runpod.pods import PodContext, confirm_gone
from overbrainer.targets.runpod.starting import Start, look, start_of
from overbrainer.utc import iso_utc, parse_utc

__all__ = [
    "Deleted",
    "DeletedCluster",
    "Removal",
    "deleted_line",
    "duration_text",
    "end_abandoned",
    "list_rows",
    "member_refusal",
    "never_had_pod",
    "not_in_store",
    "remove_run_pods",
    "row_json",
    "still_starting",
    "table",
    "warn_orphans",
]


# --- pod ls ----------------------------------------------------------------------------


async def _state_or_none(ctx: PodContext, run_id: str) -> RunLog | None:
    try:
        return await ctx.session.journal.state(run_id)
    except UnknownRun:
        return None


async def _listed_states(
    ctx: PodContext,
    pods: Sequence[Pod],
    clusters: Sequence[Cluster],
    known: Mapping[str, RunLog] | None = None,
) -> dict[str, RunLog]:
    """``known``, and the state of every other run of this store that a listed pod carries
    or a listed cluster's name names."""
    states: dict[str, RunLog] = dict(known or {})
    carried = {*map(run_of, pods), *(cluster_run(cluster.name) for cluster in clusters)}
    for run_id in sorted({r for r in carried if r is not None} - set(states)):
        state = await _state_or_none(ctx, run_id)
        if state is not None:
            states[run_id] = state
    return states


async def list_rows(ctx: PodContext, recorded: Mapping[str, RunLog]) -> list[Row | ClusterRow]:
    """One row per overbrainer pod of the account, then one per pod of ``recorded`` (the
    store's runs whose pods may exist) that the listing lacks; those are looked up and,
    confirmed gone, recorded deleted (``pod.Deleted`` by ``found_gone``). Then one row per
    overbrainer cluster, its members in it."""
    pods = await ctx.client.list_pods(include_cluster_pods=True)
    clusters = await ctx.client.list_clusters()
    states = await _listed_states(ctx, pods, clusters, recorded)
    starts = await look(ctx, states)
    abandoned = {run_id for run_id, start in starts.items() if start.abandoned}
    found = rows(pods, states.get, recorded, abandoned)
    checked: dict[int, Row] = {}

    async def check(index: int, row: Row) -> None:
        checked[index] = await _look_up(ctx, row)

    async with trio.open_nursery() as nursery:
        for index, row in enumerate(found):
            if row.note is Note.gone:
                nursery.start_soon(check, index, row)
    found = [checked.get(index, row) for index, row in enumerate(found)]
    owners = await _owners(ctx, states)
    listed: list[Row | ClusterRow] = [*found, *cluster_rows(clusters, pods, states.get, abandoned)]
    return [dataclasses.replace(row, started_by=owners.get(row.run_id or "")) for row in listed]


async def _owners(ctx: PodContext, states: Mapping[str, RunLog]) -> dict[str, str]:
    """``user@host`` of each run's ``run.Created``: with a team store, a colleague's pod
    reads as in progress *and* whose it is."""
    owners = {}
    for run_id, state in states.items():
        home = await ctx.session.journal.home(state)
        if home is not None:
            owners[run_id] = f"{home.user}@{home.host}"
    return owners


async def _look_up(ctx: PodContext, row: Row) -> Row:
    """A recorded pod the listing lacks: gone (recorded so), or as Runpod shows it."""
    assert row.run_id is not None
    front = ctx.session.front
    try:
        gone = await confirm_gone(ctx, row.pod_id)
        pod = None if gone else await ctx.client.get_pod(row.pod_id)
    except RunpodError as error:
        front.warn(f"cannot tell whether pod {row.pod_id} of run {row.run_id} is gone: {error}")
        return row
    if pod is None or pod.status is PodStatus.TERMINATED:
        state = await _state_or_none(ctx, row.run_id)
        if state is not None and state.pod.costs.get(row.pod_id, {}).get("cluster"):
            # A cluster's primary: recorded gone only with the rest of its cluster, which
            # `train attach` or `pod rm` deletes (the cluster is listed below).
            return row
        found = ev.PodDeleted(pod_id=row.pod_id, by="found_gone")
        await ctx.session.journal.append(row.run_id, lambda s: decisions.pod_deleted(s, found))
        return row
    state = await _state_or_none(ctx, row.run_id)
    start = await start_of(ctx, state) if state is not None else None
    note = classify(pod, state, abandoned=start is not None and start.abandoned)
    return Row(run_id=row.run_id, pod_id=row.pod_id, note=note, pod=pod)


def row_json(row: Row | ClusterRow) -> dict[str, object]:
    """A row as ``pod ls --json`` prints it: a pod's (``cluster`` null), or a cluster's
    (``pod`` null) with its shape and its members, each with its rank and status."""
    if isinstance(row, ClusterRow):
        cluster = row.cluster
        created = cluster.created_at if cluster else None
        return {
            "run": row.run_id,
            "pod": None,
            "cluster": row.cluster_id,
            "status": row.status,
            "gpu": cluster.gpu_id if cluster else None,
            "gpus_per_pod": cluster.gpus_per_pod if cluster else None,
            "nodes": cluster.pod_count if cluster else None,
            "cost_per_hour": row.cost_per_hour,
            "created": iso_utc(created) if created else None,
            "note": row.note.value,
            "started_by": row.started_by,
            "members": [
                {
                    "pod": pod.id,
                    "rank": member_rank(pod),
                    "status": status_of(pod),
                    "cost_per_hour": pod.cost,
                }
                for pod in row.members
            ],
        }
    pod = row.pod
    return {
        "run": row.run_id,
        "pod": row.pod_id,
        "cluster": None,
        "status": row.status,
        "gpu": pod.gpu_id if pod else None,
        "cost_per_hour": pod.cost if pod else None,
        "created": iso_utc(pod.created_at) if pod and pod.created_at else None,
        "note": row.note.value,
        "started_by": row.started_by,
    }


def _cost_cell(cost: object) -> str:
    return f"{cost:.2f}" if isinstance(cost, float) else "-"


def _lines(row: Row | ClusterRow) -> list[list[str]]:
    """A row's lines of the table: a cluster's first, then one per member (indented, its
    rank as its note)."""
    data = row_json(row)
    created = data["created"]
    name = row.pod_id if isinstance(row, Row) else f"cluster {row.cluster_id}"
    lines = [
        [
            row.run_id or "-",
            name,
            row.status,
            str(data["gpu"] or "-"),
            _cost_cell(data["cost_per_hour"]),
            created[:16].replace("T", " ") if isinstance(created, str) else "-",
            row.started_by or "-",
            row.note.value,
        ]
    ]
    for pod in row.members if isinstance(row, ClusterRow) else ():
        rank = member_rank(pod)
        note = f"rank {rank}" if rank is not None else "rank not assigned yet"
        lines.append(["", f"  {pod.id}", status_of(pod), "", _cost_cell(pod.cost), "", "", note])
    return lines


def table(found: Sequence[Row | ClusterRow]) -> str:
    """The ``pod ls`` table: run, pod, Runpod status, GPU, $/h, created, who started the
    run and where, note; a cluster's members beneath it."""
    heads = ["RUN", "POD", "STATUS", "GPU", "$/H", "CREATED", "STARTED BY", "NOTE"]
    lines = [line for row in found for line in _lines(row)]
    widths = [max(len(h), *(len(t[i]) for t in lines)) for i, h in enumerate(heads)]
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in lines]
    return "\n".join(out)


# --- train's look at leftover pods ------------------------------------------------------


async def warn_orphans(ctx: PodContext, pods: list[Pod] | None = None) -> None:
    """Warn about the pods and clusters nothing will delete, from one listing (``pods``, or
    a fresh one, and the account's clusters); never deletes."""
    front = ctx.session.front
    if pods is None:
        try:
            pods = await ctx.client.list_pods(include_cluster_pods=True)
        except OverbrainerError as error:
            front.warn(f"cannot look for leftover pods: {error}")
            return
    clusters: list[Cluster] = []
    try:
        clusters = await ctx.client.list_clusters()
        if clusters and not any(p.cluster is not None for p in pods):
            # A listing without clusters' members: theirs, to name them and their price.
            members = await ctx.client.list_pods(include_cluster_pods=True)
            pods = [*pods, *(p for p in members if p.cluster is not None)]
    except OverbrainerError as error:
        front.warn(f"cannot look for leftover clusters: {error}")
    states = await _listed_states(ctx, pods, clusters)
    try:
        starts = await look(ctx, states)
    except OverbrainerError as error:  # a warning's extra: training goes on without it
        front.warn(f"cannot tell which runs were abandoned while starting: {error}")
        starts = {}
    abandoned = {run_id for run_id, start in starts.items() if start.abandoned}
    found: list[Row | ClusterRow] = [
        *rows(pods, states.get, abandoned=abandoned),
        *cluster_rows(clusters, pods, states.get, abandoned),
    ]
    for warning in orphan_warnings(found):
        front.warn(warning)


# --- pod rm ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Removal:
    """What ``pod rm`` did: the pods and clusters deleted, the pod and clusters kept, the
    failures."""

    run_id: str
    deleted: tuple[Deleted, ...]
    failures: tuple[str, ...] = ()
    kept: str | None = None
    kept_rate: float | None = None
    # Where the kept pod's run is followed from, when that is another machine.
    elsewhere: str | None = None
    clusters: tuple[DeletedCluster, ...] = ()
    kept_clusters: tuple[str, ...] = ()

    @property
    def removed(self) -> tuple[Deleted | DeletedCluster, ...]:
        """Every cluster and pod deleted (or found gone), clusters first."""
        return (*self.clusters, *self.deleted)

    def problems(self) -> list[str]:
        """What ``pod rm`` fails with: the kept training pod (and clusters) first, then
        each failure."""
        found = list(self.failures)
        held = [f"pod {self.kept}{rate_text(self.kept_rate)}"] if self.kept is not None else []
        held += [f"cluster {cluster_id}" for cluster_id in self.kept_clusters]
        if held:
            run_id = self.run_id
            names = ", ".join(d.pod_id for d in self.deleted) or "none"
            where = f" on {self.elsewhere}" if self.elsewhere else ""
            found.insert(
                0,
                f"run {run_id} is in progress on {' and '.join(held)}: kept "
                f"{word(len(held), 'it', 'them')} (its other pods deleted: {names}). Stop "
                f"the run{where} with `overbrainer train cancel {run_id}`, or delete its pod "
                f"anyway with {_force_hint(run_id)}",
            )
        return found


def duration_text(seconds: float | None) -> str:
    """``1h02m``, ``5m20s``, ``42s``, or ``an unknown time``."""
    if seconds is None:
        return "an unknown time"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def deleted_line(run_id: str, deleted: Deleted | DeletedCluster) -> str:
    """The line ``pod rm`` prints for one pod, or one cluster with its pods."""
    if isinstance(deleted, Deleted):
        what = f"pod {deleted.pod_id} of run {run_id}"
    else:
        what = f"cluster {deleted.cluster_id} of run {run_id}{pods_text(deleted.pod_ids)}"
    if deleted.gone_already:
        return f"pod rm: {what} was already gone"
    spend = f"${deleted.spend:.2f}" if deleted.spend is not None else "unknown"
    return f"pod rm: deleted {what} after {duration_text(deleted.uptime_seconds)}, spend {spend}"


def _force_hint(run_id: str) -> str:
    return f"`overbrainer pod rm {run_id} --force`"


def not_in_store(run_id: str) -> str:
    """Why ``pod rm`` refuses a run this store does not hold, and the way to go on."""
    return (
        f"run {run_id} is not in this store: another checkout may own it "
        f"(`overbrainer pod ls` shows its pods as not in this store). To delete its "
        f"pods anyway: {_force_hint(run_id)}"
    )


def still_starting(start: Start) -> str:
    """Why a run whose starter may be alive is left alone, and the ways to end it."""
    run_id = start.run_id
    return (
        f"run {run_id} is still starting its pod: {start.who()} is at it ({start.why}), and "
        f"deletes the pod itself if it fails or is stopped. Stop it with `overbrainer train "
        f"cancel {run_id}`, or delete the run's pods anyway with {_force_hint(run_id)}"
    )


# What a create attempt may end in when Runpod certainly made no pod for it: refusals it
# answered, and creates that never left this machine. ("not_created" is a reading of
# listings after an ambiguous create, so it is not among them.)
_NO_POD = frozenset(
    {
        "no_capacity",
        "no_access",
        "rate_limited",
        "bad_api_key",
        "insufficient_balance",
        "not_found",
        "conflict",
        "invalid_request",
        "refused",
        "not_sent",
    }
)


def never_had_pod(state: RunLog) -> str | None:
    """Why run ``state`` never had a pod, from its log alone (so that saying it needs no
    API key), or None when a pod of it may exist. It never had one when it ran on another
    kind of target, or when it ended on Runpod with no create that could have made one.
    The reason reads after "never had a pod": ``it ran on target `local` (local), not on
    Runpod``."""
    run, pod = state.run, state.pod
    if run.kind and not run.kind_facts.rents_pod:
        return f"it ran on target `{run.target}` ({run.kind}), not on Runpod"
    if not state.final or pod.pod_id is not None or pod.pods or pod.strays:
        return None  # while it is not ended, a command may still create its pod
    if any(attempt.get("result") not in _NO_POD for attempt in pod.attempts):
        return None
    tried = len(pod.attempts)
    if not tried:
        return f"it ended ({run.state}) before any pod was asked for"
    creates = "its create" if tried == 1 else f"any of its {tried} creates"
    return f"it ended ({run.state}), and Runpod made no pod for {creates}"


async def remove_run_pods(
    ctx: PodContext,
    run_id: str,
    *,
    force: bool,
    outcome: RunState = RunState.failed,
    command: str = "pod rm",
) -> Removal:
    """``pod rm RUN [--force]``: see the module docstring. Returns what was deleted and
    what failed; the caller prints it.

    A run left starting by a command that is provably gone (``starting.judge``) needs no
    ``--force``: its pods are deleted and it ends ``outcome`` (``train attach`` and
    ``train cancel`` end such a run here too, naming themselves as ``command``).

    Raises:
        OverbrainerError: the run is refused (unknown, starting, in progress without a
            recorded pod) without ``--force``.
    """
    state = await _state_or_none(ctx, run_id)
    if state is None and not force:
        # Refused before any call to Runpod: a mistyped run ID gets this answer at once.
        raise OverbrainerError(not_in_store(run_id))
    everything = await ctx.client.list_pods(include_cluster_pods=True)
    # A cluster's members go with their cluster: never one at a time.
    members = {p.id for p in everything if p.cluster is not None}
    listed = [
        p
        for p in everything
        if run_of(p) == run_id and p.status is not PodStatus.TERMINATED and p.id not in members
    ]
    mine = clusters_of_run(run_id, await ctx.client.list_clusters())
    # The run's clusters with their members (a cluster only its members show included).
    clusters = [r for r in cluster_rows(mine, everything, lambda _: None) if r.run_id == run_id]
    if state is None:
        return await _remove_unrecorded(ctx, run_id, listed, clusters)
    run, pod = state.run, state.pod
    start = await start_of(ctx, state)
    if not force and start is not None and not start.abandoned:
        raise OverbrainerError(still_starting(start))
    in_progress = run.state == RunState.running
    if not force and in_progress and pod.pod_id is None:
        raise OverbrainerError(
            f"run {run_id} is in progress but no pod of it is recorded: refusing to guess "
            f"which pod runs its job. To delete every pod of the run anyway: "
            f"{_force_hint(run_id)}"
        )
    keep = pod.pod_id if (in_progress and not force) else None
    # A recorded cluster goes as its primary, the run's pod: deleted and recorded as one.
    primaries = {
        str(cost["cluster"]): pod_id
        for pod_id, cost in pod.costs.items()
        if cost.get("cluster") is not None and not pod.deleted(pod_id)
    }
    clusters = [c for c in clusters if c.cluster_id not in primaries]
    targets = _pods_of(state, listed)
    targets = {
        pod_id: found
        for pod_id, found in targets.items()
        if pod_id not in members or pod_id in primaries.values()
    }
    if keep is not None:
        targets = {pod_id: found for pod_id, found in targets.items() if pod_id != keep}
    deleted: list[Deleted] = []
    failures: list[str] = []
    # A run in progress keeps its clusters with its training pod.
    kept_clusters = tuple(c.cluster_id for c in clusters) if keep is not None else ()
    gone_clusters = await _delete_clusters(ctx, run_id, clusters if keep is None else [], failures)
    for pod_id, found in sorted(targets.items()):
        try:
            if pod.deleted(pod_id) and found is not None:
                # Recorded deleted, yet listed: a leftover nothing else will delete.
                deleted.append(await delete_unrecorded(ctx, run_id, found))
            else:
                deleted.append(await _delete(ctx, run_id, pod_id, found))
        except OverbrainerError as error:
            failures.append(str(error))
    try:
        deleted += await _resolve_pending(ctx, run_id, listed)
    except OverbrainerError as error:
        failures.append(str(error))
    if start is not None and start.abandoned:
        message = (
            f"abandoned while starting its pod: {start.who()} is gone ({start.why}); "
            f"`overbrainer {command}` deleted its pods"
        )
        await ctx.session.journal.append(run_id, lambda s: decisions.end_run(s, outcome, message))
    elif force and not state.final:
        message = f"its pods were deleted by `overbrainer pod rm {run_id} --force`"
        await ctx.session.journal.append(
            run_id, lambda s: decisions.end_run(s, RunState.failed, message)
        )
    forget_key_if_done(ctx, run_id, await ctx.session.journal.state(run_id))
    elsewhere = await _followed_elsewhere(ctx, state) if keep is not None else None
    return Removal(
        run_id,
        tuple(deleted),
        tuple(failures),
        keep,
        pod.cost_per_hour,
        elsewhere,
        gone_clusters,
        kept_clusters,
    )


async def _delete_clusters(
    ctx: PodContext, run_id: str, clusters: Sequence[ClusterRow], failures: list[str]
) -> tuple[DeletedCluster, ...]:
    """Delete each of the run's listed clusters and wait until none of its pods is listed;
    every cluster is tried, each failure added to ``failures``."""
    deleted: list[DeletedCluster] = []
    for row in clusters:
        created = row.cluster.created_at if row.cluster is not None else None
        try:
            deleted.append(
                await delete_cluster(ctx, run_id, row.cluster_id, row.members, created_at=created)
            )
        except OverbrainerError as error:
            failures.append(str(error))
    return tuple(deleted)


async def _resolve_pending(ctx: PodContext, run_id: str, listed: Sequence[Pod]) -> list[Deleted]:
    """Settle an attempt whose create was sent but never resolved (the command that sent
    it died): its pod, if Runpod made one, carries the attempt's name. Once no answer to
    the create can still arrive (the reconcile window after it has passed), that pod is
    deleted (if ``pod rm`` has not just done so: ``listed`` is what it saw first) and the
    attempt resolved, so the log stops saying a pod may be being created."""
    state = await ctx.session.journal.state(run_id)
    pending = [a for a in state.pod.attempts if a.get("result") is None]
    deleted: list[Deleted] = []
    for attempt in pending:
        sent = parse_utc(str(attempt.get("sent_at") or ""))
        window = max(ctx.timing.reconcile_after, default=0.0)
        if sent is not None:
            # ``sent`` is the time of another command's append, on its machine's clock: a
            # clock far off (here or there) must not make this wait longer than the window.
            left = min(window, window - (ctx.clock() - sent).total_seconds())
            if left > 0:
                await trio.sleep(left)
        name = str(attempt.get("pod_name"))
        now = [p for p in await ctx.client.list_pods() if run_of(p) == run_id]
        made = {p.id: p for p in [*listed, *now] if p.name == name}
        state = await ctx.session.journal.state(run_id)
        for pod in now:
            if (
                pod.id in made
                and pod.status is not PodStatus.TERMINATED
                and not state.pod.deleted(pod.id)
            ):
                deleted.append(await _delete(ctx, run_id, pod.id, pod))
        n = int(attempt["n"])
        pod_id = next(iter(made), None)
        result = "deleted" if pod_id else "not_created"
        found = f"pod {pod_id} and deleted it" if pod_id else f"no pod named {name}"
        detail = f"its command stopped before the create was answered; `pod rm` found {found}"
        resolved = ev.AttemptResolved(n=n, result=result, detail=detail, pod_id=pod_id)
        await ctx.session.journal.append(
            run_id, partial(decisions.resolve_attempt, resolved=resolved)
        )
    return deleted


async def _followed_elsewhere(ctx: PodContext, state: RunLog) -> str | None:
    """The host that last acted on the run, when it is not this one (a team store)."""
    from overbrainer.events.home import this_host

    home = await ctx.session.journal.home(state)
    if home is None or home.last_host == this_host():
        return None
    return f"host {home.last_host} (where `{home.last_command}` last acted on it)"


def _pods_of(state: RunLog, listed: Sequence[Pod]) -> dict[str, Pod | None]:
    """Every pod of the run that may exist: listed with its marker, or recorded and not
    deleted (strays included); with what the listing says of it."""
    targets: dict[str, Pod | None] = {
        p.id: p for p in listed if p.status is not PodStatus.TERMINATED
    }
    for pod_id, status in state.pod.pods.items():
        if status != PodState.deleted:
            targets.setdefault(pod_id, None)
    for pod_id in state.pod.strays:
        targets.setdefault(pod_id, None)
    return targets


async def _delete(ctx: PodContext, run_id: str, pod_id: str, found: Pod | None) -> Deleted:
    """Delete one pod of a recorded run and wait until it is gone (events appended)."""
    state = await ctx.session.journal.state(run_id)
    current = state.pod.pod_id == pod_id
    rate = None if current or found is None or not found.cost else found.cost
    created = None
    if not current and found is not None and found.created_at is not None:
        created = iso_utc(found.created_at)
    await delete_pod(ctx, run_id, pod_id, "requested", "pod_rm", rate=rate, created_at=created)
    # What the delete recorded (a short read of this run's log).
    for record in reversed(await ctx.session.journal.history(run_id)):
        event = record.event
        if isinstance(event, ev.PodDeleted) and event.pod_id == pod_id:
            return Deleted(pod_id, event.by == "found_gone", event.uptime_seconds, event.spend)
    return Deleted(pod_id, True, None, None)  # pragma: no cover - delete_pod records it


async def _remove_unrecorded(
    ctx: PodContext, run_id: str, listed: Sequence[Pod], clusters: Sequence[ClusterRow]
) -> Removal:
    """``--force`` on a run this store does not know: delete its listed pods and clusters
    directly (no run to record them in) and wait until Runpod no longer shows them."""
    deleted: list[Deleted] = []
    failures: list[str] = []
    gone_clusters = await _delete_clusters(ctx, run_id, clusters, failures)
    for pod in sorted(listed, key=lambda p: p.id):
        try:
            deleted.append(await delete_unrecorded(ctx, run_id, pod))
        except OverbrainerError as error:
            failures.append(str(error))
    return Removal(run_id, tuple(deleted), tuple(failures), clusters=gone_clusters)


async def member_refusal(ctx: PodContext, pod_id: str) -> str | None:
    """Why ``pod rm`` refuses ``pod_id`` when it is a cluster's member (Runpod deletes a
    member only with its cluster, and ``pod rm RUN`` deletes that), naming the cluster and
    the command; None when the account lists no such member."""
    pods = await ctx.client.list_pods(include_cluster_pods=True)
    member = next((p for p in pods if p.id == pod_id and p.cluster is not None), None)
    if member is None or member.cluster is None:
        return None
    cluster_id = member.cluster.cluster_id
    cluster = await ctx.client.get_cluster(cluster_id)
    run_id = (cluster_run(cluster.name) if cluster is not None else None) or run_of(member)
    if run_id is None:
        how, of = "in the Runpod console", ""
    else:
        how, of = f"with `overbrainer pod rm {run_id}`", f" of run {run_id}"
    return (
        f"pod {pod_id} is a member of cluster {cluster_id}{of}: a cluster's pods are deleted "
        f"only with their cluster; delete the cluster {how}"
    )


async def end_abandoned(ctx: PodContext, run_id: str, outcome: RunState, by: str) -> None:
    """Delete every pod of a run abandoned while starting and end it ``outcome``."""
    removal = await remove_run_pods(ctx, run_id, force=False, outcome=outcome, command=by)
    for deleted in removal.removed:
        ctx.session.front.result(deleted_line(run_id, deleted).replace("pod rm:", "train:"))
    problems = removal.problems()
    if problems:
        raise OverbrainerError("; ".join(problems))
