"""``train``, ``train attach`` and ``train cancel`` on a machine target (local or ssh).

The job runs in its own session on the target, so Ctrl-C never reaches it: Ctrl-C while
following leaves it running and says how to follow it again.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from overbrainer.config.model import LocalTarget, Settings, SshTarget
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.ids import new_run_id
from overbrainer.events.types import RunState
from overbrainer.exec.base import ContainerRuntime, Executor, NativeRuntime, Runtime
from overbrainer.lifecycle import service
from overbrainer.lifecycle.service import Job, attach_hint
from overbrainer.projections.summary import attach_header
from overbrainer.session.session import Session, ended_by
from overbrainer.train.axolotl import (
    cpu_overridden,
    job_environment,
    prepare_run_dir,
    trainer_commands,
)
from overbrainer.train.data import DataError, check_data
from overbrainer.train.metrics import MetricsSummary, summary_line

MachineTarget = LocalTarget | SshTarget


@dataclass(frozen=True)
class Plan:
    """How a run's job is started on its target."""

    target_name: str
    target: MachineTarget
    host: str | None = None

    @property
    def runtime(self) -> Runtime:
        """Native (optionally from a venv) or in a container."""
        if self.target.runtime == "docker":
            assert self.target.image is not None  # the configuration requires it
            return ContainerRuntime(engine=self.target.engine, image=self.target.image)
        return NativeRuntime(venv=self.target.venv)

    @property
    def axolotl(self) -> str:
        """The trainer executable."""
        if self.target.runtime == "native" and self.target.venv:
            return f"{self.target.venv.rstrip('/')}/bin/axolotl"
        return "axolotl"


def plan_for(settings: Settings, target_name: str) -> Plan:
    """The plan for a machine target of ``settings``."""
    target = settings.target_of(target_name)
    if isinstance(target, SshTarget):
        return Plan(target_name, target, host=settings.require_host(target_name))
    if isinstance(target, LocalTarget):
        return Plan(target_name, target)
    raise OverbrainerError(f"target {target_name} is not a local or ssh target")


@asynccontextmanager
async def open_job(
    session: Session, plan: Plan, run_id: str, *, raced: bool = False
) -> AsyncIterator[Job]:
    """Connect to the run's target; the job's directory is ``runs/<id>`` under its root.

    ``raced``: Ctrl-C stops the connecting (nothing runs on the target yet, and a host that
    does not answer would otherwise hold the command until the connect timeout).
    """
    remote_dir = f"runs/{run_id}"
    if isinstance(plan.target, SshTarget):
        from overbrainer.exec.ssh import UserHost, open_ssh

        assert plan.host is not None
        async with open_ssh(
            UserHost(plan.host), workdir=plan.target.workdir, runtime=plan.runtime, connect=False
        ) as executor:
            if not raced:
                await executor.connect()
            elif await session.interrupts.race(executor.connect) is None:
                raise _StoppedBeforeJob("connecting to the target")
            where = f"{plan.target.workdir.rstrip('/')}/{remote_dir}"
            wait = f"they stay in {where} on {executor.location}"
            yield Job(run_id, executor, remote_dir, results_wait=wait)
        return
    from overbrainer.exec.local import LocalExecutor

    local: Executor = LocalExecutor(session.project_dir, runtime=plan.runtime)
    try:
        yield Job(run_id, local, remote_dir, in_place=True)
    finally:
        await local.aclose()


def secrets_of(settings: Settings) -> dict[str, str]:
    """What reaches only the job's environment: the Hugging Face token, if set."""
    if settings.hf_token is None:
        return {}
    token = settings.hf_token.get_secret_value()
    return {"HF_TOKEN": token, "HUGGING_FACE_HUB_TOKEN": token}


