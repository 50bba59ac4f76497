"""When following a job must stop for its target's bound (a pod's deadline, its cost cap),
or for a save-and-stop request that ran out of time.

A target's bound is counted on the target's own clock (Runpod's, for a pod) and carried
between two looks at it on this process's monotonic clock. That monotonic clock is trusted
to say when to look again, never to end anything: a laptop waking up, a VM restored or a
clock stepped under the process can move it hours at once. So once a bound seems due, the
target reads its own clock afresh (:meth:`Billed.confirm_left`); only a bound that the
target's clock confirms ends following. One that it does not is a jump of this machine's
clocks: the target records and says so, and following goes on until the confirmed bound.

The save-and-stop request's bound (``stop_within``) is the user's own, on this machine: it
is kept on the monotonic clock alone.
"""

import math

import trio

from overbrainer.events.aggregate import RunLog
from overbrainer.lifecycle.target import Billed, Stop

__all__ = ["until_bound"]


async def until_bound(
    billed: Billed | None, state: RunLog, left: float, *, stop_within: float = math.inf
) -> Stop:
    """Return once following must stop: :attr:`Stop.past_deadline` when the target's bound
    is reached (``left`` seconds from now at first, confirmed on the target's clock before
    this returns), :attr:`Stop.stop_overdue` once ``stop_within`` seconds have passed
    first. Never returns while neither is reached; never raises but :class:`trio.Cancelled`
    (a target that cannot confirm its bound says how long is left by what it knows)."""
    stop_at = trio.current_time() + stop_within
    while True:
        due = trio.current_time() + left
        await trio.sleep_until(min(due, stop_at))
        if trio.current_time() >= stop_at and stop_at <= due:
            return Stop.stop_overdue
        # Without a bound (``left`` infinite) only ``stop_within`` ends the wait above.
        assert billed is not None
        left = await billed.confirm_left(state)
        if left <= 0:
            return Stop.past_deadline
