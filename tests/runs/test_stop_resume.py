"""``train stop`` and ``train --resume-from`` on this machine, with the stand-in trainer
(which acts on the plugin's save-and-stop as the Trainer does): the run ends ``stopped``
with its checkpoint recorded and resumable; a job that does not stop in time is cancelled;
a resume that does not fit is refused before any run exists."""

import subprocess
import time
from pathlib import Path

from tests.runs.conftest import Project


def _started(project: Project, **knobs: str) -> tuple[str, "subprocess.Popen[str]"]:
    """``train`` in the background, once its job has logged three steps."""
    paced = {"FAKE_AXOLOTL_STEPS": "400", "FAKE_AXOLOTL_STEP_SECONDS": "0.05", **knobs}
    train = project.start("train", **paced)
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


def test_a_stopped_run_with_merge_is_not_merged_and_says_how_to_merge_or_resume(
    project: Project,
) -> None:
    run_id, train = _started(project, OVERBRAINER_TRAINING__MERGE="true")
    stop = project.run("train", "stop", run_id, OVERBRAINER_TRAINING__MERGE="true")
    assert stop.returncode == 0, stop.stderr
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    run = project.run_json(run_id)
    assert run["state"] == "stopped", run
    checkpoint = run["checkpoint"]
    assert isinstance(checkpoint, dict)
    step = checkpoint["step"]
    home = project.path / "runs" / run_id
    # The half-trained adapter is home, its checkpoint too; no merged model was made.
    assert (home / "output" / "adapter_model.safetensors").is_file()
    assert (home / "output" / f"checkpoint-{step}").is_dir()
    assert not (home / "output" / "merged").exists()
    metrics = (home / "metrics.jsonl").read_text()
    assert '"phase":"merge_skipped"' in metrics and '"phase":"merging"' not in metrics
    message = run["message"]
    assert isinstance(message, str)
    assert message.startswith(f"saved checkpoint-{step} and stopped, as asked; the adapter ")
    how = (
        "the adapter was not merged, its training stopped before its end: merge it as it is "
        f"with `axolotl merge-lora axolotl.yaml` in runs/{run_id}, or train it to the end, "
        f"merged then, with `overbrainer train --resume-from {run_id}`"
    )
    assert how in message
    said = out + err + stop.stdout + stop.stderr
    assert "not merging the adapter: its training was stopped before its end" in said
    assert how in said


def test_a_stop_whose_save_left_nothing_never_says_saved_and_says_what_next(
    project: Project,
) -> None:
    run_id, train = _started(project, FAKE_AXOLOTL_SAVE_NOTHING="1")
    stop = project.run("train", "stop", run_id)
    assert stop.returncode == 0, stop.stderr
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    run = project.run_json(run_id)
    assert run["state"] == "stopped" and run["checkpoint"] is None, run
    message = run["message"]
    assert isinstance(message, str) and message.startswith("stopped at step "), message
    assert "but no checkpoint-" in message and "there is nothing to resume from" in message
    said = out + err + stop.stdout + stop.stderr
    assert "saved checkpoint-" not in said, said
    assert "checkpoint-" not in "".join(project.event_names(run_id))
    assert (
        f"train: run {run_id} stopped without a checkpoint home: nothing to resume; train "
        "again from the start with `overbrainer train`" in said
    )
    refused = project.run("train", "--resume-from", run_id)
    assert refused.returncode == 1
    assert len(project.runs()) == 1


def test_a_job_that_ends_before_acting_on_the_stop_succeeds_and_says_so(
    project: Project,
) -> None:
    # The job never looks for the request (as one past its last step): it trains to the end.
    run_id, train = _started(
        project, FAKE_AXOLOTL_NO_STOP="1", FAKE_AXOLOTL_STEPS="60", FAKE_AXOLOTL_STEP_SECONDS="0.1"
    )
    stop = project.run("train", "stop", run_id)
    out, err = train.communicate(timeout=60)
    assert stop.returncode == 0, stop.stderr
    run = project.run_json(run_id)
    assert run["state"] == "succeeded" and run["checkpoint"] is None, run
    said = out + err + stop.stdout + stop.stderr
    assert "saved checkpoint-" not in said
    assert (
        f"the job of run {run_id} ended its training before it could act on the request to "
        "save and stop: the run succeeded, with its whole output" in said
    )


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_check_with_resume_from_runs_the_resume_checks_and_creates_nothing(
    project: Project,
) -> None:
    run_id, train = _started(project)
    assert project.run("train", "stop", run_id).returncode == 0
    train.communicate(timeout=60)
    checkpoint = project.run_json(run_id)["checkpoint"]
    assert isinstance(checkpoint, dict)
    step = checkpoint["step"]
    before = _tree(project.path)

    fits = project.run("train", "--check", "--resume-from", run_id)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert (
        f"ok       resume         checkpoint-{step} of run {run_id} "
        f"(runs/{run_id}/output/checkpoint-{step}): the settings fit; the run would resume "
        "there" in fits.stdout
    ), fits.stdout
    assert fits.stdout.strip().splitlines()[-1].startswith("train --check: every check passed")

    refused = project.run(
        "train",
        "--check",
        "--resume-from",
        run_id,
        OVERBRAINER_TRAINING__LORA_R="64",
        OVERBRAINER_TRAINING__SEQUENCE_LEN="512",
    )
    assert refused.returncode == 1
    out = refused.stdout
    assert f"PROBLEM  resume         checkpoint-{step} of run {run_id}" in out, out
    assert "2 settings differ" in out
    assert "training.lora_r is 64 here but the checkpoint was trained with" in out
    assert "training.sequence_len is 512 here but the checkpoint was trained with" in out
    # Each fix names the variable that set the value, and the hint keeps every option.
    assert (
        "the checkpoint was trained with 16; the environment variable "
        "OVERBRAINER_TRAINING__LORA_R sets it: unset it or set it back"
    ) in out, out
    assert "set it back in overbrainer.toml" not in out
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: train --check: 2 problems (listed above); fix them, then run `overbrainer "
        f"train --check --resume-from {run_id}` again"
    )
    one = project.run("train", "--check", "--resume-from", run_id, "--target", "local")
    assert one.returncode == 0, one.stdout + one.stderr
    (project.path / ".env").write_text("OVERBRAINER_TRAINING__SEQUENCE_LEN=512\n")
    one = project.run("train", "--check", "--resume-from", run_id, "--target", "local")
    assert one.returncode == 1
    assert "1 setting differs" in one.stdout, one.stdout
    assert (
        "OVERBRAINER_TRAINING__SEQUENCE_LEN in the project's .env sets it: remove it there or "
        "set it back"
    ) in one.stdout
    assert one.stderr.strip().splitlines()[-1] == (
        "error: train --check: 1 problem (listed above); fix it, then run `overbrainer train "
        f"--check --target local --resume-from {run_id}` again"
    )
    (project.path / ".env").unlink()

    missing = project.run("train", "--check", "--resume-from", f"{run_id}:{step + 1}")
    assert missing.returncode == 1
    assert f"no checkpoint of step {step + 1} at home" in missing.stdout
    unknown = project.run("train", "--check", "--resume-from", "zzzz")
    assert unknown.returncode == 1
    assert "PROBLEM  resume" in unknown.stdout and "no run of this project" in unknown.stdout
    # Nothing was created: no run, no file (but the runs view's cache, which looking a
    # run up by part of its ID fills, as `runs ls` does).
    assert project.runs() == [run_id]
    assert set(_tree(project.path)) ^ set(before) <= {".overbrainer/view.sqlite"}
