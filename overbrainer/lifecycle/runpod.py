"""``train``, ``train attach`` and ``train cancel`` on a Runpod target (SPEC §7.5–7.8; the
seed's ``train``, ``Job::run``, ``follow``, ``end``, ``attach``, ``cancel``, ``abandon``,
``release`` and ``warn_orphans``).

The pod is created before the run's job and deleted once its results are home. Ctrl-C
before the job exists deletes the pod and fails the run. Once the job started, Ctrl-C only
stops following it: the job and the pod keep running, and the pod's watchdog bounds the
cost (or nothing does, with ``--keep-pod``, and the message says so).

Following never calls the API. It is raced against Ctrl-C and against the pod's deadline
plus :data:`DEADLINE_SLACK`: a job still followed then runs on a pod its watchdog should
have deleted, so the client deletes it and fails the run. The deadline is Runpod's
``createdAt`` plus ``max_hours``, and it is counted on Runpod's clock (the ``Date`` of the
API's last answer carried forward on the monotonic clock): this machine's wall clock being
hours off, or jumping, neither deletes a healthy pod nor lets one run unbounded. When
following loses the pod, the run fails only once the pod is confirmed gone
(``pods.confirm_gone``).

:class:`PodRun` does the work on a :class:`~overbrainer.targets.runpod.pods.PodContext`, so tests
and the benchmark drive it on trio's MockClock with the fake API in-process; the module's
:func:`train`, :func:`attach` and :func:`cancel` open the real context for a command.
"""

import contextlib
import ipaddress
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from urllib.parse import urlsplit

import trio

from overbrainer.config.model import RunpodTarget, Settings
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import PodView, RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.ids import new_run_id
from overbrainer.events.store import UnknownRun
from overbrainer.events.types import PodState, RunState
from overbrainer.exec.base import ExecError, Executor, NativeRuntime, TargetUnreachable
from overbrainer.lifecycle import service
from overbrainer.lifecycle.elsewhere import lives_elsewhere
from overbrainer.lifecycle.machine import report, report_ended_meanwhile, secrets_of
from overbrainer.lifecycle.service import Followed, Retrieval, attach_hint
from overbrainer.runpod import messages
from overbrainer.runpod.clocks import ServerClock
from overbrainer.runpod.decide import (
    connect_again_within,
    interrupted_before_job,
    parse_utc,
    uptime_and_spend,
)
from overbrainer.runpod.keys import client_key_path, write_ssh_config
from overbrainer.runpod.models import Pod, PodStatus, UnsafeSshEndpoint
from overbrainer.runpod.orphans import orphan_warnings, rows, run_of
from overbrainer.runpod.timing import Timing
from overbrainer.session.limits import CANCEL_LIMIT, COLLECT_LIMIT, START_LIMIT
from overbrainer.session.session import Session, ended_by
from overbrainer.targets.runpod.delete import delete_pod, forget_key_if_done, release
from overbrainer.targets.runpod.ending import end_pod
from overbrainer.targets.runpod.podrm import (
    deleted_line,
    duration_text,
    remove_run_pods,
    still_starting,
)
from overbrainer.targets.runpod.pods import PodAccess, PodContext, confirm_gone, note_clock
from overbrainer.targets.runpod.provision import (
    ProvisionCancelled,
    ProvisionInterrupted,
    ProvisionOvertaken,
    open_provisioned,
    pinned_ssh,
    remote_run_dir,
)
from overbrainer.targets.runpod.starting import Start, look, start_of
from overbrainer.train.axolotl import (
    job_environment,
    prepare_run_dir,
    reasoning_template_warning,
    trainer_commands,
)
from overbrainer.train.data import DataError, check_data
from overbrainer.train.metrics import MetricsSummary, summary_line

__all__ = [
    "DEADLINE_SLACK",
    "PodRun",
    "api_base_of",
    "attach",
    "cancel",
    "follow_poll",
    "open_pod_context",
    "pod_commands",
    "spend_so_far",
    "timing_for",
    "train",
]

DEADLINE_SLACK = 5 * 60.0
"""How long past the pod's deadline a job may still be followed before the client deletes
the pod itself (the watchdog should have done it at the deadline)."""

# The job's commands on a pod first take the image's environment (PATH, CUDA libraries,
# HF_HOME) that the bootstrap wrote, then put the venv first on PATH. The venv is passed as
# an argument ($1), never pasted into the script.
_WITH_JOB_ENV = '. ./.pod/job.env && PATH="$1/bin:$PATH" && export PATH && shift && exec "$@"'


class _Stop:
    """Why following a job ended without the job's end."""

    def __init__(self, why: str) -> None:
        self.why = why


_DETACHED = _Stop("Ctrl-C")
_PAST_DEADLINE = _Stop("past the pod's deadline")


# --- set-up ----------------------------------------------------------------------------


