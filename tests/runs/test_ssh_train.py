"""``train``, ``train attach`` and ``train cancel`` on an ssh target: the real ``overbrainer``
command against a real OpenSSH sshd on loopback, reached through a ``~/.ssh/config`` alias
and checked against ``~/.ssh/known_hosts`` (both in a temporary HOME), with the stand-in
trainer in the remote venv. See tests/runs/ssh_project.py for the seams."""

import hashlib
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from overbrainer.testing.sshd import keygen, known_hosts_line
from tests.exec.procs import all_command_lines
from tests.runs.conftest import alive, kill_group
from tests.runs.ssh_project import (
    ALIAS,
    CORRUPTED_FILE,
    GHOST_FILE,
    SshProject,
    ssh_project,
    ssh_project_at,
    stop_following,
)

__all__ = ["ssh_project"]

FINAL = re.compile(r"^train: run (\S+) (\w+)")
STORY_OK = ["run.Created", "run.JobStarted", "run.ArtifactsRetrieved", "run.Ended"]


def _final(stdout: str) -> tuple[str, str]:
    match = FINAL.match(stdout.strip().splitlines()[-1])
    assert match, stdout
    return match.group(1), match.group(2)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` (relative path → sha256)."""
    return {
        p.relative_to(root).as_posix(): _sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _started(project: SshProject, *args: str, **extra: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``train`` in the background; wait until its job runs; the process and run ID."""
    train = project.start("train", *args, **extra)
    run_id = project.wait_for_state("running")
    project.wait_for_file(project.remote_run(run_id) / "job.pid")
    return train, run_id


def _polls(project: SshProject) -> int:
    """How many times the job's status was read since the last job started."""
    commands = project.sshd.commands()
    starts = [i for i, c in enumerate(commands) if c.endswith("sh job.sh start")]
    return sum("'status'" in c for c in commands[starts[-1] :]) if starts else 0


def _wait_for_polls(project: SshProject, count: int = 1) -> None:
    """Wait until the job's status was read ``count`` times since it started."""
    deadline = time.monotonic() + 15
    while _polls(project) < count:
        assert time.monotonic() < deadline, "the follower never polled the job"
        time.sleep(0.02)


# ---- the whole run --------------------------------------------------------------------


def test_a_run_trains_merges_and_brings_verified_output_home(ssh_project: SshProject) -> None:
    data = ssh_project.path / "data"
    (data / "eval.jsonl").write_text((data / "train.jsonl").read_text().splitlines()[0] + "\n")
    done = ssh_project.run("train", OVERBRAINER_TRAINING__MERGE="true")
    assert done.returncode == 0, done.stderr
    run_id, state = _final(done.stdout)
    assert state == "succeeded"
    assert f"; output in {ssh_project.path}/runs/{run_id}/output" in done.stdout
    assert re.search(r"step 5/5, epoch 3, loss [0-9.]+, eval_loss [0-9.]+", done.stdout)
    assert "eval_loss" in done.stderr
    local = ssh_project.path / "runs" / run_id
    remote = ssh_project.remote_run(run_id)
    assert (local / "output" / "adapter_model.safetensors").is_file()
    assert (local / "output" / "merged" / "model.safetensors").is_file()
    # Verified copies of the remote results; the checkpoint stayed on the host.
    assert (remote / "output" / "checkpoint-1").is_dir()
    assert not (local / "output" / "checkpoint-1").exists()
    remote_output = {k: v for k, v in _files(remote / "output").items() if "checkpoint-" not in k}
    assert _files(local / "output") == remote_output
    for name in ("metrics.jsonl", "job.log"):
        assert _sha256(local / name) == _sha256(remote / name)
    run = ssh_project.run_json(run_id)
    assert run["state"] == "succeeded"
    assert isinstance(run["artifacts"], dict)
    assert run["artifacts"]["files"] == len(remote_output) + 2
    # Nothing but the job's inputs went to the host: no keys, no run.json.
    assert not (remote / "run.json").exists() and not (remote / "ssh").exists()
    # The alias of ~/.ssh/config reached the host; the workdir is relative to its home.
    assert any(
        c.startswith(f"cd '{ssh_project.workdir}/runs/{run_id}'")
        for c in ssh_project.sshd.commands()
    )
    assert ssh_project.event_names(run_id) == STORY_OK
    for name in STORY_OK:
        assert name in done.stderr


def test_a_project_at_a_non_ascii_quoted_spaced_path_trains(tmp_path: Path) -> None:
    # Issue 12: non-ASCII, a quote, a space, a double quote and a backslash in the project's
    # path (the local side of the upload, the download and the run's files).
    with ssh_project_at(tmp_path, tmp_path / "josé p'q \"r\\s" / "project") as project:
        done = project.run("train")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        run_id, state = _final(done.stdout)
        assert state == "succeeded"
        local = project.path / "runs" / run_id
        adapter = "output/adapter_model.safetensors"
        assert _sha256(local / adapter) == _sha256(project.remote_run(run_id) / adapter)
        assert project.event_names(run_id) == STORY_OK


def test_an_absolute_workdir_holds_the_runs_and_attach_and_cancel_find_them(
    ssh_project: SshProject, tmp_path: Path
) -> None:
    scratch = tmp_path / "scratch" / "me" / "overbrainer"
    ssh_project.env["OVERBRAINER_TARGETS__BOX__WORKDIR"] = f"{scratch}/"
    ssh_project.workdir = str(scratch)  # remote_root: an absolute path stays itself
    done = ssh_project.run("train")
    assert done.returncode == 0, done.stderr
    run_id, state = _final(done.stdout)
    assert state == "succeeded"
    remote = scratch / "runs" / run_id
    assert (remote / "output" / "adapter_model.safetensors").is_file()
    local = ssh_project.path / "runs" / run_id
    assert _sha256(local / "output" / "adapter_model.safetensors") == _sha256(
        remote / "output" / "adapter_model.safetensors"
    )
    assert ssh_project.run_json(run_id)["remote_dir"] == f"{scratch}/runs/{run_id}"
    commands = ssh_project.sshd.commands()
    assert any(c.startswith(f"cd '{scratch}/runs/{run_id}' && ") for c in commands)
    assert not any(f"{scratch}//" in c for c in commands)
    # A run followed again and cancelled there, through the same absolute directory.
    ssh_project.knobs(OB_GATE="1")
    train, second = _started(ssh_project)
    assert ssh_project.remote_run(second) == scratch / "runs" / second
    stop_following(train)
    cancel = ssh_project.run("train", "cancel", second)
    assert cancel.returncode == 0, cancel.stderr
    assert f"train: run {second} cancelled" in cancel.stdout
    assert (scratch / "runs" / second / "cancelled").exists()
    assert ssh_project.run_json(second)["state"] == "cancelled"


def test_check_names_the_host_and_the_remote_trainer(ssh_project: SshProject) -> None:
    done = ssh_project.run("train", "--check")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "preflight of target box (ssh, native):"
    assert f"  ok       ssh host       {ALIAS}: answered with its known host key" in lines
    trainer = f"{ssh_project.venv}/bin/axolotl on host {ALIAS} (interpreter /bin/sh starts)"
    assert f"  ok       trainer        {trainer}" in lines
    # The trainer, then the GPUs the host shows (the target trains on a GPU).
    assert [c for c in ssh_project.sshd.commands() if c.startswith("sh -s -- ")] == [
        f"sh -s -- 'trainer' '{ssh_project.venv}/bin/axolotl'",
        "sh -s -- 'gpus'",
    ]
    # The remote venv gone: named, and no run.
    ssh_project.venv.rename(ssh_project.venv.with_name("venv-moved"))
    try:
        failed = ssh_project.run("train")
    finally:
        ssh_project.venv.with_name("venv-moved").rename(ssh_project.venv)
    assert failed.returncode == 1
    assert (
        f"  {ssh_project.venv}/bin/axolotl does not exist on host {ALIAS}: install Axolotl in "
        "that venv"
    ) in failed.stderr
    assert ssh_project.runs() == []


def test_a_failing_job_fails_the_run_naming_the_code_and_its_log(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(FAKE_AXOLOTL_EXIT="3")
    done = ssh_project.run("train")
    assert done.returncode == 1
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert (
        f"error: run {run_id} failed: the job exited with code 3; see runs/{run_id}/job.log"
        in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert (
        "FAKE_AXOLOTL_EXIT=3: failing"
        in (ssh_project.path / "runs" / run_id / "job.log").read_text()
    )
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["exit_code"]) == ("failed", 3)
    assert ssh_project.event_names(run_id) == STORY_OK


def test_a_job_without_metrics_fails_the_run(ssh_project: SshProject) -> None:
    ssh_project.knobs(FAKE_AXOLOTL_NO_METRICS="1")
    done = ssh_project.run("train")
    assert done.returncode == 1
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert "the job exited 0 without writing any metrics" in done.stderr
    assert ssh_project.run_json(run_id)["state"] == "failed"
    assert ssh_project.event_names(run_id) == STORY_OK


def test_a_lost_job_fails_the_run(ssh_project: SshProject) -> None:
    ssh_project.knobs(OB_GATE="1")  # never opened: only a kill ends it
    train, run_id = _started(ssh_project)
    kill_group(ssh_project.job_pid(run_id))  # SIGKILL: no exit code is ever written
    _out, err = train.communicate(timeout=30)
    assert train.returncode == 1, err
    assert f"run {run_id} failed: the job vanished without an exit code" in err
    assert ssh_project.run_json(run_id)["state"] == "failed"
    assert ssh_project.event_names(run_id) == STORY_OK


# ---- cancel ---------------------------------------------------------------------------


def test_cancel_stops_the_whole_group_and_a_second_cancel_is_a_no_op(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(
        FAKE_AXOLOTL_STEPS="1000", FAKE_AXOLOTL_STEP_SECONDS="0.05", FAKE_AXOLOTL_SPAWN_CHILD="1"
    )
    train, run_id = _started(ssh_project)
    remote = ssh_project.remote_run(run_id)
    ssh_project.wait_for_file(remote / "grandchild.pid")
    grandchild = int((remote / "grandchild.pid").read_text())
    job = ssh_project.job_pid(run_id)
    stop_following(train)
    assert train.returncode == 130
    assert alive(grandchild) and alive(job)

    started = time.monotonic()
    cancel = ssh_project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    assert f"train: run {run_id} cancelled" in cancel.stdout
    assert time.monotonic() - started < 8
    assert not alive(grandchild), "the grandchild in the job's group must be stopped too"
    assert not alive(job)
    assert (remote / "cancelled").is_file()
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["message"]) == ("cancelled", "cancelled")
    # What the job left came home, verified.
    assert (ssh_project.path / "runs" / run_id / "metrics.jsonl").is_file()

    again = ssh_project.run("train", "cancel", run_id)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"train: run {run_id} has already ended (cancelled")
    assert again.stdout.endswith("nothing to cancel\n")
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.CancelRequested",
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


def test_cancel_from_another_terminal_while_train_follows_settles_the_run_once(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(
        FAKE_AXOLOTL_STEPS="1000", FAKE_AXOLOTL_STEP_SECONDS="0.05", FAKE_AXOLOTL_SPAWN_CHILD="1"
    )
    train, run_id = _started(ssh_project)
    ssh_project.wait_for_file(ssh_project.remote_run(run_id) / "grandchild.pid")
    _wait_for_polls(ssh_project)
    cancel = ssh_project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    assert f"train: run {run_id} cancelled" in cancel.stdout
    out, err = train.communicate(timeout=30)
    # The follower reports the end the cancel recorded, without a second collection.
    assert train.returncode == 1, err
    assert _final(out) == (run_id, "cancelled")
    assert f"error: run {run_id} cancelled\n" in err
    assert "Traceback" not in err + cancel.stderr
    assert ssh_project.run_json(run_id)["state"] == "cancelled"
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.CancelRequested",
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


def test_cancelling_an_ended_job_leaves_its_real_result(ssh_project: SshProject) -> None:
    done = ssh_project.run("train")
    run_id, state = _final(done.stdout)
    assert state == "succeeded", done.stderr
    commands = len(ssh_project.sshd.commands())
    cancel = ssh_project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.startswith(f"train: run {run_id} has already ended (succeeded; ")
    assert cancel.stdout.endswith(
        f"; output in {ssh_project.path}/runs/{run_id}/output); nothing to cancel\n"
    )
    assert ssh_project.run_json(run_id)["state"] == "succeeded"
    assert not (ssh_project.remote_run(run_id) / "cancelling").exists()
    assert not any("'cancel'" in c for c in ssh_project.sshd.commands()[commands:])
    assert ssh_project.event_names(run_id) == STORY_OK


# ---- Ctrl-C and attach ----------------------------------------------------------------


def test_ctrl_c_while_following_leaves_the_job_running_and_attach_finishes_it(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(OB_GATE="1")
    train, run_id = _started(ssh_project)
    _wait_for_polls(ssh_project)
    _out, err = stop_following(train)
    assert train.returncode == 130, err
    assert "Traceback" not in err
    assert (
        f"interrupted: run {run_id} keeps running on host {ALIAS}; follow it again with "
        f"`overbrainer train attach {run_id}`"
    ) in err
    assert alive(ssh_project.job_pid(run_id)), "the job must keep running after Ctrl-C"
    assert ssh_project.run_json(run_id)["state"] == "running"

    attach = ssh_project.start("train", "attach", run_id)
    _wait_for_polls(ssh_project, _polls(ssh_project) + 1)
    ssh_project.open_gate(run_id)
    out, err = attach.communicate(timeout=60)
    assert attach.returncode == 0, err
    assert _final(out) == (run_id, "succeeded")
    assert (ssh_project.path / "runs" / run_id / "output" / "adapter_model.safetensors").is_file()
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.Followed",  # train attach claims the run
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


def test_sigterm_while_following_detaches_with_the_attach_hint(ssh_project: SshProject) -> None:
    # SIGTERM (`timeout`, systemd, CI) used to kill the command: no run.Detached, no hint.
    ssh_project.knobs(OB_GATE="1")
    train, run_id = _started(ssh_project)
    _wait_for_polls(ssh_project)
    train.send_signal(signal.SIGTERM)
    _out, err = train.communicate(timeout=30)
    assert train.returncode == 143, err
    assert "Traceback" not in err
    assert (
        f"error: interrupted by SIGTERM: run {run_id} keeps running on host {ALIAS}; follow "
        f"it again with `overbrainer train attach {run_id}`"
    ) in err
    assert alive(ssh_project.job_pid(run_id)), "the job must keep running"
    assert ssh_project.event_names(run_id)[-1] == "run.Detached"
    ssh_project.open_gate(run_id)
    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")


def test_a_second_ctrl_c_during_retrieval_stops_it_and_attach_collects_later(
    ssh_project: SshProject,
) -> None:
    # Collecting was shielded for up to an hour: a big adapter on a slow link left only
    # `kill`. The second Ctrl-C now stops it, recording nothing as retrieved.
    ssh_project.knobs(FAKE_AXOLOTL_OUTPUT_MB="16")
    plan = {"containing": ".download:", "action": "sigint2"}
    done = ssh_project.run("train", OVERBRAINER_FAULT_PLAN=json.dumps(plan))
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    (run_id,) = ssh_project.runs()
    where = f"they stay in {ssh_project.workdir}/runs/{run_id} on host {ALIAS}"
    assert f"Ctrl-C again stops it now: {where}, and `overbrainer train attach {run_id}`" in (
        done.stderr
    )
    assert done.stderr.splitlines()[-1] == (
        f"error: interrupted: the collection of the results of run {run_id} was stopped before "
        f"they were all home and verified (nothing is recorded as retrieved); {where}: "
        f"`overbrainer train attach {run_id}` collects them"
    )
    assert ssh_project.run_json(run_id)["state"] == "running"  # a would-be success
    assert "run.ArtifactsRetrieved" not in ssh_project.event_names(run_id)
    assert not (ssh_project.path / "runs" / run_id / "output").exists()

    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")
    assert ssh_project.event_names(run_id).count("run.ArtifactsRetrieved") == 1


def test_ctrl_c_while_connecting_stops_the_run_before_its_job(ssh_project: SshProject) -> None:
    # The preflight reaches the host; while its probe is held, the host stops answering
    # new connections: the run is created and its own connection hangs.
    box = ssh_project.sshd
    box.hold_probe.touch()
    train = ssh_project.start("train")
    try:
        ssh_project.wait_for_file(box.probe_held, timeout=30)
        box.pause()  # the host accepts the connection and never answers
        box.hold_probe.unlink()
        assert train.stderr is not None
        line = train.stderr.readline()
        assert "run.Created" in line, line
        time.sleep(0.5)  # connecting now, for up to the 20 s connect timeout
        stopped = time.monotonic()
        _out, err = stop_following(train)
        assert time.monotonic() - stopped < 5, "Ctrl-C must not wait for the connect timeout"
    finally:
        box.hold_probe.unlink(missing_ok=True)
        box.resume()
    assert train.returncode == 130, err
    assert "Traceback" not in err
    (run_id,) = ssh_project.runs()
    assert (
        f"interrupted: run {run_id} stopped before its job started; nothing runs on the target"
    ) in err
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["job"]) == ("failed", None)
    assert run["interrupted_stage"] == "connecting to the target"
    assert [c for c in box.commands() if "job.sh" in c or "tar" in c] == []
    assert ssh_project.event_names(run_id) == ["run.Created", "run.Interrupted", "run.Ended"]


def test_ctrl_c_while_the_preflight_connects_creates_no_run(ssh_project: SshProject) -> None:
    ssh_project.sshd.pause()
    try:
        train = ssh_project.start("train")
        # The preflight is connecting (for up to the 20 s connect timeout) once its
        # connection waits in the frozen listener's queue.
        ssh_project.sshd.wait_for_caller()
        stopped = time.monotonic()
        _out, err = stop_following(train)
        assert time.monotonic() - stopped < 5, "Ctrl-C must not wait for the connect timeout"
    finally:
        ssh_project.sshd.resume()
    assert train.returncode == 130, err
    assert err.splitlines() == [
        "error: interrupted during the preflight checks: no run was created; start one with "
        "`overbrainer train`"
    ]
    assert ssh_project.runs() == []
    assert ssh_project.sshd.commands() == []


def test_ctrl_c_while_the_job_starts_leaves_it_recorded_and_attachable(
    ssh_project: SshProject,
) -> None:
    ssh_project.sshd.slow_start.touch()
    train = ssh_project.start("train")
    deadline = time.monotonic() + 15
    while not any(c.endswith("sh job.sh start") for c in ssh_project.sshd.commands()):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.02)
    _out, err = stop_following(train)  # inside the shielded start: it finishes first
    assert train.returncode == 130, err
    assert "Traceback" not in err
    (run_id,) = ssh_project.runs()
    assert f"interrupted: run {run_id} keeps running on host {ALIAS}" in err
    assert ssh_project.run_json(run_id)["state"] == "running"
    assert ssh_project.event_names(run_id) == ["run.Created", "run.JobStarted", "run.Detached"]
    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.Followed",  # train attach claims the run
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


# ---- the connection -------------------------------------------------------------------


def test_a_job_survives_its_connection_being_dropped(ssh_project: SshProject) -> None:
    ssh_project.knobs(OB_GATE="1")
    train, run_id = _started(ssh_project)
    _wait_for_polls(ssh_project)
    polls = _polls(ssh_project)
    assert ssh_project.sshd.drop() > 0  # every sshd process serving the follower, SIGKILLed
    # The follower's next poll fails; the one after reconnects and reads the status again.
    _wait_for_polls(ssh_project, polls + 1)
    assert alive(ssh_project.job_pid(run_id))
    ssh_project.open_gate(run_id)
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    assert _final(out) == (run_id, "succeeded")
    assert re.search(
        rf"^warning: lost the connection to host {ALIAS} while .*; retrying \(1/5\)$", err, re.M
    ), err
    assert ssh_project.event_names(run_id) == STORY_OK


def test_following_gives_up_on_the_sixth_failed_poll_and_attach_finishes_later(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(OB_GATE="1")
    train, run_id = _started(ssh_project)
    _wait_for_polls(ssh_project)
    ssh_project.sshd.stop()  # and it stays down
    _out, err = train.communicate(timeout=60)
    assert train.returncode == 1, err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert [w.rsplit("retrying ", 1)[1] for w in warnings] == [f"({n}/5)" for n in range(1, 6)]
    assert f"warning: cannot reach host {ALIAS}: connection refused" in err
    assert (
        f"error: gave up following run {run_id} after 6 failed attempts in a row to reach "
        f"host {ALIAS}"
    ) in err
    assert (
        f"its job keeps running there: follow it again with `overbrainer train attach {run_id}`"
    ) in err
    assert alive(ssh_project.job_pid(run_id)), "the job keeps running without its follower"
    assert ssh_project.run_json(run_id)["state"] == "running"
    detached = [e for e in ssh_project.events(run_id) if e["event"] == "run.Detached"]
    assert [e["fields"]["reason"] for e in detached] == ["target unreachable"]

    ssh_project.sshd.start()  # the host is back, on the same port with the same key
    ssh_project.open_gate(run_id)
    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.Followed",  # train attach claims the run
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]


def test_a_changed_host_key_is_refused_and_nothing_starts(
    ssh_project: SshProject, tmp_path: Path
) -> None:
    other = keygen(tmp_path / "other_host_key")
    port = ssh_project.sshd.port
    (ssh_project.home / ".ssh" / "known_hosts").write_text(known_hosts_line(port, other))
    done = ssh_project.run("train")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"the host key of {ALIAS} ([127.0.0.1]:{port}) is not the one in your known hosts" in (
        done.stderr
    )
    assert f"`ssh-keygen -R '[127.0.0.1]:{port}'`" in done.stderr
    assert f"`ssh-keyscan -p {port} 127.0.0.1 >> ~/.ssh/known_hosts`" in done.stderr
    # The preflight refused it: nothing ran on the host, and no run was created.
    assert done.stderr.startswith("error: preflight found 1 problem; no run was created:\n")
    assert ssh_project.sshd.commands() == []
    assert not (ssh_project.remote_root / "runs").exists()
    assert ssh_project.runs() == []
    listed = ssh_project.run("runs", "ls", "--json")
    assert listed.returncode == 0 and listed.stdout == ""


# ---- retrieval ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "problem"),
    [
        ("corrupt", f"{CORRUPTED_FILE}: different"),
        ("ghost", f"{GHOST_FILE}: missing here"),
    ],
)
def test_a_would_be_success_with_bad_results_stays_running_until_attach_collects(
    ssh_project: SshProject, flag: str, problem: str
) -> None:
    seam = getattr(ssh_project.sshd, flag)
    seam.touch()
    done = ssh_project.run("train")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (run_id,) = ssh_project.runs()
    assert (
        f"the job of run {run_id} ended but its results could not be retrieved and verified"
        in done.stderr
    )
    assert problem in done.stderr
    assert f"`overbrainer train attach {run_id}`" in done.stderr
    run = ssh_project.run_json(run_id)
    assert run["state"] == "running"
    assert str(run["note"]).startswith(f"artifacts not retrieved: {problem}")

    seam.unlink()  # the host answers truthfully again
    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert _final(attach.stdout) == (run_id, "succeeded")
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["note"]) == ("succeeded", None)
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.NoteAdded",
        "run.Followed",  # train attach claims the run
        "run.ArtifactsRetrieved",
        "run.NoteCleared",
        "run.Ended",
    ]


def test_a_failed_run_without_its_results_gets_a_note_that_a_later_collect_clears(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(FAKE_AXOLOTL_EXIT="3")
    ssh_project.sshd.corrupt.touch()
    done = ssh_project.run("train")
    assert done.returncode == 1
    run_id, state = _final(done.stdout)
    assert state == "failed"
    assert (
        f"run {run_id} failed: the job exited with code 3; see runs/{run_id}/job.log "
        f"(artifacts not retrieved: {CORRUPTED_FILE}: different"
    ) in done.stderr
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["artifacts"]) == ("failed", None)
    assert str(run["note"]).startswith("artifacts not retrieved")

    ssh_project.sshd.corrupt.unlink()
    attach = ssh_project.run("train", "attach", run_id)
    assert attach.returncode == 1  # the run failed, and says so again
    assert f"run {run_id} failed: the job exited with code 3" in attach.stderr
    assert "artifacts not retrieved" not in attach.stderr
    run = ssh_project.run_json(run_id)
    assert (run["state"], run["note"]) == ("failed", None)
    assert isinstance(run["artifacts"], dict)
    assert ssh_project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Ended",
        "run.NoteAdded",
        "run.Followed",  # train attach claims the run
        "run.ArtifactsRetrieved",
        "run.NoteCleared",
    ]


# ---- the HF token ---------------------------------------------------------------------


def test_the_hf_token_reaches_the_job_and_nothing_else(ssh_project: SshProject) -> None:
    canary = "hf_SSHCANARY0123456789abcdefXYZ"
    ssh_project.knobs(OB_GATE="1")
    train, run_id = _started(ssh_project, OVERBRAINER_HF_TOKEN=canary)
    # No process shows it on its command line while the job runs.
    assert canary not in all_command_lines()
    ssh_project.open_gate(run_id)
    out, err = train.communicate(timeout=60)
    assert train.returncode == 0, err
    local = ssh_project.path / "runs" / run_id
    remote = ssh_project.remote_run(run_id)
    assert (local / "output" / "saw_hf_token").read_text() == "yes"
    assert (remote / "output" / "saw_hf_token").read_text() == "yes"
    assert canary not in out and canary not in err
    for root in (ssh_project.path, ssh_project.remote_root, ssh_project.home):
        for path in root.rglob("*"):
            if path.is_file():
                assert canary.encode() not in path.read_bytes(), path
    log = ssh_project.sshd.log_text()
    assert "job.sh start" in log  # the commands are recorded...
    assert canary not in log  # ...and the token is on none of them
    for command in (["events", run_id, "--json"], ["events", run_id], ["runs", "show", run_id]):
        shown = ssh_project.run(*command)
        assert shown.returncode == 0, shown.stderr
        assert canary not in shown.stdout + shown.stderr
    assert ssh_project.event_names(run_id) == STORY_OK
