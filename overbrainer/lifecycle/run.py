"""A run's life on any target: ``train``, ``train attach`` and ``train cancel``.

``train``: create the run, prepare its files, open the target (a connection; a pod
provisioned), start the job (shielded), follow it (raced against signals and the target's
deadline), settle its end (results home and verified), end the target, report. Until the
job exists, a signal or a failure ends the run there and releases what the target holds.
Once it started, a signal only stops following: the job keeps running, and ``train
attach`` follows it again; the message says what bounds it meanwhile.

``train attach``: settle a run left starting, reach its job again, follow it (or collect
the results of one that ended without them), end the target, report. ``train cancel``:
stop the job (shielded), collect what it left, end the target. ``train stop``: ask the job
to save a checkpoint and stop, then follow it as ``train attach`` does (its results and
that checkpoint home, the run ``stopped``); a job that has not stopped within the bound
is cancelled.

What differs between kinds of target is the :class:`~overbrainer.lifecycle.target.Target`'s
to say; every transition is appended to the run's log through the decisions of
:mod:`overbrainer.events.decisions`.
"""

import contextlib
import dataclasses
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import trio

from overbrainer.config.model import Settings
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.ids import new_run_id
from overbrainer.events.types import PodState, RunState
from overbrainer.exec.base import ExecError, JobStatus
from overbrainer.lifecycle import service
from overbrainer.lifecycle.bounds import until_bound
from overbrainer.lifecycle.checkpoints_home import CheckpointFetcher, policy_of, prune
from overbrainer.lifecycle.claim import claim
from overbrainer.lifecycle.model_ready import ModelWatch
from overbrainer.lifecycle.report import (
    already_ended,
    report_ended_meanwhile,
    report_retrieval,
)
from overbrainer.lifecycle.service import EndedMeanwhile, Followed, Job, Retrieval, attach_hint
from overbrainer.lifecycle.stalls import LineClock, Stall, StallRule
from overbrainer.lifecycle.target import (
    CancelledBeforeJob,
    Command,
    NotEnded,
    Recover,
    Resume,
    Stop,
    StoppedBeforeJob,
    Target,
    TargetGone,
    TargetLost,
)
from overbrainer.plurals import word
from overbrainer.projections.summary import attach_header
from overbrainer.session.limits import CANCEL_LIMIT
from overbrainer.session.session import Session
from overbrainer.train.axolotl import prepare_run_dir
from overbrainer.train.data import DataError, check_data
from overbrainer.train.metrics import MetricsEvent, MetricsSummary, summary_line
from overbrainer.train.resume import ResumeFrom

__all__ = ["JobStalled", "attach", "cancel", "secrets_of", "stop", "train"]

T = TypeVar("T")
B = TypeVar("B")


class JobStalled(OverbrainerError):
    """A run's job stalled and was ended (:func:`_end_stalled`): the run failed saying so.
    ``stall`` is what was seen; ``state`` the run as it ended."""

    def __init__(self, message: str, *, stall: Stall, state: RunLog) -> None:
        super().__init__(message)
        self.stall = stall
        self.state = state


# ---- train ----------------------------------------------------------------------------


def secrets_of(settings: Settings) -> dict[str, str]:
    """What reaches only the job's environment: the Hugging Face token, if set."""
    if settings.hf_token is None:
        return {}
    token = settings.hf_token.get_secret_value()
    return {"HF_TOKEN": token, "HUGGING_FACE_HUB_TOKEN": token}


