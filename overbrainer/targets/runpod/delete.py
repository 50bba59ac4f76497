"""Deleting a pod: the one module that asks Runpod to delete one, and says why.

Every path that ends a pod comes here with its reason (``DeleteReason``, recorded in
``pod.Deleting``):

- ``retrieved``: the run's results are home and verified (``ending.end_pod``), or another
  command is deleting the pod of a run whose job ended (joined);
- ``not_ready``: a created pod did not become ready in time, vanished or died, or could not
  be reached again once ready (``provision``);
- ``refused``: the pod's watchdog refused to guard it, or its bootstrap failed
  (``provision``);
- ``duplicate``: a second pod of an ambiguous create (``provision``);
- ``interrupted``: a signal before the job started (``provision``, or the run's ready pod in
  the lifecycle);
- ``cancelled``: ``train cancel`` asked, through the log, for a run still starting its pod
  (``provision``, or the last look before the job starts);
- ``failed``: the job could not start, another command overtook the start, or provisioning
  failed in any other way;
- ``deadline``: a job still followed past its pod's deadline (the pod's watchdog should
  have deleted it);
- ``cost_cap``: a job still followed as its pod was about to reach its cost cap (its results
  so far collected first; ``following.at_cost_cap``);
- ``requested``: ``pod rm``.

:func:`delete_pod` appends ``pod.Deleting`` *before* the delete leaves, sends it, waits
until Runpod no longer shows the pod, and only then appends ``pod.Deleted`` with its uptime
and spend; shielded from signals. A delete that cannot be confirmed raises
:class:`DeleteUnconfirmed`, whose message says the pod may still bill and where to look.
:func:`delete_unrecorded` deletes a pod no run's log can record (``pod rm --force`` of a run
not in this store, or a pod recorded deleted yet still listed). :func:`delete_cluster`
deletes a run's cluster (every member with it) and waits until Runpod shows neither the
cluster nor any of its pods; it records nothing (its caller does), and fails with
:class:`ClusterDeleteUnconfirmed`, naming the cluster, its pods and ``pod rm RUN``.
:func:`release` deletes the pod of a run whose job will not run. A confirmed delete drops
the run's client key once no pod of it may exist (:func:`forget_key_if_done`, which a path
that deleted nothing calls itself). The pod's own watchdog (``runpod/scripts/watchdog.sh``)
deletes a pod no command deleted in time, with the pod's own key.
"""

from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.front.interrupts import ShieldTimeout
from overbrainer.runpod.client import RunpodError
from overbrainer.runpod.decide import rate_text, uptime_and_spend
from overbrainer.runpod.keys import forget_client_key
from overbrainer.runpod.models import Pod
from overbrainer.runpod.orphans import pods_text
from overbrainer.targets.runpod.pods import (
    PodContext,
    confirm_gone,
    note_clock,
    pod_ls_hint,
    shown,
)
from overbrainer.utc import iso_utc

__all__ = [
    "ClusterDeleteUnconfirmed",
    "DeleteUnconfirmed",
    "Deleted",
    "DeletedCluster",
    "delete_cluster",
    "delete_pod",
    "delete_unrecorded",
    "forget_key_if_done",
    "release",
]


