"""Whether the command starting a run's pod is still there, or provably gone.

A Runpod run is ``preparing`` while the ``train`` that created it provisions its pod. That
command may die (SIGKILL, a crash, a closed laptop) and leave the run starting for ever,
with a pod billing until its watchdog's boot grace. Nothing may act on such a run while its
starter lives — it would delete the pod under it — so the starter must be *provably* gone:

- on this host: its process (the actor's pid) no longer runs overbrainer;
- on another host (a team store): it is silent past its *lease*, the longest time a walk
  goes between two of its appends (see :func:`lease_seconds`) plus a margin for clocks,
  counted from the time of its latest event. No renewal event is needed: every step of a
  walk appends within that bound but one, the upload of the run's files to its network
  volume before the create: the walk records its bound first (``pod.VolumeAttached``),
  and the lease includes it.

Two hosts' clocks may be hours apart (a laptop's set wrong), and an event's time is its
host's. So the silence is counted on Runpod's clock: the starter's latest time corrected by
the offset its host recorded from Runpod's (``run.ClockOffset``, recorded once a minute or
more off; none recorded: within a minute), against Runpod's time now as this command sees
it (:meth:`PodContext.server_now`).

:func:`judge` is the pure decision; :func:`look` gathers what it needs (the run's events,
the process table) for the runs given.
"""

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.runpod.timing import Timing
from overbrainer.utc import parse_utc

if TYPE_CHECKING:
    from overbrainer.targets.runpod.pods import PodContext

__all__ = [
    "LEASE_MARGIN",
    "Start",
    "judge",
    "lease_seconds",
    "look",
    "start_of",
    "wait_starting",
]

LEASE_MARGIN = 10 * 60.0
"""Added to a lease: two hosts' clocks disagree by minutes (no more, or their TLS fails)."""


@dataclass(frozen=True)
class Start:
    """How a ``preparing`` run's start stands.

    ``verdict`` is ``starting`` (its starter runs, or may) or ``abandoned`` (provably
    gone); ``starter`` the command's stamp (``command``, ``user``, ``host``, ``pid``);
    ``why`` a phrase for messages.
    """

    run_id: str
    verdict: Literal["starting", "abandoned"]
    starter: Mapping[str, Any]
    why: str

    @property
    def abandoned(self) -> bool:
        """Whether the starter is provably gone."""
        return self.verdict == "abandoned"

    def who(self) -> str:
        """``\\`train\\` (pid 42 on host laptop-a)``."""
        starter = self.starter
        return (
            f"`{starter.get('command', '?')}` (pid {starter.get('pid', '?')} on host "
            f"{starter.get('host', '?')})"
        )


def lease_seconds(timing: Timing, start_limit: float) -> float:
    """The longest a provisioning walk may go without appending, plus :data:`LEASE_MARGIN`.

    Each term bounds one wait between two appends: a booting pod (SSH, then the watchdog's
    verdict), a create, a rate limit waited out, a delete, and the job's start (upload and
    spawn, ``start_limit``). Their sum bounds the longest of them, whichever it is.
    """
    return (
        timing.ssh_within
        + timing.verdict_within
        + timing.create_limit
        + timing.max_retry_after
        + timing.delete_limit
        + start_limit
        + LEASE_MARGIN
    )


def judge(
    state: RunLog,
    records: Sequence[tuple[Mapping[str, Any], str]],
    *,
    now: datetime,
    lease: float,
    alive: Callable[[Mapping[str, Any]], bool | None],
    offsets: Sequence[tuple[Mapping[str, Any], float]] = (),
) -> Start | None:
    """The start of ``state``'s run, or None when it is not starting (it has a job, or ended).

    ``records`` are the run's events as ``(actor, ISO time)``, oldest first: the first is
    ``run.Created``, whose actor is the starter. ``alive`` tells whether an actor's process
    runs here (True/False) or cannot be told from here (None: another host). ``now`` is
    Runpod's time; ``offsets`` the run's ``run.ClockOffset`` as ``(actor, seconds its
    host's clock is ahead of Runpod's)``, oldest first: the starter's times are corrected
    by its host's latest. The lease grows by the time the run's files may take to go up
    to its network volume (``PodView.volume_fill_seconds``), a step with no append.
    """
    if state.run.state != RunState.preparing or not records:
        return None
    lease += state.pod.volume_fill_seconds
    run_id = state.run.run_id
    starter = records[0][0]
    if alive(starter) is False:
        return Start(run_id, "abandoned", starter, "its process is gone")
    if alive(starter) is True:
        return Start(run_id, "starting", starter, "its process runs")
    own = [at for actor, at in records if _same(actor, starter)]
    last = parse_utc(own[-1]) if own else None
    if last is None:
        return Start(run_id, "starting", starter, "its last sign of life is unknown")
    ahead = next(
        (seconds for actor, seconds in reversed(offsets) if _same_host(actor, starter)), 0.0
    )
    silent = (now - (last - timedelta(seconds=ahead))).total_seconds()
    if silent > lease:
        return Start(
            run_id,
            "abandoned",
            starter,
            f"it has recorded nothing for {_minutes(silent)}, past its {_minutes(lease)} lease",
        )
    return Start(run_id, "starting", starter, f"it recorded an event {_minutes(silent)} ago")


