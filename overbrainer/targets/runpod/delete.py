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
not in this store, or a pod recorded deleted yet still listed). :func:`release` deletes the
pod of a run whose job will not run. A confirmed delete drops the run's client key once no
pod of it may exist (:func:`forget_key_if_done`, which a path that deleted nothing calls
itself). The pod's own watchdog (``runpod/scripts/watchdog.sh``)
deletes a pod no command deleted in time, with the pod's own key.
"""

from dataclasses import dataclass

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
from overbrainer.targets.runpod.pods import PodContext, confirm_gone, note_clock, pod_ls_hint
from overbrainer.utc import iso_utc

__all__ = [
    "DeleteUnconfirmed",
    "Deleted",
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


@dataclass(frozen=True)
class Deleted:
    """A pod deleted (or found already gone), with its uptime and spend."""

    pod_id: str
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
) -> None:
    """Delete pod ``pod_id`` of run ``run_id`` and wait until Runpod no longer shows it.

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
        try:
            accepted = await ctx.client.delete_pod(pod_id)
        except RunpodError as error:
            raise DeleteUnconfirmed(
                f"cannot delete pod {pod_id} of run {run_id}{rate_text(rate)}: {error}; it may "
                f"still bill: {pod_ls_hint(run_id)}",
                run_id=run_id,
                pod_id=pod_id,
            ) from error
        unlisted, unread = await _wait_unlisted(ctx, pod_id)
        if not unlisted:
            # Say what was seen: the pod still listed, or Runpod not readable at all.
            seen = (
                f"Runpod could not be read to confirm it was gone ({unread})"
                if unread is not None
                else f"Runpod still showed it {ctx.timing.delete_confirm:g} s later"
            )
            raise DeleteUnconfirmed(
                f"pod {pod_id} of run {run_id}{rate_text(rate)} was deleted, but {seen}; it "
                f"may still bill: {pod_ls_hint(run_id)}",
                run_id=run_id,
                pod_id=pod_id,
            )
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


async def _wait_unlisted(ctx: PodContext, pod_id: str) -> tuple[bool, RunpodError | None]:
    """Poll (:func:`confirm_gone`, one read a look) until Runpod no longer shows the pod:
    ``(True, None)``; on timeout ``(False, error)``, with the last read's error when the
    last look could not read Runpod at all (None when it showed the pod)."""
    timing = ctx.timing
    end = trio.current_time() + timing.delete_confirm
    while True:
        unread: RunpodError | None = None
        try:
            if await confirm_gone(ctx, pod_id, reads=1):
                return True, None
        except RunpodError as error:
            unread = error  # Unknown is not gone: look again until the time is up.
        left = end - trio.current_time()
        if left <= 0:
            return False, unread
        await trio.sleep(min(timing.delete_poll, left))


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
        unlisted, _ = await _wait_unlisted(ctx, pod.id)
        if not unlisted:
            raise OverbrainerError(
                f"pod {pod.id} of run {run_id}{rate_text(rate)} was deleted, but Runpod "
                f"still showed it {timing.delete_confirm:g} s later; it may still bill: "
                "check `overbrainer pod ls`"
            )
        created = iso_utc(pod.created_at) if pod.created_at is not None else None
        uptime, spend = uptime_and_spend(created, ctx.server_now(), rate)
        return Deleted(pod.id, not accepted, uptime, spend)

    return await ctx.session.interrupts.shield(f"deleting pod {pod.id}", timing.delete_limit, work)


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
