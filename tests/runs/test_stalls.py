"""The stall rule as a table: a job's start, its last metrics line and now in, a stall (how
long without a line, the last step) or nothing out — then :class:`LineClock` on trio's
MockClock."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from overbrainer.lifecycle.stalls import LineClock, Stall, StallRule, stalled
from overbrainer.train.metrics import MetricsEvent

RULE = StallRule(silence=20 * 60.0, first_line=60 * 60.0)


@pytest.mark.parametrize(
    ("job_start", "last_line", "last_step", "now", "expected"),
    [
        # Before the first line: the first-step allowance, from the job's start.
        (100.0, None, None, 100.0, None),
        (100.0, None, None, 100.0 + 59 * 60, None),
        (100.0, None, None, 100.0 + 60 * 60, Stall(3600.0, None, True)),
        (100.0, None, None, 100.0 + 61 * 60, Stall(3660.0, None, True)),
        # After a line: the stall bound, from that line (not from the job's start).
        (0.0, 5000.0, 7, 5000.0 + 19 * 60, None),
        (0.0, 5000.0, 7, 5000.0 + 20 * 60, Stall(1200.0, 7, False)),
        (0.0, 5000.0, 7, 5000.0 + 25 * 60, Stall(1500.0, 7, False)),
        # A first line long after the start: the first-step allowance no longer counts.
        (0.0, 3500.0, 1, 3500.0 + 20 * 60 - 1, None),
        # A line without a step (the trainer's begin line) counts as a line.
        (0.0, 10.0, None, 10.0 + 20 * 60, Stall(1200.0, None, False)),
    ],
)
def test_stall_decision(
    job_start: float,
    last_line: float | None,
    last_step: int | None,
    now: float,
    expected: Stall | None,
) -> None:
    found = stalled(RULE, job_start=job_start, last_line=last_line, last_step=last_step, now=now)
    assert found == expected


@pytest.mark.parametrize(
    ("since", "expected"), [(59 * 60.0, None), (60 * 60.0, Stall(3600.0, 9, False))]
)
def test_once_training_is_over_saving_and_merging_have_the_longer_bound(
    since: float, expected: Stall | None
) -> None:
    found = stalled(
        RULE, job_start=0.0, last_line=100.0, last_step=9, now=100.0 + since, training_over=True
    )
    assert found == expected


def test_stall_describes_what_the_job_did_not_do() -> None:
    assert Stall(1500.0, 7, False).describe() == (
        "it wrote no metrics line for 25 minutes after its last one (at step 7)"
    )
    assert Stall(3600.0, None, True).describe() == (
        "it wrote no metrics line in the 60 minutes since it started"
    )
    assert Stall(61.0, 2, False).describe().startswith("it wrote no metrics line for 1 minute ")
    assert Stall(1500.0, 7, False).minutes == 25


async def test_line_clock_moves_its_bound_with_each_line_and_keeps_the_last_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    start = trio.current_time()

    async def lines() -> None:
        for step in (1, 2, 3):
            await trio.sleep(50.0)
            clock.saw([MetricsEvent(event="log", step=step)])
            clock.looked()
        clock.saw([])  # a read with nothing new is no line
        await _look_every(clock, 10.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lines)
        stall = await clock.until_stalled()
        nursery.cancel_scope.cancel()
    # Three lines 50 s apart, then silence: stalled 60 s after the third, as the next look
    # (every 10 s) confirms.
    assert 150.0 + 60.0 <= trio.current_time() - start <= 150.0 + 60.0 + 10.0
    assert 60.0 <= stall.silent <= 70.0 and (stall.last_step, stall.first_line) == (3, False)


async def test_line_clock_allows_the_first_step_longer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_look_every, clock, 10.0)
        stall = await clock.until_stalled()
        nursery.cancel_scope.cancel()
    assert 300.0 <= trio.current_time() - start <= 310.0
    assert stall.first_line and stall.last_step is None


async def test_line_clock_gives_a_job_that_ended_training_the_longer_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    clock.saw([MetricsEvent(event="log", step=8)])
    clock.saw([MetricsEvent(event="phase")])  # saving, then merging: nothing for long
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_look_every, clock, 10.0)
        stall = await clock.until_stalled()
        nursery.cancel_scope.cancel()
    assert 300.0 <= trio.current_time() - start <= 310.0
    assert 300.0 <= stall.silent <= 310.0 and stall.last_step == 8


async def test_a_jump_of_this_machines_clock_is_no_stall_when_the_next_look_finds_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A VM restored: the monotonic clock moves 2 h at once while the job wrote on. The
    # stall seems due; the look made after it reads the lines written meanwhile.
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    clock.saw([MetricsEvent(event="log", step=1)])
    async with _watched(clock) as (stalls, nursery):
        await trio.sleep(1.0)
        autojump_clock.jump(2 * 3600)
        await trio.sleep(0)  # the watcher wakes: a stall seems due, it waits for a look
        assert stalls == []
        clock.saw([MetricsEvent(event="log", step=700)])
        clock.looked()
        await trio.sleep(30.0)
        assert stalls == []  # the bound moved: 60 s after that line
        nursery.cancel_scope.cancel()


async def test_a_jump_of_this_machines_clock_is_no_stall_when_the_next_look_finds_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The clock moves 2 h between two looks of a follower that looks every 10 s, and the
    # job (slow between lines) wrote none meanwhile: its silence is not counted across the
    # gap, and it stalls only once really silent for the bound after it.
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    clock.saw([MetricsEvent(event="log", step=1)])
    clock.looked()
    async with _watched(clock) as (stalls, nursery):
        await trio.sleep(10.0)
        clock.looked()
        autojump_clock.jump(2 * 3600)
        await trio.sleep(0)
        clock.looked()
        await trio.sleep(0)
        assert stalls == []
        after = trio.current_time()
        nursery.start_soon(_look_every, clock, 10.0)
        while not stalls:
            await trio.sleep(1.0)
        # Within a look (10 s) and this test's own 1 s wait of the bound.
        assert 60.0 - 10.0 <= trio.current_time() - after <= 60.0 + 10.0 + 1.0
        nursery.cancel_scope.cancel()


async def test_a_jump_of_this_machines_clock_before_the_first_look_is_no_stall(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The follower begins (its job just started), and the clock moves 2 h before its first
    # look completes: the first look's gap is counted from the start, not ignored.
    clock = LineClock(StallRule(silence=60.0, first_line=300.0))
    async with _watched(clock) as (stalls, nursery):
        await trio.sleep(1.0)
        autojump_clock.jump(2 * 3600)
        await trio.sleep(0)
        clock.looked()
        await trio.sleep(0)
        assert stalls == []
        after = trio.current_time()
        nursery.start_soon(_look_every, clock, 10.0)
        while not stalls:
            await trio.sleep(1.0)
        assert stalls[0].first_line
        # Within a look (10 s) and this test's own 1 s wait of the bound.
        assert 300.0 - 10.0 <= trio.current_time() - after <= 300.0 + 10.0 + 1.0
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _watched(clock: LineClock) -> AsyncIterator[tuple[list[Stall], trio.Nursery]]:
    """A task waiting for ``clock``'s stall, which it puts in the list it yields; the
    nursery runs whatever else the test starts, all cancelled when the block ends."""
    stalls: list[Stall] = []

    async def watch() -> None:
        stalls.append(await clock.until_stalled())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        yield stalls, nursery
        nursery.cancel_scope.cancel()


async def _look_every(clock: LineClock, period: float) -> None:
    """A follower's looks that find nothing new."""
    while True:
        await trio.sleep(period)
        clock.looked()
