"""``train``, ``train attach`` and ``train cancel`` on a Runpod target, on trio's MockClock:
the fake Runpod API in-process, the pod's machine in memory with a scripted job
(:class:`JobNetwork` plays a :class:`JobScript`), the real event store. Hours of training
run in milliseconds.

``async with training(tmp_path) as t:`` writes a project whose training target ``gpu`` is a
Runpod target (:func:`write_project`) and yields a :class:`Train`: ``t.command()`` is a new
command (:class:`PodCommand`), ``await t.train()`` is ``overbrainer train``, ``await
t.detached_run(script)`` leaves a run whose ``train`` was interrupted once its job started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing

from overbrainer.config.load import load_settings
from overbrainer.config.model import RunpodTarget, Settings
from overbrainer.config.template import project_files
from overbrainer.errors import Interrupted
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import PodState
from overbrainer.exec.base import (
    ExecError,
    Executor,
    HostKeyRefused,
    JobHandle,
    TargetUnreachable,
)
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import run as lifecycle
from overbrainer.projections.timeline import line as story_line
from overbrainer.runpod.models import Pod
from overbrainer.runpod.pod_scripts import WATCHDOG_LOG
from overbrainer.session.session import Session
from overbrainer.targets.runpod.podrm import warn_orphans
from overbrainer.targets.runpod.pods import PodAccess, PodContext
from overbrainer.targets.runpod.target import PodTarget
from overbrainer.testing.fake_executor import (
    CANARY_KEY,
    PINNED_IMAGE,
    POD_HOST,
    FakeExecutor,
    FakeMachine,
    FakeNetwork,
    PodRig,
    pod_rig,
)
from overbrainer.train.axolotl import STOP_FILE
from overbrainer.train.layout import CHECKPOINT_PREFIX

A40 = "NVIDIA A40"
HF_CANARY = "hf_CANARYmockclock0123456789abcdefgh"

TOML = f"""\
[training]
target = "gpu"
base_model = "Qwen/Qwen3-0.6B"
adapter = "lora"