async def train(session: Session, settings: Settings, plan: Plan) -> int:
    """Create a run, start its job, follow it to its end and bring the results home."""
    run_id = new_run_id()
    training = settings.training
    replaced = cpu_overridden(training) if plan.target.device == "cpu" else []
    if replaced:
        session.front.warn(
            f'target {plan.target_name} has device = "cpu": training.axolotl_extra\'s '
            f"{', '.join(replaced)} {'is' if len(replaced) == 1 else 'are'} replaced by false "
            "for this run"
        )
    await session.journal.create(
        ev.RunCreated(
            run_id=run_id,
            target=plan.target_name,
            kind=plan.target.kind,
            remote_dir=(
                f"{plan.target.workdir}/runs/{run_id}"
                if isinstance(plan.target, SshTarget)
                else f"runs/{run_id}"
            ),
            settings_digest=settings.settings_digest(),
            base_model=training.base_model,
            adapter=training.adapter,
        )
    )
    try:
        data = check_data(session.project_dir)
        prepare_run_dir(
            session.run_dir(run_id),
            session.project_dir,
            training,
            data,
            device=plan.target.device,
        )
    except DataError as error:
        await _fail_before_job(session, run_id, str(error))
        raise
    except OSError as error:
        # The run's directory cannot be written (a full disk, permissions): say so plainly.
        message = f"could not prepare runs/{run_id}: {error.strerror or error}"
        await _fail_before_job(session, run_id, message)
        raise OverbrainerError(f"run {run_id} failed: {message}") from error
    try:
        # Inside the try: a Ctrl-C noted while the run was being created ends it here too.
        _stop_if_interrupted(session, run_id, "connecting to the target")
        async with open_job(session, plan, run_id, raced=True) as job:
            _stop_if_interrupted(session, run_id, "starting the job")
            await service.start(
                session,
                job,
                trainer_commands(training, plan.axolotl),
                env=job_environment(training, device=plan.target.device),
                secrets=secrets_of(settings),
                container=_container(plan, run_id),
            )
            return await _follow_and_settle(session, job)
    except _StoppedBeforeJob as stop:
        await _fail_before_job(
            session, run_id, "interrupted before the job started", stage=stop.stage
        )
        raise Interrupted(
            f"interrupted: run {run_id} stopped before its job started; nothing runs on the target"
        ) from None
    except OverbrainerError as error:
        await _fail_before_job(session, run_id, f"could not start: {error}")
        raise


def _container(plan: Plan, run_id: str) -> str | None:
    return f"overbrainer-{run_id}" if plan.target.runtime == "docker" else None


class _StoppedBeforeJob(Exception):
    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


def _stop_if_interrupted(session: Session, run_id: str, stage: str) -> None:
    if session.interrupts.interrupted:
        raise _StoppedBeforeJob(stage)


async def _fail_before_job(
    session: Session, run_id: str, message: str, stage: str | None = None
) -> None:
    try:
        await session.journal.append(
            run_id, lambda s: decisions.fail_before_job(s, message, stage=stage)
        )
    except StoreError as error:
        # An error is on its way out: it stays the one the user reads.
        session.front.warn(f"{error} (while recording that run {run_id} failed)")


async def _follow_and_settle(session: Session, job: Job) -> int:
    """Follow a started job (Ctrl-C detaches), then settle and report its outcome."""
    if session.interrupts.interrupted:
        await service.detach(session, job.run_id)
        raise Interrupted(_detached(job))
    try:
        followed = await service.follow(session, job)
    except service.EndedMeanwhile as ended:
        return await report_ended_meanwhile(session, ended.state)
    except service.FollowLost:
        await service.detach(session, job.run_id, reason="target unreachable")
        raise
    if followed is None:
        await service.detach(session, job.run_id)
        raise Interrupted(_detached(job))
    try:
        state, retrieval = await service.settle(session, job, followed)
    except StoreError as error:
        # The job ended but its end could not be recorded: attach records it later.
        raise StoreError(f"{error}; once it is back, {attach_hint(job.run_id)}") from error
    if retrieval.stopped:
        raise service.stopped_collection(job)
    return report(session, state, followed.summary, retrieval.ok)


