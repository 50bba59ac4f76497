"""Waiting for capacity (``wait_for_capacity``) on trio's MockClock: the fake Runpod API
in-process has no capacity for a while, the walk waits with backoff and tries every GPU
type again; the wait ends in a pod, in a failure saying how long it waited, or at Ctrl-C
with no pod left."""

from __future__ import annotations

import itertools
import signal
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.runpod.timing import Timing
from overbrainer.targets.runpod.provision import (
    NothingPlaced,
    ProvisionCancelled,
    Provisioned,
    ProvisionInterrupted,
    provision,
)
from overbrainer.testing.fake_executor import PodRig, pod_rig, runpod_target
from overbrainer.utc import parse_utc

A40 = "NVIDIA A40"
RTX = "NVIDIA GeForce RTX 4090"


@pytest.fixture
async def rig(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with pod_rig(tmp_path) as rig:
        yield rig


async def walk(rig: PodRig, run_id: str, wait: str | None) -> Provisioned:
    spec = runpod_target([RTX, A40], wait_for_capacity=wait)
    return await provision(rig.context, run_id, spec, keep=False)


def no_capacity_until(rig: PodRig, when: float | None) -> None:
    """Neither type has capacity, until ``when`` (None: ever) when the A40 has some."""
    rig.fake.set_capacity(RTX, 0)
    rig.fake.set_capacity(A40, 0)
    if when is not None:
        rig.fake.set_capacity_at(when, A40, 8)


def create_times(rig: PodRig) -> list[float]:
    return [r.time for r in rig.fake.requests if r.method == "POST" and r.path == "/pods"]


async def test_capacity_back_after_10_minutes_gives_the_run_its_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    no_capacity_until(rig, start + 600)

    ready = await walk(rig, run_id, "30m")

    assert ready.gpu_type == A40
    assert [p.id for p in rig.fake.live_pods()] == [ready.pod_id]
    assert rig.state(run_id).pod.status == "ready"
    # Both types tried at each walk: 30 s, then 60, 120, 240 and 300 s apart (the cap).
    walks = create_times(rig)[::2]
    gaps = [round(b - a) for a, b in itertools.pairwise(walks)]
    assert gaps[:5] == [30, 60, 120, 240, 300]
    assert 600 <= walks[-1] - start < 600 + 300 + 5
    results = [a["result"] for a in rig.state(run_id).pod.attempts]
    assert results[-1] == "created" and set(results[:-1]) == {"no_capacity"}
    # Each wait is in the run's log: what it waited for, how long, until when.
    awaited = rig.events(run_id, ev.CapacityAwaited)
    assert len(awaited) == len(walks) - 1
    first = awaited[0]
    assert isinstance(first, ev.CapacityAwaited)
    assert (first.walks, first.seconds, first.gpu_types) == (1, 30.0, [RTX, A40])
    assert (first.gpu_count, first.data_centers) == (1, [])
    assert [e.seconds for e in awaited[:5]] == [30.0, 60.0, 120.0, 240.0, 300.0]  # type: ignore[attr-defined]
    # One end for the whole wait: 30 min after the first walk found no capacity.
    ends = [parse_utc(e.until) for e in awaited]  # type: ignore[attr-defined]
    assert all(end is not None and abs((end - ends[0]).total_seconds()) <= 1 for end in ends)  # type: ignore[operator]


async def test_capacity_that_never_returns_fails_the_run_saying_it_waited(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    no_capacity_until(rig, None)

    with pytest.raises(NothingPlaced) as caught:
        await walk(rig, run_id, "30m")

    waited = trio.current_time() - start
    assert 30 * 60 <= waited < 30 * 60 + 60
    message = str(caught.value)
    assert f"run {run_id} got no pod: waited 30m" in message
    assert 'wait_for_capacity = "30m"' in message
    assert "trying every GPU type" in message
    # The last walk's attempts only, not every one of the half hour.
    n = len(rig.state(run_id).pod.attempts)
    assert f"attempt {n} ({A40}): no capacity" in message
    assert f"attempt 1 ({RTX})" not in message
    # No wait goes past the wait's end: the last walk starts by then.
    assert create_times(rig)[-2] - start <= 30 * 60
    assert not rig.fake.live_pods() and not rig.state(run_id).pod.may_bill()


async def test_without_a_wait_no_capacity_fails_at_once(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    no_capacity_until(rig, trio.current_time() + 600)
    with pytest.raises(NothingPlaced) as caught:
        await walk(rig, run_id, None)
    assert "waited" not in str(caught.value)
    assert len(create_times(rig)) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_a_signal_during_the_wait_ends_the_run_before_its_job_with_no_pod(
    rig: PodRig, signum: signal.Signals, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    no_capacity_until(rig, start + 600)

    async def interrupt() -> None:
        await trio.sleep_until(start + 100)
        rig.interrupts.interrupt(signum)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt)
        with pytest.raises(ProvisionInterrupted) as caught:
            await walk(rig, run_id, "30m")

    assert "it has no pod left" in str(caught.value)
    assert trio.current_time() - start < 110  # the wait ended at once
    assert not rig.fake.live_pods() and not rig.fake.pods
    state = rig.state(run_id)
    assert state.run.interrupted_stage == "waiting for capacity"
    assert not state.pod.may_bill()


async def test_the_wait_says_what_it_waits_for_and_until_when(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    no_capacity_until(rig, trio.current_time() + 100)
    await walk(rig, run_id, "30m")

    said = rig.err.getvalue().splitlines()
    lines = [line for line in said if line.startswith(f"run {run_id}: no capacity for")]
    assert lines, said
    first = lines[0]
    assert f"run {run_id}: no capacity for 1 × {RTX} or {A40} in any data center" in first
    assert "waiting for some until " in first and " UTC" in first
    assert 'wait_for_capacity = "30m"' in first
    assert "trying again at " in first and "(try 2)" in first
    assert "Ctrl-C stops" in first


async def test_a_cancel_asked_during_the_wait_is_taken_at_once_with_no_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    no_capacity_until(rig, start + 600)

    async def ask() -> None:
        await trio.sleep_until(start + 100)
        await rig.journal.append(run_id, [ev.CancelRequested(relay="asked")])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        with pytest.raises(ProvisionCancelled, match="cancelled before its job started"):
            await walk(rig, run_id, "30m")

    # The log is looked at every poll of the wait, not only when it ends.
    assert trio.current_time() - start < 100 + 2 * Timing().poll
    assert not rig.fake.pods and not rig.state(run_id).pod.may_bill()
