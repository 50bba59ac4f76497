"""``train``, ``train attach`` and ``train cancel`` on this machine, through the real
``overbrainer`` command and the stand-in trainer."""

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.runs.conftest import Project, alive, job_pid, kill_group, local_project

FINAL = re.compile(r"^train: run (\S+) (\w+)")


def _final(stdout: str) -> tuple[str, str]:
    match = FINAL.match(stdout.strip().splitlines()[-1])
    assert match, stdout
    return match.group(1), match.group(2)


def test_a_run_trains_merges_and_brings_verified_output_home(project: Project) -> None:
    data = project.path / "data"
    (data / "eval.jsonl").write_text((data / "train.jsonl").read_text().splitlines()[0] + "\n")
    done = project.run("train", OVERBRAINER_TRAINING__MERGE="true")
    assert done.returncode == 0, done.stderr
    run_id, state = _final(done.stdout)
    assert state == "succeeded"
    assert f"; output in {project.path}/runs/{run_id}/output" in done.stdout
    assert re.search(r"step 5/5, epoch 3, loss [0-9.]+, eval_loss [0-9.]+", done.stdout)
    out = project.path / "runs" / run_id / "output"
    assert (out / "adapter_model.safetensors").is_file()
    assert (out / "merged" / "model.safetensors").is_file()
    run = project.run_json(run_id)
    assert run["state"] == "succeeded"
    assert isinstance(run["artifacts"], dict)
    # The checkpoint is not part of what is retrieved and verified.
    files = run["artifacts"]["files"]
    listed = [p for p in out.rglob("*") if p.is_file() and "checkpoint-" not in str(p)]
    assert files == len(listed) + 2  # + metrics.jsonl and job.log
    assert "eval_loss" in done.stderr  # evaluation losses are always shown
    assert project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]
    # The live output told the same story as the replay.
    for name in ("run.Created", "run.JobStarted", "run.ArtifactsRetrieved", "run.Ended"):
        assert name in done.stderr


# A project path with non-ASCII, a quote, a space, a double quote and a backslash.
HOSTILE_DIR = "josé p'q \"r\\s"


def test_a_project_at_a_non_ascii_quoted_spaced_path_trains(tmp_path: Path) -> None:
    with local_project(tmp_path, tmp_path / HOSTILE_DIR / "project") as project:
        done = project.run("train")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        run_id, state = _final(done.stdout)
        assert state == "succeeded"
        out = project.path / "runs" / run_id / "output" / "adapter_model.safetensors"
        assert out.is_file()
        assert project.run_json(run_id)["state"] == "succeeded"


def test_a_failing_job_fails_the_run_naming_the_code_and_its_log(project: Project) -> None:
    done = project.run("train", FAKE_AXOLOTL_EXIT="3")
    assert done.returncode == 1
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert (
        f"error: run {run_id} failed: the job exited with code 3; see runs/{run_id}/job.log"
        in done.stderr
    )
    assert "Traceback" not in done.stderr
    run = project.run_json(run_id)
    assert (run["state"], run["exit_code"]) == ("failed", 3)
    assert project.event_names(run_id)[-1] == "run.Ended"


def test_a_job_without_metrics_fails_the_run(project: Project) -> None:
    done = project.run("train", FAKE_AXOLOTL_NO_METRICS="1")
    assert done.returncode == 1
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert "the metrics plugin was not loaded" in done.stderr
    assert project.run_json(run_id)["state"] == "failed"


def test_a_job_without_metrics_fails_the_run_with_merge_too_and_is_not_merged(
    project: Project,
) -> None:
    done = project.run("train", FAKE_AXOLOTL_NO_METRICS="1", OVERBRAINER_TRAINING__MERGE="true")
    assert done.returncode == 1, done.stderr
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert "the metrics plugin was not loaded" in done.stderr
    assert project.run_json(run_id)["state"] == "failed"
    home = project.path / "runs" / run_id
    # The merge step saw no training recorded: it merged nothing and said why in job.log.
    assert not (home / "output" / "merged").exists()
    assert "merge skipped: the training wrote no metrics" in (home / "job.log").read_text()


