"""The preflight's drivers: ask each outside world what a run needs, then check it.

The configuration and the data files are read here; a machine target is asked through
``probe.sh`` (a local process, or a command over SSH with the user's known hosts); a
Runpod target through its API (the account's pods with the key, then the GPU catalog).
Every verdict comes from :mod:`overbrainer.preflight.checks`. Nothing is written, no run
is created; the caller races the whole walk against Ctrl-C.
"""

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from overbrainer.config.load import ConfigError, load_settings
from overbrainer.config.model import (
    RUNPOD_DEFAULT_IMAGE,
    LocalTarget,
    RunpodTarget,
    Settings,
    SshTarget,
    Target,
)
from overbrainer.errors import OverbrainerError
from overbrainer.preflight import checks
from overbrainer.preflight.checks import ApiFailure, Check, Report
from overbrainer.preflight.probes import (
    EngineProbe,
    TrainerProbe,
    engine_args,
    parse_engine,
    parse_trainer,
    probe_script,
    trainer_args,
)
from overbrainer.runpod.clocks import ServerClock
from overbrainer.runpod.models import GpuType, Pod
from overbrainer.train.data import inspect_data

__all__ = ["PROBE_SECONDS", "Preflight", "preflight"]

PROBE_SECONDS = 30.0
"""The longest one probe may take on a target (an interpreter or an engine that hangs)."""

_CONFIG_FILE = "overbrainer.toml"

_Runner = Callable[[Sequence[str]], Awaitable[str]]
"""Runs ``probe.sh`` with arguments on a target and returns what it printed."""


@dataclass(frozen=True)
class Preflight:
    """A preflight's report, the settings it read (None when they are unusable), the
    target it checked, and for a Runpod target the account's pods it listed (so the run's
    warning about leftover pods needs no second listing), Runpod's clock as its answers
    told it (so the run knows it, and how far this machine's is, before its first call)
    and the GPU catalog it read (the run's GPU candidates come from it, no second read)."""

    report: Report
    settings: Settings | None
    target: str | None
    pods: list[Pod] | None = field(default=None, repr=False)
    runpod_clock: ServerClock | None = field(default=None, repr=False)
    catalog: list[GpuType] | None = field(default=None, repr=False)


async def preflight(
    project_dir: Path,
    environ: Mapping[str, str],
    *,
    target: str | None = None,
    env_problems: Sequence[str] = (),
) -> Preflight:
    """Every check a run on ``target`` (default: ``training.target``) would fail on.

    ``environ`` is the process environment over the project's ``.env``; ``env_problems``
    what reading that ``.env`` found wrong (they are configuration problems too).
    """
    problems = list(env_problems)
    settings: Settings | None = None
    try:
        settings = load_settings(project_dir, environ)
    except ConfigError as error:
        problems.extend(error.problems)
    name = target or (settings.training.target if settings is not None else None)
    spec: Target | None = None
    if settings is not None and name is not None:
        try:
            spec = settings.target_of(name)
        except ConfigError as error:
            problems.extend(error.problems)
    subject = _subject(name, spec)
    found: list[Check] = [checks.config_check(_CONFIG_FILE, problems, subject if spec else None)]
    data = await trio.to_thread.run_sync(inspect_data, project_dir, abandon_on_cancel=True)
    found.append(checks.data_check(data))
    pods: list[Pod] | None = None
    clock: ServerClock | None = None
    catalog: list[GpuType] | None = None
    if settings is None or spec is None or name is None:
        found.append(checks.skipped("target", "not checked: the configuration has problems"))
    elif isinstance(spec, RunpodTarget):
        pods, clock, catalog = await _runpod(found, settings, name, spec)
    else:
        await _machine(found, settings, name, spec, project_dir)
    local_store = settings is None or settings.store.url is None
    found.append(await trio.to_thread.run_sync(_project_dirs, project_dir, local_store))
    report = Report(subject or "the project", tuple(found))
    return Preflight(report, settings if not problems else None, name, pods, clock, catalog)


# --- the project's own directories -------------------------------------------------------


def _project_dirs(project_dir: Path, local_store: bool) -> Check:
    """Whether ``runs/`` (and, for the project's own store, ``.overbrainer/``) can be
    written or created here, as this process (permissions, a read-only file system)."""
    facts = [_dir_fact(project_dir, "runs", "each run keeps its files in runs/<id>")]
    if local_store:
        facts.append(
            _dir_fact(project_dir, ".overbrainer", "overbrainer records every run's events there")
        )
    return checks.project_dirs_check(facts)


