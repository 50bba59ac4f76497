"""The preflight's driver: ask each outside world what a run needs, then check it.

The configuration, the data files and the project's directories are read here; the target
is asked by its own home (``targets/machine/preflight.py``: ``probe.sh`` here or over SSH;
``targets/runpod/preflight.py``: the API), as ``targets.choose`` chooses. Every verdict
comes from :mod:`overbrainer.preflight.checks`. Nothing is written (but the runs view, a
cache, catching up with the store for the monthly budget), no run is created; the caller
races the whole walk against Ctrl-C.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import trio

from overbrainer.config.load import ConfigError, load_settings
from overbrainer.config.model import RunpodTarget, Settings, Target
from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import RunLog
from overbrainer.preflight import checks
from overbrainer.preflight.checks import Check, Report
from overbrainer.targets.choose import TargetFound, check_target
from overbrainer.train.data import inspect_data

__all__ = ["Preflight", "preflight"]

_CONFIG_FILE = "overbrainer.toml"


def _utc_now() -> datetime:
    """This machine's time now."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class Preflight:
    """A preflight's report, the settings it read (None when they are unusable), the
    target it checked, and what checking the target saw that the run uses (not read
    twice)."""

    report: Report
    settings: Settings | None
    target: str | None
    seen: TargetFound = field(default_factory=TargetFound, repr=False)


async def preflight(
    project_dir: Path,
    environ: Mapping[str, str],
    *,
    target: str | None = None,
    env_problems: Sequence[str] = (),
    runs: Callable[[], Sequence[RunLog]] | None = None,
    now: Callable[[], datetime] = _utc_now,
) -> Preflight:
    """Every check a run on ``target`` (default: ``training.target``) would fail on.

    ``environ`` is the process environment over the project's ``.env``; ``env_problems``
    what reading that ``.env`` found wrong (they are configuration problems too). ``runs``
    reads the project's runs from its store (called in a worker thread, only for a Runpod
    target under ``[project] monthly_budget_usd``: the month's spend); ``now`` is this
    machine's clock (which month it is).
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
    seen = TargetFound()
    if settings is None or spec is None or name is None:
        found.append(checks.skipped("target", "not checked: the configuration has problems"))
    else:
        seen = await check_target(found, settings, name, spec, project_dir)
        budget = settings.project.monthly_budget_usd
        if budget is not None and isinstance(spec, RunpodTarget) and runs is not None:
            found.append(await _budget(budget, name, spec, seen, runs, now()))
    local_store = settings is None or settings.store.url is None
    found.append(await trio.to_thread.run_sync(_project_dirs, project_dir, local_store))
    report = Report(subject or "the project", tuple(found))
    return Preflight(report, settings if not problems else None, name, seen)


async def _budget(
    budget: float,
    name: str,
    spec: RunpodTarget,
    seen: TargetFound,
    runs: Callable[[], Sequence[RunLog]],
    now: datetime,
) -> Check:
    from overbrainer.targets.runpod.budget import budget_check_of

    try:
        states = await trio.to_thread.run_sync(runs, abandon_on_cancel=True)
    except OverbrainerError as error:
        return checks.budget_unread(str(error))
    return budget_check_of(budget, name, spec, seen.catalog, states, now)


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
    return f"target {name} ({spec.described})"