def test_a_lost_job_fails_the_run(project: Project) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running")
    kill_group(job_pid(project, run_id))  # no exit code is ever written
    _out, err = train.communicate(timeout=30)
    assert train.returncode == 1
    assert "vanished without an exit code" in err
    assert project.run_json(run_id)["state"] == "failed"


def test_ctrl_c_while_following_leaves_the_job_running_and_attach_finishes_it(
    project: Project,
) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="30", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running")
    time.sleep(0.3)
    train.send_signal(signal.SIGINT)
    _out, err = train.communicate(timeout=30)
    assert train.returncode == 130
    assert "Traceback" not in err
    assert (
        f"interrupted: run {run_id} keeps running on this machine; follow it again with "
        f"`overbrainer train attach {run_id}`"
    ) in err
    pid = job_pid(project, run_id)
    assert alive(pid), "the job must keep running after Ctrl-C"
    assert project.event_names(run_id)[-1] == "run.Detached"

    attach = project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")
    assert project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.Followed",  # attach claims it: one process follows a run at a time
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["SIGTERM", "SIGHUP"]
)
def test_sigterm_or_sighup_while_following_detaches_with_the_attach_hint(
    project: Project, signum: signal.Signals, code: int
) -> None:
    # `timeout`, systemd, CI cancelling a job (SIGTERM) and a closed terminal (SIGHUP) used
    # to kill the command outright: no run.Detached, no hint.
    train = project.start("train", FAKE_AXOLOTL_STEPS="30", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running")
    time.sleep(0.3)
    train.send_signal(signum)
    _out, err = train.communicate(timeout=30)
    assert train.returncode == code, err
    assert "Traceback" not in err
    assert (
        f"error: interrupted by {signum.name}: run {run_id} keeps running on this machine; "
        f"follow it again with `overbrainer train attach {run_id}`"
    ) in err
    assert alive(job_pid(project, run_id)), "the job must keep running"
    story = project.run("events", run_id)
    assert (
        f"stopped following (interrupted by {signum.name}); the job keeps running"
    ) in story.stdout
    assert f"`overbrainer train attach {run_id}` follows it again" in story.stdout

    attach = project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")


def test_ctrl_c_while_the_job_starts_never_leaves_an_unrecorded_job(project: Project) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="20", FAKE_AXOLOTL_STEP_SECONDS="0.05")
    assert train.stderr is not None
    # The first line is the run's creation: the job is being prepared and started now.
    line = train.stderr.readline()
    assert "run.Created" in line, line
    train.send_signal(signal.SIGINT)
    _out, err = train.communicate(timeout=30)
    assert train.returncode == 130, err
    assert "Traceback" not in err
    (run_id,) = project.runs()
    run = project.run_json(run_id)
    if run["state"] == "running":
        # The start was shielded: the job runs, is recorded, and attach follows it.
        assert "train attach" in err
        attach = project.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr
        assert project.run_json(run_id)["state"] == "succeeded"
    else:
        assert run["state"] == "failed"
        assert run["job"] is None
        assert not (project.path / "runs" / run_id / "job.pid").exists()
        assert "stopped before its job started" in err


