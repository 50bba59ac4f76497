"""The event log as trio code uses it: each store call in a worker thread, projections
rewritten after every append, and every appended event shown to whoever listens."""

import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.store import Decision, Recorded, RunStore
from overbrainer.events.types import Event, RunCreated
from overbrainer.front import checkpoints
from overbrainer.projections.files import refresh_projections, write_projections

Listener = Callable[[Recorded, RunLog], None]


class RunChanged(OverbrainerError):
    """An append whose decision no longer fits the run: another command changed it."""


class Journal:
    """Appends and reads runs for one command."""

    def __init__(
        self,
        store: RunStore,
        project_dir: Path,
        listener: Listener | None = None,
        others: Callable[[Recorded], None] | None = None,
    ) -> None:
        self.store = store
        self.project_dir = project_dir
        self.listener = listener
        # Told of what another process appended to a run while this one decided.
        self.others = others
        self._news: list[Recorded] = []

    def _append_sync(self, run_id: str, decide: Decision) -> tuple[RunLog, list[Recorded]]:
        if checkpoints.PLAN is not None:  # the reliability campaigns act around appends
            decide = checkpoints.before_append(decide)
        state, records = self.store.append(run_id, decide, on_others=self._news.extend)
        if checkpoints.PLAN is not None and records:
            checkpoints.after_append([record.event for record in records])
        try:
            if records:
                write_projections(self.project_dir, state)
            else:
                refresh_projections(self.project_dir, state)
        except OSError as error:
            # The events are stored: the projections are only caches, rebuilt by the next
            # command that reads the run. Failing here would report a saved append as lost.
            print(
                f"warning: the projections of run {run_id} (runs/{run_id}/run.json) could "
                f"not be rewritten ({error}); the next command that reads the run rebuilds them",
                file=sys.stderr,
                flush=True,
            )
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

        try:
            state, records = await trio.to_thread.run_sync(self._append_sync, run_id, decision)
        except InvalidTransition as error:
            # A decision that did not expect what another command appended meanwhile: say
            # so plainly (nothing was stored) rather than crash.
            raise RunChanged(
                f"run {run_id} changed under this command ({error}); nothing was recorded "
                f"by it: see `overbrainer events {run_id}`"
            ) from error
        self._announce(records, state)
        return state

    async def create(self, event: RunCreated) -> RunLog:
        """Start the stream of a new run."""
        import trio

        def decide(state: RunLog) -> Sequence[Event]:
            if state.exists:
                raise InvalidTransition(f"run {event.run_id} already exists")
            return [event]

        state, records = await trio.to_thread.run_sync(self._append_sync, event.run_id, decide)
        self._announce(records, state)
        return state

    async def state(self, run_id: str) -> RunLog:
        """The run's current state (an unknown run is an error)."""
        import trio

        def read() -> RunLog:
            state = self.store.get(run_id)
            # A command killed between an append and its projection write left them behind.
            with contextlib.suppress(OSError):
                refresh_projections(self.project_dir, state)
            return state

        return await trio.to_thread.run_sync(read)

    async def asker_of_cancel(self, run_id: str) -> str:
        """`` by `train cancel` as alice on host laptop-a`` for the run's latest cancel asked
        through the log (empty when none is found)."""
        import trio

        records = await trio.to_thread.run_sync(self.store.history, run_id)
        return asker_text(records)

    def _announce(self, records: list[Recorded], state: RunLog) -> None:
        news, self._news = self._news, []
        if self.others is not None:
            for record in news:
                self.others(record)
        if self.listener is not None:
            for record in records:
                self.listener(record, state)


def asker_text(records: Sequence[Recorded]) -> str:
    """Who asked the latest relayed cancel among ``records``, as a phrase (or empty)."""
    from overbrainer.events.types import CancelRequested

    for record in reversed(records):
        if isinstance(record.event, CancelRequested) and record.event.relay == "asked":
            actor = record.actor
            return (
                f" by `{actor.get('command', '?')}` as {actor.get('user', '?')} "
                f"on host {actor.get('host', '?')}"
            )
    return ""
