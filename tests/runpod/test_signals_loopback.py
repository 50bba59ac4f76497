"""Signals and broken output on the fake Runpod world, for real: the real ``overbrainer``
in a subprocess, its output through a real ``tee`` (killed by the same Ctrl-C, as a
terminal's Ctrl-C kills the whole pipeline) or a real pseudo-terminal that goes away, and
real signals.

A phase is reached deterministically with a checkpoint plan that pauses the command
(``overbrainer/front/fault_injection.py``): while it is paused, the test kills ``tee``, sends
the signal or closes the terminal; then it lets the command go on.

Each used to leave a pod billing or a run half-recorded: with ``2>&1 | tee log`` and
Ctrl-C, the next line written raised and aborted the cleanup; SIGTERM
and SIGHUP killed the command outright; and the results' collection could not
be interrupted for up to an hour.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from tests.runpod.test_train_loopback import World, final_line, world

# Phases, each a checkpoint to pause at (None: wait for the job to run, then signal).
PROVISIONING = "pod.Created"  # its append, once the pod exists
RETRIEVAL = ".download:"
STAGING = ".overbrainer-download"
# Keeps a real terminal as the child's controlling terminal, as a shell does.
CONTROLLING_TTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
# A shell's job on a terminal it controls: `overbrainer train 2>&1 | tee LOG` in a process
# group of its own, the terminal's foreground one (a Ctrl-C typed reaches both, and tee's
# output shows on the terminal); it waits for both, as a shell does before its prompt.
PIPELINE_ON_A_TERMINAL = """
import fcntl, os, subprocess, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
log, command = sys.argv[1], sys.argv[2:]
reader, writer = os.pipe()
train = subprocess.Popen(command, stdout=writer, stderr=writer, process_group=0)
tee = subprocess.Popen(["tee", log], stdin=reader, process_group=train.pid)
os.close(reader)
os.close(writer)
os.tcsetpgrp(0, train.pid)
train.wait()
tee.wait()
"""
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


@dataclass
class Command:
    """A running ``overbrainer`` and what shows its output."""

    process: trio.Process
    pause_file: Path
    output: Path  # what tee wrote, or what the terminal showed
    tee: trio.Process | None = None

    async def paused(self, timeout: float = 60) -> str:
        """Wait until the command pauses at its checkpoint; the checkpoint's key."""
        with trio.fail_after(timeout):
            while not self.pause_file.exists():
                assert self.process.poll() is None, self.said()
                await trio.sleep(0.02)
        return self.pause_file.read_text()

    def go_on(self) -> None:
        self.pause_file.unlink()

    async def wait(self, timeout: float = 60) -> int:
        with trio.fail_after(timeout):
            code = await self.process.wait()
            if self.tee is not None:
                await self.tee.wait()
        return code

    def said(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def _plan(tmp_path: Path, containing: str | None) -> dict[str, str]:
    pause_file = tmp_path / "paused"
    if containing is None:
        return {}
    plan = {"containing": containing, "action": "pause", "pause_file": str(pause_file)}
    return {"OVERBRAINER_FAULT_PLAN": json.dumps(plan)}


def _args(w: World, *args: str) -> list[str]:
    return ["-m", "overbrainer", "-C", str(w.project), *args]


@asynccontextmanager
async def teed(
    w: World, tmp_path: Path, containing: str | None, *args: str
) -> AsyncIterator[Command]:
    """``overbrainer train 2>&1 | tee log`` in its own process group (a shell's job)."""
    log = tmp_path / "tee.log"
    reader, writer = os.pipe()
    process = await trio.lowlevel.open_process(
        [sys.executable, *_args(w, *(args or ("train",)))],
        env={**w.env, **_plan(tmp_path, containing)},
        stdin=subprocess.DEVNULL,
        stdout=writer,
        stderr=writer,
        process_group=0,
    )
    tee = await trio.lowlevel.open_process(
        ["tee", str(log)], stdin=reader, stdout=subprocess.DEVNULL, process_group=process.pid
    )
    os.close(reader)
    os.close(writer)
    try:
        yield Command(process, tmp_path / "paused", log, tee)
    finally:
        for child in (process, tee):
            if child.poll() is None:
                child.kill()
                await child.wait()


@asynccontextmanager
async def on_a_terminal(
    w: World, tmp_path: Path, containing: str | None, *args: str
) -> AsyncIterator[tuple[Command, Callable[[], Awaitable[None]]]]:
    """``overbrainer train`` on a real terminal (a pseudo-terminal it controls), and what
    closes that terminal (the kernel then sends SIGHUP; writes fail with EIO)."""
    master, slave = os.openpty()
    shown = tmp_path / "terminal.out"
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", CONTROLLING_TTY, *_args(w, *(args or ("train",)))],
        env={**w.env, **_plan(tmp_path, containing)},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    screen = trio.lowlevel.FdStream(master)
    closed = trio.Event()

    async def show(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        with shown.open("ab") as out:
            try:
                while data := await screen.receive_some(65536):
                    out.write(data)
                    out.flush()
            except (trio.ClosedResourceError, OSError):
                pass  # EIO: the command closed its side; closed: the test closed the terminal

    async def close_terminal() -> None:
        await screen.aclose()
        closed.set()

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(show)
            yield Command(process, tmp_path / "paused", shown), close_terminal
            if not closed.is_set():
                await close_terminal()
    finally:
        if process.poll() is None:
            process.kill()
            await process.wait()


def _pod_id(w: World, run_id: str) -> str:
    return str(w.pod_json(run_id)["pod_id"])


def _track_deletes(w: World) -> list[tuple[str, bool]]:
    """Each delete the fake receives: the pod, and whether ``.pod/retrieved`` was there."""
    deletes: list[tuple[str, bool]] = []
    hook = w.fake.on_deleted

    async def on_deleted(pod: object) -> None:
        pod_id = pod.id  # type: ignore[attr-defined]
        marked = (w.pod_run_dir(pod_id, w.runs()[-1]) / ".pod" / "retrieved").exists()
        deletes.append((pod_id, marked))
        assert hook is not None
        await hook(pod)  # type: ignore[arg-type]

    w.fake.on_deleted = on_deleted
    return deletes


async def _stopped_while_provisioning(w: World) -> str:
    """The final state of a run stopped while its pod was starting: pod deleted, run
    failed before its job."""
    (run_id,) = w.runs()
    pod_id = _pod_id(w, run_id)
    assert w.fake.status(pod_id) == "TERMINATED"
    assert w.pod_json(run_id)["status"] == "deleted"
    run = w.run_json(run_id)
    assert (run["state"], run["job"]) == ("failed", None)
    assert run["message"] == "interrupted before the job started"
    names = await w.events(run_id)
    assert names[-4:] == ["run.Interrupted", "pod.Deleting", "pod.Deleted", "run.Ended"]
    return run_id


async def _detached_while_following(w: World, signum: int) -> str:
    """The final state of a run whose follower stopped: job and pod running, the way on
    in the run's log."""
    (run_id,) = w.runs()
    pod_id = _pod_id(w, run_id)
    assert w.fake.status(pod_id) == "RUNNING"
    assert w.run_json(run_id)["state"] == "running"
    job_pid = int((w.pod_run_dir(pod_id, run_id) / "job.pid").read_text())
    assert Path(f"/proc/{job_pid}").exists(), "the job keeps running on the pod"
    story = await w.run("events", run_id)
    why = "interrupted" if signum == signal.SIGINT else f"interrupted by {NAMES[signum]}"
    assert f"stopped following ({why}); the job keeps running" in story.stdout
    assert f"`overbrainer train attach {run_id}` follows it again" in story.stdout
    return run_id


async def _retrieved_once(w: World, deletes: list[tuple[str, bool]]) -> str:
    """The final state of a run whose results came home although a signal came while
    they were being collected: verified, recorded once, the pod marked then deleted."""
    (run_id,) = w.runs()
    pod_id = _pod_id(w, run_id)
    assert deletes == [(pod_id, True)]  # `.pod/retrieved` written before the delete
    assert w.fake.status(pod_id) == "TERMINATED"
    assert w.run_json(run_id)["state"] == "succeeded"
    names = await w.events(run_id)
    assert names.count("run.ArtifactsRetrieved") == 1
    assert names[-3:] == ["run.Ended", "pod.Deleting", "pod.Deleted"]
    assert (w.project / "runs" / run_id / "output" / "adapter_model.safetensors").is_file()
    # Nothing is left to collect: attach reports the run without a second download.
    attach = await w.run("train", "attach", run_id)
    assert attach.returncode == 0, attach.stderr
    assert final_line(attach.stdout).startswith(f"train: run {run_id} succeeded")
    assert await w.events(run_id) == names
    return run_id


# ---- `overbrainer train 2>&1 | tee log`, and Ctrl-C ---------------------------


async def test_ctrl_c_with_stderr_piped_into_tee_while_provisioning_deletes_the_pod(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w, teed(w, tmp_path, PROVISIONING) as command:
        await command.paused()
        os.killpg(command.process.pid, signal.SIGINT)  # the terminal's Ctrl-C: tee dies too
        assert await command.tee.wait() != 0  # type: ignore[union-attr]
        command.go_on()
        code = await command.wait()
        assert code == 130, command.said()
        await _stopped_while_provisioning(w)
        assert "Traceback" not in command.said()
        assert "pod.AttemptSent" in command.said()  # tee logged until it died


async def test_ctrl_c_with_output_piped_into_tee_while_following_detaches_and_logs_how_to_attach(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=40, step_seconds=0.1) as w, teed(w, tmp_path, None) as command:
        await w.wait_for("job_running")
        await trio.sleep(0.3)
        os.killpg(command.process.pid, signal.SIGINT)
        code = await command.wait()
        assert code == 130, command.said()
        run_id = await _detached_while_following(w, signal.SIGINT)
        assert "Traceback" not in command.said()

        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr
        assert w.fake.status(_pod_id(w, run_id)) == "TERMINATED"


async def test_ctrl_c_of_train_piped_into_tee_on_a_terminal_shows_the_terminal_what_keeps_running(
    tmp_path: Path,
) -> None:
    # `overbrainer train 2>&1 | tee train.log`, Ctrl-C typed once the job runs: tee dies
    # with it, and with it both of train's output streams; the terminal still shows where
    # the job runs and the ways on.
    async with world(tmp_path, steps=60, step_seconds=0.1) as w:
        log = tmp_path / "train.log"
        master, slave = os.openpty()
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-c",
                PIPELINE_ON_A_TERMINAL,
                str(log),
                sys.executable,
                *_args(w, "train"),
            ],
            env=w.env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        terminal = trio.lowlevel.FdStream(master)
        shown = bytearray()

        async def show() -> None:
            try:
                while data := await terminal.receive_some(65536):
                    shown.extend(data)
            except (trio.BrokenResourceError, OSError):
                pass  # EIO: every process on the terminal is gone

        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(show)
                run_id = await w.wait_for("job_running")
                await trio.sleep(0.5)
                await terminal.send_all(b"\x03")  # Ctrl-C, typed
                assert await process.wait() == 0, shown.decode(errors="replace")
        await terminal.aclose()
        await _detached_while_following(w, signal.SIGINT)
        pod_id = _pod_id(w, run_id)
        said = shown.decode(errors="replace")
        assert f"error: interrupted: run {run_id} keeps running on pod {pod_id}" in said, said
        assert f"`overbrainer train attach {run_id}`" in said, said
        assert f"`overbrainer pod rm {run_id}`" in said, said
        assert "keeps running" not in log.read_text()  # tee had died: the words came direct
        # The run's log says it too.
        story = (await w.run("events", run_id)).stdout
        assert f"the job keeps running on pod {pod_id}" in story, story
        assert f"`overbrainer pod rm {run_id}` deletes the pod" in story, story
        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr


async def test_ctrl_c_with_output_piped_into_tee_during_retrieval_finishes_it_and_marks_the_pod(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, output_mb=4) as w, teed(w, tmp_path, RETRIEVAL) as command:
        deletes = _track_deletes(w)
        await command.paused()
        os.killpg(command.process.pid, signal.SIGINT)
        assert await command.tee.wait() != 0  # type: ignore[union-attr]
        command.go_on()
        code = await command.wait()
        assert code == 130, command.said()
        await _retrieved_once(w, deletes)
        assert "Traceback" not in command.said()


# ---- SIGTERM and SIGHUP at each phase -------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_sigterm_or_sighup_while_provisioning_deletes_the_pod(
    tmp_path: Path, signum: signal.Signals
) -> None:
    async with world(tmp_path) as w:
        process = await trio.lowlevel.open_process(
            [sys.executable, *_args(w, "train")],
            env={**w.env, **_plan(tmp_path, PROVISIONING)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        command = Command(process, tmp_path / "paused", tmp_path / "none")
        await command.paused()
        process.send_signal(signum)
        command.go_on()
        with trio.fail_after(60):
            assert process.stderr is not None
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            code = await process.wait()
        assert code == CODES[signum], err
        run_id = await _stopped_while_provisioning(w)
        assert "Traceback" not in err
        assert (
            f"error: interrupted by {signum.name}: run {run_id} stopped before its job started; "
            "it has no pod left"
        ) in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_sigterm_or_sighup_while_following_detaches_naming_the_pod_and_the_way_on(
    tmp_path: Path, signum: signal.Signals
) -> None:
    async with world(tmp_path, steps=40, step_seconds=0.1) as w:
        process = await trio.lowlevel.open_process(
            [sys.executable, *_args(w, "train")],
            env=w.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        await w.wait_for("job_running")
        await trio.sleep(0.3)
        process.send_signal(signum)
        with trio.fail_after(60):
            assert process.stderr is not None
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            code = await process.wait()
        assert code == CODES[signum], err
        run_id = await _detached_while_following(w, signum)
        pod = w.pod_json(run_id)
        assert (
            f"error: interrupted by {signum.name}: run {run_id} keeps running on pod "
            f"{pod['pod_id']} ($0.40/h); follow it again with `overbrainer train attach {run_id}`, "
            f"or delete the pod with `overbrainer pod rm {run_id}`. The watchdog deletes the pod "
            f"30 min after the job ends if its results are not retrieved, and by "
            f"{pod['deadline']} in any case."
        ) in err
        assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_sigterm_or_sighup_during_retrieval_finishes_it_and_deletes_the_pod(
    tmp_path: Path, signum: signal.Signals
) -> None:
    async with world(tmp_path, output_mb=4) as w:
        deletes = _track_deletes(w)
        process = await trio.lowlevel.open_process(
            [sys.executable, *_args(w, "train")],
            env={**w.env, **_plan(tmp_path, RETRIEVAL)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        command = Command(process, tmp_path / "paused", tmp_path / "none")
        await command.paused()
        process.send_signal(signum)
        command.go_on()
        with trio.fail_after(60):
            assert process.stderr is not None
            err = b"".join([chunk async for chunk in process.stderr]).decode()
            code = await process.wait()
        assert code == CODES[signum], err
        run_id = await _retrieved_once(w, deletes)
        assert "Traceback" not in err
        assert (
            f"{signum.name}: collecting the results of run {run_id} first ("
        ) in err  # what goes on, how far it got ...
        assert f"another {signum.name} stops it now: the pod keeps them for 30 min" in err
        assert err.endswith(f"{signum.name}: finished before stopping; nothing is left to do\n")


# ---- a terminal that went away -----------------------------------------------------------


async def test_a_terminal_closed_while_provisioning_deletes_the_pod(tmp_path: Path) -> None:
    async with world(tmp_path) as w, on_a_terminal(w, tmp_path, PROVISIONING) as (command, close):
        await command.paused()
        await close()  # the kernel sends SIGHUP; every later write fails with EIO
        command.go_on()
        code = await command.wait()
        assert code == 129, command.said()
        await _stopped_while_provisioning(w)
        assert "Traceback" not in command.said()


async def test_a_terminal_closed_during_retrieval_still_brings_the_results_home(
    tmp_path: Path,
) -> None:
    async with (
        world(tmp_path, output_mb=4) as w,
        on_a_terminal(w, tmp_path, RETRIEVAL) as (command, close),
    ):
        deletes = _track_deletes(w)
        await command.paused()
        await close()
        command.go_on()
        code = await command.wait()
        assert code == 129, command.said()
        await _retrieved_once(w, deletes)


# ---- the collection of results can be stopped ----------------------------------


async def test_a_second_ctrl_c_during_retrieval_stops_it_leaving_the_pod_for_attach(
    tmp_path: Path,
) -> None:
    # The collection used to be shielded for up to an hour: the first Ctrl-C said nothing,
    # the second "at most 60 min more; it cannot be interrupted".
    async with world(tmp_path, output_mb=16) as w:
        deletes = _track_deletes(w)
        plan = {"containing": RETRIEVAL, "action": "sigint2"}
        done = await w.run("train", env={"OVERBRAINER_FAULT_PLAN": json.dumps(plan)})
        assert done.returncode == 130, done.stderr
        assert "Traceback" not in done.stderr
        (run_id,) = w.runs()
        pod_id = _pod_id(w, run_id)
        hint = f"`overbrainer train attach {run_id}` collects them"
        lines = done.stderr.splitlines()
        offer = next(line for line in lines if line.startswith("Ctrl-C: collecting"))
        assert offer.startswith(f"Ctrl-C: collecting the results of run {run_id} first (")
        assert offer.endswith(
            "so far); Ctrl-C again stops it now: the pod keeps them for 30 min after the job "
            f"ended (its watchdog's retrieve grace), and {hint}"
        )
        assert f"Ctrl-C: stopped collecting the results of run {run_id} (" in done.stderr
        assert lines[-1] == (
            f"error: interrupted: the collection of the results of run {run_id} was stopped "
            "before they were all home and verified (nothing is recorded as retrieved); the pod "
            "keeps them for 30 min after the job ended (its watchdog's retrieve grace): "
            f"`overbrainer train attach {run_id}` collects them"
        )
        # Nothing partial recorded or left behind; the pod waits for its watchdog's grace.
        names = await w.events(run_id)
        assert "run.ArtifactsRetrieved" not in names
        assert names[-2:] == ["run.NoteAdded", "pod.AwaitingRetrieval"]
        assert w.run_json(run_id)["state"] == "running"
        assert deletes == []
        assert w.fake.status(pod_id) == "RUNNING"
        assert not (w.pod_run_dir(pod_id, run_id) / ".pod" / "retrieved").exists()
        assert not (w.project / "runs" / run_id / STAGING).exists()

        attach = await w.run("train", "attach", run_id)
        assert attach.returncode == 0, attach.stderr
        assert final_line(attach.stdout).startswith(f"train: run {run_id} succeeded")
        assert deletes == [(pod_id, True)]
        names = await w.events(run_id)
        assert names.count("run.ArtifactsRetrieved") == 1
        assert names[-5:] == [
            "run.NoteCleared",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
