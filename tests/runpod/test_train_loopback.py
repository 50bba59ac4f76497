"""``train`` on a Runpod target for real, on the real clock: the REAL ``overbrainer`` command
in a subprocess, the fake Runpod API on loopback HTTP, fake pods running the real bootstrap
and watchdog behind a real SSH server, the stand-in trainer as the job."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio

from overbrainer.runpod.client import RunpodClient
from overbrainer.runpod.pod_scripts import ENV_HOST_KEY
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.fake_pod import FakePods, fake_pods
from overbrainer.testing.hub import PATH as HUB_PATH
from overbrainer.testing.pod_training import write_project
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from overbrainer.testing.stand_in import AXOLOTL, TORCHRUN

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = AXOLOTL
HF_CANARY = "hf_CANARYloopback0123456789abcdefgh"


@dataclass
class World:
    """The fake Runpod account with living pods, and a project whose target ``gpu`` uses it."""

    fake: FakeRunpod
    pods: FakePods
    base_url: str
    project: Path
    env: dict[str, str]

    async def run(
        self, *args: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``overbrainer -C PROJECT ARGS`` in a real process (the fake keeps serving);
        ``env`` adds to its environment."""
        with trio.fail_after(timeout):
            done = await trio.run_process(
                [sys.executable, "-m", "overbrainer", "-C", str(self.project), *args],
                env={**self.env, **(env or {})},
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )

    async def start(self, *args: str, output: bool = True) -> trio.Process:
        """``overbrainer -C PROJECT ARGS`` in a real process left running: its stdout and
        stderr piped (read them with :func:`communicate`), or dropped unless ``output``."""
        stream = subprocess.PIPE if output else subprocess.DEVNULL
        return await trio.lowlevel.open_process(
            [sys.executable, "-m", "overbrainer", "-C", str(self.project), *args],
            env=self.env,
            stdout=stream,
            stderr=stream,
        )

    def runs(self) -> list[str]:
        """The project's run IDs."""
        directory = self.project / "runs"
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def pod_json(self, run_id: str) -> dict[str, object]:
        """``runs/<id>/pod.json``."""
        data: dict[str, object] = json.loads(
            (self.project / "runs" / run_id / "pod.json").read_text()
        )
        return data

    def run_json(self, run_id: str) -> dict[str, object]:
        """``runs/<id>/run.json``."""
        data: dict[str, object] = json.loads(
            (self.project / "runs" / run_id / "run.json").read_text()
        )
        return data

    def pod_run_dir(self, pod_id: str, run_id: str) -> Path:
        """The run's directory on the fake pod."""
        return self.pods.path(pod_id, f"/workspace/overbrainer/runs/{run_id}")

    async def events(self, run_id: str) -> list[str]:
        """The names of the run's events, from ``events RUN --json``."""
        done = await self.run("events", run_id, "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["event"] for line in done.stdout.splitlines()]

    async def wait_for(self, status: str, timeout: float = 30) -> str:
        """Wait until the newest run's pod.json says ``status``; return the run ID."""
        with trio.fail_after(timeout):
            while True:
                for run_id in self.runs()[-1:]:
                    try:
                        if self.pod_json(run_id).get("status") == status:
                            return run_id
                    except (OSError, ValueError):
                        pass
                await trio.sleep(0.05)


@asynccontextmanager
async def world(
    tmp_path: Path,
    *,
    step_seconds: float = 0.05,
    steps: int = 5,
    overrides: dict[str, str] | None = None,
    max_hours: float = 1.0,
    output_mb: float = 0.0625,
    project: Path | None = None,
    provisioning_seconds: float = 0.2,
    knobs: str = "",
    hub: str | None = None,
) -> AsyncIterator[World]:
    """The fake API and pods on loopback, and a project whose Runpod target runs the
    stand-in trainer from a venv (knobs set in its wrapper: the pod's SSH sessions have an
    environment of their own; ``knobs``: more of them, ``NAME=VALUE`` words). ``hub``: the
    stand-in ``huggingface_hub``'s knobs (``FAKE_HUB_*`` words): the venv gets a ``python``
    that imports it (the job's model step downloads through it) and the stand-in trainer
    loads the base model from ``HF_HOME``."""
    fake = FakeRunpod(provisioning_seconds=provisioning_seconds, starting_seconds=0.3)
    fake.add_account(CANARY_KEY)
    project = project or tmp_path / "project"
    project.mkdir(parents=True)
    write_project(project)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    wrapper = venv / "bin" / "axolotl"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"FAKE_AXOLOTL_STEPS={steps} FAKE_AXOLOTL_STEP_SECONDS={step_seconds} "
        f"FAKE_AXOLOTL_OUTPUT_MB={output_mb} {knobs} {hub or ''} "
        f'exec {sys.executable} {STAND_IN} "$@"\n'
    )
    wrapper.chmod(0o755)
    # The stand-in torchrun beside it: a job of many processes, or a cluster's node.
    launcher = venv / "bin" / "torchrun"
    launcher.write_text(
        "#!/bin/sh\n"
        f"FAKE_AXOLOTL_STEPS={steps} FAKE_AXOLOTL_STEP_SECONDS={step_seconds} "
        f"FAKE_AXOLOTL_OUTPUT_MB={output_mb} {knobs} {hub or ''} "
        f'exec {sys.executable} {TORCHRUN} "$@"\n'
    )
    launcher.chmod(0o755)
    if hub is not None:
        python = venv / "bin" / "python"
        python.write_text(f'#!/bin/sh\nPYTHONPATH={HUB_PATH} {hub} exec {sys.executable} "$@"\n')
        python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    async with AsyncExitStack() as stack:
        base_url = await stack.enter_async_context(serve_loopback(fake))
        pods = await stack.enter_async_context(
            fake_pods(fake, base_url, tmp_path / "pods", overrides=overrides)
        )
        env.update(
            OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
            OVERBRAINER_RUNPOD__BASE_URL=base_url,
            OVERBRAINER_HF_TOKEN=HF_CANARY,
            OVERBRAINER_TARGETS__GPU__VENV=str(venv),
            OVERBRAINER_TARGETS__GPU__MAX_HOURS=str(max_hours),
            PYTHONPATH=str(ROOT),
        )
        yield World(fake, pods, base_url, project, env)