async def train(
    session: Session, target: Target, resume: ResumeFrom | None = None, *, detach: bool = False
) -> int:
    """Create a run, start its job on ``target``, follow it to its end, bring the results
    home and end the target. ``resume``: the checkpoint it goes on from (checked to fit
    the settings before this is called). ``detach``: once the job started, stop following
    it (recorded) and leave it to ``overbrainer supervise`` or ``train attach``."""
    await target.before_create()
    run_id = new_run_id()
    choice = target.parallelism
    processes = None if choice.processes == "gpu" else choice.processes
    first = dataclasses.replace(
        target.created(run_id), processes=processes, parallelism=choice.parallelism
    )
    if resume is not None:
        first = dataclasses.replace(first, resumed_from=resume.recorded())
    created = await session.journal.create(first)
    settings = target.settings
    try:
        data = check_data(session.project_dir)
        prepare_run_dir(
            session.run_dir(run_id),
            session.project_dir,
            settings.training,
            data,
            device=target.device,
            choice=choice,
            resume=(
                None
                if resume is None or not resume.at_home
                else (session.run_dir(resume.run_id), resume.step)
            ),
            prepared=target.prepared_path,
            resume_elsewhere=None if resume is None or resume.at_home else resume.step,
        )
    except DataError as error:
        await _fail_before_job(session, run_id, str(error))
        raise
    except OSError as error:
        # The run's directory cannot be written (a full disk, permissions): say so plainly.
        message = f"could not prepare runs/{run_id}: {error.strerror or error}"
        await _fail_before_job(session, run_id, message)
        raise OverbrainerError(f"run {run_id} failed: {message}") from error
    # Once the job started, what goes wrong is the follower's to say (a recovery's new pod
    # failing to start included): the handlers below are for a job that never started.
    started = False
    try:
        async with target.open(run_id) as executor:
            await target.before_start(run_id)
            job = target.job(run_id, executor, created)
            launch = target.launch(run_id)
            try:
                state = await service.start(
                    session,
                    job,
                    launch.commands,
                    env=launch.env,
                    secrets=secrets_of(settings),
                    container=launch.container,
                )
            except OverbrainerError:
                # No job runs (or none that anything recorded): the target has nothing left
                # to do for this run.
                if target.billed is not None:
                    await target.billed.not_started(run_id)
                raise
            started = True
            if target.billed is not None:
                state = await target.billed.started(run_id, state)
            if detach:
                return await _leave(session, job, state)
            return await _follow(session, target, job, state)
    except StoppedBeforeJob as stop:
        if not started:
            await _fail_before_job(
                session, run_id, "interrupted before the job started", stage=stop.stage
            )
        raise
    except CancelledBeforeJob as cancelled:
        if started:
            raise
        # Asked from another terminal (or checkout) through the log.
        await _fail_before_job(session, run_id, cancelled.reason, outcome=RunState.cancelled)
        state = await session.journal.state(run_id)
        session.front.result(summary_line(run_id, state.run.state, None, None))
        raise OverbrainerError(str(cancelled)) from None
    except OverbrainerError as error:
        if not started:
            await _fail_before_job(session, run_id, f"could not start: {error}")
        raise


async def _leave(session: Session, job: Job, state: RunLog) -> int:
    """``train --detach`` once the job started: record that nobody follows it, and say
    who will (and, on a pod, what bounds it meanwhile)."""
    run_id = job.run_id
    await service.detach(session, run_id, reason="left to the supervisor (train --detach)")
    pod = state.pod
    where = f"pod {pod.pod_id}" if pod.pod_id else job.executor.location
    bound = (
        f"; its watchdog deletes the pod by {pod.deadline} at the latest" if pod.deadline else ""
    )
    session.front.result(
        f"train: run {run_id} started on {where} and is left running: `overbrainer "
        f"supervise` follows it (or `overbrainer train attach {run_id}`){bound}"
    )
    return 0


async def _fail_before_job(
    session: Session,
    run_id: str,
    message: str,
    *,
    stage: str | None = None,
    outcome: RunState = RunState.failed,
) -> None:
    """End (``outcome``) a run whose job never started; nothing if it did, or if it ended.

    Called while an error is on its way out: when the store cannot take the record, that
    error stays the one the user reads (the store's trouble is only warned of)."""
    try:
        await session.journal.append(
            run_id,
            lambda s: decisions.fail_before_job(s, message, stage=stage, outcome=outcome),
        )
    except StoreError as error:
        session.front.warn(f"{error} (while recording that run {run_id} failed)")


