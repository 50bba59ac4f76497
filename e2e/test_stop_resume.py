"""``train stop`` and ``train --resume-from`` with the real Axolotl: a run asked to save
and stop at about half of its steps ends ``stopped`` with that checkpoint home and
verified; a new run resumed from it starts after the saved step and trains to the end.

``train`` follows the run from the start; ``train stop`` (a second command, as a user in a
second terminal) writes the request on the target and follows the job to its end too: one
of them records the end, the other reports it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from e2e.harness import (
    COMMAND_TIMEOUT,
    Case,
    Project,
    World,
    keep_output,
    metrics_of,
    run_id_of,
)
from overbrainer.exec.manifest import RESULT_PATHS, local_manifest

# 64 conversations one by one, four epochs: 256 steps. The CPU trains ~40 steps a second
# here and a stop lands ~20 steps after it is asked, so one asked at the half leaves the
# job ~3 s it does not need: the stop never races the job's own end.
CASE = Case("stop-resume", "lora", epochs=4, micro_batch_size=1)
# Two processes share the same examples: half the steps each.
CASE_2P = Case("stop-resume-2p", "lora", epochs=4, micro_batch_size=1, processes=2)


def _steps(case: Case) -> int:
    return 256 // case.processes


def _step_of(job_dir: Path) -> int:
    """The last step the job's metrics file shows (0 before any)."""
    try:
        events = metrics_of(job_dir / "metrics.jsonl")
    except (FileNotFoundError, AssertionError):
        return 0
    steps = [e.step for e in events if e.event == "log" and e.step is not None]
    return max(steps, default=0)


def _train_then_stop(
    project: Project, steps: int
) -> tuple[str, subprocess.CompletedProcess[str], str]:
    """``train``, and ``train stop`` once the job is half through; the run, stop's
    result and train's stderr."""
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
            job = project.world.job_dir(project, run_id)
            while _step_of(job) < steps // 2:
                assert process.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, "the job did not train"
                time.sleep(0.1)
            stop = project.run("train", "stop", run_id)
            keep_output(project, "stop", stop)
            code = process.wait(COMMAND_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    stderr = err_path.read_text()
    assert code == 0, stderr
    return run_id, stop, stderr


@pytest.mark.parametrize("kind", ["local", "ssh", "runpod"])
def test_stop_then_resume(world: World, tmp_path: Path) -> None:
    _stop_then_resume(world, tmp_path, CASE)


@pytest.mark.parametrize("kind", ["local"])
def test_stop_then_resume_a_job_of_two_processes(world: World, tmp_path: Path) -> None:
    _stop_then_resume(world, tmp_path, CASE_2P)


def _stop_then_resume(world: World, tmp_path: Path, case: Case) -> None:
    steps_total = _steps(case)
    project = world.project(case, tmp_path)
    run_id, stop, train_err = _train_then_stop(project, steps_total)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "to save a checkpoint and stop" in stop.stderr, stop.stderr

    # Stopped, with the checkpoint of the step it saved at home and verified.
    show = project.show(run_id)
    run = show["run"]
    assert run["state"] == "stopped", run
    step = run["checkpoint"]["step"]
    assert steps_total // 2 <= step < steps_total, run
    assert run["checkpoint"]["path"] == f"output/checkpoint-{step}"
    home = project.path / "runs" / run_id
    paths = (*RESULT_PATHS, f"output/checkpoint-{step}")
    manifest = local_manifest(home, paths)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    assert run["artifacts"]["manifest_digest"] == digest, (run["artifacts"], sorted(manifest))
    saved = home / "output" / f"checkpoint-{step}"
    assert (saved / "adapter_model.safetensors").stat().st_size > 0
    assert json.loads((saved / "trainer_state.json").read_text())["global_step"] == step
    events = metrics_of(home / "metrics.jsonl")
    assert [e.step for e in events if e.event == "stopped"] == [step]
    logged = [e.step for e in events if e.event == "log" and e.loss is not None]
    assert logged == list(range(1, step + 1)), logged
    said = f"stopping at step {step}, as asked: the job saves checkpoint-{step}"
    assert said in train_err or said in stop.stderr, train_err + stop.stderr
    both = train_err + stop.stdout + stop.stderr
    assert f"overbrainer train --resume-from {run_id}" in both, both

    # runs ls and events tell it.
    listed = project.run("runs", "ls", "--state", "stopped", timeout=60)
    assert f"stopped (checkpoint {step})" in listed.stdout, listed.stdout
    told = project.run("events", run_id, timeout=60)
    for name in ("run.StopRequested", "run.CheckpointRetrieved", "run.Ended"):
        assert name in told.stdout, told.stdout

    # A resume with another LoRA rank is refused before any run exists.
    toml = project.path / "overbrainer.toml"
    original = toml.read_text()
    toml.write_text(original.replace("lora_r = 4", "lora_r = 8"))
    refused = project.run("train", "--resume-from", run_id, timeout=300)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "training.lora_r is 8 here but the checkpoint was trained with 4" in refused.stderr
    assert "created run" not in refused.stderr
    if case.processes > 1:
        # And one on a job of another shape.
        toml.write_text(original.replace(f"processes = {case.processes}\n", ""))
        refused = project.run("train", "--resume-from", run_id, timeout=300)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        said = "the job would run 1 process here but the checkpoint was saved by a job of 2"
        assert said in refused.stderr, refused.stderr
        assert "created run" not in refused.stderr
    toml.write_text(original)

    # Resumed: a new run starting after the saved step, trained to the end.
    resumed = project.run("train", "--resume-from", run_id)
    keep_output(project, "resume", resumed)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    new_id = run_id_of(resumed.stderr)
    assert new_id != run_id
    new = project.show(new_id)["run"]
    assert new["state"] == "succeeded", new
    assert new["resumed_from"] == {"run": run_id, "step": step}
    new_events = metrics_of(project.path / "runs" / new_id / "metrics.jsonl")
    steps = [e.step for e in new_events if e.event == "log" and e.loss is not None]
    assert steps == list(range(step + 1, steps_total + 1)), steps
    assert (project.path / "runs" / new_id / "output" / "adapter_model.safetensors").is_file()
