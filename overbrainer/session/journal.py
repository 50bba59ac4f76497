"""The event log as trio code uses it: the one door async commands have to the store.

Every store call runs through the journal's *runner*, by default in a worker thread (a
SQLite or PostgreSQL call blocks, and must not stall the other tasks of the command, its
Ctrl-C handling above all); projections are rewritten after every append, and every
appended event is shown to whoever listens. A test on trio's MockClock gives the journal a
runner that calls the store inline (``overbrainer.testing.fake_executor.run_inline``): a
worker thread there lets the clock jump to the next deadline while the store works, firing
timeouts that real time would never reach.
"""

import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from overbrainer.errors import OverbrainerError
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.store import Decision, Recorded, RunStore
from overbrainer.events.types import Event, RunCreated
from overbrainer.front import fault_injection
from overbrainer.projections.files import refresh_projections, write_projections

if TYPE_CHECKING:
    from overbrainer.events.home import RunHome

Listener = Callable[[Recorded, RunLog], None]

T = TypeVar("T")


class Runner(Protocol):
    """Runs one blocking store call for trio code and returns its result.

    Whatever it does, the call must complete once started (an append torn by Ctrl-C would
    leave the command unsure of what it stored), and it must be a trio checkpoint.
    """

    def __call__(self, call: Callable[[], T], /) -> Awaitable[T]: ...


async def in_worker_thread(call: Callable[[], T], /) -> T:
    """The default runner: ``call`` in one of trio's worker threads; a Ctrl-C waits for it
    (trio does not abandon the thread), so what it stored is known."""
    import trio

    return await trio.to_thread.run_sync(call)


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
        *,
        runner: Runner = in_worker_thread,
    ) -> None:
        self._store = store
        self.project_dir = project_dir
        self.listener = listener
        # Told of what another process appended to a run while this one decided.
        self.others = others
        self._run = runner
        self._news: list[Recorded] = []

    def _append_sync(self, run_id: str, decide: Decision) -> tuple[RunLog, list[Recorded]]:
        if fault_injection.PLAN is not None:  # the reliability campaigns act around appends
            decide = fault_injection.before_append(decide)
        state, records = self._store.append(run_id, decide, on_others=self._news.extend)
        if fault_injection.PLAN is not None and records:
            fault_injection.after_append([record.event for record in records])
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

        The runner always completes a call it started, so an append is never torn by Ctrl-C.
        """
        decision: Decision
        if callable(decide):
            decision = decide
        else:
            fixed = list(decide)

            def decision(_: RunLog) -> Sequence[Event]:
                return fixed

        try:
            state, records = await self._run(lambda: self._append_sync(run_id, decision))
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

        def decide(state: RunLog) -> Sequence[Event]:
            if state.exists:
                raise InvalidTransition(f"run {event.run_id} already exists")
            return [event]

        state, records = await self._run(lambda: self._append_sync(event.run_id, decide))
        self._announce(records, state)
        return state

    async def state(self, run_id: str) -> RunLog:
        """The run's current state (an unknown run is an error)."""

        def read() -> RunLog:
            state = self._store.get(run_id)
            # A command killed between an append and its projection write left them behind.
            with contextlib.suppress(OSError):
                refresh_projections(self.project_dir, state)
            return state

        return await self._run(read)

    async def history(self, run_id: str, after: int = 0) -> list[Recorded]:
        """Every event of ``run_id`` after sequence number ``after``, in order, each with
        who appended it and when."""
        return await self._run(lambda: self._store.history(run_id, after))

    async def home(self, state: RunLog) -> "RunHome | None":
        """Where ``state``'s run lives: the host, user and command that created it, and who
        acted on it last (None for a run without events)."""
        from overbrainer.events.home import run_home

        return await self._run(lambda: run_home(self._store, state))

    async def asker_of_cancel(self, run_id: str) -> str:
        """`` by `train cancel` as alice on host laptop-a`` for the run's latest cancel asked
        through the log (empty when none is found)."""
        return asker_text(await self.history(run_id))

    async def asker_of_stop(self, run_id: str) -> str:
        """The same for the run's latest save-and-stop asked through the log."""
        from overbrainer.events.types import StopRequested

        return asker_text(await self.history(run_id), StopRequested)

    @property
    def actor(self) -> Actor:
        """Who this command's appends are recorded as."""
        return self._store.actor

    async def may_bill(self) -> dict[str, RunLog]:
        """Every run of the store some pod of which may still exist, by its fresh state."""
        return await self.matching(lambda state: state.pod.may_bill())

    async def matching(self, wanted: Callable[[RunLog], bool]) -> dict[str, RunLog]:
        """Every run of the store whose fresh state is ``wanted``, by its ID.

        The runs view (a cache of one row per run) names the candidates, so a listing costs
        the events appended since the view's last catch-up, not the whole log; their states
        are then read from the log itself, which has the last word.
        """
        from overbrainer.projections.view import RunsView, view_path

        def read() -> dict[str, RunLog]:
            view = RunsView(view_path(self.project_dir), str(self._store.url))
            try:
                view.catch_up(self._store)
                candidates = [s.run.run_id for s in view.runs() if wanted(s)]
            finally:
                view.close()
            states = {run_id: self._store.state(run_id) for run_id in candidates}
            return {run_id: state for run_id, state in states.items() if wanted(state)}

        return await self._run(read)

    async def runs(self) -> list[RunLog]:
        """Every run of the store, as the runs view (caught up with the log first) holds
        it: what a listing of the runs reads (``runs ls``, the monthly budget)."""
        from overbrainer.projections.view import RunsView, view_path

        def read() -> list[RunLog]:
            view = RunsView(view_path(self.project_dir), str(self._store.url))
            try:
                view.catch_up(self._store)
                return list(view.runs())
            finally:
                view.close()

        return await self._run(read)

    def _announce(self, records: list[Recorded], state: RunLog) -> None:
        news, self._news = self._news, []
        if self.others is not None:
            for record in news:
                self.others(record)
        if self.listener is not None:
            for record in records:
                self.listener(record, state)


def asker_text(records: Sequence[Recorded], kind: type[Event] | None = None) -> str:
    """Who asked the latest relayed request (a cancel unless ``kind`` says otherwise)
    among ``records``, as a phrase (or empty)."""
    from overbrainer.events.types import CancelRequested

    wanted = kind or CancelRequested
    for record in reversed(records):
        if isinstance(record.event, wanted) and getattr(record.event, "relay", "") == "asked":
            actor = record.actor
            return (
                f" by `{actor.get('command', '?')}` as {actor.get('user', '?')} "
                f"on host {actor.get('host', '?')}"
            )
    return ""