# ---- follow, settle, end --------------------------------------------------------------


async def _follow(
    session: Session, target: Target, job: Job, state: RunLog, *, stop_within: float = math.inf
) -> int:
    """Follow a started run (a signal detaches: the job keeps running), settle it, end its
    target and report its outcome. ``stop_within``: the seconds a job asked to save and
    stop has to end before it is cancelled."""
    run_id = job.run_id
    if session.interrupts.interrupted:
        raise await _detach(session, target, job)
    job = target.job(run_id, job.executor, state)
    watched = await _watch(session, target, job, state, stop_within=stop_within)
    if isinstance(watched, EndedMeanwhile):
        # Another command won the race to the end (it may have ended the target).
        return await report_ended_meanwhile(session, watched.state)
    if isinstance(watched, Recover):
        return await _recover(session, target, run_id, watched)
    if isinstance(watched, Resume):
        # It answers again (perhaps at a new endpoint): reached afresh, followed on.
        state = await session.journal.state(run_id)
        async with target.reach(state) as executor:
            return await _follow(session, target, target.job(run_id, executor, state), state)
    if watched is Stop.detached:
        raise await _detach(session, target, job)
    if watched is Stop.past_deadline:
        assert target.billed is not None  # only a billed target has a deadline
        return await target.billed.past_deadline(job)
    if watched is Stop.stop_overdue:
        return await _cancel_overdue(session, target, job, stop_within)
    if isinstance(watched, Stall):
        ended = await _end_stalled(session, target, job, watched)
        if isinstance(ended, Recover):
            return await _recover(session, target, run_id, ended)
        return ended
    assert isinstance(watched, Followed)
    if watched.state.status is JobStatus.lost and target.billed is not None:
        # Its machine restarted under it: one that can no longer train is replaced.
        recover = await target.billed.job_vanished(state)
        if recover is not None:
            return await _recover(session, target, run_id, recover)
    try:
        state, retrieval = await service.settle(session, job, watched)
    except StoreError as error:
        # The job ended but its end could not be recorded: attach records it later.
        raise StoreError(f"{error}; once it is back, {attach_hint(run_id)}") from error
    except OverbrainerError as error:
        raise OverbrainerError(f"{error}; {attach_hint(run_id)}") from error
    # A stop's checkpoint came with the results: the older ones beyond the kept go.
    try:
        await prune(session, run_id, target.settings.training.keep_checkpoints)
    except (OverbrainerError, OSError) as error:
        # The run's outcome stands; the next command that prunes tries again.
        session.front.warn(f"could not remove older checkpoints of run {run_id}: {error}")
    return await _end(session, target, job, state, watched.summary, retrieval)


async def _recover(session: Session, target: Target, run_id: str, recover: Recover) -> int:
    """The run's target was lost under its job: a new one takes the job on, from the
    newest checkpoint home, and this follows it there (the run keeps its ID)."""
    assert target.billed is not None  # only a rented machine is lost and replaced
    async with target.billed.recover(run_id, recover) as (executor, state):
        return await _follow(session, target, target.job(run_id, executor, state), state)


async def _gone(target: Target, state: RunLog, command: Command) -> int:
    """``command`` of a run whose target is gone: only a billed one can go (a machine that
    does not answer is an error of reaching it)."""
    if target.billed is None:
        raise OverbrainerError(f"the target of run {state.run.run_id} cannot be reached")
    return await target.billed.gone(state, command)


async def _detach(session: Session, target: Target, job: Job) -> Interrupted:
    """Record that following stopped while the job runs on; the error saying so."""
    state = await service.detach(session, job.run_id)
    return Interrupted(target.detached(state, job))


