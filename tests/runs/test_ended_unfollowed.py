"""A run whose job ended after its follower was interrupted is not shown running: ``runs
ls`` and ``runs show`` read the job's markers on this machine (writing nothing) and say the
job ended, that its results are not collected, and the command that collects them. The
real ``overbrainer`` command, the local target and the stand-in trainer."""

import json
import signal
import time

from tests.runs.conftest import Project, alive, job_pid, kill_group


def _interrupted_run(project: Project, steps: str = "20") -> str:
    """A run whose ``train`` got Ctrl-C while its job ran, once that job has ended."""
    train = project.start("train", FAKE_AXOLOTL_STEPS=steps, FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running", timeout=120)
    time.sleep(0.3)
    train.send_signal(signal.SIGINT)
    _out, err = train.communicate(timeout=60)
    assert train.returncode == 130, err
    pid = job_pid(project, run_id)
    deadline = time.monotonic() + 120
    while alive(pid) or not (project.path / "runs" / run_id / "exit_code").exists():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.1)
    return run_id


def _files(project: Project) -> tuple[int, int]:
    """The log's file as a write would change it. (A reader of a log in write-ahead mode
    may make its -shm index and an empty -wal: SQLite's own, no event in them.)"""
    path = project.path / ".overbrainer" / "events.sqlite"
    wal = path.with_name("events.sqlite-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    return path.stat().st_size, path.stat().st_mtime_ns


def test_a_job_that_ended_after_ctrl_c_is_not_shown_running(project: Project) -> None:
    run_id = _interrupted_run(project)
    log_before = _files(project)

    # It showed `running  …  200/200 (100%) … 0s` until someone ran `train attach`.
    listed = project.run("runs", "ls")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert "job ended, not collected" in row and " running " not in f" {row} "
    assert "20/20 (100%)" in row and "0s" not in row.split("(100%)")[1]
    assert listed.stderr == (
        f"run {run_id}: its job exited with code 0; not collected yet: "
        f"`overbrainer train attach {run_id}` brings its results home and ends the run\n"
    )
    as_json = json.loads(project.run("runs", "ls", "--json").stdout.splitlines()[-1])
    assert as_json["state"] == "running"  # the log's state, until collected
    assert as_json["job_ended"]["how"] == "exited" and as_json["job_ended"]["exit_code"] == 0
    assert as_json["eta"] == "" and as_json["eta_seconds"] is None

    shown = project.run("runs", "show", run_id, "--no-plot")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run {run_id}: running"
    assert lines[1].startswith("  ended      its job exited with code 0 at "), lines
    assert lines[1].endswith(
        f"Z; not collected yet: `overbrainer train attach {run_id}` brings its results home "
        "and ends the run"
    )
    assert "ETA" not in shown.stdout
    shown_json = json.loads(project.run("runs", "show", run_id, "--json").stdout)
    assert shown_json["job_ended"]["how"] == "exited"

    # Reading wrote nothing to the log; the run is still to collect, and attach does it.
    assert _files(project) == log_before
    attach = project.run("train", "attach", run_id, timeout=120)
    assert attach.returncode == 0, attach.stderr
    after = project.run("runs", "ls")
    assert "succeeded" in after.stdout and "not collected" not in after.stdout + after.stderr
    assert json.loads(project.run("runs", "show", run_id, "--json").stdout)["job_ended"] is None


def test_a_job_that_failed_unfollowed_shows_its_exit_code(project: Project) -> None:
    train = project.start(
        "train",
        FAKE_AXOLOTL_STEPS="20",
        FAKE_AXOLOTL_STEP_SECONDS="0.1",
        FAKE_AXOLOTL_EXIT="3",
    )
    run_id = project.wait_for_state("running", timeout=120)
    time.sleep(0.3)
    train.send_signal(signal.SIGINT)
    assert train.wait(timeout=60) == 130
    deadline = time.monotonic() + 120
    while not (project.path / "runs" / run_id / "exit_code").exists():
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.1)
    listed = project.run("runs", "ls")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    code = (project.path / "runs" / run_id / "exit_code").read_text().strip()
    assert code != "0"
    assert f"job ended (exit {code}), not collected" in row
    assert f"run {run_id}: its job exited with code {code}; not collected yet" in listed.stderr


def test_a_job_still_running_unfollowed_is_shown_running(project: Project) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="600", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running", timeout=120)
    time.sleep(0.3)
    train.send_signal(signal.SIGINT)
    assert train.wait(timeout=60) == 130
    listed = project.run("runs", "ls")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert " running " in f" {row} " and "not collected" not in listed.stdout + listed.stderr
    cancel = project.run("train", "cancel", run_id, timeout=120)
    assert cancel.returncode == 0, cancel.stderr


def test_a_job_killed_unfollowed_is_shown_lost(project: Project) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="600", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running", timeout=120)
    time.sleep(0.3)
    train.send_signal(signal.SIGINT)
    assert train.wait(timeout=60) == 130
    pid = job_pid(project, run_id)
    kill_group(pid)  # the machine's OOM killer, say: no exit code is written
    deadline = time.monotonic() + 60
    while alive(pid):
        assert time.monotonic() < deadline, "the job did not die"
        time.sleep(0.1)
    listed = project.run("runs", "ls")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert "job lost, not collected" in row
    assert listed.stderr == (
        f"run {run_id}: its job is gone without an exit code; not collected yet: "
        f"`overbrainer train attach {run_id}` brings its results home and ends the run\n"
    )
    attach = project.run("train", "attach", run_id, timeout=120)
    assert attach.returncode == 1 and "vanished without an exit code" in attach.stderr
