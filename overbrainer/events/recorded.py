"""One stored event as the store gives it: its run, sequence number, time and actor.
Apart from the store, so the projections name it without loading the store's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from overbrainer.events.types import Event


@dataclass(frozen=True)
class Recorded:
    """One stored event: its sequence number in the run (from 1), time and actor."""

    run_id: str
    seq: int
    at: str
    actor: dict[str, Any]
    event: Event

    def to_json(self) -> dict[str, Any]:
        """The form ``events --json`` prints."""
        return {
            "run": self.run_id,
            "seq": self.seq,
            "time": self.at,
            "actor": self.actor,
            "event": self.event.name,
            "fields": self.event.fields(),
        }