async def _watch(
    session: Session, target: Target, job: Job, state: RunLog, *, stop_within: float = math.inf
) -> Followed | Stop | Stall | Recover | Resume | EndedMeanwhile:
    """``service.watch`` raced against signals, against the target's deadline, against
    ``stop_within`` (a job asked to save and stop) and against a stall (no metrics line
    for ``[training] stall_minutes``; not watched for a job asked to stop, which
    ``stop_within`` bounds)."""
    billed = target.billed
    left = math.inf if billed is None else billed.seconds_left(state)
    if left <= 0 and await _ended(job):
        # Attached past the deadline to a job that ended: its results come home first
        # (this takes moments), then the target is ended as usual.
        left = math.inf
    spend = None if billed is None else billed.spend(state)
    check = None if billed is None else billed.at_each_poll(state)
    fetcher = _fetcher(session, target, job, state)
    lines = LineClock(StallRule.of(target.settings.training))
    watch_stalls = math.isinf(stop_within)
    model = ModelWatch(session, job, state)

    def saw(events: list[MetricsEvent]) -> None:
        fetcher.saw(events)
        lines.saw(events)
        model.saw(events)

    async def each_poll() -> None:
        # Each look confirms (or not) a stall that seemed due on this machine's clock.
        lines.looked()
        await model()
        if check is not None:
            await check()

    async def bounds() -> Stop | Stall:
        bound = partial(until_bound, billed, state, left, stop_within=stop_within)
        if not watch_stalls:
            return await bound()
        return await _first_of(bound, lines.until_stalled)

    async def work() -> Followed | Stop | Stall:
        async def follow() -> Followed:
            followed = await service.watch(
                session,
                job,
                poll=target.poll,
                spend=spend,
                at_each_poll=each_poll,
                on_events=saw,
            )
            # The job ended: its last saves come home before its target may go.
            await fetcher.finish()
            await model.finish()
            return followed

        async def followed() -> Followed:
            # Checkpoints come home beside following, never in its way.
            return await _beside(follow, fetcher.run)

        # The bound is confirmed on the target's clock before it ends anything (bounds.py).
        return await _first(followed, bounds)

    try:
        finished = await session.interrupts.race(work)
    except EndedMeanwhile as ended:
        return ended
    except service.FollowLost as lost:
        ended_state = await _ended_since(session, job.run_id, state)
        if ended_state is not None:
            return EndedMeanwhile(ended_state)
        return await target.lost(job, state, lost)
    return Stop.detached if finished is None else finished.value


def _fetcher(session: Session, target: Target, job: Job, state: RunLog) -> CheckpointFetcher:
    """What brings the job's checkpoints home (and records those on a network volume)."""
    settings = target.settings
    policy, on_volume = policy_of(settings, state)
    return CheckpointFetcher(
        session,
        job,
        keep=settings.training.keep_checkpoints,
        home=state.run.checkpoints,
        pruned=state.run.pruned,
        policy=policy,
        on_volume=on_volume,
        recorded=[int(c["step"]) for c in state.run.volume_checkpoints],
    )


