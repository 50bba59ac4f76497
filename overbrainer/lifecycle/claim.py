"""A command takes over the following of a run, or leaves it to the process that follows
it (see ``overbrainer.events.claims``)."""

from collections.abc import Callable
from functools import partial
from typing import Any

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.actor import starter_alive
from overbrainer.events.claims import Claim, decide, follower, left_alone, who
from overbrainer.session.journal import RunChanged
from overbrainer.session.session import Session

ATTEMPTS = 5
"""How many times a claim reads the log again after another command appended meanwhile."""

Alive = Callable[[dict[str, Any]], bool | None]


class FollowedElsewhere(OverbrainerError):
    """Another live process follows the run: this command leaves it alone."""


async def claim(session: Session, run_id: str, *, alive: Alive = starter_alive) -> Claim:
    """Make this command the run's follower (appending ``run.Followed`` unless it is one
    already); what it found.

    Raises:
        FollowedElsewhere: another process follows the run and may still run.
    """
    me = session.journal.actor.to_json()
    for _ in range(ATTEMPTS):
        records = await session.journal.history(run_id)
        current = follower(records)
        found = decide(current, me, None if current is None else alive(current))
        if found is Claim.mine:
            return found
        if current is not None and not found.takes:
            raise FollowedElsewhere(left_alone(run_id, found, current))
        if current is not None:
            session.front.info(f"run {run_id} was followed by {who(current)}, which is gone")
        try:
            await session.journal.append(run_id, partial(decisions.follow, seen=len(records)))
        except RunChanged:
            continue  # another command appended first: read again who follows now
        return found
    raise FollowedElsewhere(
        f"run {run_id} kept changing while this command read who follows it; try again"
    )