def _same(actor: Mapping[str, Any], starter: Mapping[str, Any]) -> bool:
    return _same_host(actor, starter) and actor.get("pid") == starter.get("pid")


def _same_host(actor: Mapping[str, Any], starter: Mapping[str, Any]) -> bool:
    # One host, one clock: an offset another command there recorded is the starter's too.
    return actor.get("host") == starter.get("host")


def _minutes(seconds: float) -> str:
    return f"{max(0, round(seconds / 60))} min"


async def look(ctx: "PodContext", states: Mapping[str, RunLog]) -> dict[str, Start]:
    """The start of every ``preparing`` run of ``states``, from its events (read through
    the journal) and ``ctx.alive``; the lease is counted on Runpod's clock (asked for when
    no answer of Runpod's told it yet)."""
    from overbrainer.errors import OverbrainerError
    from overbrainer.events.types import ClockOffset
    from overbrainer.session.limits import START_LIMIT

    lease = lease_seconds(ctx.timing, START_LIMIT)
    if not any(state.run.state == RunState.preparing for state in states.values()):
        return {}
    if not ctx.client.server_clock.known:
        # Any answer carries Runpod's Date; without one, this machine's clock stands in.
        with contextlib.suppress(OverbrainerError):
            await ctx.client.list_pods()
    now = ctx.server_now()
    found: dict[str, Start] = {}
    for run_id, state in states.items():
        if state.run.state != RunState.preparing:
            continue
        logged = await ctx.session.journal.history(run_id)
        records = [(r.actor, r.at) for r in logged]
        offsets = [
            (r.actor, r.event.offset_seconds) for r in logged if isinstance(r.event, ClockOffset)
        ]
        start = judge(state, records, now=now, lease=lease, alive=ctx.alive, offsets=offsets)
        if start is not None:
            found[run_id] = start
    return found


async def start_of(ctx: "PodContext", state: RunLog) -> Start | None:
    """:func:`look` for one run (None when it is not starting)."""
    return (await look(ctx, {state.run.run_id: state})).get(state.run.run_id)


async def wait_starting(ctx: "PodContext", run_id: str, poll: float) -> RunLog | Start | None:
    """Wait for a run asked to cancel while starting: its final state; its starter's
    :class:`Start` once that is provably gone; None when nobody took the request in
    time (the longest step of a walk that does not look at the log, and a few polls).
    ``poll`` is how often the run's follower reads the log."""
    import trio

    from overbrainer.session.limits import CANCEL_LIMIT, COLLECT_LIMIT, START_LIMIT

    timing = ctx.timing
    ack_wait = (
        5.0
        + 10 * max(timing.poll, poll)
        + timing.create_limit
        + max(timing.reconcile_after, default=0.0)
        + timing.delete_limit
        + START_LIMIT
    )
    taken_by = trio.current_time() + ack_wait
    limit = taken_by + timing.delete_limit + CANCEL_LIMIT + COLLECT_LIMIT
    while trio.current_time() < limit:
        state = await ctx.session.journal.state(run_id)
        if state.final:
            return state
        start = await start_of(ctx, state)
        if start is not None and start.abandoned:
            return start
        if state.run.cancel_pending and trio.current_time() >= taken_by:
            return None
        await trio.sleep(min(timing.poll, poll))
    return None