def _is_loopback(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def timing_for(base_url: str) -> Timing:
    """How long to wait and poll against the API at ``base_url``.

    Runpod's own API gets SPEC §7.2's timing. An API on a loopback address is the fake
    server of the demo and the tests: it answers in milliseconds and its pods boot in
    seconds, so polls are a fraction of a second (``confirm_gone``'s 404s too).
    """
    if _is_loopback(base_url):
        return Timing(poll=0.25, reconcile_after=(1.0, 3.0), delete_poll=0.25, gone_interval=0.5)
    return Timing.standard()


def follow_poll(settings: Settings) -> float:
    """How often following reads the job's status and metrics: the machine targets' pace,
    or a quarter second against a loopback API (the demo's and the tests' fake pods)."""
    return 0.25 if _is_loopback(settings.runpod.base_url) else service.POLL_SECONDS


def api_base_of(settings: Settings) -> str | None:
    """The API the pod's watchdog talks to, when it is not Runpod's own (the fake one)."""
    from overbrainer.runpod.client import DEFAULT_BASE_URL

    base = settings.runpod.base_url.rstrip("/")
    return None if base == DEFAULT_BASE_URL.rstrip("/") else base


def pod_commands(settings: Settings, spec: RunpodTarget) -> list[list[str]]:
    """The trainer commands of a job on a pod, each run through the pod's job environment
    file with the target's venv first on ``PATH``. ``[training.env]`` is applied again after
    that file (through ``env``), so the project's values win over the pod's own
    (``HF_HOME``, say)."""
    venv = spec.venv.rstrip("/") or "/"
    axolotl = f"{venv}/bin/axolotl"
    training = settings.training
    again = ["env", *(f"{name}={value}" for name, value in training.env.items())]
    return [
        ["sh", "-c", _WITH_JOB_ENV, "sh", venv, *(again if training.env else []), *command]
        for command in trainer_commands(training, axolotl)
    ]


@contextlib.asynccontextmanager
async def open_pod_context(
    session: Session, settings: Settings, spec: RunpodTarget | None = None
) -> AsyncIterator[PodContext]:
    """The API client (the key from the settings) and, given the run's target ``spec``,
    the pinned SSH connector of one command, for as long as the block runs."""
    from overbrainer.runpod.client import RunpodClient

    key = settings.require_runpod_api_key()
    base = settings.runpod.base_url
    async with RunpodClient(key, base) as client:
        yield PodContext(
            client=client,
            session=session,
            timing=timing_for(base),
            connect=pinned_ssh(NativeRuntime(venv=spec.venv)) if spec is not None else None,
        )


def _target_of(settings: Settings, state: RunLog) -> RunpodTarget:
    """The Runpod target a run was started on."""
    run = state.run
    spec = settings.targets.get(run.target)
    if not isinstance(spec, RunpodTarget):
        raise OverbrainerError(
            f"target `{run.target}` of run {run.run_id} is no longer a runpod target in "
            "overbrainer.toml; declare it again to reach the run's pod, or delete the pod "
            f"with `overbrainer pod rm {run.run_id}`"
        )
    return spec


# --- the commands ----------------------------------------------------------------------


async def train(
    session: Session,
    settings: Settings,
    name: str,
    spec: RunpodTarget,
    *,
    keep: bool,
    pods: list[Pod] | None = None,
    runpod_clock: ServerClock | None = None,
) -> int:
    """``overbrainer train`` on the Runpod target ``name``: see :meth:`PodRun.train`.

    ``pods`` is the account's listing the preflight made, if any (no second listing), and
    ``runpod_clock`` Runpod's clock as its answers told it."""
    async with open_pod_context(session, settings, spec) as ctx:
        if runpod_clock is not None and runpod_clock.date is not None:
            # Same process, same monotonic clock: carried on, it is Runpod's time now.
            ctx.client.server_clock.saw(runpod_clock.date, runpod_clock.at)
        run = PodRun(ctx, settings, spec, poll=follow_poll(settings))
        return await run.train(name, keep=keep, api_base=api_base_of(settings), pods=pods)


async def attach(session: Session, settings: Settings, state: RunLog) -> int:
    """``overbrainer train attach`` on a Runpod run: see :meth:`PodRun.attach` (and
    :meth:`PodRun.attach_starting` for a run still starting its pod)."""
    from overbrainer.projections.summary import attach_header

    spec = _target_of(settings, state)
    if state.run.state != RunState.preparing:
        _require_job(state)
    session.front.info(attach_header(state))
    async with open_pod_context(session, settings, spec) as ctx:
        run = PodRun(ctx, settings, spec, poll=follow_poll(settings))
        if state.run.state == RunState.preparing:
            return await run.attach_starting(state)
        return await run.attach(state)


async def cancel(session: Session, settings: Settings, state: RunLog) -> int:
    """``overbrainer train cancel`` on a Runpod run: see :meth:`PodRun.cancel` (and
    :meth:`PodRun.cancel_starting` for a run still starting its pod)."""
    spec = _target_of(settings, state)
    if state.run.job is None and state.run.state != RunState.preparing:
        raise OverbrainerError(f"run {state.run.run_id} has no job to cancel ({state.run.state})")
    async with open_pod_context(session, settings, spec) as ctx:
        run = PodRun(ctx, settings, spec, poll=follow_poll(settings))
        if state.run.state == RunState.preparing:
            return await run.cancel_starting(state)
        return await run.cancel(state)


def _require_job(state: RunLog) -> None:
    if state.run.job is None:
        run_id = state.run.run_id
        if state.run.state == RunState.preparing:
            raise OverbrainerError(
                f"run {run_id} has no job yet: its pod is still starting; `overbrainer "
                f"train attach {run_id}` follows it once its job started"
            )
        raise OverbrainerError(
            f"run {run_id} has no job: it stopped before its job started ({state.run.message})"
        )


def spend_so_far(pod: PodView, ctx: PodContext) -> float | None:
    """The pod's spend until now: its rate times its uptime on Runpod's clock (None when
    unknown)."""
    return uptime_and_spend(pod.created_at, ctx.server_now(), pod.cost_per_hour)[1]


# --- the work --------------------------------------------------------------------------


@dataclass(frozen=True)
class Reached:
    """How to reach a run's pod now, and when its current boot began (Runpod's
    ``startedAt``; None when not shown)."""

    access: PodAccess
    started_at: datetime | None


@dataclass
class PodRun:
    """A run's job on its pod (the seed's ``Job``): what ``train``, ``train attach`` and
    ``train cancel`` do once the command's :class:`PodContext` is open.

    ``poll`` is how often following reads the job's status and metrics.
    """

    ctx: PodContext
    settings: Settings
    spec: RunpodTarget
    poll: float = service.POLL_SECONDS

    @property
    def session(self) -> Session:
        """The command's journal, front end and Ctrl-C controller."""
        return self.ctx.session

    def job(self, run_id: str, executor: Executor, *, keep: bool = False) -> service.Job:
        """The run's job on its pod, reached through ``executor`` (``keep``: a pod kept
        with ``--keep-pod``, which nothing deletes by itself)."""
        if keep:
            wait = "the kept pod keeps them until `overbrainer pod rm` deletes it"
        else:
            wait = (
                f"the pod keeps them for {self.spec.retrieve_grace_minutes} min after the job "
                "ended (its watchdog's retrieve grace)"
            )
        return service.Job(run_id, executor, remote_run_dir(run_id), results_wait=wait)

    # -- train --

    async def train(
        self,
        name: str,
        *,
        keep: bool,
        api_base: str | None = None,
        pods: list[Pod] | None = None,
    ) -> int:
        """Warn about leftover pods, create the run, provision its pod (shielded), start the
        job (shielded; a failed start deletes the pod), then follow, settle and end it.

        ``api_base`` is told to the pod's watchdog when the API is not Runpod's own;
        ``pods`` is a fresh listing of the account's pods, when the caller has one.
        """
        session = self.session
        training = self.settings.training
        warning = reasoning_template_warning(training)
        if warning:
            session.front.warn(warning)
        await self.warn_orphans(pods)
        run_id = new_run_id()
        await session.journal.create(
            ev.RunCreated(
                run_id=run_id,
                target=name,
                kind="runpod",
                remote_dir=f"{self.ctx.root.rstrip('/')}/{remote_run_dir(run_id)}",
                settings_digest=self.settings.settings_digest(),
                base_model=training.base_model,
                adapter=training.adapter,
                keep_pod=keep,
            )
        )
        try:
            data = check_data(session.project_dir)
            prepare_run_dir(session.run_dir(run_id), session.project_dir, training, data)
        except DataError as error:
            await self._fail_before_job(run_id, str(error))
            raise
        except OSError as error:
            # The run's directory cannot be written (a full disk, permissions): say so plainly.
            message = f"could not prepare runs/{run_id}: {error.strerror or error}"
            await self._fail_before_job(run_id, message)
            raise OverbrainerError(f"run {run_id} failed: {message}") from error
        try:
            # Runpod's clock is known from the listing above: say so if this one is far off.
            await note_clock(self.ctx, run_id)
            async with open_provisioned(
                self.ctx, run_id, self.spec, keep=keep, api_base=api_base
            ) as ready:
                return await self._run(run_id, ready.executor)
        except ProvisionInterrupted:
            await self._fail_before_job(run_id, "interrupted before the job started")
            raise
        except ProvisionCancelled as cancelled:
            # Asked from another terminal (or checkout) through the log; the pod is deleted.
            await self._fail_before_job(run_id, cancelled.reason, outcome=RunState.cancelled)
            state = await session.journal.state(run_id)
            session.front.result(summary_line(run_id, state.run.state, None, None))
            raise OverbrainerError(str(cancelled)) from None
        except OverbrainerError as error:
            await self._fail_before_job(run_id, f"could not start: {error}")
            raise

    async def warn_orphans(self, pods: list[Pod] | None = None) -> None:
        """Warn about the pods nothing will delete, from one listing (``pods``, or a fresh
        one); never deletes."""
        front = self.session.front
        if pods is None:
            try:
                pods = await self.ctx.client.list_pods()
            except OverbrainerError as error:
                front.warn(f"cannot look for leftover pods: {error}")
                return
        states: dict[str, RunLog] = {}
        for run_id in sorted({r for r in map(run_of, pods) if r is not None}):
            try:
                states[run_id] = await self.session.journal.state(run_id)
            except UnknownRun:
                continue
        try:
            starts = await look(self.ctx, states)
        except OverbrainerError as error:  # a warning's extra: training goes on without it
            front.warn(f"cannot tell which runs were abandoned while starting: {error}")
            starts = {}
        abandoned = {run_id for run_id, start in starts.items() if start.abandoned}
        for warning in orphan_warnings(rows(pods, states.get, abandoned=abandoned)):
            front.warn(warning)

    async def _run(self, run_id: str, executor: Executor) -> int:
        """Start the job of the new run on its ready pod and follow it."""
        session = self.session
        if session.interrupts.interrupted:
            return await self._abandon(run_id)
        await self._before_start(run_id)
        job = self.job(run_id, executor)
        try:
            await service.start(
                session,
                job,
                pod_commands(self.settings, self.spec),
                env=job_environment(self.settings.training),
                secrets=secrets_of(self.settings),
            )
        except OverbrainerError:
            # No job runs (or none that anything recorded): the pod has nothing left to do.
            await self._release(run_id, "failed")
            raise
        state = await session.journal.state(run_id)
        pod = state.pod
        if pod.keep:
            # Only now: until the job started, Ctrl-C or a failure deleted the pod.
            session.front.warn(messages.keep_warning(pod, run_id))
        assert pod.pod_id is not None  # provisioning recorded it
        pod_id = pod.pod_id
        try:
            state = await session.journal.append(
                run_id, lambda s: decisions.pod_job_running(s, pod_id)
            )
        except OverbrainerError as error:
            # The job runs on a billed pod: the error says how to reach or remove it.
            raise OverbrainerError(f"{messages.job_on_pod(pod, run_id)} ({error})") from error
        if session.interrupts.interrupted:
            await service.detach(session, run_id)
            raise Interrupted(self._detached(state))
        return await self._follow(job)

    async def _before_start(self, run_id: str) -> None:
        """The last look at the log before the job starts: a cancel asked through it is
        taken (the pod deleted, the run cancelled), and a run another command ended (or
        whose pod it is deleting) starts nothing.

        Raises:
            ProvisionCancelled: the cancel was taken.
            ProvisionOvertaken: another command ended the run or is deleting its pod.
        """
        session = self.session
        state = await session.journal.state(run_id)
        pod_id = state.pod.pod_id
        verdict = decisions.before_start(state)
        if verdict is decisions.Before.overtaken:
            await self._release(run_id, "failed")
            state = await session.journal.state(run_id)
            who = await ended_by(session, run_id) if state.final else ""
            why = f": {state.run.message}" if state.final and state.run.message else ""
            done = f"was {state.run.state}{who}{why}" if state.final else "lost its pod"
            raise ProvisionOvertaken(
                f"run {run_id} {done} while this command was starting its job; nothing more "
                f"is done here (see `overbrainer events {run_id}`)"
            )
        if verdict is decisions.Before.cancel:
            await session.journal.append(run_id, decisions.take_cancel)
            asker = await session.journal.asker_of_cancel(run_id)
            session.front.info(
                f"train: cancel of run {run_id} requested{asker}: not starting its job"
            )
            await self._release(run_id, "cancelled")
            reason = f"cancelled before its job started{asker}"
            raise ProvisionCancelled(
                f"run {run_id} {reason}; pod {pod_id} was deleted", reason=reason
            )

    async def _abandon(self, run_id: str) -> int:
        """Ctrl-C came once the pod was ready but before the job started: delete the pod
        and fail the run."""
        await self._release(run_id, "interrupted")
        await self.session.journal.append(
            run_id,
            lambda s: decisions.fail_before_job(
                s, "interrupted before the job started", stage="starting the job"
            ),
        )
        raise Interrupted(interrupted_before_job(await self.session.journal.state(run_id)))

    async def _release(self, run_id: str, reason: ev.DeleteReason) -> None:
        await release(self.ctx, run_id, reason)

    async def _fail_before_job(
        self, run_id: str, message: str, *, outcome: RunState = RunState.failed
    ) -> None:
        """Fail (or end as ``outcome``) a run whose job never started (nothing if it did,
        or if it ended).

        Called while an error is on its way out: when the store cannot take the record,
        that error stays the one the user reads (the store's trouble is only warned of)."""
        try:
            await self.session.journal.append(
                run_id, lambda s: decisions.fail_before_job(s, message, outcome=outcome)
            )
        except StoreError as error:
            self.session.front.warn(f"{error} (while recording that run {run_id} failed)")

    def _detached(self, state: RunLog) -> str:
        return messages.detached(state.pod, state.run.run_id, self.spec.retrieve_grace_minutes)

    # -- follow, settle, end --

    async def _follow(self, job: service.Job) -> int:
        """Follow a started run, then settle it, end its pod and report its outcome.
        Ctrl-C detaches: the job and the pod keep running."""
        session = self.session
        run_id = job.run_id
        state = await session.journal.state(run_id)
        if state.pod.keep:
            job = self.job(run_id, job.executor, keep=True)
        watched = await self._watch(job, state)
        if isinstance(watched, service.EndedMeanwhile):
            # Another follower won the race to the end (it may have deleted the pod).
            return await report_ended_meanwhile(session, watched.state)
        if watched is _DETACHED:
            state = await service.detach(session, run_id)
            raise Interrupted(self._detached(state))
        if watched is _PAST_DEADLINE:
            return await self._past_deadline(run_id)
        assert isinstance(watched, Followed)
        try:
            state, retrieval = await service.settle(session, job, watched)
        except OverbrainerError as error:
            raise OverbrainerError(f"{error}; {attach_hint(run_id)}") from error
        return await self._end(job, state, watched.summary, retrieval)

    async def _watch(
        self, job: service.Job, state: RunLog
    ) -> Followed | _Stop | service.EndedMeanwhile:
        """``service.watch`` raced against Ctrl-C and against the pod's deadline plus
        :data:`DEADLINE_SLACK` (a kept pod has no deadline). Never calls the API."""
        left = math.inf
        deadline = parse_utc(state.pod.deadline)
        if not state.pod.keep and deadline is not None:
            # Both on Runpod's clock, and from here on trio's monotonic one: no change of
            # this machine's wall clock moves it.
            now = self.ctx.server_now()
            left = max(0.0, (deadline - now).total_seconds() + DEADLINE_SLACK)
        if left <= 0 and await self._ended(job):
            # Attached past the deadline to a job that ended: its results come home first
            # (this takes moments), then the pod is ended as usual.
            left = math.inf
        spend = partial(spend_so_far, state.pod, self.ctx)

        async def work() -> Followed | _Stop:
            with trio.move_on_after(left):
                return await service.watch(self.session, job, poll=self.poll, spend=spend)
            return _PAST_DEADLINE

        try:
            finished = await self.session.interrupts.race(work)
        except service.EndedMeanwhile as ended:
            return ended
        except service.FollowLost as lost:
            ended_state = await self._ended_since(job.run_id, state)
            if ended_state is not None:
                return service.EndedMeanwhile(ended_state)
            return await self._lost(job.run_id, state, lost)
        return _DETACHED if finished is None else finished.value

    async def _ended_since(self, run_id: str, before: RunLog) -> RunLog | None:
        """The run's fresh state if another command ended it since ``before`` was read."""
        if before.final:
            return None
        try:
            state = await self.session.journal.state(run_id)
        except StoreError:
            return None
        return state if state.final else None

    async def _ended(self, job: service.Job) -> bool:
        """Whether the job has ended, as far as one look tells (unreachable: no)."""
        try:
            return (await job.executor.status(job.remote_dir)).ended
        except ExecError:
            return False

    async def _lost(self, run_id: str, state: RunLog, lost: service.FollowLost) -> _Stop:
        """Following lost the pod: the run fails only if the pod is confirmed gone."""
        session = self.session
        pod = state.pod
        assert pod.pod_id is not None
        pod_id = pod.pod_id
        try:
            checked = await session.interrupts.race(partial(confirm_gone, self.ctx, pod_id))
        except OverbrainerError as error:
            await service.detach(session, run_id, reason="pod unreachable")
            raise OverbrainerError(
                f"{lost}; whether pod {pod_id} still exists is unknown ({error}): check "
                f"`overbrainer pod ls`, delete it with `overbrainer pod rm {run_id}`"
            ) from error
        if checked is None:
            return _DETACHED
        if checked.value:
            await self._record_gone(run_id, pod_id)
            deadline = parse_utc(pod.deadline)
            if not pod.keep and deadline is not None and self.ctx.server_now() >= deadline:
                # Runpod's clock (just read again) says why: the watchdog kept the bound.
                raise OverbrainerError(
                    f"run {run_id} failed: pod {pod_id} reached its deadline ({pod.deadline}, "
                    f"max_hours = {self._max_hours(pod):g} after its creation) and its watchdog "
                    "deleted it, and its job went with it; raise max_hours of target "
                    f"{state.run.target} in overbrainer.toml if the job needs longer"
                )
            raise OverbrainerError(
                f"run {run_id} failed: pod {pod_id} no longer exists (Runpod answered "
                "'no such pod' again and again and no longer lists it), and its job went with "
                "it; start again with `overbrainer train`"
            )
        await service.detach(session, run_id, reason="pod unreachable")
        raise OverbrainerError(
            f"{lost}; pod {pod_id}{messages.rate(pod)} is still there: delete it with "
            f"`overbrainer pod rm {run_id}`"
        )

    async def _record_gone(self, run_id: str, pod_id: str) -> RunLog:
        """Record the run's pod found gone; a run still running fails with it (its job went
        with the pod)."""

        async def work() -> RunLog:
            return await self.session.journal.append(
                run_id, lambda s: decisions.pod_gone(s, pod_id)
            )

        state = await self.session.interrupts.shield(
            f"recording that pod {pod_id} is gone", 60.0, work
        )
        forget_key_if_done(self.ctx, run_id, state)
        return state

    def _max_hours(self, pod: PodView) -> float:
        """The bound the pod was created with (the target's, for logs that do not say)."""
        for attempt in reversed(pod.attempts):
            if attempt.get("pod_id") == pod.pod_id and attempt.get("max_hours") is not None:
                return float(attempt["max_hours"])
        return self.spec.max_hours

    async def _past_deadline(self, run_id: str) -> int:
        """The job was still followed past the pod's deadline (plus the slack): delete the
        pod (its watchdog should have) and fail the run."""
        session = self.session
        state = await session.journal.state(run_id)
        pod = state.pod
        assert pod.pod_id is not None
        pod_id = pod.pod_id
        message = (
            f"the job was still running {DEADLINE_SLACK / 60:g} min past the deadline of pod "
            f"{pod_id} ({pod.deadline}, max_hours = {self._max_hours(pod):g}); overbrainer "
            "deleted the pod"
        )
        problem: OverbrainerError | None = None
        try:
            await delete_pod(self.ctx, run_id, pod_id, "deadline")
        except OverbrainerError as error:
            problem = error
        state = await session.journal.append(
            run_id, lambda s: decisions.fail_past_deadline(s, message)
        )
        forget_key_if_done(self.ctx, run_id, state)
        metrics = state.run.metrics
        summary = MetricsSummary.from_dict(metrics) if metrics else None
        session.front.result(summary_line(run_id, state.run.state, summary, None))
        if problem is not None:
            raise OverbrainerError(f"run {run_id} failed: {message}, but: {problem}")
        raise OverbrainerError(
            f"run {run_id} failed: {message}; raise max_hours of target {state.run.target} in "
            "overbrainer.toml if the job needs longer"
        )

    async def _end(
        self,
        job: service.Job,
        state: RunLog,
        summary: MetricsSummary | None,
        retrieval: Retrieval,
    ) -> int:
        """End the pod of a run whose job ended, then print the outcome — even when the pod
        could not be ended, whose error then wins: the pod may still bill (seed: ``end``,
        ``ended``)."""
        session = self.session
        run_id = job.run_id
        try:
            ending = await end_pod(
                self.ctx,
                run_id,
                job.executor,
                retrieved=retrieval.ok,
                retrieve_grace_minutes=self.spec.retrieve_grace_minutes,
                problem=retrieval.problem,
            )
        except OverbrainerError as pod_error:
            try:
                self._report(await session.journal.state(run_id), summary, retrieval)
            except OverbrainerError as run_error:
                session.front.warn(str(run_error))
            raise OverbrainerError(
                f"run {run_id} ended, but not its pod: {pod_error}"
            ) from pod_error
        state = await session.journal.state(run_id)
        line = messages.report_line(state.pod, ending, run_id)
        if line is not None:
            session.front.warn(line)
        if retrieval.stopped:
            raise service.stopped_collection(job)
        return self._report(state, summary, retrieval)

    def _report(self, state: RunLog, summary: MetricsSummary | None, retrieval: Retrieval) -> int:
        code = report(self.session, state, summary, retrieval.ok)
        if not retrieval.ok:
            run_id = state.run.run_id
            raise OverbrainerError(
                f"the results of run {run_id} could not be retrieved ({retrieval.problem}); "
                f"{attach_hint(run_id)} to collect them"
            )
        return code

    # -- attach and cancel --

    async def attach(self, state: RunLog) -> int:
        """Follow a started run again through a fresh endpoint, then collect it and end its
        pod. A pod that is gone: the run is summarized from its local files (failed if it
        was still running). A stopped pod: ``pod rm``."""
        _require_job(state)
        run_id = state.run.run_id
        reached = await self._reach(state)
        if reached is None:
            return await self._from_local_files(run_id)
        async with contextlib.AsyncExitStack() as stack:
            try:
                executor = await self._connect(stack, reached, state)
            except OverbrainerError:
                # Another follower may have ended the run and its pod (and forgotten the
                # key) since this command looked: its outcome is the one to report.
                ended = await self._ended_since(run_id, state)
                if ended is None:
                    raise
                return await report_ended_meanwhile(self.session, ended)
            job = self.job(run_id, executor, keep=state.pod.keep)
            state = await self.session.journal.state(run_id)
            if state.run.state == RunState.running:
                return await self._follow(job)
            retrieval = await self._collect_again(job, state)
            state = await self.session.journal.state(run_id)
            return await self._end(job, state, None, retrieval)

    async def attach_starting(self, state: RunLog) -> int:
        """``train attach`` of a run still starting its pod: one whose starter is provably
        gone (*abandoned while starting*) is ended — its pods deleted, the run failed; one
        whose starter may be alive is left to it."""
        run_id = state.run.run_id
        start = await start_of(self.ctx, state)
        if start is None:
            # It got its job (or ended) since it was read.
            return await self.attach(await self.session.journal.state(run_id))
        if not start.abandoned:
            raise OverbrainerError(
                f"{still_starting(start)}; `overbrainer train attach {run_id}` follows it "
                "once its job started"
            )
        self.session.front.info(
            f"train: run {run_id} was abandoned while starting its pod: {start.who()} is "
            f"gone ({start.why}); ending it"
        )
        await self._end_abandoned(run_id, RunState.failed, f"train attach {run_id}")
        return report(self.session, await self.session.journal.state(run_id), None, False)

    async def _end_abandoned(
        self, run_id: str, outcome: RunState, by: str
    ) -> None:
        """Delete every pod of a run abandoned while starting and end it ``outcome``."""
        removal = await remove_run_pods(self.ctx, run_id, force=False, outcome=outcome, command=by)
        for deleted in removal.deleted:
            self.session.front.result(deleted_line(run_id, deleted).replace("pod rm:", "train:"))
        problems = removal.problems()
        if problems:
            raise OverbrainerError("; ".join(problems))

    async def cancel_starting(self, state: RunLog) -> int:
        """``train cancel`` of a run still starting its pod.

        Its starter provably gone, the run is ended here (pods deleted, run cancelled).
        Otherwise the cancel is asked through the log (``run.CancelRequested``, relay
        ``asked``): the provisioning walk takes it between two steps, deletes its pod and
        cancels the run; a run that got its job meanwhile has it taken by its follower.
        This command waits for the end — and ends the run itself if the starter dies
        meanwhile.
        """
        session = self.session
        run_id = state.run.run_id
        start = await start_of(self.ctx, state)
        if start is None:
            state = await session.journal.state(run_id)
            if state.final:
                return await self._already_ended(state)
            return await self.cancel(state)
        if start.abandoned:
            session.front.info(
                f"train: run {run_id} was abandoned while starting its pod: {start.who()} is "
                f"gone ({start.why}); ending it"
            )
            await self._end_abandoned(run_id, RunState.cancelled, f"train cancel {run_id}")
            session.front.result(f"train: run {run_id} cancelled")
            return 0
        await session.journal.append(run_id, decisions.ask_cancel)
        session.front.info(
            f"train: run {run_id} is starting its pod ({start.who()}): asked it to stop and "
            "delete its pod; waiting"
        )
        finished = await session.interrupts.race(lambda: self._wait_starting(run_id))
        if finished is None:
            raise Interrupted(
                f"stopped waiting; the cancel of run {run_id} stays requested: "
                f"`overbrainer events {run_id} --follow` shows when it is done"
            )
        outcome = finished.value
        if isinstance(outcome, Start):
            # The starter died with the request pending: nothing else will take it.
            session.front.info(
                f"train: {outcome.who()} is gone ({outcome.why}) with the cancel pending; "
                "ending the run here"
            )
            await self._end_abandoned(run_id, RunState.cancelled, f"train cancel {run_id}")
            session.front.result(f"train: run {run_id} cancelled")
            return 0
        if outcome is None:
            state = await session.journal.state(run_id)
            if state.run.state == RunState.running and not lives_elsewhere(session, state):
                # Its job started, and nothing follows it to take the request: stop the
                # job from here, as any cancel of a started run does.
                return await self.cancel(state)
            raise OverbrainerError(
                f"the cancel of run {run_id} is recorded, but {start.who()}, which is "
                f"starting it, did not take it; it is taken at the next step of that "
                f"command, or end the run with `overbrainer pod rm {run_id} --force`"
            )
        if outcome.run.state == RunState.cancelled:
            session.front.result(
                f"train: run {run_id} cancelled by the command starting it, {start.who()}"
            )
        else:
            message = f" ({outcome.run.message})" if outcome.run.message else ""
            session.front.result(
                f"train: run {run_id} {outcome.run.state} before the cancel took effect{message}"
            )
        return 0

    async def _wait_starting(self, run_id: str) -> RunLog | Start | None:
        """Wait for a run asked to cancel while starting: its final state; its starter's
        :class:`Start` once that is provably gone; None when nobody took the request in
        time (the longest step of a walk that does not look at the log, and a few polls)."""
        timing = self.ctx.timing
        ack_wait = (
            5.0
            + 10 * max(timing.poll, self.poll)
            + timing.create_limit
            + max(timing.reconcile_after, default=0.0)
            + timing.delete_limit
            + START_LIMIT
        )
        taken_by = trio.current_time() + ack_wait
        limit = taken_by + timing.delete_limit + CANCEL_LIMIT + COLLECT_LIMIT
        while trio.current_time() < limit:
            state = await self.session.journal.state(run_id)
            if state.final:
                return state
            start = await start_of(self.ctx, state)
            if start is not None and start.abandoned:
                return start
            if state.run.cancel_pending and trio.current_time() >= taken_by:
                return None
            await trio.sleep(min(timing.poll, self.poll))
        return None

    async def _collect_again(self, job: service.Job, state: RunLog) -> Retrieval:
        """The results of an ended run, again (nothing to do for a kept pod whose results
        are all home)."""
        run = state.run
        if state.pod.status == PodState.kept and run.artifacts is not None and not run.note:
            return Retrieval(ok=True)
        return await service.recollect(self.session, job)

    async def cancel(self, state: RunLog) -> int:
        """Stop the run's job (shielded), collect what it left, then end its pod. A job that
        had already ended is left alone, with a pointer to ``train attach``."""
        session = self.session
        run_id = state.run.run_id
        reached = await self._reach(state)
        if reached is None:
            state = await session.journal.state(run_id)
            raise OverbrainerError(
                f"run {run_id} has no pod left: nothing to cancel (the run is "
                f"{state.run.state}; see `overbrainer events {run_id}`)"
            )
        async with contextlib.AsyncExitStack() as stack:
            try:
                executor = await self._connect(stack, reached, state)
                job = self.job(run_id, executor, keep=state.pod.keep)
                state, job_state, retrieval = await service.cancel(session, job)
            except OverbrainerError:
                # Lost a race with the run's follower: it ended the run (and its pod).
                ended = await self._ended_since(run_id, state)
                if ended is None:
                    raise
                return await self._already_ended(ended)
            if retrieval is None:
                session.front.result(
                    f"train: the job of run {run_id} had already ended "
                    f"({job_state.status.value}): collect it with "
                    f"`overbrainer train attach {run_id}`"
                )
                return 0
            note = "" if retrieval.ok else f" ({service.NOT_RETRIEVED})"
            try:
                ending = await end_pod(
                    self.ctx,
                    run_id,
                    executor,
                    retrieved=retrieval.ok,
                    retrieve_grace_minutes=self.spec.retrieve_grace_minutes,
                    problem=retrieval.problem,
                )
            except OverbrainerError as pod_error:
                session.front.result(f"train: run {run_id} cancelled{note}")
                raise OverbrainerError(
                    f"run {run_id} ended, but not its pod: {pod_error}"
                ) from pod_error
            session.front.result(f"train: run {run_id} cancelled{note}")
            line = messages.report_line((await session.journal.state(run_id)).pod, ending, run_id)
            if line is not None:
                session.front.warn(line)
            if retrieval.stopped:
                raise service.stopped_collection(job)
            return 0

    async def _already_ended(self, state: RunLog) -> int:
        """``train cancel`` of a run that ended before the cancel took effect: say how, and
        by whom; nothing is left to do."""
        run_id = state.run.run_id
        who = await ended_by(self.session, run_id)
        message = f" ({state.run.message})" if state.run.message else ""
        self.session.front.result(
            f"train: run {run_id} had already ended ({state.run.state}){who}{message}; "
            "nothing to cancel"
        )
        return 0

    async def _reach(self, state: RunLog) -> Reached | None:
        """A fresh look at the run's pod: how to reach it now (its endpoint may have
        changed: recorded, and ``ssh/config`` rewritten) and since when it runs, or None
        when it is gone (recorded, and a running run failed). A stopped or unreachable pod
        is an error naming the way out."""
        run_id = state.run.run_id
        pod = state.pod
        pod_id = pod.pod_id
        if pod_id is None or pod.deleted(pod_id):
            return None
        client = self.ctx.client
        remote = await client.get_pod(pod_id)
        await note_clock(self.ctx, run_id)
        if remote is None:
            if await confirm_gone(self.ctx, pod_id):
                await self._record_gone(run_id, pod_id)
                return None
            remote = await client.get_pod(pod_id)
            if remote is None:
                raise OverbrainerError(
                    f"Runpod answers inconsistently about pod {pod_id} of run {run_id}; try "
                    f"`overbrainer train attach {run_id}` again later"
                )
        if remote.status is PodStatus.TERMINATED:
            await self._record_gone(run_id, pod_id)
            return None
        status = remote.raw_status or remote.status.value
        if remote.status in (PodStatus.EXITED, PodStatus.ERROR):
            raise OverbrainerError(messages.stopped(pod, run_id, status))
        try:
            endpoint = remote.ssh_endpoint()
        except UnsafeSshEndpoint as error:
            raise OverbrainerError(
                f"{error}; not connecting. Delete the pod with `overbrainer pod rm {run_id}`"
            ) from None
        if endpoint is None or remote.status is not PodStatus.RUNNING:
            raise OverbrainerError(messages.not_reachable_yet(pod, run_id, status))
        if pod.host_public_key is None:
            raise OverbrainerError(
                f"run {run_id} has no pinned host key for pod {pod_id}: it cannot be reached "
                f"safely; delete it with `overbrainer pod rm {run_id}`"
            )
        seen = {"host": endpoint.host, "port": endpoint.port, "user": endpoint.username}
        ssh_dir = self.session.run_dir(run_id) / "ssh"
        if pod.endpoint != seen:
            fresh = ev.EndpointSeen(
                pod_id=pod_id, host=endpoint.host, port=endpoint.port, user=endpoint.username
            )
            # Decided on the fresh log: a second follower that saw the same endpoint first
            # has recorded it already.
            await self.session.journal.append(run_id, lambda s: decisions.endpoint_seen(s, fresh))
            try:
                write_ssh_config(ssh_dir, run_id, endpoint.host, endpoint.port, endpoint.username)
            except OSError as error:
                # Only `ssh -F` needs the file; this command reaches the pod without it.
                self.session.front.warn(
                    f"cannot rewrite runs/{run_id}/ssh/config for pod {pod_id}'s new endpoint "
                    f"({error.strerror or error}); `ssh -F` with it reaches the old one"
                )
        access = PodAccess(endpoint, client_key_path(ssh_dir), pod.host_public_key, self.ctx.root)
        return Reached(access, remote.started_at)

    async def _connect(
        self, stack: contextlib.AsyncExitStack, reached: Reached, state: RunLog
    ) -> Executor:
        """The SSH connection to the run's pod. One that refuses (a pod just restarted, its
        sshd not up yet) is tried again, every ``poll``, for as long as a booting pod is
        given from its start (a pod up for longer: a few times); a signal stops waiting."""
        assert self.ctx.connect is not None
        run_id = state.run.run_id
        access = reached.access
        timing = self.ctx.timing
        try:
            try:
                return await stack.enter_async_context(self.ctx.connect(access))
            except TargetUnreachable as refused:
                within = connect_again_within(
                    reached.started_at,
                    self.ctx.server_now(),
                    timing.ssh_within,
                    timing.connect_attempts * timing.poll,
                )
                self.session.front.info(
                    f"pod {state.pod.pod_id} of run {run_id} does not answer SSH at "
                    f"{access.endpoint.host}:{access.endpoint.port} yet ({refused}); it may "
                    f"be starting: trying again for up to {duration_text(within)}"
                )
                deadline = trio.current_time() + within
                while True:
                    slept = await self.session.interrupts.race(partial(trio.sleep, timing.poll))
                    if slept is None:
                        raise Interrupted(
                            f"interrupted while pod {state.pod.pod_id} of run {run_id} did not "
                            f"answer SSH yet: its job keeps running; "
                            f"`overbrainer train attach {run_id}` reaches it again"
                        ) from None
                    try:
                        return await stack.enter_async_context(self.ctx.connect(access))
                    except TargetUnreachable:
                        if trio.current_time() >= deadline:
                            raise
        except ExecError as error:
            raise OverbrainerError(
                f"cannot reach pod {state.pod.pod_id} of run {run_id} at "
                f"{access.endpoint.host}:{access.endpoint.port} ({error}); try "
                f"`overbrainer train attach {run_id}` again, or delete the pod with "
                f"`overbrainer pod rm {run_id}`"
            ) from error

    async def _from_local_files(self, run_id: str) -> int:
        """Report a run whose pod is gone from what is on this machine; a run still
        running is failed first, since its job went with the pod."""
        state = await self.session.journal.state(run_id)
        pod_id = state.pod.pod_id
        if pod_id is not None and not state.final:
            state = await self._record_gone(run_id, pod_id)
        self.session.front.info(
            f"pod {pod_id or '(none)'} of run {run_id} no longer exists: from the local files"
        )
        return report(self.session, state, None, state.run.artifacts is not None)
