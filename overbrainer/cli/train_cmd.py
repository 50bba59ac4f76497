"""``train``, ``train attach RUN``, ``train cancel RUN`` and ``train stop RUN``."""

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

from overbrainer.cli.context import current
from overbrainer.cli.declare import command, group
from overbrainer.events.types import RunState
from overbrainer.plurals import plural, word

if TYPE_CHECKING:
    from overbrainer.cli.context import Invocation
    from overbrainer.config.model import Settings
    from overbrainer.events.aggregate import RunLog
    from overbrainer.front.console import Front
    from overbrainer.front.interrupts import Interrupts
    from overbrainer.lifecycle.target import Target
    from overbrainer.preflight.checks import Check
    from overbrainer.session.session import Session
    from overbrainer.targets.preflight import Preflight
    from overbrainer.train.resume import ResumeFrom, Shape

app = group("train")


@asynccontextmanager
async def _front() -> AsyncIterator["tuple[Front, Interrupts]"]:
    """The front end and the Ctrl-C controller of one train command."""
    from overbrainer.front.console import Front
    from overbrainer.front.interrupts import open_interrupts

    front = Front()
    try:
        async with open_interrupts(front.notice) as interrupts:
            yield front, interrupts
    finally:
        front.close()


@asynccontextmanager
async def _store(
    settings: "Settings", front: "Front", interrupts: "Interrupts"
) -> AsyncIterator["Session"]:
    """The store and journal of one train command, around its front end and Ctrl-C."""
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore
    from overbrainer.session.journal import Journal
    from overbrainer.session.session import Session

    invocation = current()
    store = RunStore(
        settings.store.url,
        invocation.project_dir,
        Actor.here(invocation.command),
        environ=invocation.environ(),  # PGPASSWORD may come from the project's .env
    )
    try:
        journal = Journal(store, invocation.project_dir, listener=front.event, others=front.other)
        yield Session(journal, front, interrupts, invocation.project_dir)
    finally:
        store.close()


@asynccontextmanager
async def command_session() -> AsyncIterator["tuple[Settings, Session]"]:
    """Settings, store, front end, journal and Ctrl-C controller for one command that acts
    on recorded runs (``train attach``, ``supervise``)."""
    from overbrainer.config.load import load_settings

    invocation = current()
    settings = load_settings(invocation.project_dir, invocation.environ())
    async with _front() as (front, interrupts), _store(settings, front, interrupts) as session:
        yield settings, session


async def _with_run(run: str, name: str) -> int:
    from overbrainer.cli.listing import resolve_run
    from overbrainer.cli.unlogged import require_logged
    from overbrainer.projections.summary import came_to, nothing_left

    run = resolve_run(current(), run)
    # Read-only first: opening the log to write would make an emptied file a new log.
    require_logged(current(), run)
    async with command_session() as (settings, session):
        state = await session.journal.state(run)
        ended = came_to(state, session.project_dir) if state.final else ""
        if state.final and name == "stop":
            session.front.result(f"train: run {run} has already ended ({ended}); nothing to stop")
            return session.interrupts.finish(0)
        if state.final and (name == "cancel" or nothing_left(state)):
            # Nothing to stop; attach of a run with nothing left to do only tells its end.
            if name == "cancel":
                pod = state.pod
                collect = ""
                if state.run.note and state.run.job is not None:
                    collect = f"; `overbrainer train attach {run}` collects its results"
                elif pod.may_bill():
                    collect = (
                        f"; its pod {pod.pod_id} may still bill: `overbrainer pod rm {run}` "
                        "deletes it"
                    )
                session.front.result(
                    f"train: run {run} has already ended ({ended}); nothing to cancel{collect}"
                )
                return session.interrupts.finish(0)
            if state.run.state in (RunState.succeeded, RunState.cancelled, RunState.stopped):
                session.front.result(f"train: run {run} {ended}")
                return session.interrupts.finish(0)
        from overbrainer.lifecycle import elsewhere
        from overbrainer.targets.choose import follower_poll

        if elsewhere.lives_elsewhere(session, state):
            # A team store: the run's job is reached from the checkout that started it.
            if name == "attach":
                code = await elsewhere.attach_elsewhere(session, state)
            elif name == "stop":
                code = await elsewhere.stop_elsewhere(
                    session,
                    state,
                    follower_poll=follower_poll(settings, state),
                    within=_stop_within(settings),
                )
            else:
                code = await elsewhere.cancel_elsewhere(
                    session, state, follower_poll=follower_poll(settings, state)
                )
        else:
            code = await _act(name, session, settings, state)
        return session.interrupts.finish(code)


