"""``lifecycle/bounds.py``: following stops at a target's bound only once the target's own
clock confirms it, on trio's MockClock with an in-memory target whose clock is scripted."""

import math
from dataclasses import dataclass, field
from typing import Any, cast

import trio
import trio.testing

from overbrainer.events.aggregate import RunLog
from overbrainer.lifecycle.bounds import until_bound
from overbrainer.lifecycle.target import Stop, Target


@dataclass
class ScriptedTarget:
    """A target whose clock answers, at each confirmation, the next of ``answers`` (seconds
    still left by it), and records when (trio's time) it was asked."""

    answers: list[float]
    asked: list[float] = field(default_factory=list)

    async def confirm_left(self, state: RunLog) -> float:
        self.asked.append(trio.current_time())
        return self.answers.pop(0)


def _target(scripted: ScriptedTarget) -> Target:
    return cast(Target, cast(Any, scripted))


async def test_a_bound_that_the_targets_clock_does_not_confirm_is_waited_for_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # This machine's clock said 10 s; the target's said 3600 s more, then it was due.
    scripted = ScriptedTarget([3600.0, 0.0])
    start = trio.current_time()
    stop = await until_bound(_target(scripted), RunLog(), 10.0)
    assert stop is Stop.past_deadline
    assert [round(t - start) for t in scripted.asked] == [10, 3610]


async def test_a_bound_already_past_is_confirmed_before_it_is_acted_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedTarget([-5.0])
    start = trio.current_time()
    assert await until_bound(_target(scripted), RunLog(), 0.0) is Stop.past_deadline
    assert [t - start for t in scripted.asked] == [0.0]


async def test_a_save_and_stop_request_out_of_time_stops_following_without_asking_the_target(
    autojump_clock: trio.testing.MockClock,
) -> None:
    scripted = ScriptedTarget([])
    start = trio.current_time()
    stop = await until_bound(_target(scripted), RunLog(), math.inf, stop_within=300.0)
    assert stop is Stop.stop_overdue
    assert trio.current_time() - start == 300.0 and scripted.asked == []


async def test_a_save_and_stop_request_due_after_an_unconfirmed_bound_still_stops_in_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The bound seemed due at 10 s, was not (1 h more by the target's clock); the request's
    # 300 s still end following at 300 s.
    scripted = ScriptedTarget([3600.0])
    start = trio.current_time()
    stop = await until_bound(_target(scripted), RunLog(), 10.0, stop_within=300.0)
    assert stop is Stop.stop_overdue
    assert trio.current_time() - start == 300.0