[targets.gpu]
kind = "runpod"
gpu_types = ["{A40}"]
max_hours = 2
image = "{PINNED_IMAGE}"
retrieve_grace_minutes = 30
"""


@dataclass
class JobScript:
    """What the next job does once spawned: ``steps`` metrics lines ``step_seconds`` apart,
    then (if it ``ends``) its outputs and exit code; every ``saves_every`` steps (never
    for 0) it saves its adapter so far in ``output/``. A job that ``stops`` acts on a
    save-and-stop request (``stop_request`` in its directory) as the metrics plugin makes
    the trainer do: at the end of the step under way it saves ``output/checkpoint-STEP``,
    writes the ``stopped`` line (with the reason the request holds), its outputs and exit
    code 0."""

    steps: int = 5
    step_seconds: float = 60.0
    exit_code: int = 0
    ends: bool = True
    saves_every: int = 0
    stops: bool = True


@dataclass
class JobNetwork(FakeNetwork):
    """Fake pod machines whose executors run :class:`JobScript` jobs; ``downloads`` breaks
    retrieval: ``"fail"`` (the connection drops) or ``"corrupt"`` (a file differs)."""

    script: JobScript = field(default_factory=JobScript)
    downloads: str | None = None
    spawn_error: str | None = None

    def connect(self, access: PodAccess) -> contextlib.AbstractAsyncContextManager[Executor]:
        """Like FakeNetwork.connect, with job-playing executors."""
        return self._open_jobs(access)

    @contextlib.asynccontextmanager
    async def _open_jobs(self, access: PodAccess) -> AsyncIterator[Executor]:
        await trio.lowlevel.checkpoint()
        endpoint = access.endpoint
        label = f"{endpoint.username}@{endpoint.host}:{endpoint.port}"
        machine = self.machines.get((endpoint.host, endpoint.port))
        if machine is None or machine.down or trio.current_time() < machine.reachable_at:
            raise TargetUnreachable(f"cannot reach host {label}: connection refused", host=label)
        machine.connects += 1
        if machine.host_key is not None and machine.host_key != access.host_public_key:
            raise HostKeyRefused("another host key", host=label)
        executor = JobExecutor(machine, label, self)
        self.opened.append(executor)
        try:
            yield executor
        finally:
            await executor.aclose()


def _stopped_line(step: int, reason: bytes) -> bytes:
    word = reason.strip().decode(errors="replace")
    line: dict[str, object] = {"event": "stopped", "time": float(step), "step": step}
    if word:
        line["reason"] = word
    return json.dumps(line).encode() + b"\n"


def _metrics_line(steps: int, step: int) -> bytes:
    if step == 0:
        return json.dumps({"event": "begin", "time": 0.0, "max_steps": steps}).encode() + b"\n"
    line = {
        "event": "log",
        "time": float(step),
        "step": step,
        "epoch": round(step / steps, 3),
        "max_steps": steps,
        "loss": round(2.0 - step / (steps + 1), 4),
        "learning_rate": 2e-4,
    }
    return json.dumps(line).encode() + b"\n"


class JobExecutor(FakeExecutor):
    """A fake executor whose ``spawn`` schedules the network's job script on the machine."""

    def __init__(self, machine: FakeMachine, label: str, network: JobNetwork) -> None:
        super().__init__(machine, label)
        self.network = network

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Start the scripted job (after recording it as the fake does)."""
        if self.network.spawn_error:
            await trio.lowlevel.checkpoint()
            raise ExecError(self.network.spawn_error)
        handle = await super().spawn(
            remote_dir, commands, env=env, secrets=secrets, container=container
        )
        self.machine.secrets_seen = dict(secrets)  # type: ignore[attr-defined]
        script = self.network.script
        now = trio.current_time()
        files = self.machine.files
        files[f"{remote_dir}/{WATCHDOG_LOG}"] = b"watchdog: guarding the pod\n"
        metrics = _metrics_line(script.steps, 0)
        files[f"{remote_dir}/metrics.jsonl"] = metrics
        for step in range(1, script.steps + 1):
            metrics += _metrics_line(script.steps, step)
            at = now + step * script.step_seconds
            self.machine.write_at(at, f"{remote_dir}/metrics.jsonl", metrics)
            if script.saves_every and step % script.saves_every == 0:
                saved = f"step {step}\n".encode()
                self.machine.write_at(at, f"{remote_dir}/output/adapter_model.safetensors", saved)
        if script.ends:
            end = now + script.steps * script.step_seconds
            self._end_at(end, remote_dir, script.exit_code)
        if script.stops:
            acted = False

            def react() -> None:
                nonlocal acted
                acted = acted or self._stop_when_asked(script, remote_dir, now)

            self.machine.reactions.append(react)
        return handle

    def _end_at(self, at: float, remote_dir: str, exit_code: int) -> None:
        self.machine.write_at(at, f"{remote_dir}/output/adapter_model.safetensors", b"w" * 64)
        self.machine.write_at(at, f"{remote_dir}/output/adapter_config.json", b"{}")
        self.machine.write_at(at, f"{remote_dir}/job.log", b"trained\n")
        self.machine.write_at(at, f"{remote_dir}/exit_code", f"{exit_code}\n".encode())

    def _stop_when_asked(self, script: JobScript, remote_dir: str, started: float) -> bool:
        """Once the request is there, the job's rest is: the step under way, its
        checkpoint, the stopped line, its outputs and exit code 0 (nothing after).
        Whether it acted (once)."""
        machine = self.machine
        files = machine.files
        request = files.get(f"{remote_dir}/{STOP_FILE}")
        if request is None:
            return False
        if f"{remote_dir}/exit_code" in files or f"{remote_dir}/cancelled" in files:
            return True  # ended: nothing left to stop
        elapsed = trio.current_time() - started
        step = min(script.steps, math.floor(elapsed / script.step_seconds) + 1)
        at = started + step * script.step_seconds
        prefix = f"{remote_dir}/"
        machine.scheduled = [
            s for s in machine.scheduled if s[0] <= at or not s[1].startswith(prefix)
        ]
        metrics = b"".join(_metrics_line(script.steps, n) for n in range(step + 1))
        machine.write_at(at, f"{remote_dir}/metrics.jsonl", metrics + _stopped_line(step, request))
        checkpoint = f"{remote_dir}/output/{CHECKPOINT_PREFIX}{step}"
        machine.write_at(at, f"{checkpoint}/adapter_model.safetensors", f"step {step}\n".encode())
        machine.write_at(at, f"{checkpoint}/trainer_state.json", b'{"global_step": %d}' % step)
        self._end_at(at, remote_dir, 0)
        return True

    async def download(self, remote_dir: str, paths: Sequence[str], local_dir: Path) -> None:
        """Retrieve, broken as the network says."""
        if self.network.downloads == "fail":
            await trio.lowlevel.checkpoint()
            raise TargetUnreachable(f"cannot reach {self.location}: connection lost", host="pod")
        await super().download(remote_dir, paths, local_dir)
        if self.network.downloads == "corrupt":
            target = local_dir / "output" / "adapter_model.safetensors"
            target.write_bytes(b"x" + target.read_bytes()[1:])


@dataclass
class PodCommand:
    """One command on the rig, as a new ``overbrainer`` process would run it: ``train``,
    ``train attach`` and ``train cancel`` through the lifecycle on a :class:`PodTarget`.

    ``ctx`` is the command's own (its own signal state); ``poll`` is how often following
    reads the job.
    """

    ctx: PodContext
    settings: Settings
    spec: RunpodTarget
    poll: float = 10.0

    @property
    def session(self) -> Session:
        """The command's journal, front end and signal controller."""
        return self.ctx.session

    def target(self, name: str = "gpu", *, keep: bool = False) -> PodTarget:
        """The command's Runpod target."""
        return PodTarget(self.ctx, self.settings, self.spec, name=name, keep=keep, poll=self.poll)

    async def train(self, name: str = "gpu", *, keep: bool = False) -> int:
        """``overbrainer train [--keep-pod]`` on target ``name``."""
        return await lifecycle.train(self.session, self.target(name, keep=keep))

    async def attach(self, state: RunLog) -> int:
        """``overbrainer train attach`` (a run still starting its pod too)."""
        return await lifecycle.attach(self.session, self.target(state.run.target), state)

    async def cancel(self, state: RunLog) -> int:
        """``overbrainer train cancel`` (a run still starting its pod too)."""
        return await lifecycle.cancel(self.session, self.target(state.run.target), state)

    # Named for what the tests of runs left starting exercise: the same commands.
    attach_starting = attach
    cancel_starting = cancel

    async def warn_orphans(self, pods: list[Pod] | None = None) -> None:
        """The leftover pods ``train`` warns about."""
        await warn_orphans(self.ctx, pods)


