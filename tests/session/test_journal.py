"""The journal's runner: every store call goes through it, the default one in a worker
thread, the inline one (MockClock tests) in the calling task, and neither tears a call it
started."""

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore
from overbrainer.session.journal import Journal, Runner, in_worker_thread
from overbrainer.testing.fake_executor import run_inline

RUN = "20260102-000000-abcd"
CREATED = ev.RunCreated(
    run_id=RUN, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
)
SENT = ev.AttemptSent(n=1, pod_name="overbrainer-x", gpu_type="NVIDIA A40", max_hours=1.0)


class Watched:
    """A real store that notes each method called on it, and whether a runner was running
    a call at that moment, and on which thread."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.running = False
        self.calls: list[tuple[str, bool, int]] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, self.running, threading.get_ident()))
            return found(*args, **kwargs)

        return call

    def runner(self, inner: Runner) -> Runner:
        """``inner``, noting while it runs a call."""

        async def run(call: Callable[[], Any], /) -> Any:
            def marked() -> Any:
                self.running = True
                try:
                    return call()
                finally:
                    self.running = False

            return await inner(marked)

        return run  # type: ignore[return-value]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunStore]:
    opened = RunStore(None, tmp_path, Actor.here("test"))
    try:
        yield opened
    finally:
        opened.close()


async def _every_operation(journal: Journal) -> None:
    await journal.create(CREATED)
    state = await journal.append(RUN, [SENT])
    assert (await journal.state(RUN)).pod.status == "creating"
    assert [r.event.name for r in await journal.history(RUN)] == ["run.Created", "pod.AttemptSent"]
    home = await journal.home(state)
    assert home is not None and home.user == Actor.here("test").user
    assert await journal.asker_of_cancel(RUN) == ""
    assert list(await journal.may_bill()) == [RUN]


@pytest.mark.parametrize("inner", [in_worker_thread, run_inline], ids=["thread", "inline"])
async def test_every_store_call_of_every_operation_goes_through_the_runner(
    store: RunStore, tmp_path: Path, inner: Runner
) -> None:
    watched = Watched(store)
    journal = Journal(watched, tmp_path, runner=watched.runner(inner))  # type: ignore[arg-type]
    await _every_operation(journal)
    called = {name for name, _, _ in watched.calls}
    # append, history, get, state (may_bill), origin (home), notifications (the runs view)…
    assert {"append", "get", "history", "state"} <= called
    outside = [name for name, running, _ in watched.calls if not running]
    assert outside == []


async def test_the_default_runner_calls_the_store_in_a_worker_thread(
    store: RunStore, tmp_path: Path
) -> None:
    watched = Watched(store)
    journal = Journal(watched, tmp_path)  # type: ignore[arg-type]
    await _every_operation(journal)
    here = threading.get_ident()
    assert watched.calls and all(thread != here for _, _, thread in watched.calls)


async def test_the_inline_runner_calls_the_store_in_the_calling_task(
    store: RunStore, tmp_path: Path
) -> None:
    watched = Watched(store)
    journal = Journal(watched, tmp_path, runner=run_inline)  # type: ignore[arg-type]
    await _every_operation(journal)
    here = threading.get_ident()
    assert watched.calls and all(thread == here for _, _, thread in watched.calls)


@pytest.mark.parametrize("inner", [in_worker_thread, run_inline], ids=["thread", "inline"])
async def test_a_cancelled_caller_never_starts_a_store_call(
    store: RunStore, tmp_path: Path, inner: Runner
) -> None:
    journal = Journal(store, tmp_path, runner=inner)
    await journal.create(CREATED)
    with trio.CancelScope() as scope:
        scope.cancel()
        await journal.append(RUN, [SENT])
    assert scope.cancelled_caught
    assert [r.event.name for r in store.history(RUN)] == ["run.Created"]


@pytest.mark.parametrize("inner", [in_worker_thread, run_inline], ids=["thread", "inline"])
async def test_a_cancel_during_an_append_lets_it_finish_and_be_heard(
    store: RunStore, tmp_path: Path, inner: Runner
) -> None:
    heard: list[str] = []
    journal = Journal(
        store, tmp_path, listener=lambda r, _: heard.append(r.event.name), runner=inner
    )
    await journal.create(CREATED)
    returned: list[RunLog] = []
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:

        def decide(_: RunLog) -> list[ev.Event]:
            # Ctrl-C arrives while the store works (from the worker thread, or inline).
            if threading.get_ident() == main:
                scope.cancel()
            else:
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
            return [SENT]

        main = threading.get_ident()
        returned.append(await journal.append(RUN, decide))
        await trio.lowlevel.checkpoint()  # where the cancel lands
    assert scope.cancelled_caught
    assert [state.pod.status for state in returned] == ["creating"]
    assert heard == ["run.Created", "pod.AttemptSent"]
    assert [r.event.name for r in store.history(RUN)] == ["run.Created", "pod.AttemptSent"]


async def test_on_the_mock_clock_an_inline_store_call_takes_no_virtual_time(
    store: RunStore, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # Why MockClock tests give the journal the inline runner: while a worker thread works,
    # the clock sees every task asleep and jumps to the next deadline.
    def slowly(events: list[ev.Event]) -> Callable[[RunLog], list[ev.Event]]:
        def decide(_: RunLog) -> list[ev.Event]:
            threading.Event().wait(0.05)  # a store that takes real time, as PostgreSQL may
            return events

        return decide

    inline = Journal(store, tmp_path, runner=run_inline)
    await inline.create(CREATED)
    start = trio.current_time()
    with trio.move_on_after(60) as limit:
        await inline.append(RUN, slowly([SENT]))
        await trio.lowlevel.checkpoint()
    assert not limit.cancelled_caught and trio.current_time() == start

    threaded = Journal(store, tmp_path)
    with trio.move_on_after(60) as limit:
        await threaded.append(RUN, slowly([ev.NoteAdded(note="x")]))
        await trio.lowlevel.checkpoint()
    assert limit.cancelled_caught and trio.current_time() >= start + 60