def _detached(job: Job) -> str:
    return (
        f"interrupted: run {job.run_id} keeps running on {job.executor.location}; "
        f"{attach_hint(job.run_id)}, or stop it with `overbrainer train cancel {job.run_id}`"
    )


def report(session: Session, state: RunLog, summary: MetricsSummary | None, retrieved: bool) -> int:
    """Print the final line; a run that did not succeed is an error (exit 1)."""
    run = state.run
    if summary is None and run.metrics:
        summary = MetricsSummary.from_dict(run.metrics)
    if run.state == RunState.running:
        why = f" ({run.note})" if run.note else ""
        raise OverbrainerError(
            f"the job of run {run.run_id} ended but its results could not be retrieved and "
            f"verified{why}; {attach_hint(run.run_id)} to collect them"
        )
    output = f"runs/{run.run_id}/output" if run.state == RunState.succeeded and retrieved else None
    session.front.result(summary_line(run.run_id, run.state, summary, output))
    if run.state == RunState.succeeded:
        return 0
    note = f" ({run.note})" if run.note else ""
    why = f": {run.message}" if run.message and run.message != run.state else ""
    raise OverbrainerError(f"run {run.run_id} {run.state}{why}{note}")


async def report_ended_meanwhile(session: Session, state: RunLog) -> int:
    """Report a run another command ended while this one followed it — what that command
    did, then the run's real outcome (exit 0 only if it succeeded)."""
    run_id = state.run.run_id
    who = await ended_by(session, run_id)
    session.front.info(f"train: run {run_id} was ended{who} while this command followed it")
    return report(session, state, None, state.run.artifacts is not None and not state.run.note)


async def attach(session: Session, settings: Settings, state: RunLog) -> int:
    """Follow a started run again, then collect it; a run already ended whose results are
    missing is collected again."""
    state = await _settle_start(session, settings, state)
    run = state.run
    if run.job is None:
        raise OverbrainerError(
            f"run {run.run_id} has no job: it stopped before its job started ({run.message})"
        )
    session.front.info(attach_header(state))
    plan = plan_for(settings, run.target)
    async with open_job(session, plan, run.run_id) as job:
        if run.state == RunState.running:
            return await _follow_and_settle(session, job)
        if run.artifacts is None or run.note:
            retrieval = await service.recollect(session, job)
            if retrieval.stopped:
                raise service.stopped_collection(job)
            if not retrieval.ok:
                raise OverbrainerError(
                    f"the results of run {run.run_id} could not be retrieved: {retrieval.problem}"
                )
            state = await session.journal.state(run.run_id)
        return report(session, state, None, True)


async def cancel(session: Session, settings: Settings, state: RunLog) -> int:
    """Stop the run's job, collect what it left, record the end."""
    state = await _settle_start(session, settings, state)
    run = state.run
    if run.job is None:
        raise OverbrainerError(f"run {run.run_id} has no job to cancel ({run.state})")
    plan = plan_for(settings, run.target)
    async with open_job(session, plan, run.run_id) as job:
        _, job_state, retrieval = await service.cancel(session, job)
    # No retrieval means nothing was stopped: the job had ended before (cancelled or not).
    if retrieval is None:
        session.front.result(
            f"train: the job of run {run.run_id} had already ended ({job_state.status.value}): "
            f"collect it with `overbrainer train attach {run.run_id}`"
        )
        return 0
    note = "" if retrieval is None or retrieval.ok else f" ({service.NOT_RETRIEVED})"
    session.front.result(f"train: run {run.run_id} cancelled{note}")
    if retrieval.stopped:
        raise service.stopped_collection(job)
    return 0


async def _settle_start(session: Session, settings: Settings, state: RunLog) -> RunLog:
    """A run left ``preparing`` by a command that died: adopt its job or fail it."""
    if state.run.state != RunState.preparing:
        return state
    from overbrainer.lifecycle.recover import settle_start

    async with open_job(session, plan_for(settings, state.run.target), state.run.run_id) as job:
        return await settle_start(session, job, state)
