"""Deleting a pod and knowing it is gone — the primitive every path that ends a pod uses.

:func:`delete_pod` appends ``PodDeleting`` *before* the delete leaves, sends it, then waits
until Runpod no longer shows the pod (a delete that is accepted while the pod stays listed
is waited out), and only then appends ``PodDeleted`` with the pod's uptime and spend. The
whole of it is shielded from Ctrl-C. A delete that cannot be confirmed raises
:class:`DeleteUnconfirmed`, whose message says the pod may still bill and where to look.

:func:`confirm_gone` is the stricter test for a pod found missing (SPEC §7.5, §7.9): three
404s ``gone_interval`` apart, then a listing without it.

:class:`PodContext` is what these and the provisioning walk share.
"""

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.actor import starter_alive
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.types import PodState
from overbrainer.exec.base import Executor
from overbrainer.front.interrupts import ShieldTimeout
from overbrainer.runpod import clocks
from overbrainer.runpod.client import RunpodClient, RunpodError
from overbrainer.runpod.decide import rate_text, uptime_and_spend
from overbrainer.runpod.models import Pod, PodStatus, SshEndpoint
from overbrainer.runpod.timing import Timing
from overbrainer.session.session import Session

POD_ROOT = "/workspace/overbrainer"
"""The executor's root on a pod: a run's directory there is ``<root>/runs/<id>``."""


@dataclass(frozen=True)
class PodAccess:
    """Everything needed to open an SSH connection to a run's pod, and nothing else.

    ``host_public_key`` is the pinned host key (``ssh-ed25519 …``): any other is refused.
    ``root`` is the absolute directory on the pod that the executor's relative paths start
    from. No secret is held here; the client key stays in its file.
    """

    endpoint: SshEndpoint
    client_key_path: Path
    host_public_key: str
    root: str = POD_ROOT


Connect = Callable[[PodAccess], AbstractAsyncContextManager[Executor]]
"""Opens an SSH connection to a pod (pinned host key, the run's client key only, no agent,
no user config) as an async context manager of an :class:`Executor`. Raises
``TargetUnreachable`` while nothing answers, ``HostKeyRefused`` for another host key."""


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


def alive_here(actor: Mapping[str, Any]) -> bool | None:
    """Whether the process of an event's ``actor`` still runs overbrainer on this host
    (None: it ran on another host)."""
    return starter_alive(dict(actor))


@dataclass
class PodContext:
    """What pod operations of one command share.

    ``connect`` is needed only by provisioning (tests pass the in-memory fake executor's,
    production the pinned SSH executor's); ``clock`` is this machine's wall clock (tests
    tie it to trio's MockClock, skewed or jumping at will). Nothing that bounds a pod is
    counted on it: deadlines, uptimes and spends are counted on Runpod's clock
    (:meth:`server_now`); ``clock`` is only compared with it, to say when it is far off.
    ``clock_recorded`` is the offset this command last recorded (0: none yet). ``alive``
    tells whether another command's process runs (tests, whose commands share one process,
    script it).
    """

    client: RunpodClient
    session: Session
    timing: Timing = field(default_factory=Timing)
    connect: Connect | None = None
    clock: Callable[[], datetime] = utc_now
    root: str = POD_ROOT
    alive: Callable[[Mapping[str, Any]], bool | None] = alive_here
    clock_recorded: float = 0.0

    def server_now(self) -> datetime:
        """Runpod's time now: the ``Date`` of its API's latest answer carried forward on the
        monotonic clock. Only while no answer carried a ``Date``, this machine's clock."""
        seen = self.client.server_clock.now(trio.current_time())
        return seen if seen is not None else self.clock()


async def note_clock(ctx: PodContext, run_id: str) -> None:
    """Record in run ``run_id``'s log, and warn the user, when this machine's clock is far
    from Runpod's (or moved far since this command last said so: a laptop waking up, a
    clock set by hand). Nothing when Runpod's time is not known yet."""
    offset = ctx.client.server_clock.offset(ctx.clock(), trio.current_time())
    if offset is None or not clocks.large(offset, ctx.clock_recorded):
        return
    # Whole seconds: an HTTP date has no more.
    offset = ctx.clock_recorded = float(round(offset))
    await ctx.session.journal.append(run_id, [ev.ClockOffset(offset_seconds=offset)])
    ctx.session.front.warn(clocks.skew_warning(offset, run_id))


class DeleteUnconfirmed(OverbrainerError):
    """A delete was sent (or could not be), and Runpod may still show — and bill — the pod."""

    def __init__(self, message: str, *, run_id: str, pod_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.pod_id = pod_id


def pod_ls_hint(run_id: str) -> str:
    """Where to look for a pod that may be left, and how to remove it."""
    return f"check `overbrainer pod ls` and remove it with `overbrainer pod rm {run_id}`"


async def delete_pod(
    ctx: PodContext,
    run_id: str,
    pod_id: str,
    reason: ev.DeleteReason,
    by: ev.DeletedBy = "client",
    *,
    rate: float | None = None,
    created_at: str | None = None,
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

    Raises:
        DeleteUnconfirmed: the delete failed, or Runpod still showed the pod
            ``timing.delete_confirm`` seconds later; it may still bill.
    """
    journal = ctx.session.journal
    joined = False  # another command's delete of the pod was already in the log

    def deleting(now: RunLog) -> list[ev.Event]:
        nonlocal joined
        joined = now.pod.pods.get(pod_id) == PodState.deleting
        if now.pod.pods.get(pod_id) in (PodState.deleted, PodState.deleting):
            return []  # gone, or another command's delete of it is recorded: one fact
        return [ev.PodDeleting(pod_id=pod_id, reason=reason)]

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
        await journal.append(
            run_id, lambda now: [] if now.pod.deleted(pod_id) else [deleted]
        )
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


def _shown(pod: Pod | None) -> bool:
    # A TERMINATED pod bills nothing and never comes back: it counts as no longer shown.
    return pod is not None and pod.status is not PodStatus.TERMINATED


async def _wait_unlisted(ctx: PodContext, pod_id: str) -> tuple[bool, RunpodError | None]:
    """Poll until neither a read of the pod nor the listing shows it: ``(True, None)``;
    on timeout ``(False, error)``, with the last read's error when the last look could not
    read Runpod at all (None when it showed the pod)."""
    timing = ctx.timing
    end = trio.current_time() + timing.delete_confirm
    while True:
        unread: RunpodError | None = None
        try:
            if not _shown(await ctx.client.get_pod(pod_id)):
                listed = await ctx.client.list_pods()
                if not any(p.id == pod_id and _shown(p) for p in listed):
                    return True, None
        except RunpodError as error:
            unread = error  # Unknown is not gone: look again until the time is up.
        left = end - trio.current_time()
        if left <= 0:
            return False, unread
        await trio.sleep(min(timing.delete_poll, left))


async def confirm_gone(ctx: PodContext, pod_id: str) -> bool:
    """Whether pod ``pod_id`` is confirmed gone: ``timing.gone_checks`` reads answered
    "no such pod" ``timing.gone_interval`` apart, then a listing without it.

    False as soon as one read or the listing shows the pod. Read errors propagate: an
    unknown answer confirms nothing.
    """
    for check in range(ctx.timing.gone_checks):
        if check:
            await trio.sleep(ctx.timing.gone_interval)
        if await ctx.client.get_pod(pod_id) is not None:
            return False
    listed = await ctx.client.list_pods()
    return all(p.id != pod_id for p in listed)
