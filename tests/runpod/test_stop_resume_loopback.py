"""``train stop`` then ``train --resume-from`` on a Runpod target, for real on the real clock:
the REAL ``overbrainer`` commands in subprocesses, the fake Runpod API on loopback, fake pods
running the real bootstrap and watchdog behind a real SSH server, and the stand-in trainer,
which acts on the plugin's save-and-stop as the Trainer does."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.runpod.test_train_loopback import communicate, world


async def test_stop_on_a_pod_brings_its_checkpoint_home_and_resume_goes_on_on_a_new_pod(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=400, step_seconds=0.05) as w:
        train = await w.start("train")
        run_id = await w.wait_for("job_running")
        pod_id = str(w.pod_json(run_id)["pod_id"])
        metrics = w.pod_run_dir(pod_id, run_id) / "metrics.jsonl"
        with trio.fail_after(60):
            while not metrics.exists() or metrics.read_text().count('"event":"log"') < 5:
                await trio.sleep(0.05)
        stop = await w.run("train", "stop", run_id)
        out, err = await communicate(train)
        assert stop.returncode == 0, stop.stderr
        assert train.returncode == 0, err
        assert f"asked the job of run {run_id} on " in stop.stderr

        # Stopped, its checkpoint home and verified, its pod deleted as after a success.
        run = w.run_json(run_id)
        assert run["state"] == "stopped", run
        checkpoint = run["checkpoint"]
        assert isinstance(checkpoint, dict)
        step = checkpoint["step"]
        assert 5 <= step < 400
        home = w.project / "runs" / run_id / "output" / f"checkpoint-{step}"
        assert json.loads((home / "trainer_state.json").read_text())["global_step"] == step
        assert run["message"] == f"saved checkpoint-{step} and stopped, as asked"
        pod = w.pod_json(run_id)
        assert pod["status"] == "deleted" and pod["deleted_by"] == "client"
        assert w.fake.status(pod_id) == "TERMINATED"
        names = await w.events(run_id)
        assert names.count("run.StopRequested") == 1
        assert names.index("run.CheckpointRetrieved") < names.index("run.Ended")
        assert names.index("run.Ended") < names.index("pod.Deleting")
        said = out + err + stop.stdout + stop.stderr
        assert f"checkpoint-{step} of run {run_id} is home" in said

        # Resumed on a new pod: the checkpoint goes up with the run; training starts after it.
        resumed = await w.run("train", "--resume-from", run_id, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        new_id = w.runs()[-1]
        assert new_id != run_id
        new = w.run_json(new_id)
        assert (new["state"], new["resumed_from"]) == ("succeeded", {"run": run_id, "step": step})
        new_pod = str(w.pod_json(new_id)["pod_id"])
        assert new_pod != pod_id and w.fake.status(new_pod) == "TERMINATED"
        text = (w.project / "runs" / new_id / "metrics.jsonl").read_text()
        assert f'"step":{step + 1},' in text and f'"step":{step},' not in text
        assert '"step":400,' in text
