"""What every executor does, checked on each: the local executor (real processes on this
machine) and the SSH executor (against a real OpenSSH sshd on loopback). Both put their run
directories on this machine, so a test looks at them as local paths (``Rig.root``).

What only one executor does stays in test_local.py (the environment it inherits, container
and venv runtimes, a run directory that is its own home) and test_ssh.py (connections,
host keys, channels, secrets in the sshd's log)."""

import hashlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from overbrainer.exec.base import (
    ExecError,
    Executor,
    JobAlreadyRunning,
    JobHandle,
    JobState,
    JobStatus,
)
from overbrainer.exec.local import LocalExecutor
from overbrainer.exec.manifest import RESULT_PATHS, verify
from overbrainer.exec.shell import UnsafeValue
from overbrainer.exec.ssh import UserHost, open_ssh
from overbrainer.testing.sshd import SshServer
from tests.exec.procs import group_members, state

LONG = [["sleep", "300"]]
# Jobs wait for a `go` file the test creates, so no assertion races the clock.
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


@dataclass(frozen=True)
class Rig:
    """An executor, and its root (where its run directories are) seen from this machine."""

    executor: Executor
    root: Path


@pytest.fixture(params=["local", "ssh"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    root = tmp_path / "root"
    if request.param == "local":
        yield Rig(LocalExecutor(root, cancel_grace=2), root)
        return
    server: SshServer = request.getfixturevalue("sshd_server")
    target = UserHost(server.alias, config=server.ssh_config, known_hosts=server.known_hosts)
    async with open_ssh(target, workdir=str(root), cancel_grace=2) as executor:
        yield Rig(executor, root)


async def _until_state(executor: Executor, run: str, *wanted: JobStatus) -> JobState:
    with trio.fail_after(20):
        while True:
            current = await executor.status(run)
            if current.status in wanted:
                return current
            await trio.sleep(0.02)


async def _until_gone(pid: int) -> None:
    with trio.fail_after(5):
        while state(pid) is not None:
            await trio.sleep(0.02)


async def test_a_job_runs_detached_and_its_exit_code_is_recorded(rig: Rig, reap: list[int]) -> None:
    executor = rig.executor
    handle = await executor.spawn(
        "runs/r1",
        [["sh", "-c", f"echo step; {WAIT_FOR_GO}"], ["sh", "-c", "exit 4"]],
        env={},
        secrets={},
    )
    reap.append(handle.pid)
    assert handle == JobHandle(handle.pid, None)
    assert os.getpgid(handle.pid) == handle.pid
    assert os.getsid(handle.pid) == handle.pid  # its own session: no Ctrl-C reaches it
    assert (await executor.status("runs/r1")).status is JobStatus.running
    (rig.root / "runs/r1/go").touch()
    assert await _until_state(executor, "runs/r1", JobStatus.exited) == JobState(
        JobStatus.exited, 4
    )
    assert await executor.read_file("runs/r1/job.log", 0, 100) == b"step\n"


async def test_a_finished_job_is_reaped_and_never_reads_alive(rig: Rig, reap: list[int]) -> None:
    handle = await rig.executor.spawn("runs/r1", [["true"]], env={}, secrets={})
    reap.append(handle.pid)
    await _until_gone(handle.pid)  # no zombie left behind
    assert await rig.executor.status("runs/r1") == JobState(JobStatus.exited, 0)


async def test_a_job_killed_whole_reads_lost_and_is_reaped(rig: Rig, reap: list[int]) -> None:
    handle = await rig.executor.spawn("runs/r1", LONG, env={}, secrets={})
    reap.append(handle.pid)
    os.killpg(handle.pid, signal.SIGKILL)
    await _until_gone(handle.pid)
    assert await rig.executor.status("runs/r1") == JobState(JobStatus.lost)


async def test_unsafe_values_are_refused_by_name_only(rig: Rig) -> None:
    executor = rig.executor
    with pytest.raises(UnsafeValue, match="HF_TOKEN") as caught:
        await executor.spawn("runs/r1", LONG, env={}, secrets={"HF_TOKEN": "x\nsecret-9"})
    assert "secret-9" not in str(caught.value)
    with pytest.raises(UnsafeValue, match="training command 1, word 2") as caught:
        await executor.spawn("runs/r1", [["echo", "a\0b-hidden"]], env={}, secrets={})
    assert "hidden" not in str(caught.value)
    with pytest.raises(UnsafeValue, match="PLAIN"):
        await executor.spawn("runs/r1", LONG, env={"PLAIN": "a\rb"}, secrets={})
    with pytest.raises(UnsafeValue):
        await executor.spawn("../escape", LONG, env={}, secrets={})
    assert not (rig.root / "runs").exists()


async def test_a_second_job_in_a_running_directory_is_refused(rig: Rig, reap: list[int]) -> None:
    handle = await rig.executor.spawn("runs/r1", LONG, env={}, secrets={})
    reap.append(handle.pid)
    with pytest.raises(JobAlreadyRunning):
        await rig.executor.spawn("runs/r1", [["true"]], env={}, secrets={})
    assert (await rig.executor.status("runs/r1")).status is JobStatus.running


async def test_cancel_ends_the_whole_group_once_and_leaves_an_ended_job_alone(
    rig: Rig, reap: list[int]
) -> None:
    executor = rig.executor
    handle = await executor.spawn(
        "runs/r1", [["sh", "-c", "sleep 300 & sleep 300"]], env={}, secrets={}
    )
    reap.append(handle.pid)
    with trio.fail_after(5):
        while len(group_members(handle.pid)) < 3:
            await trio.sleep(0.02)
    assert await executor.cancel("runs/r1") == JobState(JobStatus.cancelled)
    assert group_members(handle.pid) == []
    assert await executor.cancel("runs/r1") == JobState(JobStatus.cancelled)
    ended = await executor.spawn("runs/r2", [["sh", "-c", "exit 6"]], env={}, secrets={})
    reap.append(ended.pid)
    await _until_state(executor, "runs/r2", JobStatus.exited)
    assert await executor.cancel("runs/r2") == JobState(JobStatus.exited, 6)
    assert await executor.status("runs/r2") == JobState(JobStatus.exited, 6)


async def test_a_new_job_starts_without_the_previous_markers(rig: Rig, reap: list[int]) -> None:
    executor = rig.executor
    first = await executor.spawn("runs/r1", LONG, env={}, secrets={})
    reap.append(first.pid)
    await executor.cancel("runs/r1")
    second = await executor.spawn("runs/r1", [["sh", "-c", "exit 2"]], env={}, secrets={})
    reap.append(second.pid)
    assert await _until_state(executor, "runs/r1", JobStatus.exited, JobStatus.cancelled) == (
        JobState(JobStatus.exited, 2)
    )


def _results(run: Path) -> None:
    (run / "output/checkpoint-5").mkdir(parents=True)
    (run / "output/checkpoint-5/state").write_text("skipped")
    (run / "output/adapter.safetensors").write_bytes(os.urandom(5000))
    (run / "output/config.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"event":"log","step":1}\n')
    (run / "job.log").write_text("trained\n")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_downloaded_results_verify_against_the_manifest_and_replace_what_was_there(
    rig: Rig, tmp_path: Path
) -> None:
    executor = rig.executor
    _results(rig.root / "runs/r1")
    expected = await executor.manifest("runs/r1", RESULT_PATHS)
    assert set(expected) == {
        "output/adapter.safetensors",
        "output/config.json",
        "metrics.jsonl",
        "job.log",
    }
    home = tmp_path / "home/runs/r1"
    (home / "output").mkdir(parents=True)
    (home / "output/stale-from-an-earlier-try").write_text("old")
    await executor.download("runs/r1", RESULT_PATHS, home)
    assert verify(expected, home, RESULT_PATHS) == []
    assert not (home / "output/checkpoint-5").exists()
    assert not (home / ".overbrainer-download").exists()

    (home / "output/config.json").unlink()
    (home / "metrics.jsonl").write_text("changed\n")
    (home / "output/extra.bin").write_text("extra")
    assert verify(expected, home, RESULT_PATHS) == [
        "metrics.jsonl: different"
        f" (sha256 {_sha(home / 'metrics.jsonl')[:12]}… here,"
        f" {expected['metrics.jsonl'][:12]}… on the target)",
        "output/config.json: missing here (the target has it)",
        "output/extra.bin: extra here (the target does not have it)",
    ]
    await executor.download("runs/r1", RESULT_PATHS, home)
    assert verify(expected, home, RESULT_PATHS) == []


async def test_a_missing_run_directory_is_an_error_not_an_empty_result(
    rig: Rig, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / "output").mkdir(parents=True)
    (home / "output/adapter.bin").write_text("keep me")
    with pytest.raises(ExecError, match="no run directory"):
        await rig.executor.manifest("runs/none", RESULT_PATHS)
    with pytest.raises(ExecError, match="no run directory"):
        await rig.executor.download("runs/none", RESULT_PATHS, home)
    assert (home / "output/adapter.bin").read_text() == "keep me"


async def test_upload_leaves_keys_and_projections_behind(rig: Rig, tmp_path: Path) -> None:
    local = tmp_path / "project/runs/r1"
    (local / "data").mkdir(parents=True)
    (local / "ssh").mkdir()
    (local / "ssh/id_ed25519").write_text("PRIVATE")
    (local / "run.json").write_text("{}")
    (local / "pod.json").write_text("{}")
    (local / "axolotl.yaml").write_text("base_model: x\n")
    (local / "data/train.jsonl").write_text('{"messages": []}\n')
    (local / "data/empty").mkdir()
    (local / "tool.sh").write_text("#!/bin/sh\n")
    (local / "tool.sh").chmod(0o755)
    await rig.executor.upload(local, "runs/r1")
    remote = rig.root / "runs/r1"
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == [
        "axolotl.yaml",
        "data",
        "data/empty",
        "data/train.jsonl",
        "tool.sh",
    ]
    assert os.access(remote / "tool.sh", os.X_OK)
    assert (local / "ssh/id_ed25519").read_text() == "PRIVATE"


async def test_an_upload_sends_every_file_after_one_of_whole_blocks(
    rig: Rig, tmp_path: Path
) -> None:
    # A checkpoint whose weights are a whole number of 512-byte blocks, and an empty file:
    # the files after them arrive too (a resumed run reads trainer_state.json last).
    local = tmp_path / "project/runs/r1"
    checkpoint = local / "resume/checkpoint-66"
    checkpoint.mkdir(parents=True)
    (checkpoint / "adapter_model.safetensors").write_bytes(b"w" * 1024)
    (checkpoint / "empty").write_bytes(b"")
    (checkpoint / "trainer_state.json").write_text('{"global_step": 66}')
    (local / "z_last").write_bytes(b"z" * 512)
    await rig.executor.upload(local, "runs/r1")
    remote = rig.root / "runs/r1"
    for path in [p for p in local.rglob("*") if p.is_file()]:
        assert (remote / path.relative_to(local)).read_bytes() == path.read_bytes(), path


async def test_read_file_reads_a_range_and_touch_creates_a_file_with_its_parents(
    rig: Rig,
) -> None:
    executor = rig.executor
    (rig.root / "runs/r1").mkdir(parents=True)
    (rig.root / "runs/r1/metrics.jsonl").write_bytes(b"line1\nline2\n")
    assert await executor.read_file("runs/r1/metrics.jsonl", 6, 100) == b"line2\n"
    assert await executor.read_file("runs/r1/metrics.jsonl", 0, 3) == b"lin"
    assert await executor.read_file("runs/r1/missing", 0, 3) == b""
    await executor.touch("runs/r1/.pod/retrieved")
    assert (rig.root / "runs/r1/.pod/retrieved").is_file()
    with pytest.raises(UnsafeValue):
        await executor.read_file("/etc/passwd", 0, 10)


async def test_a_script_runs_with_its_arguments_and_a_failing_one_is_named(rig: Rig) -> None:
    said = await rig.executor.run_script(
        'printf "%s|" "$@"; echo', ["one", "two words", "it's"], what="echoing"
    )
    assert said == b"one|two words|it's|\n"
    with pytest.raises(ExecError, match="checking the volume"):
        await rig.executor.run_script("echo broken >&2; exit 3", [], what="checking the volume")
