"""The local executor: real processes in their own sessions, real files."""

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from overbrainer.exec.base import (
    ContainerRuntime,
    JobAlreadyRunning,
    JobHandle,
    JobState,
    JobStatus,
    NativeRuntime,
)
from overbrainer.exec.local import LocalExecutor
from overbrainer.exec.manifest import RESULT_PATHS, verify
from overbrainer.exec.shell import UnsafeValue
from tests.exec.procs import all_command_lines, group_members, state

LONG = [["sleep", "300"]]
# Jobs wait for a `go` file the test creates, so no assertion races the clock.
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


async def _until_state(executor: LocalExecutor, run: str, *wanted: JobStatus) -> JobState:
    with trio.fail_after(15):
        while True:
            current = await executor.status(run)
            if current.status in wanted:
                return current
            await trio.sleep(0.02)


async def _until_gone(pid: int) -> None:
    with trio.fail_after(5):
        while state(pid) is not None:
            await trio.sleep(0.02)


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "root", cancel_grace=2)


@pytest.fixture
def jobs(reap: list[int]) -> list[int]:
    return reap


async def test_a_job_runs_detached_and_its_exit_code_is_recorded(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    handle = await executor.spawn(
        "runs/r1",
        [["sh", "-c", f"echo step; {WAIT_FOR_GO}"], ["sh", "-c", "exit 4"]],
        env={},
        secrets={},
    )
    jobs.append(handle.pid)
    assert handle == JobHandle(handle.pid, None)
    assert os.getpgid(handle.pid) == handle.pid
    assert os.getsid(handle.pid) == handle.pid  # its own session: no Ctrl-C reaches it
    assert (await executor.status("runs/r1")).status is JobStatus.running
    (executor.root / "runs/r1/go").touch()
    assert await _until_state(executor, "runs/r1", JobStatus.exited) == JobState(
        JobStatus.exited, 4
    )
    assert await executor.read_file("runs/r1/job.log", 0, 100) == b"step\n"


async def test_a_finished_job_is_reaped_and_never_reads_alive(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    handle = await executor.spawn("runs/r1", [["true"]], env={}, secrets={})
    jobs.append(handle.pid)
    await _until_gone(handle.pid)  # no zombie left behind
    assert await executor.status("runs/r1") == JobState(JobStatus.exited, 0)


async def test_a_job_killed_whole_reads_lost_and_is_reaped(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    handle = await executor.spawn("runs/r1", LONG, env={}, secrets={})
    jobs.append(handle.pid)
    os.killpg(handle.pid, signal.SIGKILL)
    await _until_gone(handle.pid)
    assert await executor.status("runs/r1") == JobState(JobStatus.lost)


async def test_a_job_outlives_the_process_that_started_it(tmp_path: Path, jobs: list[int]) -> None:
    starter = textwrap.dedent(
        """
        import sys, trio
        from pathlib import Path
        from overbrainer.exec.local import LocalExecutor

        async def main():
            executor = LocalExecutor(Path(sys.argv[1]))
            command = ["sh", "-c", "while [ ! -e go ]; do sleep 0.02; done; echo done > done"]
            handle = await executor.spawn("runs/r1", [command], env={}, secrets={})
            print(handle.pid)

        trio.run(main)
        """
    )
    root = tmp_path / "root"
    result = await trio.run_process([sys.executable, "-c", starter, str(root)], capture_stdout=True)
    jobs.append(int(result.stdout))
    executor = LocalExecutor(root)
    assert (await executor.status("runs/r1")).status is JobStatus.running
    (root / "runs/r1/go").touch()
    assert await _until_state(executor, "runs/r1", JobStatus.exited) == JobState(
        JobStatus.exited, 0
    )
    assert (root / "runs/r1/done").read_text() == "done\n"


async def test_the_environment_drops_overbrainer_and_vault_and_adds_secrets(
    tmp_path: Path, jobs: list[int]
) -> None:
    canary = "hf_canary_91c2 with spaces 'and quotes'"
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "OVERBRAINER_RUNPOD__API_KEY": "rp_canary_drop",
        "overbrainer_lower": "lower_canary_drop",
        "VAULT_TOKEN": "vault_canary_drop",
        "KEEP_ME": "kept",
    }
    executor = LocalExecutor(tmp_path / "root", base_env=base)
    handle = await executor.spawn(
        "runs/r1",
        [["sh", "-c", "env > env.txt; sleep 30"]],
        env={"OVERBRAINER_METRICS": "metrics.jsonl", "PLAIN": "a b"},
        secrets={"HF_TOKEN": canary},
    )
    jobs.append(handle.pid)
    run = tmp_path / "root/runs/r1"
    with trio.fail_after(10):
        while not (run / "env.txt").exists() or b"\n" not in (run / "env.txt").read_bytes():
            await trio.sleep(0.02)
    await trio.sleep(0.1)
    seen = (run / "env.txt").read_text()
    assert f"HF_TOKEN={canary}\n" in seen
    assert "KEEP_ME=kept\n" in seen
    assert "OVERBRAINER_METRICS=metrics.jsonl\n" in seen  # given explicitly: kept
    assert "PLAIN=a b\n" in seen
    assert "canary_drop" not in seen
    assert "hf_canary_91c2" not in all_command_lines()
    for name in ("job.cmds", "job.sh", "job.log", "job.pid", "job.container"):
        assert "hf_canary_91c2" not in (run / name).read_text(), name


async def test_unsafe_values_are_refused_by_name_only(executor: LocalExecutor) -> None:
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
    assert not (executor.root / "runs").exists()


async def test_a_second_job_in_a_running_directory_is_refused(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    handle = await executor.spawn("runs/r1", LONG, env={}, secrets={})
    jobs.append(handle.pid)
    with pytest.raises(JobAlreadyRunning):
        await executor.spawn("runs/r1", [["true"]], env={}, secrets={})
    assert (await executor.status("runs/r1")).status is JobStatus.running


async def test_cancel_ends_the_job_and_leaves_an_ended_one_alone(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    handle = await executor.spawn(
        "runs/r1", [["sh", "-c", "sleep 300 & sleep 300"]], env={}, secrets={}
    )
    jobs.append(handle.pid)
    with trio.fail_after(5):
        while len(group_members(handle.pid)) < 3:
            await trio.sleep(0.02)
    assert await executor.cancel("runs/r1") == JobState(JobStatus.cancelled)
    assert group_members(handle.pid) == []
    assert await executor.cancel("runs/r1") == JobState(JobStatus.cancelled)
    done = await executor.spawn("runs/r2", [["sh", "-c", "exit 0"]], env={}, secrets={})
    jobs.append(done.pid)
    await _until_state(executor, "runs/r2", JobStatus.exited)
    assert await executor.cancel("runs/r2") == JobState(JobStatus.exited, 0)
    assert await executor.status("runs/r2") == JobState(JobStatus.exited, 0)


async def test_a_new_job_starts_without_the_previous_markers(
    executor: LocalExecutor, jobs: list[int]
) -> None:
    first = await executor.spawn("runs/r1", LONG, env={}, secrets={})
    jobs.append(first.pid)
    await executor.cancel("runs/r1")
    second = await executor.spawn("runs/r1", [["sh", "-c", "exit 2"]], env={}, secrets={})
    jobs.append(second.pid)
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


async def test_manifest_download_and_verify(executor: LocalExecutor, tmp_path: Path) -> None:
    _results(executor.root / "runs/r1")
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


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_missing_run_directory_is_an_error_not_an_empty_result(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    from overbrainer.exec.base import ExecError

    home = tmp_path / "home"
    (home / "output").mkdir(parents=True)
    (home / "output/adapter.bin").write_text("keep me")
    with pytest.raises(ExecError, match="no run directory"):
        await executor.manifest("runs/none", RESULT_PATHS)
    with pytest.raises(ExecError, match="no run directory"):
        await executor.download("runs/none", RESULT_PATHS, home)
    assert (home / "output/adapter.bin").read_text() == "keep me"


async def test_download_into_the_run_directory_itself_changes_nothing(
    executor: LocalExecutor,
) -> None:
    run = executor.root / "runs/r1"
    _results(run)
    expected = await executor.manifest("runs/r1", RESULT_PATHS)
    await executor.download("runs/r1", RESULT_PATHS, run)
    assert verify(expected, run, RESULT_PATHS) == []
    assert (run / "output/checkpoint-5/state").exists()


async def test_upload_leaves_keys_and_projections_behind(
    executor: LocalExecutor, tmp_path: Path
) -> None:
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
    await executor.upload(local, "runs/r1")
    remote = executor.root / "runs/r1"
    assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == [
        "axolotl.yaml",
        "data",
        "data/empty",
        "data/train.jsonl",
        "tool.sh",
    ]
    assert os.access(remote / "tool.sh", os.X_OK)
    # The same directory as source and target: nothing to copy, nothing lost.
    same = LocalExecutor(tmp_path / "project")
    await same.upload(local, "runs/r1")
    assert (local / "ssh/id_ed25519").read_text() == "PRIVATE"


async def test_read_file_and_touch(executor: LocalExecutor) -> None:
    (executor.root / "runs/r1").mkdir(parents=True)
    (executor.root / "runs/r1/metrics.jsonl").write_bytes(b"line1\nline2\n")
    assert await executor.read_file("runs/r1/metrics.jsonl", 6, 100) == b"line2\n"
    assert await executor.read_file("runs/r1/metrics.jsonl", 0, 3) == b"lin"
    assert await executor.read_file("runs/r1/missing", 0, 3) == b""
    await executor.touch("runs/r1/.pod/retrieved")
    assert (executor.root / "runs/r1/.pod/retrieved").is_file()
    with pytest.raises(UnsafeValue):
        await executor.read_file("/etc/passwd", 0, 10)


FAKE_DOCKER = """#!/bin/sh
# A stand-in for docker/podman: records each call, runs the command after the image
# as the "container", and stops it on `stop`.
printf '%s\\n' "$*" >>"$FAKE_DOCKER_LOG"
case $1 in
run)
    shift
    name=
    while [ "$#" -gt 0 ]; do
        case $1 in
        --rm) shift ;;
        --name) name=$2; shift 2 ;;
        -e | -v | -w | --gpus | --device) shift 2 ;;
        *) break ;;
        esac
    done
    shift
    "$@" &
    echo "$!" >"$FAKE_DOCKER_LOG.$name"
    wait "$!"
    ;;
stop)
    kill -TERM "$(cat "$FAKE_DOCKER_LOG.$4")"
    ;;
esac
"""


async def test_a_container_job_runs_through_the_engine_with_secrets_by_name(
    tmp_path: Path, jobs: list[int]
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    log = tmp_path / "docker.log"
    base = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_DOCKER_LOG": str(log)}
    runtime = ContainerRuntime("docker", "registry.example/axolotl@sha256:" + "a" * 64)
    executor = LocalExecutor(tmp_path / "root", runtime=runtime, base_env=base, cancel_grace=2)
    handle = await executor.spawn(
        "runs/r1",
        [["sh", "-c", 'echo "token=${HF_TOKEN:+set}"; sleep 300']],
        env={"OVERBRAINER_METRICS": "metrics.jsonl"},
        secrets={"HF_TOKEN": "hf_container_canary"},
        container="overbrainer-r1",
    )
    jobs.append(handle.pid)
    assert handle.container == "overbrainer-r1"
    run = (tmp_path / "root/runs/r1").resolve()
    with trio.fail_after(10):
        while b"token" not in await executor.read_file("runs/r1/job.log", 0, 100):
            await trio.sleep(0.02)
    assert await executor.read_file("runs/r1/job.log", 0, 100) == b"token=set\n"
    call = log.read_text().splitlines()[0]
    assert call == (
        "run --rm --name overbrainer-r1 -e OVERBRAINER_METRICS -e HF_TOKEN --gpus all"
        f" -v {run}:{run} -w {run} registry.example/axolotl@sha256:{'a' * 64}"
        ' sh -c echo "token=${HF_TOKEN:+set}"; sleep 300'
    )
    assert await executor.cancel("runs/r1") == JobState(JobStatus.cancelled)
    assert log.read_text().splitlines()[1] == "stop -t 2 overbrainer-r1"
    assert group_members(handle.pid) == []
    assert "hf_container_canary" not in log.read_text()
    assert "hf_container_canary" not in (run / "job.cmds").read_text()


async def test_runtime_and_container_must_agree(tmp_path: Path) -> None:
    from overbrainer.exec.base import ExecError

    native = LocalExecutor(tmp_path / "a", runtime=NativeRuntime(venv="/opt/venv"))
    with pytest.raises(ExecError, match="native"):
        await native.spawn("runs/r1", LONG, env={}, secrets={}, container="c1")
    docker = LocalExecutor(tmp_path / "b", runtime=ContainerRuntime("podman", "img:1"))
    with pytest.raises(ExecError, match="no container name"):
        await docker.spawn("runs/r1", LONG, env={}, secrets={})
    with pytest.raises(UnsafeValue):
        await docker.spawn("runs/r1", LONG, env={}, secrets={}, container="-bad")


async def test_a_native_venv_goes_first_on_path(tmp_path: Path, jobs: list[int]) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/axolotl").write_text('#!/bin/sh\necho "venv axolotl $*"\n')
    (venv / "bin/axolotl").chmod(0o755)
    executor = LocalExecutor(tmp_path / "root", runtime=NativeRuntime(venv=str(venv)))
    handle = await executor.spawn(
        "runs/r1", [["axolotl", "train", "axolotl.yaml"]], env={}, secrets={}
    )
    jobs.append(handle.pid)
    await _until_state(executor, "runs/r1", JobStatus.exited)
    assert (
        await executor.read_file("runs/r1/job.log", 0, 100) == b"venv axolotl train axolotl.yaml\n"
    )
