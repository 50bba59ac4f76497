"""The Ctrl-C controller in-process: ``interrupt()`` stands for SIGINT, trio's MockClock for
time (see test_sigint.py for real signals to a real process)."""

import signal
import threading
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.front.interrupts import (
    Finished,
    Interrupts,
    Offer,
    ShieldTimeout,
    StopRequested,
    open_interrupts,
)


class Lines:
    """A ``notice`` that keeps what it was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


async def interrupt_at(interrupts: Interrupts, *times: float) -> None:
    """Call ``interrupt()`` at each of ``times`` (seconds from now)."""
    start = trio.current_time()
    for at in times:
        await trio.sleep_until(start + at)
        interrupts.interrupt()


async def test_shield_completes_despite_interrupt(autojump_clock: trio.testing.MockClock) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    steps: list[str] = []

    async def work() -> str:
        steps.append("begun")
        await trio.sleep(10)
        steps.append("done")
        return "pod k3x9"

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1)
        result = await interrupts.shield("deleting pod k3x9", 60, work)

    assert result == "pod k3x9"
    assert steps == ["begun", "done"]
    assert trio.current_time() - start == pytest.approx(10)
    assert interrupts.interrupted
    assert interrupts.count == 1
    assert notices.lines == []  # the first Ctrl-C is only noted


async def test_shield_is_not_torn_by_outer_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    interrupts = Interrupts(Lines())
    done: list[bool] = []

    async def work() -> None:
        await trio.sleep(5)
        done.append(True)

    start = trio.current_time()
    with trio.move_on_after(1):
        await interrupts.shield("appending an event", 30, work)
    assert done == [True]
    assert trio.current_time() - start == pytest.approx(5)


async def test_race_is_cancelled_by_interrupt(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())
    steps: list[str] = []

    async def follow() -> int:
        steps.append("following")
        await trio.sleep(1000)
        steps.append("finished")
        return 0

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 2)
        outcome = await interrupts.race(follow)

    assert outcome is None
    assert steps == ["following"]
    assert trio.current_time() - start == pytest.approx(2)


async def test_race_that_ends_returns_its_value(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())

    async def quick() -> None:
        await trio.sleep(3)

    outcome = await interrupts.race(quick)
    # A finished race is told apart from a stopped one even when its value is None.
    assert outcome == Finished(None)
    assert not interrupts.interrupted


async def test_race_after_interrupt_never_starts(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())
    interrupts.interrupt()
    started: list[bool] = []

    async def follow() -> None:
        started.append(True)

    assert await interrupts.race(follow) is None
    assert started == []


async def test_race_leaves_other_cancellation_to_its_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    interrupts = Interrupts(Lines())
    after: list[bool] = []

    async def follow() -> None:
        await trio.sleep(1000)

    with trio.move_on_after(1) as outer:
        await interrupts.race(follow)
        after.append(True)  # not reached: the timeout is not a Ctrl-C
    assert outer.cancelled_caught
    assert after == []
    assert not interrupts.interrupted


async def test_multiple_concurrent_races_all_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    interrupts = Interrupts(Lines())
    outcomes: dict[int, Finished[int] | None] = {}

    async def one(index: int) -> None:
        async def follow() -> int:
            await trio.sleep(1000 + index)
            return index

        outcomes[index] = await interrupts.race(follow)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(one, index)
        nursery.start_soon(interrupt_at, interrupts, 1)

    assert outcomes == {0: None, 1: None, 2: None, 3: None}
    assert trio.current_time() - start == pytest.approx(1)


async def test_shield_limit_raises_shield_timeout(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())
    done: list[bool] = []

    async def stuck() -> None:
        await trio.sleep(1000)
        done.append(True)

    start = trio.current_time()
    with pytest.raises(ShieldTimeout) as caught:
        await interrupts.shield("deleting pod k3x9", 5, stuck)
    assert trio.current_time() - start == pytest.approx(5)
    assert done == []
    assert str(caught.value) == "deleting pod k3x9 did not finish within 5 s"
    assert caught.value.what == "deleting pod k3x9"
    assert caught.value.limit == 5
    assert isinstance(caught.value, OverbrainerError)
    assert caught.value.exit_code == 1


async def test_shield_refuses_a_limit_that_is_not_positive() -> None:
    interrupts = Interrupts(Lines())

    async def work() -> None:
        raise AssertionError("never started")

    for limit in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="must be positive"):
            await interrupts.shield("deleting pod k3x9", limit, work)


async def test_further_interrupt_during_shield_says_what_and_how_long(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    done: list[bool] = []

    async def work() -> None:
        await trio.sleep(10)
        done.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1, 2, 7.5)
        await interrupts.shield("deleting pod k3x9", 60, work)

    assert done == [True]
    assert interrupts.count == 3
    assert notices.lines == [
        "still deleting pod k3x9 (at most 58 s more); it cannot be interrupted safely",
        "still deleting pod k3x9 (at most 53 s more); it cannot be interrupted safely",
    ]


async def test_long_limits_are_said_in_minutes(autojump_clock: trio.testing.MockClock) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)

    async def work() -> None:
        await trio.sleep(3)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1, 2)
        await interrupts.shield("retrieving the results of run r1", 600, work)

    assert notices.lines == [
        "still retrieving the results of run r1 (at most 10 min more); "
        "it cannot be interrupted safely"
    ]


async def test_nested_shields_each_say_what_they_finish(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)

    async def inner() -> None:
        await trio.sleep(5)

    async def outer() -> None:
        await trio.sleep(1)
        await interrupts.shield("creating pod", 30, inner)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 2, 3)
        await interrupts.shield("provisioning run r1", 120, outer)

    assert notices.lines == [
        "still provisioning run r1 (at most 117 s more); it cannot be interrupted safely",
        "still creating pod (at most 28 s more); it cannot be interrupted safely",
    ]


async def test_further_interrupt_without_shield_says_it_is_stopping() -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    interrupts.interrupt()
    interrupts.interrupt()
    assert notices.lines == ["already stopping after Ctrl-C"]


async def test_a_failing_notice_does_not_escape() -> None:
    def broken(line: str) -> None:
        raise BrokenPipeError(line)

    interrupts = Interrupts(broken)
    interrupts.interrupt()
    interrupts.interrupt()
    assert interrupts.count == 2


async def test_race_inside_shield(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())
    steps: list[str] = []

    async def wait_for_pod() -> None:
        await trio.sleep(1000)

    async def provision() -> str:
        waited = await interrupts.race(wait_for_pod)
        steps.append("waited" if waited else "wait stopped")
        await trio.sleep(3)  # deleting the pod again, still shielded
        steps.append("cleaned up")
        return "provisioned" if waited else "abandoned"

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1)
        result = await interrupts.shield("provisioning run r1", 60, provision)

    assert result == "abandoned"
    assert steps == ["wait stopped", "cleaned up"]
    assert trio.current_time() - start == pytest.approx(4)


async def test_shield_inside_race(autojump_clock: trio.testing.MockClock) -> None:
    interrupts = Interrupts(Lines())
    steps: list[str] = []

    async def append_event() -> None:
        await trio.sleep(5)
        steps.append("event appended")

    async def follow() -> None:
        await trio.sleep(0.5)
        await interrupts.shield("appending an event", 30, append_event)
        await trio.sleep(1000)
        steps.append("followed to the end")

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1)
        outcome = await interrupts.race(follow)

    assert outcome is None
    assert steps == ["event appended"]
    # The race ended when the shielded section did, not before and not later.
    assert trio.current_time() - start == pytest.approx(5.5)


async def test_check_raises_once_interrupted() -> None:
    interrupts = Interrupts(Lines())
    interrupts.check("creating pod")  # nothing noted yet
    interrupts.interrupt()
    with pytest.raises(StopRequested) as caught:
        interrupts.check("creating pod")
    assert str(caught.value) == "interrupted by Ctrl-C before creating pod"
    assert isinstance(caught.value, Interrupted)
    assert caught.value.exit_code == 130
    with pytest.raises(StopRequested, match=r"^interrupted by Ctrl-C$"):
        interrupts.check()


async def test_open_interrupts_without_listening_leaves_sigint_alone() -> None:
    before = signal.getsignal(signal.SIGINT)
    async with open_interrupts(Lines(), listen=False) as interrupts:
        assert signal.getsignal(signal.SIGINT) is before
        interrupts.interrupt()
        assert interrupts.interrupted


async def test_open_interrupts_takes_sigint_and_gives_it_back() -> None:
    notices = Lines()
    before = signal.getsignal(signal.SIGINT)
    async with open_interrupts(notices) as interrupts:
        assert signal.getsignal(signal.SIGINT) is not before
        signal.raise_signal(signal.SIGINT)  # a real one, in this process
        with trio.fail_after(5):
            while interrupts.count < 1:
                await trio.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is before
    assert notices.lines == []


async def test_an_error_leaves_open_interrupts_unwrapped() -> None:
    with pytest.raises(Interrupted, match=r"^stopped$"):
        async with open_interrupts(Lines()):
            raise Interrupted("stopped")


def test_open_interrupts_outside_the_main_thread_does_not_listen() -> None:
    seen: list[int] = []
    failures: list[BaseException] = []

    async def command() -> None:
        async with open_interrupts(Lines()) as interrupts:
            interrupts.interrupt()
            seen.append(interrupts.count)

    def run() -> None:
        try:
            trio.run(command)
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert failures == []
    assert seen == [1]


# --- SIGTERM and SIGHUP ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "label", "code"),
    [
        (signal.SIGINT, "Ctrl-C", 130),
        (signal.SIGTERM, "SIGTERM", 143),
        (signal.SIGHUP, "SIGHUP", 129),
    ],
)
async def test_each_stop_signal_has_its_name_and_conventional_exit_code(
    signum: int, label: str, code: int
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    assert (interrupts.label, interrupts.exit_code, interrupts.signum) == ("Ctrl-C", 130, None)
    interrupts.interrupt(signum)
    interrupts.interrupt(signal.SIGINT)  # the first one decides
    assert (interrupts.label, interrupts.exit_code, interrupts.signum) == (label, code, signum)
    with pytest.raises(StopRequested) as caught:
        interrupts.check("creating pod")
    assert str(caught.value) == f"interrupted by {label} before creating pod"
    assert caught.value.exit_code == code
    assert interrupts.reason == ("interrupted" if label == "Ctrl-C" else f"interrupted by {label}")
    assert interrupts.finish(1) == 1  # a failure stays one
    assert notices.lines == [f"already stopping after {label}"]  # from the second signal
    assert interrupts.finish(0) == code  # ran to its end, but was asked to stop
    assert notices.lines[1:] == [f"{label}: finished before stopping; nothing is left to do"]


async def test_a_command_never_interrupted_keeps_its_exit_code() -> None:
    interrupts = Interrupts(Lines())
    assert interrupts.finish(0) == 0
    assert interrupts.finish(1) == 1


async def test_sigterm_cancels_races_and_a_further_one_says_what_is_being_finished(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)

    async def follow() -> None:
        await trio.sleep(1000)

    assert await interrupts_race_stopped_by(interrupts, signal.SIGTERM, follow)
    interrupts.interrupt(signal.SIGTERM)
    assert notices.lines == ["already stopping after SIGTERM"]


async def interrupts_race_stopped_by(
    interrupts: Interrupts, signum: int, fn: Callable[[], Awaitable[None]]
) -> bool:
    async with trio.open_nursery() as nursery:

        async def later() -> None:
            await trio.sleep(1)
            interrupts.interrupt(signum)

        nursery.start_soon(later)
        return await interrupts.race(fn) is None


def test_an_interrupted_error_names_any_signal_but_ctrl_c() -> None:
    error = Interrupted("interrupted: run r1 keeps running on this machine")
    assert str(error) == "interrupted: run r1 keeps running on this machine"
    assert error.exit_code == 130
    error.by("SIGHUP", 129)
    assert str(error) == "interrupted by SIGHUP: run r1 keeps running on this machine"
    assert error.exit_code == 129
    already = Interrupted("interrupted by SIGTERM before creating pod").by("SIGTERM", 143)
    assert str(already) == "interrupted by SIGTERM before creating pod"


async def test_an_interrupted_error_leaving_open_interrupts_is_told_its_signal() -> None:
    with pytest.raises(Interrupted) as caught:
        async with open_interrupts(Lines(), listen=False) as interrupts:
            interrupts.interrupt(signal.SIGTERM)
            raise Interrupted("interrupted: run r1 stopped before its job started")
    assert str(caught.value) == "interrupted by SIGTERM: run r1 stopped before its job started"
    assert caught.value.exit_code == 143


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_open_interrupts_takes_sigterm_and_sighup_and_gives_them_back(signum: int) -> None:
    before = signal.getsignal(signum)
    async with open_interrupts(Lines()) as interrupts:
        signal.raise_signal(signum)  # a real one, in this process
        with trio.fail_after(5):
            while interrupts.count < 1:
                await trio.sleep(0.01)
        assert interrupts.signum == signum
    assert signal.getsignal(signum) == before


async def test_a_signal_ignored_at_the_start_stays_ignored() -> None:
    # `nohup overbrainer train` ignores SIGHUP: the terminal closing must not stop it.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        async with open_interrupts(Lines()) as interrupts:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)
            await trio.sleep(0.1)
            assert interrupts.count == 0
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


# --- stoppable work ----------------------------------------------------------------------


def _offer(progress: "list[str] | None" = None) -> Offer:
    return Offer(
        what="collecting the results of run r1",
        if_stopped="the pod keeps them for 60 min, and `overbrainer train attach r1` collects them",
        progress=(lambda: progress[0]) if progress is not None else None,
    )


async def test_stoppable_work_says_what_it_does_at_the_first_signal_and_stops_at_the_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    progress = ["0 bytes so far"]
    steps: list[str] = []

    async def download() -> str:
        for step in range(100):
            await trio.sleep(1)
            progress[0] = f"{step + 1}.0 MB so far"
            steps.append(str(step))
        return "home"

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 2.5, 5.5)
        outcome = await interrupts.stoppable(_offer(progress), 3600, download)

    assert outcome is None
    assert trio.current_time() - start == pytest.approx(5.5)
    assert len(steps) == 5
    assert notices.lines == [
        "Ctrl-C: collecting the results of run r1 first (2.0 MB so far); Ctrl-C again stops it "
        "now: the pod keeps them for 60 min, and `overbrainer train attach r1` collects them",
        "Ctrl-C: stopped collecting the results of run r1 (5.0 MB so far)",
    ]


async def test_stoppable_work_left_alone_finishes(autojump_clock: trio.testing.MockClock) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)

    async def download() -> str:
        await trio.sleep(10)
        return "home"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1)
        outcome = await interrupts.stoppable(_offer(), 3600, download)
    assert outcome == Finished("home")
    assert len(notices.lines) == 1  # the offer only


async def test_stoppable_work_offers_at_once_when_a_signal_came_before_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    interrupts.interrupt(signal.SIGTERM)

    async def download() -> None:
        await trio.sleep(1000)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 2)
        assert await interrupts.stoppable(_offer(), 3600, download) is None
    assert notices.lines[0].startswith(
        "SIGTERM: collecting the results of run r1 first; another SIGTERM stops it now: "
    )
    assert notices.lines[1] == "Ctrl-C: stopped collecting the results of run r1"


async def test_stoppable_work_past_its_limit_is_a_shield_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    interrupts = Interrupts(Lines())

    async def download() -> None:
        await trio.sleep(1000)

    with pytest.raises(ShieldTimeout, match="collecting the results of run r1 did not finish"):
        await interrupts.stoppable(_offer(), 10, download)


async def test_stoppable_work_inside_a_shield_speaks_for_it_and_bounds_what_follows(
    autojump_clock: trio.testing.MockClock,
) -> None:
    notices = Lines()
    interrupts = Interrupts(notices)
    steps: list[str] = []

    async def download() -> None:
        await trio.sleep(1000)

    async def settle() -> None:
        outcome = await interrupts.stoppable(_offer(), 3600, download)
        steps.append("stopped" if outcome is None else "home")
        await trio.sleep(10)  # recording what happened, still shielded
        steps.append("recorded")

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1, 2, 5)
        await interrupts.shield("recording the end of run r1", 3720, settle)

    assert steps == ["stopped", "recorded"]
    assert trio.current_time() - start == pytest.approx(12)
    assert len(notices.lines) == 3
    assert notices.lines[1] == "Ctrl-C: stopped collecting the results of run r1"
    # Not "at most 62 min": what follows a stoppable section is bounded by AFTER_STOP.
    assert notices.lines[2] == (
        "still recording the end of run r1 (at most 117 s more); it cannot be interrupted safely"
    )


async def test_a_second_signal_stops_stoppable_work_inside_any_shield(
    autojump_clock: trio.testing.MockClock,
) -> None:
    interrupts = Interrupts(Lines())
    steps: list[str] = []

    async def download() -> None:
        await trio.sleep(1000)

    async def work() -> None:
        outcome = await interrupts.stoppable(_offer(), 3600, download)
        steps.append("stopped" if outcome is None else "home")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_at, interrupts, 1, 2)
        await interrupts.shield("cancelling the job of run r1", 4000, work)
    assert steps == ["stopped"]