async def communicate(process: trio.Process, timeout: float = 60) -> tuple[str, str]:
    """A background command's (:meth:`World.start`) whole stdout and stderr, once it
    exited."""
    out = err = b""
    with trio.fail_after(timeout):
        async with trio.open_nursery() as nursery:

            async def read_out() -> None:
                nonlocal out
                assert process.stdout is not None
                async for chunk in process.stdout:
                    out += chunk

            nursery.start_soon(read_out)
            assert process.stderr is not None
            async for chunk in process.stderr:
                err += chunk
        await process.wait()
    return out.decode(), err.decode()


def _cmdlines() -> bytes:
    found = b""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                found += (proc / "cmdline").read_bytes() + b"\n"
            except OSError:
                continue
    return found


def final_line(stdout: str) -> str:
    return stdout.strip().splitlines()[-1]


async def test_a_whole_run_on_a_pod_through_the_real_command(tmp_path: Path) -> None:
    async with world(tmp_path, steps=20, step_seconds=0.05) as w:
        deletes: list[tuple[str, bool, str]] = []
        hook = w.fake.on_deleted

        async def on_deleted(pod: object) -> None:
            # Whether `.pod/retrieved` was on the pod when the delete arrived, and who sent it.
            pod_id = pod.id  # type: ignore[attr-defined]
            run_id = w.runs()[-1]
            marked = (w.pod_run_dir(pod_id, run_id) / ".pod" / "retrieved").exists()
            deletes.append((pod_id, marked, w.fake.requests[-1].auth))
            assert hook is not None
            await hook(pod)  # type: ignore[arg-type]

        w.fake.on_deleted = on_deleted
        seen: list[bytes] = []
        async with trio.open_nursery() as nursery:

            async def watch_command_lines() -> None:
                await w.wait_for("job_running")
                seen.append(_cmdlines())

            nursery.start_soon(watch_command_lines)
            done = await w.run("train")
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        assert final_line(done.stdout) == (
            f"train: run {run_id} succeeded; step 20/20, epoch 3, "
            + final_line(done.stdout).split("epoch 3, ", 1)[1]
        )
        assert f"; output in {w.project}/runs/{run_id}/output" in done.stdout
        pod = w.pod_json(run_id)
        pod_id = str(pod["pod_id"])
        assert pod["status"] == "deleted" and pod["deleted_by"] == "client"
        assert deletes == [(pod_id, True, "account")]  # marked retrieved before the delete
        assert w.fake.status(pod_id) == "TERMINATED"
        assert f"pod {pod_id} deleted (by overbrainer) after " in done.stderr
        assert ", spend $" in done.stderr
        run_dir = w.project / "runs" / run_id
        assert (run_dir / "output" / "adapter_model.safetensors").is_file()
        assert "watchdog: guarding pod" in (run_dir / "watchdog.log").read_text()
        assert (run_dir / "output" / "saw_hf_token").read_text().strip() == "yes"
        story = await w.run("events", run_id)
        story_json = await w.run("events", run_id, "--json")
        assert f"pod {pod_id} deleted (by overbrainer) after " in story.stdout
        assert [json.loads(line)["event"] for line in story_json.stdout.splitlines()] == [
            "run.Created",
            "pod.KeysGenerated",
            "pod.AttemptSent",
            "pod.AttemptResolved",
            "pod.Created",
            "pod.EndpointSeen",
            "pod.Ready",
            "run.JobStarted",
            "pod.JobRunning",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]

        # Canaries: the API key and the HF token reached nothing but the job's environment.
        texts = [done.stdout, done.stderr, story.stdout, story_json.stdout]
        texts.append(json.dumps([r.json for r in w.fake.requests]))
        created = w.fake.pod_env(pod_id)
        texts.append(json.dumps({k: v for k, v in created.items() if k != ENV_HOST_KEY}))
        texts += [line.decode(errors="replace") for line in seen]
        for path in w.project.rglob("*"):
            if path.is_file() and not path.is_relative_to(run_dir / "ssh"):
                texts.append(path.read_bytes().decode(errors="replace"))
        for path in w.pods.root(pod_id).rglob("*"):
            if path.is_file() and "etc" not in path.relative_to(w.pods.root(pod_id)).parts[:1]:
                texts.append(path.read_bytes().decode(errors="replace"))
        assert seen and len(texts) > 20
        for text in texts:
            assert CANARY_KEY[4:16] not in text
            assert HF_CANARY[3:16] not in text
        for text in texts[:5]:
            assert "PRIVATE KEY" not in text