async def _beside(main: Callable[[], Awaitable[T]], background: Callable[[], Awaitable[None]]) -> T:
    """``main``'s result (or error, as it is), with ``background`` running meanwhile and
    cancelled once ``main`` is done. ``background`` must not fail."""
    done: list[T] = []
    failed: list[Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(background)
        try:
            done.append(await main())
        except Exception as error:  # raised as it is, not in a group
            failed.append(error)
        nursery.cancel_scope.cancel()
    if failed:
        raise failed[0]
    return done[0]


async def _first(main: Callable[[], Awaitable[T]], bound: Callable[[], Awaitable[B]]) -> T | B:
    """``main``'s result (or error, as it is), unless ``bound`` returns first: then its
    result (a :class:`Stop`, a :class:`Stall`), ``main`` cancelled. ``bound`` must not
    fail."""
    stopped: list[B] = []
    with trio.CancelScope() as scope:

        async def watch_bound() -> None:
            stopped.append(await bound())
            scope.cancel()

        return await _beside(main, watch_bound)
    return stopped[0]


async def _first_of(*bounds: Callable[[], Awaitable[B]]) -> B:
    """The result of whichever of ``bounds`` returns first, the others cancelled. None
    may fail."""
    done: list[B] = []
    async with trio.open_nursery() as nursery:

        async def one(bound: Callable[[], Awaitable[B]]) -> None:
            done.append(await bound())
            nursery.cancel_scope.cancel()

        for bound in bounds:
            nursery.start_soon(one, bound)
    return done[0]


async def _ended(job: Job) -> bool:
    """Whether the job has ended, as far as one look tells (unreachable: no)."""
    try:
        return (await job.executor.status(job.remote_dir)).ended
    except ExecError:
        return False


async def _ended_since(session: Session, run_id: str, before: RunLog) -> RunLog | None:
    """The run's fresh state if another command ended it since ``before`` was read."""
    if before.final:
        return None
    try:
        state = await session.journal.state(run_id)
    except StoreError:
        return None
    return state if state.final else None


async def _end(
    session: Session,
    target: Target,
    job: Job,
    state: RunLog,
    summary: MetricsSummary | None,
    retrieval: Retrieval,
) -> int:
    """End the target of a run whose job ended, then report the outcome — even when the
    target could not be ended, whose error then wins: a pod may still bill."""
    run_id = job.run_id
    try:
        state = await target.end(job, state, retrieval)
    except NotEnded:
        try:
            report_retrieval(session, await session.journal.state(run_id), summary, retrieval)
        except OverbrainerError as run_error:
            session.front.warn(str(run_error))
        raise
    if retrieval.stopped:
        raise service.stopped_collection(job)
    return report_retrieval(session, state, summary, retrieval)


# ---- attach ---------------------------------------------------------------------------


async def attach(session: Session, target: Target, state: RunLog) -> int:
    """Follow a started run again, then collect it and end its target; a run that ended
    without its results home has them collected again. A run left starting is settled
    first (see :meth:`Target.settle_start`)."""
    run_id = state.run.run_id
    if state.run.state != RunState.preparing:
        _require_job(state)
    # Where the run stands comes first, then what this command does about it.
    session.front.info(attach_header(state))
    if state.run.state != RunState.preparing:
        # One process follows a run: another live one keeps it (a claim is appended).
        await claim(session, run_id)
    if state.run.state == RunState.preparing:
        try:
            settled = await target.settle_start(state, "attach")
        except TargetLost as lost:
            # A recovery its command left unfinished goes on here, this command its follower.
            await claim(session, run_id)
            return await _recover(session, target, run_id, Recover(lost.why))
        if isinstance(settled, int):
            return settled
        state = settled
        _require_job(state)
        await claim(session, run_id)
    async with contextlib.AsyncExitStack() as stack:
        try:
            executor = await stack.enter_async_context(target.reach(state, recovers=True))
        except TargetLost as lost:
            return await _recover(session, target, run_id, Recover(lost.why))
        except TargetGone:
            return await _gone(target, state, "attach")
        except OverbrainerError:
            # Another command may have ended the run and its target (a pod deleted, its key
            # forgotten) since this one looked: its outcome is the one to report.
            ended = await _ended_since(session, run_id, state)
            if ended is None:
                raise
            return await report_ended_meanwhile(session, ended)
        job = target.job(run_id, executor, state)
        state = await session.journal.state(run_id)
        if state.run.state == RunState.running:
            return await _follow(session, target, job, state)
        retrieval = await _collect_again(session, job, state)
        state = await session.journal.state(run_id)
        return await _end(session, target, job, state, None, retrieval)


def _require_job(state: RunLog) -> None:
    if state.run.job is None:
        raise OverbrainerError(
            f"run {state.run.run_id} has no job: it stopped before its job started "
            f"({state.run.message})"
        )


async def _collect_again(session: Session, job: Job, state: RunLog) -> Retrieval:
    """The results of an ended run, again (nothing to do for a kept pod whose results are
    all home)."""
    run = state.run
    if state.pod.status == PodState.kept and run.artifacts is not None and not run.note:
        return Retrieval(ok=True)
    return await service.recollect(session, job)


# ---- cancel ---------------------------------------------------------------------------


async def cancel(session: Session, target: Target, state: RunLog) -> int:
    """Stop the run's job (shielded), collect what it left, then end its target. A job that
    had already ended is left alone, with a pointer to ``train attach``. A run left
    starting is settled first (see :meth:`Target.settle_start`)."""
    if state.run.job is None and state.run.state != RunState.preparing:
        raise _no_job_to_cancel(state)
    if state.run.state == RunState.preparing:
        settled = await target.settle_start(state, "cancel")
        if isinstance(settled, int):
            return settled
        state = settled
        if state.run.job is None:
            raise _no_job_to_cancel(state)
    run_id = state.run.run_id
    async with contextlib.AsyncExitStack() as stack:
        try:
            executor = await stack.enter_async_context(target.reach(state))
            job = target.job(run_id, executor, state)
            state, job_state, retrieval = await service.cancel(session, job)
        except TargetGone:
            return await _gone(target, state, "cancel")
        except OverbrainerError:
            # Lost a race with the run's follower: it ended the run (and its target).
            ended = await _ended_since(session, run_id, state)
            if ended is None:
                raise
            return await already_ended(session, ended)
        # No retrieval means nothing was stopped: the job had ended before (cancelled or
        # not).
        if retrieval is None:
            session.front.result(
                f"train: the job of run {run_id} had already ended "
                f"({job_state.status.value}): collect it with "
                f"`overbrainer train attach {run_id}`"
            )
            return 0
        note = "" if retrieval.ok else f" ({service.NOT_RETRIEVED})"
        try:
            await target.end(job, state, retrieval)
        except NotEnded:
            session.front.result(f"train: run {run_id} cancelled{note}")
            raise
        session.front.result(f"train: run {run_id} cancelled{note}")
        if retrieval.stopped:
            raise service.stopped_collection(job)
        return 0


# ---- stop -----------------------------------------------------------------------------


async def stop(session: Session, target: Target, state: RunLog, *, within: float) -> int:
    """Ask the run's job to save a checkpoint and stop, then follow it to its end as
    ``train attach`` does: its results and that checkpoint come home verified, the run
    ends ``stopped`` and its target is ended as after a success. A job still running
    ``within`` seconds after the request is cancelled as ``train cancel`` does."""
    run_id = state.run.run_id
    if not decisions.can_stop(state):
        raise _nothing_to_stop(state)
    async with contextlib.AsyncExitStack() as stack:
        try:
            executor = await stack.enter_async_context(target.reach(state))
        except TargetGone:
            return await _gone(target, state, "attach")
        job = target.job(run_id, executor, state)
        # Written first, recorded next: a request that never reached the job is not one.
        await session.interrupts.shield(
            f"asking the job of run {run_id} to stop",
            STOP_REQUEST_LIMIT,
            lambda: service.write_stop_request(job),
        )
        state = await session.journal.append(run_id, decisions.request_stop)
        if state.final:
            return await report_ended_meanwhile(session, state)
        session.front.info(
            f"train: asked the job of run {run_id} on {executor.location} to save a "
            f"checkpoint and stop; following it until it has (at most {_minutes(within)})"
        )
        return await _follow(session, target, job, state, stop_within=within)


STOP_REQUEST_LIMIT = 60.0
"""How long writing a save-and-stop request on the target may take (one small command)."""


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:g} {word(minutes, 'minute')}"