@dataclass
class Train:
    """A project with a Runpod target, on the MockClock rig."""

    rig: PodRig
    network: JobNetwork
    settings: Settings
    spec: RunpodTarget
    runs: list[PodCommand] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    last: str | None = None

    def command(self) -> PodCommand:
        """A new command (its own Ctrl-C state), as a new `overbrainer` process would be."""
        interrupts = Interrupts(self.rig.front.notice)
        session = Session(self.rig.journal, self.rig.front, interrupts, self.rig.project)
        ctx = dataclasses.replace(self.rig.context, session=session)
        run = PodCommand(ctx, self.settings, self.spec)
        self.runs.append(run)
        return run

    def _runs(self) -> set[str]:
        directory = self.rig.project / "runs"
        return {p.name for p in directory.iterdir()} if directory.exists() else set()

    async def train(self, *, keep: bool = False, run: PodCommand | None = None) -> int:
        """``overbrainer train [--keep-pod]``."""
        self.known = self._runs()
        try:
            return await (run or self.command()).train("gpu", keep=keep)
        finally:
            new = self._runs() - self.known
            if new:
                (self.last,) = new
            self.known |= new

    def run_id(self) -> str:
        """The run of the last (or current) ``train``."""
        new = self._runs() - self.known
        if new:
            (run_id,) = new
            return run_id
        assert self.last is not None
        return self.last

    def machine(self, port: int = 22000) -> FakeMachine:
        """The machine of the first pod (where it was first seen)."""
        return self.network.machines[(POD_HOST, port)]

    def out(self) -> str:
        """What went to stdout."""
        out = self.rig.front.out
        assert isinstance(out, io.StringIO)
        return out.getvalue()

    def err(self) -> str:
        """What went to stderr."""
        return self.rig.err.getvalue()

    def story(self, run_id: str) -> str:
        """``overbrainer events RUN``, as text."""
        return "\n".join(story_line(r) for r in self.rig.store.history(run_id))

    def pod_id(self, run_id: str) -> str:
        """The pod of run ``run_id`` (it must have one)."""
        pod_id = self.rig.state(run_id).pod.pod_id
        assert pod_id is not None
        return pod_id

    def request_times(self, method: str, path: str) -> list[float]:
        """When the fake API was sent ``method`` ``path`` (trio time), in order."""
        return [r.time for r in self.rig.fake.requests if r.method == method and r.path == path]

    async def detached_run(self, script: JobScript) -> str:
        """A run whose `train` was interrupted once its job (playing ``script``) started."""
        self.network.script = script
        run = self.command()

        def job_running() -> bool:
            new = self._runs() - self.known
            return bool(new) and self.rig.state(max(new)).pod.status == PodState.job_running

        async with trio.open_nursery() as nursery:
            nursery.start_soon(interrupt_when, run.session.interrupts, job_running)
            try:
                await self.train(run=run)
            except Interrupted:
                pass
            else:
                raise AssertionError("train was not interrupted once its job started")
        return self.run_id()


