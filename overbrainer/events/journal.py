"""The event log as trio code uses it: each store call in a worker thread, projections
rewritten after every append, and every appended event shown to whoever listens."""

from collections.abc import Callable, Sequence
from pathlib import Path

from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import Decision, Recorded, RunStore
from overbrainer.events.types import Event, RunCreated
from overbrainer.projections.files import write_projections

Listener = Callable[[Recorded, RunLog], None]


class Journal:
    """Appends and reads runs for one command."""

    def __init__(self, store: RunStore, project_dir: Path,
                 listener: Listener | None = None) -> None:
        self.store = store
        self.project_dir = project_dir
        self.listener = listener

    def _append_sync(self, run_id: str, decide: Decision) -> tuple[RunLog, list[Recorded]]:
        state, records = self.store.append(run_id, decide)
        if records:
            write_projections(self.project_dir, state)
        return state, records

    async def append(self, run_id: str, decide: Decision | Sequence[Event]) -> RunLog:
        """Append events to ``run_id``; ``decide`` may be a decision or a list of events.

        A worker-thread call always completes, so an append is never torn by Ctrl-C.
        """
        import trio

        decision: Decision
        if callable(decide):
            decision = decide
        else:
            fixed = list(decide)

            def decision(_: RunLog) -> Sequence[Event]:
                return fixed

        state, records = await trio.to_thread.run_sync(self._append_sync, run_id, decision)
        self._announce(records, state)
        return state

    async def create(self, event: RunCreated) -> RunLog:
        """Start the stream of a new run."""
        import trio

        def create() -> tuple[RunLog, list[Recorded]]:
            state, records = self.store.create(event)
            write_projections(self.project_dir, state)
            return state, records

        state, records = await trio.to_thread.run_sync(create)
        self._announce(records, state)
        return state

    async def state(self, run_id: str) -> RunLog:
        """The run's current state (an unknown run is an error)."""
        import trio

        return await trio.to_thread.run_sync(self.store.get, run_id)

    def _announce(self, records: list[Recorded], state: RunLog) -> None:
        if self.listener is not None:
            for record in records:
                self.listener(record, state)