def _nothing_to_stop(state: RunLog) -> OverbrainerError:
    run_id = state.run.run_id
    if state.run.state == RunState.preparing:
        return OverbrainerError(
            f"run {run_id} has not started its job yet: there is no training to save; "
            f"`overbrainer train cancel {run_id}` stops it"
        )
    return OverbrainerError(f"run {run_id} has no job to stop ({state.run.state})")


async def _cancel_overdue(session: Session, target: Target, job: Job, within: float) -> int:
    """A job asked to save and stop that is still running after ``within`` seconds: cancel
    it as ``train cancel`` does, end the target, and say so."""
    run_id = job.run_id
    session.front.warn(
        f"the job of run {run_id} did not stop within {_minutes(within)} of the request "
        f"to save and stop; cancelling it"
    )
    state, _, retrieval = await service.cancel(session, job)
    if retrieval is None:
        # It ended on its own meanwhile (or another command ended the run): settled as
        # any end is.
        return await _follow(session, target, job, await session.journal.state(run_id))
    await target.end(job, state, retrieval)
    if retrieval.stopped:
        raise service.stopped_collection(job)
    raise OverbrainerError(
        f"run {run_id} {state.run.state}: its job did not stop within {_minutes(within)} of "
        "the request to save and stop (see [training] stop_timeout_minutes)"
    )