async def test_ctrl_c_once_the_job_runs_leaves_job_and_pod_and_attach_finishes(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=20, step_seconds=0.1) as w:
        process = await w.start("train")
        run_id = await w.wait_for("job_running")
        await trio.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _out, text = await communicate(process, 30)
        assert process.returncode == 130, text
        assert "Traceback" not in text
        pod = w.pod_json(run_id)
        pod_id = str(pod["pod_id"])
        assert (
            f"error: interrupted: run {run_id} keeps running on pod {pod_id} ($0.40/h); "
            f"follow it again with `overbrainer train attach {run_id}`, or delete the pod with "
            f"`overbrainer pod rm {run_id}`. The watchdog deletes the pod 30 min after the job "
            f"ends if its results are not retrieved, and by {pod['deadline']} in any case."
        ) in text
        assert w.fake.status(pod_id) == "RUNNING"
        job_pid = int((w.pod_run_dir(pod_id, run_id) / "job.pid").read_text())
        assert Path(f"/proc/{job_pid}").exists(), "the job keeps running on the pod"

        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr
        assert final_line(attach.stdout).startswith(f"train: run {run_id} succeeded; step 20/20")
        assert w.fake.status(pod_id) == "TERMINATED"
        names = await w.events(run_id)
        assert names[-8:] == [
            "pod.JobRunning",
            "run.Detached",
            "run.Followed",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]


