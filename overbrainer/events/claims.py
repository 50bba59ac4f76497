"""Who follows a run, and whether another command may take its following over.

One process follows a run at a time: the command that started its job (its
``run.JobStarted``), or the latest one that claimed it (``run.Followed``: ``train
attach``, ``supervise``), until a ``run.Detached`` releases it. Each event's actor names
the process (host, pid, command), so the log alone says who follows; nothing else is kept.

A command that wants to follow a run reads its log, decides with :func:`decide`, and
appends its claim decided on the version it read (``decisions.follow``): of two claims
from that version, the store's optimistic concurrency keeps one, and the other reads the
log again and finds the winner.
"""

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from overbrainer.events.recorded import Recorded

FOLLOWING = frozenset({"run.JobStarted", "run.Followed"})
"""The events whose actor follows the run from then on."""
RELEASING = frozenset({"run.Detached"})
"""The events after which nobody follows it."""


class Claim(StrEnum):
    """What a command that wants to follow a run finds."""

    free = "free"
    """Nobody follows it: claim it."""
    mine = "mine"
    """This process follows it already: nothing to claim."""
    stale = "stale"
    """Its follower ran on this host and is gone: claim it over."""
    held = "held"
    """Its follower still runs on this host: leave the run to it."""
    elsewhere = "elsewhere"
    """Its follower ran on another host, where it may still run: leave the run to it."""

    @property
    def takes(self) -> bool:
        """Whether the command may follow the run."""
        return self in (Claim.free, Claim.mine, Claim.stale)


def follower(records: Sequence[Recorded]) -> dict[str, Any] | None:
    """The actor of the run's follower as its log says (None: nobody follows it)."""
    found: dict[str, Any] | None = None
    for record in records:
        if record.event.name in FOLLOWING:
            found = record.actor
        elif record.event.name in RELEASING:
            found = None
    return found


def decide(current: Mapping[str, Any] | None, me: Mapping[str, Any], alive: bool | None) -> Claim:
    """What ``me`` (an actor) finds in a run followed by ``current`` (None: by nobody),
    whose process ``alive`` says runs (None: on another host, unknowable from here)."""
    if current is None:
        return Claim.free
    if current.get("host") == me.get("host") and current.get("pid") == me.get("pid"):
        return Claim.mine
    if alive is None:
        return Claim.elsewhere
    return Claim.held if alive else Claim.stale


def who(actor: Mapping[str, Any]) -> str:
    """``\\`overbrainer train attach\\` (pid 42 on host laptop)``."""
    return (
        f"`overbrainer {actor.get('command', '?')}` (pid {actor.get('pid', '?')} "
        f"on host {actor.get('host', '?')})"
    )


def left_alone(run_id: str, claim: Claim, actor: Mapping[str, Any]) -> str:
    """Why a run followed by ``actor`` is left to it, and what to do instead."""
    if claim is Claim.elsewhere:
        return (
            f"run {run_id} is followed by {who(actor)}, which may still run there; "
            "follow it from that host"
        )
    return (
        f"run {run_id} is followed by {who(actor)}; it is left to it (once that process is "
        f"gone, `overbrainer train attach {run_id}` or `overbrainer supervise` takes it over)"
    )