def _stop_within(settings: "Settings") -> float:
    """How long a job asked to save and stop has before it is cancelled (seconds)."""
    return settings.training.stop_timeout_minutes * 60


@command(app, "train")
async def train(
    *,
    target: str | None = None,
    keep_pod: bool = False,
    check: bool = False,
    resume_from: str | None = None,
    detach: bool = False,
) -> int:
    # Create a run, start its job, follow it to the end, retrieve and verify the results.
    #
    # Every check a run would fail on runs first (`--check` runs only them): a problem
    # creates no run. Each checkpoint the trainer saves comes home verified while the job
    # runs; the last `[training] keep_checkpoints` (default 2) stay. With `--resume-from
    # RUN`, the new run starts from RUN's last checkpoint at home (from `overbrainer train
    # stop RUN`, or saved as it trained): a setting that would not fit it is refused first.
    from overbrainer.errors import Interrupted, OverbrainerError
    from overbrainer.lifecycle import run
    from overbrainer.targets.choose import target_for

    if keep_pod:
        _refuse_keep_pod(target)
    wanted = None
    if resume_from is not None:
        from overbrainer.train.resume import parse_spec

        wanted = parse_spec(resume_from)
    async with _front() as (front, interrupts):
        checked = await interrupts.race(partial(_preflight, target))
        if checked is None:
            raise Interrupted(
                "interrupted during the preflight checks: no run was created; start one with "
                "`overbrainer train`"
            )
        found = checked.value
        report = found.report
        from overbrainer.cli.unlogged import before_train

        unlogged = before_train(current())
        if unlogged is not None:
            front.warn(unlogged)
        spec = found.settings.targets.get(found.target or "") if found.settings else None
        if check:
            if wanted is not None and found.settings is not None:
                # What the run would resume from, checked as a run would check it: its
                # state, its checkpoint at home, the settings that must match.
                shape = _shape_of(found)
                resumed = await _resume_check(
                    found.settings, front, interrupts, wanted, shape, found.target
                )
                report = dataclasses.replace(report, checks=(*report.checks, resumed))
            for line in report.lines():
                front.result(line)
            again = _again(target, keep_pod, resume_from, check=True)
            if not report.ok:
                raise OverbrainerError(report.summary(again))
            front.result(report.summary(again))
            return interrupts.finish(0)
        if not report.ok or found.settings is None or found.target is None or spec is None:
            raise OverbrainerError(
                report.failure(
                    _again(target, keep_pod, resume_from, check=False),
                    _again(target, keep_pod, resume_from, check=True),
                )
            )
        for warning in report.warnings:
            front.warn(warning)
        settings, name = found.settings, found.target
        if wanted is not None:
            _logged(wanted[0])
        async with _store(settings, front, interrupts) as session:
            if interrupts.interrupted:
                raise Interrupted(
                    "interrupted before the run was created: no run was created; start one "
                    "with `overbrainer train`"
                )
            resume = (
                None
                if wanted is None
                else await _resume_checked(session, settings, wanted, _shape_of(found), name)
            )
            async with target_for(session, settings, name, found.seen, keep=keep_pod) as chosen:
                code = await run.train(session, chosen, resume, detach=detach)
            return interrupts.finish(code)


def _again(target: str | None, keep_pod: bool, resume_from: str | None, *, check: bool) -> str:
    """The ``train`` command line as given (every option but ``-C``), with ``--check`` or
    without: the command a message tells to run again. A target that is no valid name is
    left out (the problem it makes names it)."""
    import shlex

    from overbrainer.cli.spec import TREE
    from overbrainer.config.model import TARGET_NAME_RE

    declared = TREE.command("train")
    assert declared is not None
    option = {o.param: o.name for o in declared.options}  # spelled in spec.py only
    words = ["overbrainer", "train"]
    if check:
        words.append(option["check"])
    if target is not None and TARGET_NAME_RE.fullmatch(target) is not None:
        words += [option["target"], target]
    if keep_pod:
        words.append(option["keep_pod"])
    if resume_from is not None:
        words += [option["resume_from"], resume_from]
    return shlex.join(words)