class DeleteUnconfirmed(OverbrainerError):
    """A delete was sent (or could not be), and Runpod may still show — and bill — the pod."""

    def __init__(self, message: str, *, run_id: str, pod_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.pod_id = pod_id


class ClusterDeleteUnconfirmed(OverbrainerError):
    """A cluster's delete was sent (or could not be), and Runpod may still show — and bill —
    the cluster or some of its pods."""

    def __init__(
        self, message: str, *, run_id: str, cluster_id: str, pod_ids: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.cluster_id = cluster_id
        self.pod_ids = pod_ids


@dataclass(frozen=True)
class Deleted:
    """A pod deleted (or found already gone), with its uptime and spend."""

    pod_id: str
    gone_already: bool
    uptime_seconds: float | None
    spend: float | None


@dataclass(frozen=True)
class DeletedCluster:
    """A cluster deleted (or found already gone) with its member pods: the cluster's uptime
    and what its members spent together (None when a member's rate or start is unknown)."""

    cluster_id: str
    pod_ids: tuple[str, ...]
    gone_already: bool
    uptime_seconds: float | None
    spend: float | None


async def delete_pod(
    ctx: PodContext,
    run_id: str,
    pod_id: str,
    reason: ev.DeleteReason,
    by: ev.DeletedBy = "client",
    *,
    rate: float | None = None,
    created_at: str | None = None,
    keep_key: bool = False,
    cluster_id: str | None = None,
) -> None:
    """Delete pod ``pod_id`` of run ``run_id`` and wait until Runpod no longer shows it.
    The primary of a cluster (recorded so, or ``cluster_id``) goes with its cluster.

    Appends ``PodDeleting(reason)`` before the delete is sent and ``PodDeleted`` once the
    pod is gone, with its uptime and spend (``rate`` × uptime, on Runpod's clock), then
    ``ClockOffset`` if this machine's clock is now found far off Runpod's. ``rate`` and
    ``created_at`` default to what the run's log says of its current pod; give them for
    another pod (a stray). A pod that was already gone is recorded deleted ``found_gone``.
    Shielded from Ctrl-C; a pod already recorded deleted is left alone. A pod another
    command is deleting (``PodDeleting`` in the log) is joined: no second ``PodDeleting``,
    the delete is sent again (the other command may have died before sending it) and
    waited for, and whichever command sees it gone first records ``PodDeleted``.
    Once the pod is gone, the run's client key is dropped if no pod of it may exist —
    unless ``keep_key`` (provisioning goes on to another pod with the same keys).

    Raises:
        DeleteUnconfirmed: the delete failed, or Runpod still showed the pod
            ``timing.delete_confirm`` seconds later; it may still bill.
    """
    journal = ctx.session.journal
    joined = False  # another command's delete of the pod was already in the log

    def deleting(now: RunLog) -> list[ev.Event]:
        nonlocal joined
        joined = decisions.joins_delete(now, pod_id)
        return decisions.start_delete(now, pod_id, reason)

    async def work() -> None:
        nonlocal rate, created_at
        state = await journal.state(run_id)
        if state.pod.deleted(pod_id):
            return
        if state.pod.pod_id == pod_id:
            rate = state.pod.cost_per_hour if rate is None else rate
            created_at = created_at or state.pod.created_at
        state = await journal.append(run_id, deleting)
        if state.pod.deleted(pod_id):
            return  # recorded deleted by another command meanwhile
        cluster = cluster_id or state.pod.costs.get(pod_id, {}).get("cluster")
        if cluster is not None:
            # The primary of a cluster: Runpod deletes its members only with the cluster.
            try:
                ended = await delete_cluster(ctx, run_id, str(cluster))
            except ClusterDeleteUnconfirmed as error:
                raise DeleteUnconfirmed(str(error), run_id=run_id, pod_id=pod_id) from error
            accepted = not ended.gone_already
        else:
            accepted = await _delete_one_pod(ctx, run_id, pod_id, rate)
        # The uptime is counted on Runpod's clock, from its own createdAt.
        uptime, spend = uptime_and_spend(created_at, ctx.server_now(), rate)
        # Joining another command's delete, a pod already gone is that delete's doing.
        deleted = ev.PodDeleted(
            pod_id=pod_id,
            by=by if accepted or joined else "found_gone",
            uptime_seconds=uptime,
            spend=spend,
        )
        await journal.append(run_id, lambda now: decisions.pod_deleted(now, deleted))
        # Runpod's clock was just read again: a jump of this machine's shows here.
        try:
            await note_clock(ctx, run_id)
        except StoreError as error:
            ctx.session.front.warn(f"{error} (while recording this machine's clock offset)")

    try:
        await ctx.session.interrupts.shield(f"deleting pod {pod_id}", ctx.timing.delete_limit, work)
    except ShieldTimeout as error:
        raise DeleteUnconfirmed(
            f"deleting pod {pod_id} of run {run_id}{rate_text(rate)} did not finish within "
            f"{ctx.timing.delete_limit:g} s; it may still bill: {pod_ls_hint(run_id)}",
            run_id=run_id,
            pod_id=pod_id,
        ) from error
    if not keep_key:
        forget_key_if_done(ctx, run_id, await journal.state(run_id))


async def _delete_one_pod(ctx: PodContext, run_id: str, pod_id: str, rate: float | None) -> bool:
    """Delete one pod and wait until Runpod no longer shows it: whether Runpod accepted the
    delete (False: it was gone already)."""
    try:
        accepted = await ctx.client.delete_pod(pod_id)
    except RunpodError as error:
        raise DeleteUnconfirmed(
            f"cannot delete pod {pod_id} of run {run_id}{rate_text(rate)}: {error}; it may "
            f"still bill: {pod_ls_hint(run_id)}",
            run_id=run_id,
            pod_id=pod_id,
        ) from error
    seen = await _wait_gone(ctx, _pod_look(ctx, pod_id))
    if seen is not None:
        raise DeleteUnconfirmed(
            f"pod {pod_id} of run {run_id}{rate_text(rate)} was deleted, but {seen}; it "
            f"may still bill: {pod_ls_hint(run_id)}",
            run_id=run_id,
            pod_id=pod_id,
        )
    return accepted


async def _wait_gone(ctx: PodContext, look: Callable[[], Awaitable[str | None]]) -> str | None:
    """Poll ``look`` (what Runpod still shows after a delete, None once nothing) every
    ``timing.delete_poll`` s until it shows nothing: None. Past ``timing.delete_confirm``,
    what was last seen: ``Runpod still showed …``, or, when the last look could not read
    Runpod at all, that it could not be read (unknown is not gone)."""
    timing = ctx.timing
    end = trio.current_time() + timing.delete_confirm
    still = "it"
    while True:
        unread: RunpodError | None = None
        try:
            showing = await look()
            if showing is None:
                return None
            still = showing
        except RunpodError as error:
            unread = error  # Unknown is not gone: look again until the time is up.
        left = end - trio.current_time()
        if left <= 0:
            if unread is not None:
                return f"Runpod could not be read to confirm it was gone ({unread})"
            return f"Runpod still showed {still} {timing.delete_confirm:g} s later"
        await trio.sleep(min(timing.delete_poll, left))


def _pod_look(ctx: PodContext, pod_id: str) -> Callable[[], Awaitable[str | None]]:
    """One look at a deleted pod (:func:`confirm_gone`, one read): ``it`` while shown."""

    async def look() -> str | None:
        return None if await confirm_gone(ctx, pod_id, reads=1) else "it"

    return look


def _pod_uptime_and_spend(ctx: PodContext, pod: Pod) -> tuple[float | None, float | None]:
    """A listed pod's uptime and spend until now, on Runpod's clock, at its listed rate."""
    created = iso_utc(pod.created_at) if pod.created_at is not None else None
    return uptime_and_spend(created, ctx.server_now(), pod.cost or None)


async def delete_unrecorded(ctx: PodContext, run_id: str, pod: Pod) -> Deleted:
    """Delete ``pod`` of run ``run_id`` where no log records it (the run is not in this
    store, or it records the pod deleted while Runpod still lists it), and wait until
    Runpod no longer shows it. Shielded from signals.

    Raises:
        OverbrainerError: the delete failed, or Runpod still showed the pod
            ``timing.delete_confirm`` seconds later; it may still bill.
    """
    timing = ctx.timing
    rate = pod.cost or None

    async def work() -> Deleted:
        try:
            accepted = await ctx.client.delete_pod(pod.id)
        except RunpodError as error:
            raise OverbrainerError(
                f"cannot delete pod {pod.id} of run {run_id}{rate_text(rate)}: {error}; it may "
                "still bill: check `overbrainer pod ls`"
            ) from error
        seen = await _wait_gone(ctx, _pod_look(ctx, pod.id))
        if seen is not None:
            raise OverbrainerError(
                f"pod {pod.id} of run {run_id}{rate_text(rate)} was deleted, but {seen}; it "
                "may still bill: check `overbrainer pod ls`"
            )
        uptime, spend = _pod_uptime_and_spend(ctx, pod)
        return Deleted(pod.id, not accepted, uptime, spend)

    return await ctx.session.interrupts.shield(f"deleting pod {pod.id}", timing.delete_limit, work)


async def delete_cluster(
    ctx: PodContext,
    run_id: str,
    cluster_id: str,
    members: Sequence[Pod] = (),
    *,
    created_at: datetime | None = None,
) -> DeletedCluster:
    """Delete cluster ``cluster_id`` of run ``run_id`` (``DELETE /clusters/{id}``: every
    member with it) and wait until Runpod shows neither the cluster nor any of its pods
    (listed with clusters' members). Shielded from signals.

    ``members`` are its pods as last listed (read from Runpod when not given), for their
    ids and what they spent: each its listed rate from its own creation, on Runpod's clock;
    the cluster's uptime counts from ``created_at`` (default: its first member's).
    Nothing is recorded in a run's log here: the caller records what it returns.

    Raises:
        ClusterDeleteUnconfirmed: the delete failed, or Runpod still showed the cluster or
            one of its pods ``timing.delete_confirm`` seconds later; they may still bill.
    """
    client, timing = ctx.client, ctx.timing
    known = list(members)
    if not known:
        # Unread, its pods are still looked for after the delete by the cluster they name.
        with suppress(RunpodError):
            known = await client.cluster_pods(cluster_id) or []
    pod_ids = tuple(p.id for p in known)
    what = f"cluster {cluster_id} of run {run_id}{pods_text(pod_ids)}"
    what += rate_text(sum(p.cost for p in known) or None)

    def unconfirmed(text: str) -> ClusterDeleteUnconfirmed:
        return ClusterDeleteUnconfirmed(
            f"{text}; it may still bill: {pod_ls_hint(run_id)}",
            run_id=run_id,
            cluster_id=cluster_id,
            pod_ids=pod_ids,
        )

    async def look() -> str | None:
        still = ["the cluster"] if await client.get_cluster(cluster_id) is not None else []
        left = [
            p.id
            for p in await client.list_pods(include_cluster_pods=True)
            if shown(p)
            and (p.id in pod_ids or (p.cluster is not None and p.cluster.cluster_id == cluster_id))
        ]
        if left:
            still.append(f"its pods {', '.join(left)}")
        return " and ".join(still) or None

    async def work() -> DeletedCluster:
        try:
            accepted = await ctx.client.delete_cluster(cluster_id)
        except RunpodError as error:
            raise unconfirmed(f"cannot delete {what}: {error}") from error
        seen = await _wait_gone(ctx, look)
        if seen is not None:
            raise unconfirmed(f"{what} was deleted, but {seen}")
        spends = [_pod_uptime_and_spend(ctx, pod)[1] for pod in known]
        spend = None if not known or None in spends else sum(s or 0.0 for s in spends)
        start = created_at or min((p.created_at for p in known if p.created_at), default=None)
        since = iso_utc(start) if start is not None else None
        uptime, _ = uptime_and_spend(since, ctx.server_now(), None)
        return DeletedCluster(cluster_id, pod_ids, not accepted, uptime, spend)

    try:
        return await ctx.session.interrupts.shield(
            f"deleting cluster {cluster_id}", timing.delete_limit, work
        )
    except ShieldTimeout as error:
        raise unconfirmed(
            f"deleting {what} did not finish within {timing.delete_limit:g} s"
        ) from error


async def end_cluster_of_gone(ctx: PodContext, state: RunLog, pod_id: str) -> None:
    """Pod ``pod_id`` of the run is gone (lost, or found gone): when it was a cluster's
    primary, the rest of its cluster goes too (Runpod keeps the other nodes, billing),
    confirmed before the pod is recorded gone.

    Raises:
        OverbrainerError: the cluster's delete was not confirmed; nothing is recorded (a
            later command looks again), and the message says how to remove it.
    """
    cluster = state.pod.costs.get(pod_id, {}).get("cluster")
    if cluster is None:
        return
    try:
        await delete_cluster(ctx, state.run.run_id, str(cluster))
    except ClusterDeleteUnconfirmed as error:
        raise OverbrainerError(
            f"pod {pod_id} of run {state.run.run_id} is gone, but not the rest of its "
            f"cluster: {error}"
        ) from error


async def release(ctx: PodContext, run_id: str, reason: ev.DeleteReason) -> None:
    """Delete the current pod of a run that will not run its job (shielded; the delete
    drops its key if no pod of it is left); a failure is only warned about, with where to
    look."""
    journal = ctx.session.journal
    state = await journal.state(run_id)
    pod_id = state.pod.pod_id
    if pod_id is None or state.pod.deleted(pod_id):
        return
    try:
        await delete_pod(ctx, run_id, pod_id, reason)
    except OverbrainerError as error:
        ctx.session.front.warn(str(error))


def forget_key_if_done(ctx: PodContext, run_id: str, state: RunLog) -> None:
    """Drop the run's client key once no pod of it may exist (nothing to log in to)."""
    if not state.pod.may_bill():
        forget_client_key(ctx.session.run_dir(run_id) / "ssh")