def write_project(path: Path) -> None:
    """A project at ``path`` whose training target ``gpu`` is a Runpod target (:data:`TOML`)."""
    for name, text in project_files().items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (path / "overbrainer.toml").write_text(TOML)


async def _in_this_task(fn: Callable[..., object], *args: object, **_: object) -> object:
    await trio.lowlevel.checkpoint()
    return fn(*args)


@contextlib.asynccontextmanager
async def training(tmp_path: Path, **timing: float) -> AsyncIterator[Train]:
    """The rig on a project in ``tmp_path`` whose target ``gpu`` is a Runpod target.

    Work the code sends to a worker thread (checking local files) runs in the calling task
    here: while a thread runs, the MockClock would jump to the next deadline and fire time
    limits real time never reaches.
    """
    original = trio.to_thread.run_sync
    trio.to_thread.run_sync = _in_this_task  # type: ignore[assignment]
    try:
        async with _training(tmp_path, **timing) as t:
            yield t
    finally:
        trio.to_thread.run_sync = original


@contextlib.asynccontextmanager
async def _training(tmp_path: Path, **timing: float) -> AsyncIterator[Train]:
    write_project(tmp_path)
    env = {"OVERBRAINER_RUNPOD__API_KEY": CANARY_KEY, "OVERBRAINER_HF_TOKEN": HF_CANARY}
    settings = load_settings(tmp_path, env)
    spec = settings.targets["gpu"]
    assert isinstance(spec, RunpodTarget)
    async with pod_rig(tmp_path) as rig:
        network = JobNetwork()
        rig.network = network
        rig.context.connect = network.connect
        if timing:
            changes: dict[str, Any] = dict(timing)
            rig.context.timing = dataclasses.replace(rig.context.timing, **changes)
        yield Train(rig, network, settings, spec)


async def interrupt_when(
    interrupts: Interrupts, ready: Callable[[], bool], poll: float = 1.0
) -> None:
    """Ctrl-C (through ``interrupts``) once ``ready()`` says so, looking every ``poll`` s."""
    while not ready():
        await trio.sleep(poll)
    interrupts.interrupt()