def _dir_fact(project_dir: Path, name: str, holds: str) -> checks.DirFact:
    path = project_dir / name
    label = f"{name}/"
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists()
    except OSError as error:
        return checks.DirFact(label, str(path), "not_writable", holds, why=_why(error))
    if exists and not is_dir:
        return checks.DirFact(label, str(path), "not_a_directory", holds)
    if exists:
        why = _unwritable(path)
        state: checks.DirState = "writable" if why is None else "not_writable"
        return checks.DirFact(label, str(path), state, holds, why=why or "")
    why = _unwritable(project_dir)
    if why is None:
        return checks.DirFact(label, str(path), "creatable", holds)
    return checks.DirFact(
        label, str(path), "cannot_create", holds, parent=str(project_dir), why=why
    )


def _unwritable(directory: Path) -> str | None:
    """Why this process cannot create files in ``directory`` (None: it can). Asked of the
    system (``access``, as this process's effective ids and powers), nothing written."""
    effective = os.access in os.supports_effective_ids
    if os.access(directory, os.W_OK | os.X_OK, effective_ids=effective):
        return None
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError as error:
        return _why(error)
    return "permission denied"


def _why(error: OSError) -> str:
    return (error.strerror or str(error)).lower()


def _subject(name: str | None, spec: Target | None) -> str | None:
    if name is None or spec is None:
        return None
    if isinstance(spec, RunpodTarget):
        return f"target {name} (runpod)"
    return f"target {name} ({spec.kind}, {spec.runtime})"


# --- machine targets -------------------------------------------------------------------


async def _machine(
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


# --- Runpod --------------------------------------------------------------------------------


async def _runpod(
    found: list[Check], settings: Settings, name: str, spec: RunpodTarget
) -> tuple[list[Pod] | None, ServerClock | None, list[GpuType] | None]:
    """The key (by listing the account's pods), the GPU types (by the catalog, with its
    stock for the pod's GPU count), the candidates they give, the image; the pods listed,
    Runpod's clock as the answers told it and the catalog read."""
    from overbrainer.runpod.candidates import wanted_of
    from overbrainer.runpod.client import RunpodClient, RunpodError, RunpodUnreachable

    base = settings.runpod.base_url
    pods: list[Pod] | None = None
    clock: ServerClock | None = None
    read: list[GpuType] | None = None
    wanted = wanted_of(name, spec)
    try:
        key = settings.require_runpod_api_key()
    except ConfigError as error:
        found.append(checks.runpod_key_check(base, "; ".join(error.problems)))
        found.append(checks.skipped("gpu types", "not checked: no API key"))
        if wanted.needs_catalog:
            found.append(checks.skipped("gpu candidates", "not chosen: no API key"))
    else:
        async with RunpodClient(key, base) as client:
            answer: int | ApiFailure
            try:
                pods = await client.list_pods()
                answer = len(pods)
            except RunpodError as error:
                unreachable = isinstance(error, RunpodUnreachable)
                answer = ApiFailure(error.status, str(error), unreachable=unreachable)
            found.append(checks.runpod_key_check(base, answer))
            if isinstance(answer, ApiFailure):
                found.append(checks.skipped("gpu types", "not checked: see runpod key"))
                if wanted.needs_catalog:
                    found.append(checks.skipped("gpu candidates", "not chosen: see runpod key"))
            else:
                catalog: list[GpuType] | ApiFailure
                try:
                    catalog = await client.list_gpu_types(
                        availability=True, gpu_count=spec.gpu_count
                    )
                    read = catalog
                except RunpodError as error:
                    catalog = ApiFailure(error.status, str(error))
                if spec.gpu_types != "auto":
                    found.append(
                        checks.gpu_types_check(name, spec.gpu_types, spec.gpu_count, catalog)
                    )
                if wanted.needs_catalog:
                    found.append(checks.candidates_check(wanted, catalog))
            clock = client.server_clock if client.server_clock.known else None
    found.append(
        checks.image_check(
            "pod image",
            f"targets.{name}.image",
            spec.image,
            allowed_unpinned=spec.allow_unpinned_image,
            default=spec.image == RUNPOD_DEFAULT_IMAGE and "image" not in spec.model_fields_set,
        )
    )
    return pods, clock, read
