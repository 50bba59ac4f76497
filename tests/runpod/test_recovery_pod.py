"""A run whose pod is lost under its job, recovered on a new pod, on trio's MockClock with
the fake API in-process: its money counted across pods, the new pod's cap what is left."""

from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.runpod.pod_scripts import ENV_MAX_COST
from overbrainer.testing.pod_training import JobScript, Train, training


async def _lose_the_pod_at_ten_minutes(t: Train) -> None:
    while not t.network.machines or not t.machine().spawned:
        await trio.sleep(5)
    await trio.sleep(600)
    t.rig.fake.vanish(t.rig.fake.live_pods()[0].id)
    t.machine().down = True


async def test_a_pod_lost_before_any_checkpoint_is_replaced_and_the_job_starts_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.spec = t.spec.model_copy(update={"max_cost_usd": 1.0})
        t.network.script = JobScript(steps=60, step_seconds=60.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_lose_the_pod_at_ten_minutes, t)
            assert await t.train() == 0
        run_id = t.run_id()
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded"
        (recovery,) = state.run.recoveries
        first, second = recovery["lost_pod"], recovery["pod_id"]
        assert (recovery["reason"], recovery["resumed_step"]) == (
            f"pod {first} no longer exists",
            0,  # no checkpoint home: from the start
        )
        assert recovery["lost_steps"] == recovery["last_step"] > 0
        assert state.pod.pod_id == second and t.rig.fake.live_pods() == []
        # The lost pod was counted until it was found gone; what is left of the $1 cap is
        # the new pod's cap, in the log and in its watchdog's environment.
        spent = state.pod.costs[first]["estimate"]
        assert 0 < spent < 0.2
        sent = t.rig.events(run_id, ev.AttemptSent)
        assert [a.max_cost_usd for a in sent] == [1.0, round(1.0 - spent, 6)]
        assert float(t.rig.fake.pod_env(second)[ENV_MAX_COST]) == sent[1].max_cost_usd
        # While following the new pod, the spend shown is the run's: both pods'.
        last = [line for line in t.err().splitlines() if line.startswith("progress:")][-1]
        shown = float(last.rpartition("spend $")[2])
        second_pod = state.pod.costs[second]["estimate"]
        assert abs(shown - (spent + second_pod)) < 0.02, (last, spent, second_pod)
        assert "recovery 1/3 on a new pod, its cost cap $" in t.err()
        assert f"run.Recovered: recovery 1: the job runs on pod {second}" in t.err()


async def test_a_recovery_whose_new_pod_cannot_be_placed_fails_the_run_saying_so(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=60, step_seconds=60.0)

        async def lose_it_and_every_gpu() -> None:
            await _lose_the_pod_at_ten_minutes(t)
            for gpu in t.spec.gpu_types:
                t.rig.fake.set_capacity(gpu, 0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lose_it_and_every_gpu)
            with pytest.raises(OverbrainerError) as caught:
                await t.train()
        run_id = t.run_id()
        assert str(caught.value).startswith(f"run {run_id} failed: recovery 1 could not start: ")
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and len(state.run.recoveries) == 1
        assert state.run.message is not None
        assert state.run.message.startswith("recovery 1 could not start: ")
        assert t.rig.fake.live_pods() == []