# ---- stalls ---------------------------------------------------------------------------


async def _end_stalled(session: Session, target: Target, job: Job, stall: Stall) -> int | Recover:
    """The end of a stalled job (no metrics line for ``[training] stall_minutes``), the one
    place every stall comes to: record it (``run.Stalled``), ask the job to save a
    checkpoint and stop (the request ``train stop`` writes), give it ``[training]
    stop_timeout_minutes``, cancel it as ``train cancel`` does, collect what it left, end
    the target, and raise :class:`JobStalled` (the run failed, saying how to go on).

    A job that ends on its own within that grace (it saved and stopped after all, or
    finished) is settled as any end is (its checkpoint home), and its outcome reported. A
    signal during the grace stops following only, as at any time: the job keeps running,
    and ``train attach`` follows it again.

    On a target that recovers runs, the stalled job is ended without ending the run, and
    the :class:`Recover` returned: the run goes on, on a new target (:func:`_recover_stalled`).
    """
    run_id = job.run_id
    what = stall.describe()
    state = await session.journal.append(
        run_id,
        lambda s: decisions.record_stall(
            s,
            silent_minutes=stall.minutes,
            last_step=stall.last_step,
            first_line=stall.first_line,
        ),
    )
    if state.final:
        return await report_ended_meanwhile(session, state)
    if target.billed is not None and target.billed.recovers:
        return await _recover_stalled(session, target, job, state, what)
    grace = target.settings.training.stop_timeout_minutes * 60
    session.front.warn(
        f"the job of run {run_id} on {job.executor.location} stalled: {what} ([training] "
        f"stall_minutes); asking it to save a checkpoint and stop, then ending it within "
        f"{_minutes(grace)}"
    )
    if await _ask_stalled_to_stop(session, job, "cancelled"):
        ending = f"ended as it did not save and stop within {_minutes(grace)}"
        # Written first, recorded next, as `train stop` does.
        state = await session.journal.append(run_id, decisions.request_stop)
    else:
        ending = "cancelled: the request to save and stop could not be written"
        grace = 0.0
    if grace > 0 and await _ended_in_grace(session, target, job, grace):
        # It saved and stopped after all (or finished): settled as any end is, the
        # checkpoint it saved brought home with its results.
        return await _follow(session, target, job, await session.journal.state(run_id))
    message = f"stalled: {what}; {ending}"
    state, retrieval = await service.stop_and_collect(session, job, message)
    state = await target.end(job, state, retrieval)
    if retrieval.stopped:
        raise service.stopped_collection(job)
    if state.run.state != RunState.failed or state.run.message != message:
        # It ended on its own just before the cancel: that end is the run's outcome.
        return report_retrieval(session, state, None, retrieval)
    raise JobStalled(_stalled_message(state, what), stall=stall, state=state)


