"""A pod's watchdog asks its job to save a checkpoint and stop before the pod's bound (its
deadline less ``save_before_deadline_minutes``, or 95 % of its cost cap): the command
following the run then brings that checkpoint home, ends the run ``stopped`` saying why,
and deletes the pod as after a success.

On trio's MockClock with the fake Runpod API in-process and a scripted job that acts on the
request as the metrics plugin makes the trainer do. The watchdog itself (the real script,
under sh, dash and busybox) is tested in ``test_watchdog.py``, which shows it writes the
request at these moments; here a task stands in for it, writing what it writes there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.targets.runpod.provision import remote_run_dir
from overbrainer.testing.pod_training import A40, JobScript, Train, training
from overbrainer.train.axolotl import STOP_FILE

CAP_SECONDS = 30 * 60.0  # $1 at $2/h
MAX_SECONDS = 2 * 3600.0  # the project's max_hours
SAVE_BEFORE = 10 * 60.0  # the default, for that bound


def _capped(t: Train) -> None:
    """A $1 cap on pods billing $2/h (listed cheaper, so the pod gets its whole
    max_hours): the cap is reached 30 min after the pod's creation."""
    fake = t.rig.fake
    listed = min(2.0, 1.0 / t.spec.max_hours)
    fake.add_gpu_type(dataclasses.replace(fake.gpu_types[A40], price=listed, billed_price=2.0))
    t.spec = t.spec.model_copy(update={"max_cost_usd": 1.0})


async def _watchdog_asks(t: Train, at: float, reason: str) -> None:
    """What the pod's watchdog does ``at`` seconds after the pod's creation: write the
    request, holding ``reason``, in the run's directory on the pod."""
    while not t.request_times("POST", "/pods"):
        await trio.sleep(1)
    (created,) = t.request_times("POST", "/pods")
    await trio.sleep_until(created + at)
    run_id = t.run_id()
    t.machine().files[f"{remote_run_dir(run_id)}/{STOP_FILE}"] = f"{reason}\n".encode()


async def test_a_save_asked_before_the_deadline_ends_the_run_stopped_with_its_checkpoint(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        assert t.spec.save_before == SAVE_BEFORE / 60
        # 200 min of training on a pod bound to 120.
        t.network.script = JobScript(steps=200, step_seconds=60.0)
        codes: list[int] = []

        async def train() -> None:
            codes.append(await t.train())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(train)
            nursery.start_soon(_watchdog_asks, t, MAX_SECONDS - SAVE_BEFORE, "deadline")
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        assert codes == [0]
        assert state.run.state == "stopped"
        # Asked 110 min after the pod's creation (the job started a little later): it
        # saved at the end of the step under way.
        assert state.run.checkpoint is not None
        step = state.run.checkpoint["step"]
        assert 100 <= step <= 110, step
        assert state.run.message == (
            f"saved checkpoint-{step} and stopped, as its pod's watchdog asked, before the "
            "pod's deadline"
        )
        home = tmp_path / "runs" / run_id / "output" / f"checkpoint-{step}"
        assert (home / "adapter_model.safetensors").read_text() == f"step {step}\n"
        # No StopRequested: nobody here asked; the record says who did.
        names = t.rig.names(run_id)
        assert "run.StopRequested" not in names
        assert names.index("run.CheckpointRetrieved") < names.index("run.Ended")
        assert names.index("run.Ended") < names.index("pod.Deleting")
        # The pod is deleted as after a success, before its deadline.
        assert state.pod.status == "deleted" and t.rig.fake.status(pod_id) == "TERMINATED"
        (created,) = t.request_times("POST", "/pods")
        (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
        assert deleted - created < MAX_SECONDS
        out = t.out()
        assert (
            f"train: run {run_id} saved checkpoint-{step} and stopped, as its pod's watchdog "
            "asked, before the pod's deadline" in out
        )
        assert f"resume with `overbrainer train --resume-from {run_id}`" in out
        said = t.err()
        assert (
            f"stopping at step {step}, as its pod's watchdog asked, before the pod's deadline: "
            f"the job saves checkpoint-{step}" in said
        )


async def test_a_save_asked_at_95_percent_of_the_cost_cap_ends_the_run_stopped(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _capped(t)  # $1 at $2/h: the cap 30 min after the pod's creation
        t.network.script = JobScript(steps=400, step_seconds=10.0, ends=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(t.train)
            nursery.start_soon(_watchdog_asks, t, 0.95 * CAP_SECONDS, "cost_cap")
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        assert state.run.state == "stopped", state.run.message
        assert state.run.checkpoint is not None
        step = state.run.checkpoint["step"]
        assert state.run.message == (
            f"saved checkpoint-{step} and stopped, as its pod's watchdog asked, at 95 % of "
            "the pod's cost cap"
        )
        assert state.pod.cost_cap_near
        # Deleted before the cap, by overbrainer once the results were home.
        (created,) = t.request_times("POST", "/pods")
        (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
        assert 0.95 * CAP_SECONDS < deleted - created < CAP_SECONDS
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        names = t.rig.names(run_id)
        assert names.count("pod.CostCapNear") == 1
        assert "run.CheckpointRetrieved" in names
        assert not [e for e in t.rig.events(run_id, ev.RunEnded) if e.state == "failed"]
        assert f"pod {pod_id} has cost 95 % of its cap" in t.err()
        assert "its watchdog asks the job to save a checkpoint and stop" in t.err()


@pytest.mark.parametrize("reason", ["deadline", "cost_cap"])
async def test_a_job_that_does_not_act_on_the_request_is_still_bounded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, reason: str
) -> None:
    # A job that never looks for the request (a broken plugin): the bound holds as before.
    async with training(tmp_path) as t:
        if reason == "cost_cap":
            _capped(t)
        t.network.script = JobScript(steps=400, step_seconds=60.0, ends=False, stops=False)
        at = 0.95 * CAP_SECONDS if reason == "cost_cap" else MAX_SECONDS - SAVE_BEFORE
        async with trio.open_nursery() as nursery:

            async def train() -> None:
                with pytest.raises(Exception, match="failed"):
                    await t.train()

            nursery.start_soon(train)
            nursery.start_soon(_watchdog_asks, t, at, reason)
        state = t.rig.state(t.run_id())
        assert state.run.state == "failed"
        assert state.pod.status == "deleted"
