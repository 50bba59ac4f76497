"""``train`` on a Runpod target with ``wait_for_capacity`` when no GPU type has capacity
for a while (the fake Runpod in-process, on trio's MockClock): the run waits and gets its
pod once capacity returns, or is interrupted during the wait with no pod left."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import Interrupted
from overbrainer.testing.pod_training import Train, training


def wait_for_capacity(t: Train, written: str, back_after: float) -> None:
    """The target waits ``written``; no GPU type has capacity for ``back_after`` seconds."""
    t.spec = t.spec.model_copy(update={"wait_for_capacity": written})
    assert t.spec.gpu_types != "auto"
    for gpu in t.spec.gpu_types:
        t.rig.fake.set_capacity(gpu, 0)
        t.rig.fake.set_capacity_at(trio.current_time() + back_after, gpu, 8)


async def test_a_run_waits_for_capacity_then_trains_on_its_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        wait_for_capacity(t, "30m", 600)
        start = trio.current_time()
        code = await t.train()
        run_id = t.run_id()

        assert code == 0
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded"
        assert t.rig.fake.create_requests()[0].time - start < 1
        created = [p for p in t.rig.fake.pods.values()]
        assert len(created) == 1 and created[0].created_at - start >= 600
        assert not t.rig.fake.live_pods() and not state.pod.may_bill()
        assert "pod.CapacityAwaited" in t.rig.names(run_id)
        assert f"run {run_id}: no capacity for" in t.err()


async def test_ctrl_c_during_the_wait_fails_the_run_before_its_job_with_no_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        wait_for_capacity(t, "30m", 600)
        run = t.command()
        start = trio.current_time()

        async def ctrl_c() -> None:
            await trio.sleep_until(start + 120)
            run.session.interrupts.interrupt()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctrl_c)
            with pytest.raises(Interrupted) as caught:
                await t.train(run=run)

        run_id = t.run_id()
        assert str(caught.value) == (
            f"interrupted: run {run_id} stopped before its job started; it has no pod left"
        )
        assert trio.current_time() - start < 130
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and state.run.job is None
        assert state.run.interrupted_stage == "waiting for capacity"
        assert not t.rig.fake.pods and not state.pod.may_bill()
        assert t.rig.names(run_id)[-2:] == ["run.Interrupted", "run.Ended"]