def _shape_of(found: "Preflight") -> "Shape | None":
    """The shape of the job a new run would start (None: its target is not usable)."""
    from overbrainer.config.load import ConfigError
    from overbrainer.targets.choose import parallelism_for

    if found.settings is None or found.target is None:
        return None
    try:
        choice = parallelism_for(found.settings, found.target, found.seen)
    except ConfigError:
        return None
    return (None if choice.processes == "gpu" else choice.processes, choice.parallelism)


async def _resume_check(
    settings: "Settings",
    front: "Front",
    interrupts: "Interrupts",
    wanted: tuple[str, int | None],
    shape: "Shape | None",
    target: str | None,
) -> "Check":
    """``train --check --resume-from``: the checks of :func:`_resume_checked` as one line
    of the preflight — what the run would resume from, or each problem — creating nothing."""
    from overbrainer.errors import OverbrainerError
    from overbrainer.preflight.checks import Check, Verdict

    try:
        _logged(wanted[0])
        async with _store(settings, front, interrupts) as session:
            source, problems = await _resume_source(session, settings, wanted, shape, target)
    except OverbrainerError as error:
        return Check("resume", Verdict.problem, f"--resume-from {wanted[0]}", (str(error),))
    where = f"checkpoint-{source.step} of run {source.run_id} ({_held_at(source)})"
    if problems:
        count = len(problems)
        return Check(
            "resume",
            Verdict.problem,
            f"{where}: {plural(count, 'setting')} {word(count, 'differs', 'differ')}",
            tuple(
                f"{problem}; {fix} (epochs and the learning rate may change)"
                for problem, fix in problems
            ),
        )
    return Check("resume", Verdict.ok, f"{where}: the settings fit; the run would resume there")


def _logged(given: str) -> None:
    """Refuse, reading the log only, a run to resume from that it does not hold (so an
    emptied log file is not made a new log by a command that then fails)."""
    from overbrainer.cli.listing import resolve_run
    from overbrainer.cli.unlogged import bare_log, require_logged

    # Only a log missing or emptied needs it: reading any other first would leave SQLite's
    # -wal and -shm files that the command's own opening of the log does not.
    if bare_log(current()):
        require_logged(current(), resolve_run(current(), given))


async def _resume_source(
    session: "Session",
    settings: "Settings",
    wanted: tuple[str, int | None],
    shape: "Shape | None",
    target: str | None,
) -> "tuple[ResumeFrom, list[tuple[str, str]]]":
    """The checkpoint ``--resume-from`` names and the settings that do not fit it (each
    named, with where to set it back), the job's shape (``shape``) among them; an error
    when there is none to resume from."""
    from overbrainer.cli.listing import resolve_run
    from overbrainer.config.load import load_resolved
    from overbrainer.targets.choose import checkpoints_on_volume
    from overbrainer.train.axolotl import render_config
    from overbrainer.train.resume import (
        SHAPE_FIX,
        ResumeError,
        mismatched,
        pick_checkpoint,
        put_back,
        shape_mismatch,
    )
    from overbrainer.train.resume_files import checkpoint_steps, trained_config

    given, step = wanted
    run_id = resolve_run(current(), given)
    state = await session.journal.state(run_id)
    if not state.final:
        raise ResumeError(
            f"run {run_id} is {state.run.state}: a run is resumed once it has ended; "
            f"`overbrainer train stop {run_id}` saves a checkpoint and stops it"
        )
    if state.run.files_removed is not None:
        raise ResumeError(
            f"run {run_id} has no checkpoint to resume from: its files were removed from "
            f"this machine (`overbrainer runs rm`); `overbrainer runs ls` lists the runs "
            "whose files are here"
        )
    run_dir = session.run_dir(run_id)
    volume = [] if target is None else checkpoints_on_volume(settings, target, state)
    source = pick_checkpoint(run_id, checkpoint_steps(run_dir), step, state.run.pruned, volume)
    trained = trained_config(run_dir, run_id)
    found = mismatched(trained, render_config(settings.training, has_eval=False))
    saved_by = (state.run.processes, state.run.parallelism)
    other_shape = None if shape is None else shape_mismatch(saved_by, shape)
    shaped = [] if other_shape is None else [(other_shape, SHAPE_FIX)]
    if not found:
        return source, shaped
    invocation = current()
    # Where each value comes from: a fix names the variable that set it, if one did.
    sources = load_resolved(invocation.project_dir, invocation.environ()).sources
    process = invocation.base_environ
    fixes = [(problem, put_back(name, sources, process)) for name, problem in found]
    return source, fixes + shaped


