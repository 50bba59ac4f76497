"""What only the local executor does: a job outlives the process that started it, its
environment is this process's (less overbrainer's and Vault's), container and venv runtimes,
a run directory that is its own home. What every executor does: test_executors.py."""

import os
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from overbrainer.exec.base import (
    ContainerRuntime,
    JobState,
    JobStatus,
    NativeRuntime,
)
from overbrainer.exec.local import LocalExecutor
from overbrainer.exec.manifest import RESULT_PATHS, verify
from overbrainer.exec.shell import UnsafeValue
from tests.exec.procs import all_command_lines, group_members

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


@pytest.fixture
def executor(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "root", cancel_grace=2)


@pytest.fixture
def jobs(reap: list[int]) -> list[int]:
    return reap


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


def _results(run: Path) -> None:
    (run / "output/checkpoint-5").mkdir(parents=True)
    (run / "output/checkpoint-5/state").write_text("skipped")
    (run / "output/adapter.safetensors").write_bytes(os.urandom(5000))
    (run / "output/config.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"event":"log","step":1}\n')
    (run / "job.log").write_text("trained\n")


async def test_download_into_the_run_directory_itself_changes_nothing(
    executor: LocalExecutor,
) -> None:
    run = executor.root / "runs/r1"
    _results(run)
    expected = await executor.manifest("runs/r1", RESULT_PATHS)
    await executor.download("runs/r1", RESULT_PATHS, run)
    assert verify(expected, run, RESULT_PATHS) == []
    assert (run / "output/checkpoint-5/state").exists()


async def test_an_upload_onto_its_own_directory_loses_nothing(tmp_path: Path) -> None:
    # A local target whose root is the project: source and target are one directory.
    local = tmp_path / "project/runs/r1"
    (local / "ssh").mkdir(parents=True)
    (local / "ssh/id_ed25519").write_text("PRIVATE")
    (local / "axolotl.yaml").write_text("base_model: x\n")
    same = LocalExecutor(tmp_path / "project")
    await same.upload(local, "runs/r1")
    assert (local / "ssh/id_ed25519").read_text() == "PRIVATE"
    assert (local / "axolotl.yaml").read_text() == "base_model: x\n"


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
