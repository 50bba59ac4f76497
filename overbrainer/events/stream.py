"""The eventsourcing aggregate a run's events are stored in.

Each stored event is an envelope: the catalogue name of a typed event, its payload and its
actor. The typed events (``types.py``) and their fold (``aggregate.py``) stay free of the
library; these two classes are the only place that knows it. Their import paths are stored
with every event, so they must not move.
"""

import uuid
from typing import Any

from eventsourcing.domain import Aggregate

from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import event_from

# Stream IDs are derived from run IDs, so any process finds a run's stream from its ID.
_NAMESPACE = uuid.UUID("5f1a4a3e-6a0b-4f8e-9a86-0b5d3c1f2e77")


def stream_id(run_id: str) -> uuid.UUID:
    """The aggregate ID of run ``run_id``."""
    return uuid.uuid5(_NAMESPACE, run_id)


def iso(moment: Any) -> str:
    """An event's UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    text: str = moment.isoformat()
    return text.replace("+00:00", "Z")


class RunStream(Aggregate):
    """A run's event stream; ``log`` is the typed state folded from it."""

    def __init__(self, run_id: str, name: str, data: dict[str, Any], actor: dict[str, Any]) -> None:
        self.run_id = run_id
        self.log = RunLog()
        self.log.apply(event_from(name, data), iso(self.created_on))

    class Opened(Aggregate.Created):
        """The first event of a stream: always a ``run.Created``."""

        run_id: str
        name: str
        data: dict[str, Any]
        actor: dict[str, Any]

    class Recorded(Aggregate.Event):
        """Any later event."""

        run_id: str
        name: str
        data: dict[str, Any]
        actor: dict[str, Any]

        def apply(self, aggregate: Aggregate) -> None:
            assert isinstance(aggregate, RunStream)
            aggregate.log.apply(event_from(self.name, self.data), iso(self.timestamp))
