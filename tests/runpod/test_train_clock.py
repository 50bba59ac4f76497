"""This machine's clock hours off, or jumping, changes no pod's bound: ``train`` and ``train
attach`` on trio's MockClock, with the fake Runpod API in-process (Runpod's clock is the
fake's) and this machine's wall clock (``PodContext.clock``) set 3 h behind, 2 years ahead,
or jumping 2 h either way mid-run.

What must hold whatever this machine's clock says: no healthy pod deleted, no pod left
unbounded (the client still deletes a pod its watchdog left running, 5 min past
``max_hours`` after its creation), uptimes and spends counted on Runpod's clock, and the
offset recorded in the run's log and warned about.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.runpod.pod_scripts import ENV_MAX_SECONDS
from overbrainer.targets.runpod.following import DEADLINE_SLACK
from overbrainer.testing.pod_training import JobScript, Train, training
from overbrainer.testing.runpod_api import FakeRunpod
from overbrainer.utc import parse_utc

HOUR = 3600.0
SKEWS = {"3h-behind": timedelta(hours=-3), "2y-ahead": timedelta(days=730)}
JUMPS = {"forward-2h": timedelta(hours=2), "back-2h": timedelta(hours=-2)}


@dataclass
class LaptopClock:
    """This machine's wall clock: Runpod's (the fake's) plus ``offset``, which a test may
    change while a command runs (a jump)."""

    fake: FakeRunpod
    offset: timedelta = timedelta(0)
    jumps: list[float] = field(default_factory=list)

    def __call__(self) -> datetime:
        return self.fake.wall(trio.current_time()) + self.offset

    def jump(self, by: timedelta) -> None:
        self.offset += by
        self.jumps.append(trio.current_time())


def _laptop(t: Train, offset: timedelta = timedelta(0)) -> LaptopClock:
    clock = LaptopClock(t.rig.fake, offset)
    t.rig.context.clock = clock  # every command made from now on reads it
    return clock


async def _when(ready: Callable[[], bool], then: Callable[[], None], poll: float = 5.0) -> None:
    while not ready():
        await trio.sleep(poll)
    then()


def _status(t: Train, status: str) -> Callable[[], bool]:
    def check() -> bool:
        new = t._runs() - t.known
        return bool(new) and t.rig.state(max(new)).pod.status == status

    return check


def _offsets(t: Train, run_id: str) -> list[float]:
    return [e.offset_seconds for e in t.rig.events(run_id, ev.ClockOffset)]  # type: ignore[attr-defined]


def _create_to_delete(t: Train, pod_id: str) -> float:
    (created,) = t.request_times("POST", "/pods")
    (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
    return deleted - created


def _assert_bound_from_runpods_clock(t: Train, run_id: str, pod_id: str) -> None:
    """The pod was asked for with max_hours only, and its deadline is Runpod's createdAt
    plus max_hours: nothing of this machine's clock went into either."""
    (body,) = t.rig.creates()
    env = body["env"]
    assert isinstance(env, dict)
    assert env[ENV_MAX_SECONDS] == "7200" and "OVERBRAINER_DEADLINE" not in env
    (created,) = t.rig.events(run_id, ev.PodCreated)
    assert isinstance(created, ev.PodCreated)
    made = t.rig.fake.wall(t.rig.fake.pod(pod_id).created_at).replace(microsecond=0)
    assert parse_utc(created.created_at) == made
    assert parse_utc(created.deadline) == made + timedelta(hours=2)


# --- a clock hours off -----------------------------------------------------------------


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
async def test_a_clock_far_off_changes_nothing_of_a_run_and_is_recorded(
    tmp_path: Path, skew: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        offset = SKEWS[skew]
        _laptop(t, offset)
        assert await t.train() == 0
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded"
        assert (state.pod.delete_reason, state.pod.deleted_by) == ("retrieved", "client")
        _assert_bound_from_runpods_clock(t, run_id, pod_id)
        # Uptime and spend on Runpod's clock: the job's 5 minutes and the boot, not the
        # offset (17,520 h for a clock 2 years ahead).
        assert state.pod.uptime_seconds is not None and 300 < state.pod.uptime_seconds < 400
        assert state.pod.spend == pytest.approx(0.40 * state.pod.uptime_seconds / HOUR, rel=1e-3)
        # Recorded once (right after the run's creation), warned once.
        (recorded,) = _offsets(t, run_id)
        assert abs(recorded - offset.total_seconds()) <= 2
        assert t.rig.names(run_id)[:2] == ["run.Created", "run.ClockOffset"]
        assert state.run.clock_offset == recorded
        said = {"3h-behind": "3 h 0 min behind", "2y-ahead": "2 years ahead of"}[skew]
        assert t.err().count(f"warning: this machine's clock is {said} Runpod's") == 1
        assert f"run {run_id}'s pod is bounded by Runpod's and the pod's own clocks" in t.err()
        assert f"this machine's clock is {said} Runpod's: the times" in t.story(run_id)


@pytest.mark.parametrize("skew", list(SKEWS), ids=list(SKEWS))
async def test_a_clock_far_off_still_bounds_a_pod_its_watchdog_left_running(
    tmp_path: Path, skew: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _laptop(t, SKEWS[skew])
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        with pytest.raises(OverbrainerError, match="5 min past the deadline"):
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        # max_hours (2) plus the slack after the create, on Runpod's clock: not at once
        # (3 h behind), not in 2 years.
        assert 2 * HOUR + DEADLINE_SLACK <= _create_to_delete(t, pod_id) < 2 * HOUR + 400
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and state.pod.delete_reason == "deadline"
        assert t.rig.fake.status(pod_id) == "TERMINATED"


def test_no_clock_offset_is_recorded_for_a_clock_close_to_runpods() -> None:
    from overbrainer.runpod import clocks

    assert not clocks.large(59.0) and not clocks.large(-59.0) and clocks.large(-60.0)
    assert clocks.large(7260.0, 7200.0) and not clocks.large(7230.0, 7200.0)
    assert not clocks.large(None) and not clocks.large(float("nan"))


async def test_a_run_on_a_right_clock_records_no_offset(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _laptop(t, timedelta(seconds=20))  # a little off: nothing worth saying
        assert await t.train() == 0
        run_id = t.run_id()
        assert _offsets(t, run_id) == [] and "clock" not in t.err()


# --- a clock that jumps ----------------------------------------------------------------


@pytest.mark.parametrize("jump", list(JUMPS), ids=list(JUMPS))
@pytest.mark.parametrize("during", ["provisioning", "following"])
async def test_a_clock_jump_mid_run_deletes_no_healthy_pod(
    tmp_path: Path, jump: str, during: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        laptop = _laptop(t)
        # An hour of training, well within max_hours (2).
        t.network.script = JobScript(steps=60, step_seconds=60.0)
        status = "created" if during == "provisioning" else "job_running"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_when, _status(t, status), lambda: laptop.jump(JUMPS[jump]), 1.0)
            assert await t.train() == 0
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        assert len(laptop.jumps) == 1
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded"
        assert (state.pod.delete_reason, state.pod.deleted_by) == ("retrieved", "client")
        assert state.pod.uptime_seconds is not None and HOUR < state.pod.uptime_seconds < HOUR + 100
        _assert_bound_from_runpods_clock(t, run_id, pod_id)
        # The jump is recorded once the command sees it (by the pod's delete), and warned.
        (recorded,) = _offsets(t, run_id)
        assert abs(recorded - JUMPS[jump].total_seconds()) <= 2
        # Runpod's billing of the pod is read once it is gone.
        assert t.rig.names(run_id)[-4:] == [
            "pod.Deleting",
            "pod.Deleted",
            "run.ClockOffset",
            "pod.Billed",
        ]
        assert "warning: this machine's clock is 2 h 0 min" in t.err()


@pytest.mark.parametrize("jump", list(JUMPS), ids=list(JUMPS))
async def test_a_clock_jump_mid_run_leaves_no_pod_unbounded(
    tmp_path: Path, jump: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        laptop = _laptop(t)
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_when, _status(t, "created"), lambda: laptop.jump(JUMPS[jump]))
            with pytest.raises(OverbrainerError, match="5 min past the deadline"):
                await t.train()
        pod_id = t.pod_id(t.run_id())
        assert 2 * HOUR + DEADLINE_SLACK <= _create_to_delete(t, pod_id) < 2 * HOUR + 400


async def test_attach_after_a_clock_jump_follows_a_healthy_pod_to_its_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        laptop = _laptop(t)
        run_id = await t.detached_run(JobScript(steps=60, step_seconds=60.0))
        pod_id = t.pod_id(run_id)
        await trio.sleep(600)
        laptop.jump(timedelta(hours=2))  # the laptop slept; it wakes with the clock moved on
        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded" and state.pod.delete_reason == "retrieved"
        assert state.pod.uptime_seconds is not None and HOUR < state.pod.uptime_seconds < HOUR + 100
        # attach saw the offset on its first look at the pod, before anything else.
        (recorded,) = _offsets(t, run_id)
        assert abs(recorded - 2 * HOUR) <= 2
        names = t.rig.names(run_id)
        after = names.index("run.Detached") + 1
        # attach claims the run, then records the offset first thing.
        assert names[after : after + 2] == ["run.Followed", "run.ClockOffset"]
        assert t.rig.fake.status(pod_id) == "TERMINATED"


# --- the watchdog's end, told by Runpod's clock ----------------------------------------


async def _watchdog(t: Train) -> None:
    """What the pod's watchdog does at its deadline (its script is tested on loopback):
    the pod is deleted ``OVERBRAINER_MAX_SECONDS`` after its creation, on Runpod's clock."""
    fake = t.rig.fake
    while not fake.live_pods():
        await trio.sleep(1)
    pod = fake.live_pods()[0]
    await trio.sleep_until(pod.created_at + float(pod.env[ENV_MAX_SECONDS]))
    fake.vanish(pod.id)
    t.machine().down = True


@pytest.mark.parametrize("skew", ["none", *SKEWS], ids=["right", *SKEWS])
async def test_a_pod_its_watchdog_deleted_at_the_deadline_is_said_so(
    tmp_path: Path, skew: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _laptop(t, SKEWS.get(skew, timedelta(0)))
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watchdog, t)
            with pytest.raises(OverbrainerError) as caught:
                await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        assert str(caught.value) == (
            f"run {run_id} failed: pod {pod_id} reached its deadline ({state.pod.deadline}, "
            "max_hours = 2 after its creation) and its watchdog deleted it, and its job went "
            "with it; raise max_hours of target gpu in overbrainer.toml if the job needs longer"
        )
        assert state.run.state == "failed"
        # Found gone past its deadline: recorded as its watchdog's delete, for that bound.
        assert (state.pod.deleted_by, state.pod.delete_reason) == ("watchdog", "deadline")


async def test_the_deadline_said_is_the_one_the_pod_was_created_with(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=200))
        t.spec = t.spec.model_copy(update={"max_hours": 5.0})  # overbrainer.toml changed since
        await trio.sleep(3 * HOUR)
        with pytest.raises(OverbrainerError) as caught:
            await t.command().attach(t.rig.state(run_id))
        assert "5 min past the deadline" in str(caught.value)
        assert "max_hours = 2)" in str(caught.value)