def test_cancel_stops_the_whole_group_and_a_second_cancel_is_a_no_op(project: Project) -> None:
    train = project.start(
        "train",
        FAKE_AXOLOTL_STEPS="400",
        FAKE_AXOLOTL_STEP_SECONDS="0.1",
        FAKE_AXOLOTL_SPAWN_CHILD="1",
        FAKE_AXOLOTL_ON_SIGTERM="ignore",
    )
    run_id = project.wait_for_state("running")
    run_dir = project.path / "runs" / run_id
    deadline = time.monotonic() + 60  # a busy machine starts processes slowly
    while not (run_dir / "grandchild.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int((run_dir / "grandchild.pid").read_text())
    train.send_signal(signal.SIGINT)
    train.communicate(timeout=30)
    assert alive(grandchild)

    started = time.monotonic()
    cancel = project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    assert f"train: run {run_id} cancelled" in cancel.stdout
    assert time.monotonic() - started < 20  # SIGTERM ignored: SIGKILL after the grace
    assert not alive(grandchild)
    assert not alive(job_pid(project, run_id))
    assert project.run_json(run_id)["state"] == "cancelled"

    again = project.run("train", "cancel", run_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"train: run {run_id} has already ended (cancelled; step ")
    assert again.stdout.endswith("); nothing to cancel\n")
    assert "train attach" not in again.stdout
    # Attach of the cancelled run tells what it came to, and succeeds.
    attached = project.run("train", "attach", run_id)
    assert attached.returncode == 0, attached.stderr
    assert attached.stdout.startswith(f"train: run {run_id} cancelled; step ")
    names = project.event_names(run_id)
    assert names.count("run.CancelRequested") == 1
    assert names[-1] == "run.Ended"


def test_cancelling_an_ended_job_leaves_its_real_result(project: Project) -> None:
    done = project.run("train")
    run_id, state = _final(done.stdout)
    assert state == "succeeded"
    cancel = project.run("train", "cancel", run_id)
    assert cancel.returncode == 0
    assert cancel.stdout == (
        f"train: run {run_id} has already ended (succeeded; step 5/5, epoch 3, loss "
        f"{done.stdout.split(', loss ')[1].split(';')[0]}; output in "
        f"{project.path}/runs/{run_id}/output); "
        "nothing to cancel\n"
    )
    assert project.run_json(run_id)["state"] == "succeeded"
    assert "run.CancelRequested" not in project.event_names(run_id)


def test_the_hf_token_reaches_the_job_and_nothing_else(project: Project) -> None:
    canary = "hf_CANARYtoken0123456789abcdef"
    train = project.start(
        "train",
        OVERBRAINER_HF_TOKEN=canary,
        FAKE_AXOLOTL_STEPS="15",
        FAKE_AXOLOTL_STEP_SECONDS="0.05",
    )
    run_id = project.wait_for_state("running")
    # No process shows it on its command line while the job runs.
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                assert canary.encode() not in (proc / "cmdline").read_bytes()
            except OSError:
                continue
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    run_dir = project.path / "runs" / run_id
    assert (run_dir / "output" / "saw_hf_token").read_text().strip() == "yes"
    assert canary not in out and canary not in err
    for path in project.path.rglob("*"):
        if path.is_file():
            assert canary.encode() not in path.read_bytes(), path
    events = project.run("events", run_id, "--json")
    assert canary not in events.stdout


def test_invalid_run_ids_are_refused_by_every_command_and_create_nothing(
    project: Project,
) -> None:
    before = sorted(str(p) for p in project.path.rglob("*"))
    for bad in ("../etc", "/tmp/x", "a/b", ""):
        for command in (
            ["train", "attach", bad],
            ["train", "cancel", bad],
            ["runs", "show", bad],
            ["pod", "rm", bad],
            ["pod", "rm", bad, "--force"],
            ["events", bad],
            ["events", bad, "--json"],
        ):
            done = project.run(*command)
            assert done.returncode in (1, 2), (command, done.stderr)
            assert "Traceback" not in done.stderr
            assert "is not a run ID" in done.stderr, (command, done.stderr)
    after = sorted(str(p) for p in project.path.rglob("*"))
    assert [p for p in after if p not in before and ".overbrainer" not in p] == []
    assert not Path("/tmp/x").exists() or Path("/tmp/x").stat().st_mtime < time.time() - 60
    assert not (project.path.parent / "etc").exists()
    assert os.path.exists(project.path / "overbrainer.toml")