async def test_keep_pod_outlives_its_deadline_answers_its_ssh_command_and_only_pod_rm_ends_it(
    tmp_path: Path,
) -> None:
    # A watchdog checking every 0.2 s, with a retrieve grace of 0.5 s and a deadline 3.6 s
    # after the create: any pod but a kept one would be deleted within the test.
    overrides = {"OVERBRAINER_INTERVAL": "0.2", "OVERBRAINER_RETRIEVE_GRACE": "0.5"}
    async with world(tmp_path, overrides=overrides, max_hours=0.001) as w:
        done = await w.run("train", "--keep-pod")
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        pod_id = str(w.pod_json(run_id)["pod_id"])
        ssh = f"ssh -F runs/{run_id}/ssh/config overbrainer-{run_id}"
        assert (
            f"warning: --keep-pod: pod {pod_id} is kept with no time limit, at $0.40/h, even "
            f"once the run ends; nothing deletes it but `overbrainer pod rm {run_id}`"
        ) in done.stderr
        assert f"warning: pod {pod_id} kept (--keep-pod): `{ssh}`" in done.stderr
        assert w.pod_json(run_id)["status"] == "kept"

        deadline = datetime.fromisoformat(
            str(w.pod_json(run_id)["deadline"]).replace("Z", "+00:00")
        )
        # Past the deadline (and the retrieve grace), many watchdog checks later.
        left = (deadline - datetime.now(UTC)).total_seconds()
        await trio.sleep(max(0.0, left) + 1.0)
        assert w.fake.status(pod_id) == "RUNNING"
        log = (w.pod_run_dir(pod_id, run_id) / ".pod" / "watchdog.log").read_text()
        assert "kept (--keep-pod) and its job started" in log
        assert "deleting pod" not in log

        # The printed command works with the real OpenSSH client, from the project.
        reached = await trio.run_process(
            [
                "ssh",
                "-o",
                "BatchMode=yes",
                *ssh.split()[1:],
                "cat",
                f"/workspace/overbrainer/runs/{run_id}/.pod/watchdog",
            ],
            cwd=w.project,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert reached.returncode == 0, reached.stderr
        assert reached.stdout == b"ready\n"

        removed = await w.run("pod", "rm", run_id)
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout.startswith(f"pod rm: deleted pod {pod_id} of run {run_id} after ")
        assert w.fake.status(pod_id) == "TERMINATED"
        # `pod rm` reads what Runpod billed for the pod once it is gone.
        assert (await w.events(run_id))[-4:] == [
            "pod.Kept",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        # `pod billing` reads it again: not final while the pod's hour is not over, the
        # same amount as recorded (nothing new is recorded).
        billed = await w.run("pod", "billing", "--json")
        assert billed.returncode == 0, billed.stderr
        (reading,) = [json.loads(line) for line in billed.stdout.splitlines()]
        assert (reading["run"], reading["pod"], reading["final"]) == (run_id, pod_id, False)
        assert reading["billed_usd"] > 0 and reading["estimate_usd"] > 0
        billed = await w.run("pod", "billing", run_id)
        assert billed.returncode == 0, billed.stderr
        assert (
            billed.stdout.startswith(f"pod billing: pod {pod_id} of run {run_id}: Runpod billed $")
            and "so far (not final yet); overbrainer estimated ~$" in billed.stdout
        )
        assert (await w.events(run_id)).count("pod.Billed") == 1


async def test_attach_reaches_a_restarted_pod_through_its_new_endpoint(tmp_path: Path) -> None:
    async with world(tmp_path, steps=10, step_seconds=0.1) as w:
        process = await w.start("train", output=False)
        run_id = await w.wait_for("job_running")
        process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == 130
        pod_id = str(w.pod_json(run_id)["pod_id"])
        old_port = w.pods.current(pod_id).ssh_port
        exit_code = w.pod_run_dir(pod_id, run_id) / "exit_code"
        with trio.fail_after(30):
            while not exit_code.exists():
                await trio.sleep(0.05)
        # The pod's host restarts it: it comes back on another port.
        async with RunpodClient(CANARY_KEY, w.base_url) as client:
            await client.pod_action(pod_id, "restart")
            with trio.fail_after(30):
                while True:
                    seen = await client.get_pod(pod_id)
                    if seen is not None and seen.ssh_direct is not None:
                        break
                    await trio.sleep(0.1)
        assert seen.ssh_direct.port != old_port

        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr
        assert final_line(attach.stdout).startswith(f"train: run {run_id} succeeded")
        pod = w.pod_json(run_id)
        assert pod["endpoint"] == {
            "host": "127.0.0.1",
            "port": seen.ssh_direct.port,
            "user": "root",
        }
        config = (w.project / "runs" / run_id / "ssh" / "config").read_text()
        assert f"Port {seen.ssh_direct.port}" in config
        assert w.fake.status(pod_id) == "TERMINATED"
        names = await w.events(run_id)
        assert names.count("pod.EndpointSeen") == 2


@pytest.mark.parametrize(
    "where",
    ["josé p'q #%h", "josé p'q \"r\\s"],
    ids=["quoted-in-the-config", "relative-in-the-config"],
)
async def test_a_project_at_a_non_ascii_quoted_spaced_path_trains(
    tmp_path: Path, where: str
) -> None:
    # Issue 12: such a path used to be found unwritable into runs/<id>/ssh/config only once
    # the pod existed (a UnicodeEncodeError traceback and a pod paid for, per retry).
    project = tmp_path / where / "project"
    async with world(tmp_path, project=project, steps=3) as w:
        done = await w.run("train", "--keep-pod")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        (run_id,) = w.runs()
        pod_id = str(w.pod_json(run_id)["pod_id"])
        assert final_line(done.stdout).startswith(f"train: run {run_id} succeeded")
        assert len(w.fake.create_requests()) == 1
        # The printed `ssh -F` command works from the project with the real client.
        reached = await trio.run_process(
            [
                *("ssh", "-o", "BatchMode=yes", "-F", f"runs/{run_id}/ssh/config"),
                *(f"overbrainer-{run_id}", "echo reached"),
            ],
            cwd=project,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert reached.returncode == 0, reached.stderr
        assert reached.stdout == b"reached\n"
        removed = await w.run("pod", "rm", run_id)
        assert removed.returncode == 0, removed.stderr
        assert w.fake.status(pod_id) == "TERMINATED"


async def test_train_and_a_cancel_from_another_terminal_agree_on_the_outcome(
    tmp_path: Path,
) -> None:
    # Issue 12: the cancel ended the pod and forgot the run's key; the `train` following
    # the run then failed to reconnect and reported "cannot read the run's SSH key".
    async with world(tmp_path, steps=200, step_seconds=0.1) as w:
        process = await w.start("train")
        run_id = await w.wait_for("job_running")
        await trio.sleep(0.5)
        cancel = await w.run("train", "cancel", run_id)
        assert cancel.returncode == 0, cancel.stderr
        assert final_line(cancel.stdout) == f"train: run {run_id} cancelled"
        out, text = await communicate(process)
        assert process.returncode == 1, text  # the run's real outcome: cancelled
        assert "Traceback" not in text
        assert "SSH key" not in text
        assert text.strip().splitlines()[-1] == f"error: run {run_id} cancelled"
        assert final_line(out).startswith(f"train: run {run_id} cancelled")
        names = await w.events(run_id)
        assert names.count("pod.Deleting") == 1 and names.count("pod.Deleted") == 1
        assert names.count("run.Ended") == 1
        assert w.run_json(run_id)["state"] == "cancelled"


async def test_of_two_attaches_one_follows_the_other_leaves_it_and_the_pod_goes_once(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=30, step_seconds=0.1) as w:
        process = await w.start("train", output=False)
        run_id = await w.wait_for("job_running")
        process.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            await process.wait()
        done: list[subprocess.CompletedProcess[str]] = []
        async with trio.open_nursery() as nursery:

            async def attach() -> None:
                done.append(await w.run("train", "attach", run_id))

            nursery.start_soon(attach)
            nursery.start_soon(attach)
        followed = [each for each in done if each.returncode == 0]
        assert followed, [each.stderr for each in done]
        for each in done:
            assert "Traceback" not in each.stderr
            assert "SSH key" not in each.stderr
            if each.returncode == 0:
                assert final_line(each.stdout).startswith(f"train: run {run_id} succeeded")
            else:
                # One process follows a run: the later claim finds the first one's, alive.
                assert each.returncode == 1
                assert f"run {run_id} is followed by `overbrainer train attach` (pid " in (
                    each.stderr
                )
        names = await w.events(run_id)
        assert names.count("pod.Deleting") == 1 and names.count("pod.Deleted") == 1
        assert names.count("run.ArtifactsRetrieved") == 1 and names.count("run.Ended") == 1
        assert w.fake.status(str(w.pod_json(run_id)["pod_id"])) == "TERMINATED"


async def test_pod_rm_force_while_train_provisions_never_gives_a_traceback(
    tmp_path: Path,
) -> None:
    # Issue 12: `pod rm --force` during provisioning crashed that train with an
    # InvalidTransition traceback. A pod that takes 30 s to boot: train is booting it.
    async with world(tmp_path, provisioning_seconds=30) as w:
        process = await w.start("train")
        run_id = await w.wait_for("created")
        pod_id = str(w.pod_json(run_id)["pod_id"])
        removed = await w.run("pod", "rm", run_id, "--force")
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout.startswith(f"pod rm: deleted pod {pod_id} of run {run_id} after ")
        _out, err = await communicate(process)
        assert process.returncode == 1, err
        assert "Traceback" not in err and "Transition" not in err
        # Who did it, whether the walk looked before or after `pod rm` recorded the run's end.
        last = err.strip().splitlines()[-1]
        assert re.match(
            rf"error: run {run_id} (was failed|had its pod deleted) by `pod rm` as ", last
        )
        assert "while this command was starting its pod" in err
        assert w.fake.status(pod_id) == "TERMINATED"
        assert w.run_json(run_id)["state"] == "failed"
        names = await w.events(run_id)
        assert names.count("pod.Deleting") == 1 and "run.JobStarted" not in names


async def test_item_5_a_killed_train_is_abandoned_while_starting_then_attach_ends_it(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, provisioning_seconds=30) as w:
        process = await w.start("train")
        run_id = await w.wait_for("created")
        pod_id = str(w.pod_json(run_id)["pod_id"])
        process.kill()
        await communicate(process)
        listed = await w.run("pod", "ls")
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if pod_id in line]
        assert row.startswith(run_id) and row.endswith("abandoned while starting")

        # The next train warns about it (and trains on a pod that boots at once).
        w.fake.provisioning_seconds = 0.2
        again = await w.run("train")
        assert again.returncode == 0, again.stderr
        assert (
            f"warning: pod {pod_id} of run {run_id} ($0.40/h) was abandoned while starting: "
            f"the `overbrainer train` starting it is gone"
        ) in again.stderr
        assert f"end the run with `overbrainer pod rm {run_id}`" in again.stderr

        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 1
        assert "Traceback" not in attach.stderr
        assert f"train: run {run_id} was abandoned while starting its pod: `train` (pid " in (
            attach.stderr
        )
        assert f"train: deleted pod {pod_id} of run {run_id} after " in attach.stdout
        assert (
            attach.stderr.strip()
            .splitlines()[-1]
            .startswith(f"error: run {run_id} failed: abandoned while starting its pod")
        )
        assert w.fake.status(pod_id) == "TERMINATED"
        assert w.run_json(run_id)["state"] == "failed"


async def test_item_5_train_cancel_of_a_provisioning_run_is_taken_by_the_train_starting_it(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, provisioning_seconds=30) as w:
        process = await w.start("train")
        run_id = await w.wait_for("created")
        pod_id = str(w.pod_json(run_id)["pod_id"])
        cancel = await w.run("train", "cancel", run_id)
        assert cancel.returncode == 0, cancel.stderr
        assert final_line(cancel.stdout).startswith(
            f"train: run {run_id} cancelled by the command starting it, `train` (pid "
        )
        out, err = await communicate(process)
        assert process.returncode == 1, err
        assert "Traceback" not in err
        assert (
            err.strip()
            .splitlines()[-1]
            .startswith(
                f"error: run {run_id} cancelled before its job started by `train cancel` as "
            )
        )
        assert final_line(out) == f"train: run {run_id} cancelled"
        assert w.fake.status(pod_id) == "TERMINATED"
        assert w.run_json(run_id)["state"] == "cancelled"
        names = await w.events(run_id)
        assert names.count("run.CancelRequested") == 2 and "run.JobStarted" not in names


async def test_a_detached_pod_run_is_followed_to_its_end_by_supervise_and_its_pod_deleted(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=20, step_seconds=0.1) as w:
        detached = await w.run("train", "--detach")
        assert detached.returncode == 0, detached.stderr
        run_id = w.runs()[-1]
        pod_id = str(w.pod_json(run_id)["pod_id"])
        assert f"train: run {run_id} started on pod " in detached.stdout
        assert "is left running: `overbrainer supervise` follows it" in detached.stdout
        assert w.fake.status(pod_id) == "RUNNING"
        done = await w.run("supervise", "--once")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert f"train: run {run_id} succeeded" in done.stdout
        assert final_line(done.stdout) == "supervise: followed 1 run"
        assert w.fake.status(pod_id) == "TERMINATED"
        names = await w.events(run_id)
        assert names.count("run.Followed") == 1 and names.count("pod.Deleted") == 1
        assert names.index("run.Detached") < names.index("run.Followed")


async def test_a_hung_job_with_the_laptop_gone_is_ended_by_its_pods_watchdog(
    tmp_path: Path,
) -> None:
    # The stand-in hangs after step 3; the stall bound is 1.8 s, the stop timeout 1.2 s
    # (the watchdog's grace twice that: a follower, if any, ends the job first).
    async with world(
        tmp_path,
        steps=200,
        step_seconds=0.1,
        knobs="FAKE_AXOLOTL_HANG_AFTER=3",
        overrides={"OVERBRAINER_INTERVAL": "0.2"},
    ) as w:
        w.env.update(
            OVERBRAINER_TRAINING__STALL_MINUTES="0.03",
            OVERBRAINER_TRAINING__FIRST_STEP_MINUTES="0.5",
            OVERBRAINER_TRAINING__STOP_TIMEOUT_MINUTES="0.02",
        )
        process = await w.start("train")
        run_id = await w.wait_for("job_running")
        process.send_signal(signal.SIGINT)  # the laptop goes: nothing follows the run
        _out, text = await communicate(process, 30)
        assert process.returncode == 130, text
        pod_id = str(w.pod_json(run_id)["pod_id"])
        run_dir = w.pod_run_dir(pod_id, run_id)
        metrics = run_dir / "metrics.jsonl"
        with trio.fail_after(20):
            while '"step": 3' not in _text(metrics) and '"step":3' not in _text(metrics):
                await trio.sleep(0.02)
        hung = trio.current_time()
        with trio.fail_after(20):
            while w.fake.status(pod_id) != "TERMINATED":
                await trio.sleep(0.05)
        gone = trio.current_time() - hung
        # Within the stall bound and its grace, and a few checks (0.2 s) more.
        assert 1.8 + 2.4 - 0.5 <= gone <= 1.8 + 2.4 + 2.0, gone
        assert (run_dir / "stop_request").read_text() == "stall\n"
        log = (run_dir / ".pod" / "watchdog.log").read_text()
        assert "save_requested (stall)" in log
        assert f"deleting pod {pod_id}: stall: the job wrote no new metrics line" in log


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
