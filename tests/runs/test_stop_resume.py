"""``train stop`` and ``train --resume-from`` on this machine, with the stand-in trainer
(which acts on the plugin's save-and-stop as the Trainer does): the run ends ``stopped``
with its checkpoint recorded and resumable; a job that does not stop in time is cancelled;
a resume that does not fit is refused before any run exists."""

import subprocess
import time

from tests.runs.conftest import Project


def _started(project: Project, **knobs: str) -> tuple[str, "subprocess.Popen[str]"]:
    """``train`` in the background, once its job has logged three steps."""
    train = project.start(
        "train", FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0.05", **knobs
    )
    run_id = project.wait_for_state("running")
    metrics = project.path / "runs" / run_id / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not metrics.exists() or metrics.read_text().count('"event":"log"') < 3:
        assert time.monotonic() < deadline, "the job did not train"
        time.sleep(0.05)
    return run_id, train


def test_stop_saves_a_checkpoint_ends_the_run_stopped_and_resume_goes_on(
    project: Project,
) -> None:
    run_id, train = _started(project)
    stop = project.run("train", "stop", run_id)
    assert stop.returncode == 0, stop.stderr
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    run = project.run_json(run_id)
    assert run["state"] == "stopped", run
    checkpoint = run["checkpoint"]
    assert isinstance(checkpoint, dict)
    step = checkpoint["step"]
    assert 3 <= step < 400
    assert (project.path / "runs" / run_id / "output" / f"checkpoint-{step}").is_dir()
    assert f"checkpoint-{step} of run {run_id} is home" in out + stop.stdout
    names = project.event_names(run_id)
    # The stop's checkpoint is home as soon as the trainer announced it saved, before the
    # results: recorded once.
    assert names[-3:] == ["run.CheckpointRetrieved", "run.ArtifactsRetrieved", "run.Ended"]
    assert names.count("run.CheckpointRetrieved") == 1
    assert names.count("run.StopRequested") == 1
    again = project.run("train", "stop", run_id)
    assert again.returncode == 0
    assert "nothing to stop" in again.stdout

    # A rank that does not fit is refused before any run exists.
    refused = project.run("train", "--resume-from", run_id, OVERBRAINER_TRAINING__LORA_R="64")
    assert refused.returncode == 1
    assert "training.lora_r is 64 here but the checkpoint was trained with" in refused.stderr
    assert len(project.runs()) == 1
    missing = project.run("train", "--resume-from", f"{run_id}:{step + 1}")
    assert missing.returncode == 1
    assert f"no checkpoint of step {step + 1} at home" in missing.stderr
    assert len(project.runs()) == 1

    resumed = project.run(
        "train", "--resume-from", run_id, FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0"
    )
    assert resumed.returncode == 0, resumed.stderr
    new_id = project.runs()[-1]
    new = project.run_json(new_id)
    assert (new["state"], new["resumed_from"]) == ("succeeded", {"run": run_id, "step": step})
    text = (project.path / "runs" / new_id / "metrics.jsonl").read_text()
    assert f'"step":{step + 1},' in text and f'"step":{step},' not in text


def test_a_job_that_does_not_stop_in_time_is_cancelled_and_the_command_says_so(
    project: Project,
) -> None:
    run_id, train = _started(project, FAKE_AXOLOTL_NO_STOP="1")
    started = time.monotonic()
    stop = project.run("train", "stop", run_id, OVERBRAINER_TRAINING__STOP_TIMEOUT_MINUTES="0.05")
    assert time.monotonic() - started < 40
    assert stop.returncode == 1
    assert "did not stop within 0.05 minutes" in stop.stderr
    assert f"run {run_id} cancelled" in stop.stderr
    train.communicate(timeout=60)
    assert project.run_json(run_id)["state"] == "cancelled"