async def _resume_checked(
    session: "Session",
    settings: "Settings",
    wanted: tuple[str, int | None],
    shape: "Shape | None",
    target: str,
) -> "ResumeFrom":
    """The checkpoint ``--resume-from`` names, checked against the settings the new run
    would train with — before any run (or pod) exists."""
    from overbrainer.train.resume import refusal

    source, problems = await _resume_source(session, settings, wanted, shape, target)
    if problems:
        raise refusal(source, [f"{problem}; {fix}" for problem, fix in problems])
    run_id = source.run_id
    session.front.info(
        f"train: resuming from checkpoint-{source.step} of run {run_id} ({_held_at(source)})"
    )
    return source


def _held_at(source: "ResumeFrom") -> str:
    """Where the checkpoint to resume from is: at home, or only on the network volume."""
    if source.at_home:
        return f"runs/{source.run_id}/output/checkpoint-{source.step}"
    return "on the network volume only: the new run's pod reads it there"


def _refuse_keep_pod(target: str | None) -> None:
    """``--keep-pod`` for a target that is not a Runpod one is refused before anything
    happens (a configuration that cannot be read is left to the preflight to report)."""
    from overbrainer.config.load import ConfigError, load_settings
    from overbrainer.targets.choose import refuse_keep_pod

    invocation = current()
    try:
        settings = load_settings(invocation.project_dir, invocation.environ())
    except ConfigError:
        return
    refuse_keep_pod(settings, target or settings.training.target)


async def _preflight(target: str | None) -> "Preflight":
    """The preflight of the command's project (see :mod:`overbrainer.preflight`)."""
    from overbrainer.config.load import ConfigError
    from overbrainer.targets.preflight import preflight

    invocation = current()
    env_problems: list[str] = []
    try:
        environ = invocation.environ()
    except ConfigError as error:
        # A broken .env is one more problem; the rest is still checked.
        env_problems = error.problems
        environ = dict(invocation.base_environ)
    return await preflight(
        invocation.project_dir,
        environ,
        target=target,
        env_problems=env_problems,
        runs=partial(_project_runs, invocation),
    )


def _project_runs(invocation: "Invocation") -> "list[RunLog]":
    """Every run of the project's store (none before its log exists): the monthly
    budget's spend, as `runs ls` reads it."""
    from overbrainer.cli.common import store_url
    from overbrainer.cli.listing import listing
    from overbrainer.config.project import LOG_FILE

    if store_url(invocation) is None and not (invocation.project_dir / LOG_FILE).is_file():
        return []
    states, _ = listing(invocation)
    return states


async def _act(name: str, session: "Session", settings: "Settings", state: "RunLog") -> int:
    """``train attach``, ``train cancel`` or ``train stop`` of a run, on its target."""
    from overbrainer.lifecycle import run

    act: Callable[[Session, Target, RunLog], Awaitable[int]]
    if name == "stop":
        act = partial(run.stop, within=_stop_within(settings))
    else:
        act = run.attach if name == "attach" else run.cancel
    from overbrainer.targets.choose import target_of_run

    async with target_of_run(session, settings, state) as chosen:
        return await act(session, chosen, state)


@command(app, "train", "attach")
async def attach(run: str, /) -> int:
    return await _with_run(run, "attach")


@command(app, "train", "cancel")
async def cancel(run: str, /) -> int:
    return await _with_run(run, "cancel")


@command(app, "train", "stop")
async def stop(run: str, /) -> int:
    return await _with_run(run, "stop")
