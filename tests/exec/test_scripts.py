"""job.sh and ctl.sh behave the same under sh, dash, busybox sh (with busybox's tools
only) and bash in POSIX mode: real shells, real processes, real signals."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from overbrainer.exec.job import CONTROL_SCRIPT, JOB_SCRIPT, script
from overbrainer.exec.manifest import local_manifest, parse_sha256sum
from overbrainer.exec.transfer import extract_tar
from tests.exec.conftest import Shell
from tests.exec.procs import (
    all_command_lines,
    group_command_lines,
    group_members,
    state,
    wait_until,
)


def _wait_file(path: Path, timeout: float = 10) -> str:
    assert wait_until(path.exists, timeout), f"{path.name} never appeared"
    return path.read_text()


def test_commands_run_in_order_and_stop_at_the_first_failure(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    shell.prepare(
        run,
        [
            ["sh", "-c", "echo first; echo 'to stderr' >&2"],
            ["sh", "-c", "exit 7"],
            ["sh", "-c", "echo never"],
        ],
    )
    pid = shell.start(run)
    reap.append(pid)
    assert _wait_file(run / "exit_code") == "7\n"
    assert (run / "job.log").read_text() == "first\nto stderr\n"
    assert (run / "job.pid").read_text() == f"{pid}\n"
    assert shell.ctl("status", str(run)) == "exited 7\n"
    assert not list(run.glob("*.tmp.*"))


def test_the_job_leads_its_group_and_reads_stdin_from_dev_null(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    # `cat` would wait forever on the pipe below if the wrapper did not use /dev/null.
    shell.prepare(run, [["cat"], ["sh", "-c", "echo done"]])
    with subprocess.Popen(
        [shell.sh, JOB_SCRIPT, "run"],
        cwd=run,
        stdin=subprocess.PIPE,
        env=shell.env(),
        start_new_session=True,
    ) as process:
        reap.append(process.pid)
        assert process.wait(timeout=10) == 0
        assert process.stdin is not None
        process.stdin.close()
    assert (run / "exit_code").read_text() == "0\n"
    assert (run / "job.log").read_text() == "done\n"
    assert shell.ctl("status", str(run)) == "exited 0\n"


def test_the_wrapper_refuses_a_process_group_it_does_not_lead(shell: Shell, tmp_path: Path) -> None:
    # Started without setsid it would share pytest's group, which a cancel would kill.
    run = tmp_path / "run"
    shell.prepare(run, [["sh", "-c", "echo ran > ran"]])
    result = subprocess.run(
        [shell.sh, JOB_SCRIPT, "run"], cwd=run, env=shell.env(), timeout=10, check=False
    )
    assert result.returncode == 125
    assert not (run / "job.pid").exists()
    assert not (run / "ran").exists()
    assert "own process group" in (run / "job.log").read_text()


def test_secrets_on_stdin_reach_the_job_environment_only(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    canary = "canary-7f3a 'quoted' \"dq\" $HOME `id` \\ spaces  end"
    run = tmp_path / "run"
    shell.prepare(
        run,
        [["sh", "-c", 'printf %s "$OB_CANARY" > seen; printf %s "$PLAIN" > plain; sleep 30']],
    )
    pid = shell.start(run, f"OB_CANARY={canary}\nPLAIN=a=b\n".encode())
    reap.append(pid)
    _wait_file(run / "plain")
    assert (run / "seen").read_text() == canary
    assert (run / "plain").read_text() == "a=b"
    assert shell.ctl("status", str(run)) == "running\n"
    assert "canary-7f3a" not in all_command_lines()
    for path in run.iterdir():
        if path.name != "seen":
            assert "canary-7f3a" not in path.read_text(errors="replace"), path.name


@pytest.mark.parametrize(
    "line", [b"NO_EQUALS_hunter2\n", b"1BAD=hunter2\n", b"BAD-NAME=hunter2\n", b"=hunter2\n"]
)
def test_the_launcher_refuses_a_malformed_secret_without_showing_it(
    shell: Shell, tmp_path: Path, line: bytes
) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["true"]])
    result = subprocess.run(
        [shell.sh, JOB_SCRIPT, "start"],
        cwd=run,
        input=line,
        capture_output=True,
        env=shell.env(),
        timeout=10,
        check=False,
    )
    assert result.returncode == 2
    assert b"refused" in result.stderr
    assert b"hunter2" not in result.stderr + result.stdout
    assert not (run / "job.pid").exists()


def test_a_job_killed_with_its_whole_group_reads_lost(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sleep", "300"]])
    pid = shell.start(run)
    reap.append(pid)
    assert shell.ctl("status", str(run)) == "running\n"
    os.killpg(pid, signal.SIGKILL)
    assert wait_until(lambda: shell.ctl("status", str(run)) == "lost\n", 5)
    assert not (run / "exit_code").exists()


def test_a_zombie_job_reads_lost_not_running(shell: Shell, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sleep", "300"]])
    # This test is the job's parent and does not reap it, so it stays a zombie.
    process = subprocess.Popen(
        [shell.sh, JOB_SCRIPT, "run"],
        cwd=run,
        stdin=subprocess.DEVNULL,
        env=shell.env(),
        start_new_session=True,
    )
    try:
        _wait_file(run / "job.pid")
        assert shell.ctl("status", str(run)) == "running\n"
        os.killpg(process.pid, signal.SIGKILL)
        assert wait_until(lambda: state(process.pid) == "Z" and not group_members(process.pid))
        os.killpg(process.pid, 0)  # kill -0 still finds the group: only its zombie is left
        assert shell.ctl("status", str(run)) == "lost\n"
    finally:
        process.kill()
        process.wait()


def test_cancel_stops_the_whole_group_with_grandchildren_and_a_second_is_a_no_op(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sh", "-c", "sleep 300 & sh -c 'sleep 301 & sleep 302' & sleep 303"]])
    pid = shell.start(run)
    reap.append(pid)
    sleeps = {"sleep 300", "sleep 301", "sleep 302", "sleep 303"}
    assert wait_until(lambda: sleeps <= set(group_command_lines(pid)))
    started = time.monotonic()
    assert shell.ctl("cancel", str(run), "10") == "cancelled\n"
    assert time.monotonic() - started < 5
    assert group_members(pid) == []
    assert shell.ctl("status", str(run)) == "cancelled\n"
    assert not (run / "exit_code").exists()
    marked = (run / "cancelled").stat().st_mtime_ns
    assert shell.ctl("cancel", str(run), "10") == "cancelled\n"
    assert (run / "cancelled").stat().st_mtime_ns == marked


def test_cancel_kills_a_group_that_ignores_sigterm_after_the_grace(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]])
    pid = shell.start(run)
    reap.append(pid)
    assert wait_until(lambda: len(group_members(pid)) >= 3)
    started = time.monotonic()
    assert shell.ctl("cancel", str(run), "1") == "cancelled\n"
    assert 1.0 <= time.monotonic() - started < 5
    assert group_members(pid) == []


@pytest.mark.parametrize("name", ["sh", "dash", "bash-posix"])  # busybox: its own sleep
def test_the_grace_before_sigkill_is_counted_in_seconds_on_a_busy_machine(
    shells: dict[str, Shell], name: str, tmp_path: Path, reap: list[int]
) -> None:
    # Every tick of the wait took far longer than its sleep on a loaded machine (each look
    # at the processes is slow): counted in ticks, a 10 s grace became a minute (`train
    # cancel` of a job ignoring SIGTERM, past its tests' 20 s). Here each sleep takes 0.4 s.
    shell = shells[name]
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sleep").write_text("#!/bin/sh\nexec /bin/sleep 0.4\n")
    (slow / "sleep").chmod(0o755)
    run = tmp_path / "run"
    shell.prepare(run, [["sh", "-c", "trap '' TERM; while :; do /bin/sleep 0.05; done"]])
    pid = shell.start(run)
    reap.append(pid)
    assert wait_until(lambda: len(group_members(pid)) >= 3)
    started = time.monotonic()
    assert shell.ctl("cancel", str(run), "2", path=str(slow)) == "cancelled\n"
    assert 2.0 <= time.monotonic() - started < 5.5  # 20 ticks of 0.4 s would be 8 s
    assert group_members(pid) == []


def test_cancelling_an_ended_job_leaves_its_result(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sh", "-c", "exit 3"]])
    reap.append(shell.start(run))
    _wait_file(run / "exit_code")
    assert shell.ctl("cancel", str(run), "10") == "exited 3\n"
    assert not (run / "cancelling").exists()
    assert not (run / "cancelled").exists()
    assert shell.ctl("status", str(run)) == "exited 3\n"


def test_cancelling_a_lost_job_does_nothing(shell: Shell, tmp_path: Path, reap: list[int]) -> None:
    run = tmp_path / "run"
    shell.prepare(run, [["sleep", "300"]])
    pid = shell.start(run)
    reap.append(pid)
    os.killpg(pid, signal.SIGKILL)
    assert wait_until(lambda: shell.ctl("status", str(run)) == "lost\n", 5)
    assert shell.ctl("cancel", str(run), "10") == "lost\n"
    assert not (run / "cancelling").exists()
    assert not (run / "cancelled").exists()


def test_a_missing_run_directory_reads_lost(shell: Shell, tmp_path: Path) -> None:
    assert shell.ctl("status", str(tmp_path / "nowhere")) == "lost\n"
    assert shell.ctl("cancel", str(tmp_path / "nowhere")) == "lost\n"


def test_markers_have_a_fixed_priority(shell: Shell, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    # Our own pid stands for a live group leader.
    assert shell.ctl("status", str(run)) == "lost\n"
    (run / "exit_code").write_text("0\n")
    assert shell.ctl("status", str(run)) == "exited 0\n"
    (run / "cancelling").write_text("x\n")
    assert shell.ctl("status", str(run)) == "cancelling\n"
    (run / "cancelled").write_text("x\n")
    assert shell.ctl("status", str(run)) == "cancelled\n"


@pytest.mark.parametrize("garbage", ["0", "1", "1\n2", "-1", "", "abc", "007", "12 34", "+5"])
def test_a_garbage_pid_reads_lost(shell: Shell, tmp_path: Path, garbage: str) -> None:
    # kill -0 on group 0 (our own) or 1 would succeed: reading "lost" shows the pid is
    # refused before any kill, for status and cancel alike (they share the check).
    run = tmp_path / "run"
    run.mkdir()
    (run / "job.pid").write_text(garbage + "\n")
    assert shell.ctl("status", str(run)) == "lost\n"


@pytest.mark.parametrize("garbage", ["0", "", "abc", "-1", "007", "12 34", "4294967297"])
def test_a_cancel_under_way_never_signals_a_garbage_pid(
    shell: Shell, tmp_path: Path, garbage: str
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "job.pid").write_text(garbage + "\n")
    (run / "cancelling").write_text("x\n")  # a cancel interrupted after its first step
    # In a session of its own, a stray `kill -TERM -0` would kill the script itself.
    result = subprocess.run(
        [shell.sh, "-s", "--", "cancel", str(run), "1"],
        input=script(CONTROL_SCRIPT).encode(),
        capture_output=True,
        env=shell.env(),
        start_new_session=True,
        timeout=10,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, b"cancelled\n"), result.stderr


def _result_tree(root: Path) -> None:
    (root / "output" / "sub dir" / "checkpoint-3").mkdir(parents=True)
    (root / "output" / "checkpoint-10").mkdir(parents=True)
    (root / "output" / "adapter.bin").write_bytes(os.urandom(70_000))
    (root / "output" / "empty").write_bytes(b"")
    (root / "output" / "sub dir" / "a b.txt").write_text("spaces\n")
    (root / "output" / "sub dir" / "checkpoint-3" / "x").write_text("no")
    (root / "output" / "checkpoint-10" / "model").write_text("no")
    (root / "output" / "checkpoint-notes").write_text("a file, not a checkpoint dir\n")
    (root / "output" / "link").symlink_to("adapter.bin")
    (root / "metrics.jsonl").write_text('{"event":"begin"}\n')


EXPECTED_FILES = {
    "output/adapter.bin",
    "output/empty",
    "output/sub dir/a b.txt",
    "output/checkpoint-notes",
    "metrics.jsonl",
}


def test_manifest_and_pack_agree_with_the_python_side(shell: Shell, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _result_tree(run)
    paths = ["output", "metrics.jsonl", "job.log"]
    manifest = parse_sha256sum(shell.ctl("manifest", str(run), *paths), where="test")
    assert set(manifest) == EXPECTED_FILES
    assert manifest == local_manifest(run, paths)
    archive = tmp_path / "pack.tar"
    archive.write_bytes(shell.ctl_bytes("pack", str(run), *paths))
    staging = tmp_path / "staging"
    staging.mkdir()
    extract_tar(archive, staging, paths)
    assert local_manifest(staging, paths) == manifest


def test_a_checkpoint_named_as_a_path_is_in_the_manifest_and_the_pack(
    shell: Shell, tmp_path: Path
) -> None:
    # A stopped job's checkpoint: asked for by its own path, beside the results.
    run = tmp_path / "run"
    _result_tree(run)
    (run / "output" / "checkpoint-10" / "nested").mkdir()
    (run / "output" / "checkpoint-10" / "nested" / "rng").write_bytes(os.urandom(3000))
    (run / "output" / "checkpoint-10" / "checkpoint-1").mkdir()  # never below one
    (run / "output" / "checkpoint-10" / "checkpoint-1" / "x").write_text("no")
    paths = ["output", "metrics.jsonl", "job.log", "output/checkpoint-10", "output/checkpoint-7"]
    manifest = parse_sha256sum(shell.ctl("manifest", str(run), *paths), where="test")
    assert set(manifest) == EXPECTED_FILES | {
        "output/checkpoint-10/model",
        "output/checkpoint-10/nested/rng",
    }
    assert manifest == local_manifest(run, paths)
    archive = tmp_path / "pack.tar"
    archive.write_bytes(shell.ctl_bytes("pack", str(run), *paths))
    staging = tmp_path / "staging"
    staging.mkdir()
    extract_tar(archive, staging, paths)
    assert local_manifest(staging, paths) == manifest
    # Without its path, the same checkpoint stays out (and is refused in a download).
    assert local_manifest(staging, paths[:3]) == {
        name: digest for name, digest in manifest.items() if "checkpoint-10" not in name
    }


def test_an_output_that_links_to_a_volume_is_followed_and_no_link_below_it(
    shell: Shell, tmp_path: Path
) -> None:
    # A run's output on a network volume: the run directory's output is a link to it.
    volume = tmp_path / "volume" / "runs" / "r"
    _result_tree(volume)
    (volume / "output" / "checkpoint-10" / "trainer_state.json").write_text("{}")
    (volume / "output" / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"event":"begin"}\n')
    (run / "output").symlink_to(Path("..") / "volume" / "runs" / "r" / "output")
    paths = ["output", "metrics.jsonl", "output/checkpoint-10"]
    manifest = parse_sha256sum(shell.ctl("manifest", str(run), *paths), where="test")
    assert set(manifest) == EXPECTED_FILES | {
        "output/checkpoint-10/model",
        "output/checkpoint-10/trainer_state.json",
    }
    assert manifest == local_manifest(run, paths)
    archive = tmp_path / "pack.tar"
    archive.write_bytes(shell.ctl_bytes("pack", str(run), *paths))
    staging = tmp_path / "staging"
    staging.mkdir()
    extract_tar(archive, staging, paths)
    assert not (staging / "output").is_symlink()
    assert local_manifest(staging, paths) == manifest
    # A checkpoint that is itself a link is never walked, on either side.
    (run / "output" / "checkpoint-11").symlink_to("checkpoint-10")
    linked = ["output/checkpoint-11"]
    assert shell.ctl("manifest", str(run), *linked) == ""
    assert local_manifest(run, linked) == {}


def test_manifest_of_nothing_is_empty(shell: Shell, tmp_path: Path) -> None:
    assert shell.ctl("manifest", str(tmp_path), "output", "job.log") == ""
    assert shell.ctl_bytes("pack", str(tmp_path), "output") == b""


def test_read_from_an_offset_and_touch(shell: Shell, tmp_path: Path) -> None:
    data = tmp_path / "metrics.jsonl"
    data.write_bytes(b"0123456789")
    assert shell.ctl_bytes("read", str(data), "0", "4") == b"0123"
    assert shell.ctl_bytes("read", str(data), "3", "4") == b"3456"
    assert shell.ctl_bytes("read", str(data), "8", "100") == b"89"
    assert shell.ctl_bytes("read", str(data), "20", "5") == b""
    assert shell.ctl_bytes("read", str(tmp_path / "missing"), "0", "5") == b""
    marker = tmp_path / ".pod" / "deep" / "retrieved"
    shell.ctl("touch", str(marker))
    assert marker.is_file()


def test_a_status_read_as_the_job_ends_is_never_lost(
    shell: Shell, tmp_path: Path, reap: list[int]
) -> None:
    # Found by the Ctrl-C campaign (runpod train sigint @100): a status read that saw no
    # exit_code yet, then a process group already gone, called a job that had just exited 0
    # "lost", failing a good run. Jobs that end at once, each read without pause till done.
    seen: list[str] = []
    for n in range(12):
        run = tmp_path / f"run{n}"
        shell.prepare(run, [["sh", "-c", "exit 0"]])
        pid = shell.start(run)
        reap.append(pid)
        while True:
            status = shell.ctl("status", str(run)).strip()
            seen.append(status)
            if status != "running":
                break
        assert status == "exited 0", f"job {n} read {status!r} as it ended"
    assert set(seen) <= {"running", "exited 0"}
