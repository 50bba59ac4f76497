"""What the pod operations of one command share (:class:`PodContext`), how a pod is reached
(:class:`PodAccess`), and knowing a pod is gone.

:func:`confirm_gone` is the one test of a pod being gone: by default the strict one for a
pod found missing (three "no such pod" answers ``gone_interval`` apart, then a listing
without it); a delete waiting for its pod to go looks once at a time. Deleting a pod is
:mod:`overbrainer.targets.runpod.delete`'s alone.
"""

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from overbrainer.events import types as ev
from overbrainer.events.actor import starter_alive
from overbrainer.exec.base import Executor
from overbrainer.runpod import clocks
from overbrainer.runpod.client import RunpodClient
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


def pod_ls_hint(run_id: str) -> str:
    """Where to look for a pod that may be left, and how to remove it."""
    return f"check `overbrainer pod ls` and remove it with `overbrainer pod rm {run_id}`"


def shown(pod: Pod | None) -> bool:
    """Whether Runpod still shows a pod. A TERMINATED pod bills nothing and never comes
    back: it counts as gone."""
    return pod is not None and pod.status is not PodStatus.TERMINATED


async def confirm_gone(ctx: PodContext, pod_id: str, *, reads: int | None = None) -> bool:
    """Whether pod ``pod_id`` is confirmed gone: ``reads`` reads (default
    ``timing.gone_checks``) answered "no such pod" (or TERMINATED) ``timing.gone_interval``
    apart, then a listing that does not show it.

    False as soon as one read or the listing shows the pod. Read errors propagate: an
    unknown answer confirms nothing.
    """
    for check in range(ctx.timing.gone_checks if reads is None else reads):
        if check:
            await trio.sleep(ctx.timing.gone_interval)
        if shown(await ctx.client.get_pod(pod_id)):
            return False
    listed = await ctx.client.list_pods()
    return not any(p.id == pod_id and shown(p) for p in listed)
