"""The preflight of a machine target: the trainer (native) or the engine and image
(docker), asked through ``probe.sh`` here (a local process) or over SSH (with the user's
known hosts). Every verdict comes from :mod:`overbrainer.preflight.checks`; nothing is
written.
"""

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from overbrainer.config.load import ConfigError
from overbrainer.config.model import LocalTarget, Settings, SshTarget
from overbrainer.errors import OverbrainerError
from overbrainer.preflight import checks
from overbrainer.preflight.checks import Check
from overbrainer.preflight.probes import (
    EngineProbe,
    GpusProbe,
    TrainerProbe,
    engine_args,
    gpus_args,
    parse_engine,
    parse_gpus,
    parse_trainer,
    probe_script,
    trainer_args,
)

__all__ = ["PROBE_SECONDS", "check_machine"]

PROBE_SECONDS = 30.0
"""The longest one probe may take on a target (an interpreter or an engine that hangs)."""

_Runner = Callable[[Sequence[str]], Awaitable[str]]
"""Runs ``probe.sh`` with arguments on a target and returns what it printed."""


async def check_machine(
    found: list[Check],
    settings: Settings,
    name: str,
    spec: LocalTarget | SshTarget,
    project_dir: Path,
) -> None:
    """The trainer (native) or the engine and image (docker), here or on an SSH host; then
    how the job's processes share the model."""
    from overbrainer.targets.machine.target import parallelism_of

    await _reach(found, settings, name, spec, project_dir)
    found.append(checks.parallelism_check(parallelism_of(settings, spec)))


async def _reach(
    found: list[Check],
    settings: Settings,
    name: str,
    spec: LocalTarget | SshTarget,
    project_dir: Path,
) -> None:
    """The trainer (native) or the engine and image (docker), here or on an SSH host."""
    if isinstance(spec, SshTarget):
        try:
            host = settings.require_host(name)
        except ConfigError as error:
            found.append(checks.host_check(f"targets.{name}.host", "; ".join(error.problems)))
            return
        await _over_ssh(found, name, spec, host)
        return
    from overbrainer.exec.local import job_environment

    env = job_environment(os.environ, {})  # as a job here would see it

    async def run_here(args: Sequence[str]) -> str:
        done = await trio.run_process(
            ["sh", "-s", "--", *args],
            stdin=probe_script().encode(),
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            cwd=project_dir,
            check=False,
            # Its own process group: a probe given up on goes with everything it started
            # (an interpreter that hangs, say).
            start_new_session=True,
            deliver_cancel=_kill_group,
        )
        return bytes(done.stdout).decode(errors="replace")

    await _probe(found, name, spec, "this machine", run_here)


async def _kill_group(process: trio.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _over_ssh(found: list[Check], name: str, spec: SshTarget, host: str) -> None:
    """The host answers with the host key the user's known hosts pin and lets us in; then
    the probe, over that connection."""
    from overbrainer.exec.ssh import UserHost, open_ssh

    where = f"host {host}"
    try:
        async with open_ssh(UserHost(host), workdir=spec.workdir, connect=False) as executor:
            try:
                await executor.connect()
            except OverbrainerError as error:
                found.append(checks.host_check(host, str(error)))
                found.append(checks.skipped("trainer", "not checked: the host did not let us in"))
                return
            found.append(checks.host_check(host, None))

            async def run_there(args: Sequence[str]) -> str:
                out = await executor.run_script(probe_script(), args, what="the preflight probe")
                return out.decode(errors="replace")

            await _probe(found, name, spec, where, run_there)
    except OverbrainerError as error:
        # Opening (a bad ~/.ssh/config) or closing a connection that broke meanwhile.
        if not any(check.name == "ssh host" for check in found):
            found.append(checks.host_check(host, str(error)))


async def _probe(
    found: list[Check],
    name: str,
    spec: LocalTarget | SshTarget,
    where: str,
    run: _Runner,
) -> None:
    """Ask ``run`` about the trainer (native) or the engine and image (docker), then,
    unless the job trains on the CPU, the GPUs ``nvidia-smi`` lists."""
    await _trainer_or_engine(found, name, spec, where, run)
    if spec.device == "cpu":
        return
    said = await _ask(run, gpus_args())
    gpus = parse_gpus(said) if isinstance(said, str) else GpusProbe(None, said.reason)
    processes = spec.job_processes
    count = None if processes == "gpu" else processes
    line = checks.gpus_check(gpus, count, where=where, key=f"targets.{name}.processes")
    if line is not None:
        found.append(line)


async def _trainer_or_engine(
    found: list[Check],
    name: str,
    spec: LocalTarget | SshTarget,
    where: str,
    run: _Runner,
) -> None:
    """Ask ``run`` about the trainer (native) or the engine and image (docker)."""
    if spec.runtime == "docker":
        assert spec.image is not None  # the configuration requires it with docker
        said = await _ask(run, engine_args(spec.engine))
        engine = (
            parse_engine(said, spec.engine)
            if isinstance(said, str)
            else EngineProbe(spec.engine, "unreadable", detail=said.reason)
        )
        found.append(checks.engine_check(engine, where=where, engine_key=f"targets.{name}.engine"))
        found.append(
            checks.image_check(
                "container image",
                f"targets.{name}.image",
                spec.image,
                allowed_unpinned=spec.allow_unpinned_image,
                default=False,
            )
        )
        return
    trainer = f"{spec.venv.rstrip('/')}/bin/axolotl" if spec.venv else "axolotl"
    said = await _ask(run, trainer_args(trainer))
    probe = (
        parse_trainer(said, trainer)
        if isinstance(said, str)
        else TrainerProbe(trainer, "unreadable", detail=said.reason)
    )
    found.append(checks.trainer_check(probe, where=where, venv_key=f"targets.{name}.venv"))


@dataclass(frozen=True)
class _NoAnswer:
    """Why a probe gave no output: the target failed to run it, or it took too long."""

    reason: str


async def _ask(run: _Runner, args: Sequence[str]) -> str | _NoAnswer:
    """The probe's output, or why there is none."""
    with trio.move_on_after(PROBE_SECONDS):
        try:
            return await run(args)
        except (OverbrainerError, OSError) as error:
            return _NoAnswer(str(error))
    return _NoAnswer(f"it did not answer within {PROBE_SECONDS:g} s")