async def _ask_stalled_to_stop(session: Session, job: Job, ending: str) -> bool:
    """Ask a stalled job to save a checkpoint and stop (its stop request written); False
    when the request could not be written (warned: the job is ``ending`` without a save)."""
    try:
        await session.interrupts.shield(
            f"asking the stalled job of run {job.run_id} to stop",
            STOP_REQUEST_LIMIT,
            lambda: service.write_stop_request(job),
        )
    except ExecError as error:
        session.front.warn(f"{error}; the stalled job is {ending} without a save")
        return False
    return True


async def _ended_in_grace(session: Session, target: Target, job: Job, grace: float) -> bool:
    """Whether the job ended within ``grace`` seconds (a Ctrl-C meanwhile detaches)."""
    finished = await session.interrupts.race(partial(_ended_within, job, grace, target.poll))
    if finished is None:
        raise await _detach(session, target, job)
    return finished.value


async def _recover_stalled(
    session: Session, target: Target, job: Job, state: RunLog, what: str
) -> int | Recover:
    """A stalled job on a target that recovers runs: asked to save a checkpoint and stop,
    given ``[training] stop_timeout_minutes``, then its process group ended (the run's end
    is not recorded); the checkpoints it saved come home, and the run goes on from the
    newest on a new target (the :class:`Recover` returned). A job that ended on its own in
    the grace other than by that save (it finished after all) is settled as any end is."""
    run_id = job.run_id
    grace = target.settings.training.stop_timeout_minutes * 60
    session.front.warn(
        f"the job of run {run_id} on {job.executor.location} stalled: {what} ([training] "
        f"stall_minutes); asking it to save a checkpoint and stop, then ending it within "
        f"{_minutes(grace)} and going on, on a new pod, from its newest checkpoint"
    )
    if not await _ask_stalled_to_stop(session, job, "ended"):
        grace = 0.0
    ended = grace > 0 and await _ended_in_grace(session, target, job, grace)
    try:
        events = await service.read_all_metrics(job)
    except ExecError as error:
        session.front.warn(f"could not read what the stalled job of run {run_id} wrote: {error}")
        events = []
    if ended and not any(event.event == "stopped" for event in events):
        # It finished (or failed) on its own after all: that end is the run's outcome.
        return await _follow(session, target, job, await session.journal.state(run_id))
    fetcher = _fetcher(session, target, job, state)
    fetcher.saw(events)
    await fetcher.finish()
    if not ended:
        try:
            await session.interrupts.shield(
                f"ending the stalled job of run {run_id}",
                CANCEL_LIMIT,
                partial(job.executor.cancel, job.remote_dir),
            )
        except ExecError as error:
            # Its target is ended before a new one is made: the job goes with it.
            session.front.warn(f"could not end the stalled job of run {run_id}: {error}")
    return Recover(f"its job stalled: {what}")


async def _ended_within(job: Job, within: float, poll: float) -> bool:
    """Whether the job ends within ``within`` seconds, looked at every ``poll`` seconds (a
    look that cannot reach the target counts as not ended)."""
    with trio.move_on_after(within):
        while True:
            if await _ended(job):
                return True
            await trio.sleep(poll)
    return False


def _stalled_message(state: RunLog, what: str) -> str:
    """Why a stalled run failed, and the command that goes on from where it got."""
    run_id = state.run.run_id
    checkpoint = state.run.checkpoint
    if checkpoint is not None:
        after = (
            f"`overbrainer train --resume-from {run_id}` goes on from its checkpoint of "
            f"step {checkpoint['step']}"
        )
    else:
        after = "no checkpoint of it came home: `overbrainer train` starts it again"
    return f"run {run_id} failed: its job stalled ({what}); {after}"


def _no_job_to_cancel(state: RunLog) -> OverbrainerError:
    return OverbrainerError(f"run {state.run.run_id} has no job to cancel ({state.run.state})")
