"""A job that stalls while ``train`` follows it, on trio's MockClock: the fake Runpod API
in-process, the pod's machine in memory with a scripted job that stops writing metrics
lines after step 3 and keeps running (hung). The follower records the stall, asks the job
to save and stop, gives it ``[training] stop_timeout_minutes``, cancels it, brings what it
left home, deletes the pod and fails the run saying it stalled and what to run next (the
target recovers no run here: ``max_recoveries = 0``; a stall recovered on a new pod is
tested in ``test_recovery_loopback.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.exec.base import ExecError
from overbrainer.lifecycle.run import JobStalled
from overbrainer.testing.fake_executor import FakeExecutor
from overbrainer.testing.pod_training import JobScript, training
from overbrainer.train.axolotl import STOP_FILE

STEP = 60.0  # a step a minute
STALL = 20 * 60.0  # [training] stall_minutes, by default
GRACE = 5 * 60.0  # [training] stop_timeout_minutes, by default


async def test_a_hung_job_is_asked_to_save_then_cancelled_and_the_run_fails_stalled(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        # Three steps, then nothing more: no line, no end, no answer to a stop request.
        t.network.script = JobScript(steps=3, step_seconds=STEP, ends=False, stops=False)
        with pytest.raises(JobStalled) as caught:
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        machine = t.machine()
        # Asked to save and stop first, then cancelled once the grace ran out.
        assert f"runs/{run_id}/{STOP_FILE}" in machine.files
        assert f"runs/{run_id}/cancelled" in machine.files
        names = t.rig.names(run_id)
        assert names.index("run.Stalled") < names.index("run.StopRequested")
        assert names.index("run.StopRequested") < names.index("run.Ended")
        assert names.index("run.Ended") < names.index("pod.Deleted")
        (stalled,) = t.rig.events(run_id, ev.Stalled)
        assert stalled == ev.Stalled(silent_minutes=20.0, last_step=3, first_line=False)
        assert state.run.stalled is not None and state.run.stalled["step"] == 3
        # The pod went: not before the stall and its grace, and not much after.
        (created,) = t.request_times("POST", "/pods")
        (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
        assert 3 * STEP + STALL + GRACE <= deleted - created <= 3 * STEP + STALL + GRACE + 120
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        # The run failed saying it stalled, at which step, for how long; its metrics home.
        assert state.run.state == "failed"
        assert state.run.message == (
            "stalled: it wrote no metrics line for 20 minutes after its last one (at step 3); "
            "ended as it did not save and stop within 5 minutes"
        )
        assert (tmp_path / "runs" / run_id / "metrics.jsonl").read_text().count('"log"') == 3
        assert str(caught.value) == (
            f"run {run_id} failed: its job stalled (it wrote no metrics line for 20 minutes "
            "after its last one (at step 3)); no checkpoint of it came home: `overbrainer "
            "train` starts it again"
        )
        assert caught.value.stall.last_step == 3
        assert "stalled: the job wrote no metrics line for 20 minutes (last at step 3)" in (
            t.story(run_id)
        )
        assert "stalled: it wrote no metrics line" in t.err()


async def test_a_job_that_began_but_never_stepped_stalls_after_the_stall_bound(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        # The trainer's begin line (the model is loaded), then not a single step.
        t.network.script = JobScript(steps=0, step_seconds=STEP, ends=False, stops=False)
        with pytest.raises(JobStalled):
            await t.train()
        run_id = t.run_id()
        (stalled,) = t.rig.events(run_id, ev.Stalled)
        # The begin line is a line: twenty minutes after it, not sixty.
        assert stalled == ev.Stalled(silent_minutes=20.0, last_step=None, first_line=False)


async def test_a_stalled_job_that_saves_when_asked_ends_stopped_with_its_checkpoint(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        # Silent for longer than the stall bound (a step of 30 min), but it still answers a
        # save-and-stop request at the end of the step under way, within the grace.
        t.network.script = JobScript(steps=4, step_seconds=23 * 60.0, ends=False, stops=True)
        code = await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        assert code == 0
        assert "run.Stalled" in t.rig.names(run_id)
        assert state.run.state == "stopped"
        assert state.run.checkpoint is not None and state.run.checkpoint["step"] == 1


async def test_a_stop_request_that_cannot_be_written_cancels_the_stalled_job_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(self: FakeExecutor, path: str) -> None:
        await trio.lowlevel.checkpoint()
        raise ExecError(f"cannot write {path}: disk full")

    monkeypatch.setattr(FakeExecutor, "touch", refuse)
    async with training(tmp_path) as t:
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        t.network.script = JobScript(steps=3, step_seconds=STEP, ends=False, stops=False)
        with pytest.raises(JobStalled):
            await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        names = t.rig.names(run_id)
        assert "run.StopRequested" not in names  # never written, so never recorded
        assert state.run.message == (
            "stalled: it wrote no metrics line for 20 minutes after its last one (at step 3); "
            "cancelled: the request to save and stop could not be written"
        )
        (created,) = t.request_times("POST", "/pods")
        (deleted,) = t.request_times("DELETE", f"/pods/{t.pod_id(run_id)}")
        assert deleted - created < 3 * STEP + STALL + 120  # no grace waited
        assert "disk full; the stalled job is cancelled without a save" in t.err()
