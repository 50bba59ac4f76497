"""A Runpod run whose pod is lost once a checkpoint came home, with the real Axolotl:
``train`` recovers it on a new pod from the newest checkpoint home, the new job's first
step is the one after it, and the run succeeds with its adapter home and verified and no
pod left.

The pod vanishes from the fake Runpod (404, everything in it ended) while ``train``
follows the run: a pod Runpod lost.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import (
    COMMAND_TIMEOUT,
    Case,
    Project,
    RunpodWorld,
    World,
    metrics_of,
    run_id_of,
)
from overbrainer.exec.manifest import local_manifest

# 64 conversations one by one, eight epochs: 512 steps, a checkpoint every 32. The CPU
# trains ~40 to 80 steps a second here, and the pod is lost ~0.5 s after the first
# checkpoint is saved: the job is far from its end then. Every step is logged (Axolotl
# would log every other one of 512), so the new job's first step shows.
CASE = Case("recovery", "lora", epochs=8, micro_batch_size=1)
STEPS = 512
SAVE_EVERY = 32


def _read_json(path: Path) -> dict[str, Any]:
    """A record the running ``train`` writes (``{}`` before it is there)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data


def _train_losing_the_pod(world: RunpodWorld, project: Project) -> tuple[str, str, list[int], str]:
    """``train``, its pod lost once the first checkpoint is home; the run, the lost pod,
    the checkpoints home when it was lost, and train's stderr."""
    err_path = project.path.parent / "train.err"
    with err_path.open("w") as err, (project.path.parent / "train.out").open("w") as out:
        process = subprocess.Popen(
            project.argv("train"), env=project.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        try:
            deadline = time.monotonic() + COMMAND_TIMEOUT
            while "run.JobStarted" not in err_path.read_text():
                assert process.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.1)
            run_id = run_id_of(err_path.read_text())
            home = project.path / "runs" / run_id
            while not (checkpoints := _read_json(home / "run.json").get("checkpoints")):
                assert process.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, "no checkpoint came home"
                time.sleep(0.1)
            pod = _read_json(home / "pod.json")
            assert pod["status"] == "job_running", pod
            lost = str(pod["pod_id"])
            world.vanish(lost)
            code = process.wait(COMMAND_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    stderr = err_path.read_text()
    assert code == 0, stderr
    return run_id, lost, list(checkpoints), stderr


@pytest.mark.parametrize("kind", ["runpod"])
def test_a_pod_lost_after_a_checkpoint_came_home_is_recovered_from_it_and_the_run_succeeds(
    world: World, tmp_path: Path
) -> None:
    assert isinstance(world, RunpodWorld)
    project = world.project(CASE, tmp_path)
    toml = project.path / "overbrainer.toml"
    text = toml.read_text()
    text = text.replace(
        "evals_per_epoch = 2\n", f"evals_per_epoch = 1\nsaves_per_epoch = {64 // SAVE_EVERY}\n"
    )
    extra = "[training.axolotl_extra]\n"
    text = text.replace(extra, f"{extra}logging_steps = 1\n")
    toml.write_text(text)
    run_id, lost, home_at_loss, stderr = _train_losing_the_pod(world, project)
    assert home_at_loss and home_at_loss[0] == SAVE_EVERY, home_at_loss

    # Succeeded after one recovery, on another pod, from a checkpoint that was home.
    show = project.show(run_id)
    run = show["run"]
    assert run["state"] == "succeeded", run
    (recovery,) = run["recoveries"]
    assert recovery["attempt"] == 1 and recovery["lost_pod"] == lost, recovery
    new_pod = recovery["pod_id"]
    assert new_pod and new_pod != lost, recovery
    step = recovery["resumed_step"]
    # The newest home when train saw the pod gone: the one seen, or one that came home
    # in the moment before the pod went.
    assert step >= max(home_at_loss) and step % SAVE_EVERY == 0, (recovery, home_at_loss)
    assert step < STEPS, recovery
    assert recovery["lost_steps"] is not None and recovery["lost_steps"] >= 0, recovery
    said = f"recovery 1/3 on a new pod, resuming from checkpoint-{step}"
    assert said in stderr, stderr
    assert f"train: run {run_id} succeeded" in (project.path.parent / "train.out").read_text()

    # The new job trained from the checkpoint on: its first step is the next one.
    remote = run["remote_dir"]
    rel = remote.lstrip("/") if remote.startswith("/") else f"root/{remote}"
    events = metrics_of(world.workspace / new_pod / rel / "metrics.jsonl")
    steps = [e.step for e in events if e.event == "log" and e.loss is not None]
    assert steps == list(range(step + 1, STEPS + 1)), steps[:3]

    # The run's events tell the recovery, before its end.
    told = project.run("events", run_id, "--json", timeout=60)
    assert told.returncode == 0, told.stderr
    names = [json.loads(line)["event"] for line in told.stdout.splitlines()]
    assert names.count("run.Recovering") == names.count("run.Recovered") == 1, names
    assert names.index("run.Recovering") < names.index("run.Recovered") < names.index("run.Ended")

    # The adapter is home, and every file is the one the new pod hashed.
    home = project.path / "runs" / run_id
    manifest = local_manifest(home)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    assert run["artifacts"]["manifest_digest"] == digest, (run["artifacts"], sorted(manifest))
    assert run["artifacts"]["files"] == len(manifest)
    output = home / "output"
    assert (output / "adapter_model.safetensors").stat().st_size > 0
    assert json.loads((output / "adapter_config.json").read_text())["r"] == 4
    assert run["metrics"]["step"] == STEPS, run["metrics"]

    # No pod of the run left: the new one deleted (the lost one is gone).
    assert show["pod"]["pod_id"] == new_pod, show["pod"]
    world.check_after(project, show)
