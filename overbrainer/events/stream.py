"""The eventsourcing aggregate a run's events are stored in.

Each stored event is an envelope: the catalogue name of a typed event, its payload and its
actor. The typed events (``types.py``) and their fold (``aggregate.py``) stay free of the
library; these two classes are the only place that knows it. Their import paths are stored
with every event, so they must not move.
"""

from typing import Any

from eventsourcing.domain import Aggregate

from overbrainer.events.aggregate import RunLog
from overbrainer.events.stream_ids import stream_id as stream_id  # where the store finds it
from overbrainer.events.types import event_from


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
