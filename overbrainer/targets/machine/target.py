"""A machine as a run's target: this machine (``local``) or a host over SSH (``ssh``).

The job runs in its own session on the machine, so a signal to the command never reaches
it: a signal while following leaves it running and says how to follow it again. Nothing
bounds it but the job itself, and nothing is left to end once it ended (its files stay in
the run's directory there).
"""

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from overbrainer.config.model import LocalTarget, Settings, SshTarget
from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.exec.base import ContainerRuntime, Executor, NativeRuntime, Runtime
from overbrainer.lifecycle import service
from overbrainer.lifecycle.service import FollowLost, Job, Retrieval, attach_hint
from overbrainer.lifecycle.target import Command, Launch, Stop, StoppedBeforeJob
from overbrainer.plurals import word
from overbrainer.session.session import Session
from overbrainer.train.axolotl import (
    cpu_overridden,
    job_environment,
    reasoning_template_warning,
    trainer_commands,
)
from overbrainer.train.parallelism import Choice, choose_for

__all__ = ["MachineTarget", "Plan", "open_job", "parallelism_of", "plan_for"]


@dataclass(frozen=True)
class Plan:
    """How a run's job is started on its target."""

    target_name: str
    target: LocalTarget | SshTarget
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


def parallelism_of(settings: Settings, target: LocalTarget | SshTarget) -> Choice:
    """How the job of a machine target shares the model among its processes."""
    return choose_for(
        settings.training, processes=target.job_processes, gpu=None, cpu=target.device == "cpu"
    )


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
) -> AsyncIterator[Executor]:
    """Connect to the run's target, rooted where its runs live.

    ``raced``: a signal stops the connecting (nothing runs on the target yet, and a host
    that does not answer would otherwise hold the command until the connect timeout).
    """
    if isinstance(plan.target, SshTarget):
        from overbrainer.exec.ssh import UserHost, open_ssh

        assert plan.host is not None
        async with open_ssh(
            UserHost(plan.host), workdir=plan.target.workdir, runtime=plan.runtime, connect=False
        ) as executor:
            if not raced:
                await executor.connect()
            elif await session.interrupts.race(executor.connect) is None:
                raise _stopped(run_id, "connecting to the target")
            yield executor
        return
    from overbrainer.exec.local import LocalExecutor

    local: Executor = LocalExecutor(session.project_dir, runtime=plan.runtime)
    try:
        yield local
    finally:
        await local.aclose()


@asynccontextmanager
async def reach_to_read(project_dir: Path, plan: Plan) -> AsyncIterator[Executor]:
    """The machine of a run's job, reached to read its files (nothing is recorded)."""
    if isinstance(plan.target, SshTarget):
        from overbrainer.exec.ssh import UserHost, open_ssh

        assert plan.host is not None
        async with open_ssh(UserHost(plan.host), workdir=plan.target.workdir) as executor:
            yield executor
        return
    from overbrainer.exec.local import LocalExecutor

    local = LocalExecutor(project_dir)
    try:
        yield local
    finally:
        await local.aclose()


def _stopped(run_id: str, stage: str) -> StoppedBeforeJob:
    return StoppedBeforeJob(
        f"interrupted: run {run_id} stopped before its job started; nothing runs on the target",
        stage=stage,
    )


LOCAL_POLL_SECONDS = 0.25


@dataclass
class MachineTarget:
    """A machine target of one command (see :class:`~overbrainer.lifecycle.target.Target`)."""

    session: Session
    settings: Settings
    plan: Plan

    @property
    def poll(self) -> float:
        """How often following looks at the job: four times a second on this machine, where
        a look costs a few file reads and one ``sh`` and the run then ends within a quarter
        second of its job; once a second over SSH, where each look is a round trip."""
        return (
            service.POLL_SECONDS if isinstance(self.plan.target, SshTarget) else LOCAL_POLL_SECONDS
        )

    @property
    def device(self) -> str:
        """The device the target's job trains on."""
        return self.plan.target.device

    @property
    def parallelism(self) -> Choice:
        """How the job's processes share the model (the GPUs' memory is not known here)."""
        return parallelism_of(self.settings, self.plan.target)

    @property
    def prepared_path(self) -> None:
        """The tokenised data stays in the run directory."""
        return None

    @property
    def billed(self) -> None:
        """A machine is not rented for the run: no deadline, no spend, it does not vanish."""
        return None

    # -- a new run --

    async def before_create(self) -> None:
        """Warn about the chat template and the settings a CPU target replaces."""
        front = self.session.front
        training = self.settings.training
        warning = reasoning_template_warning(training)
        if warning:
            front.warn(warning)
        replaced = cpu_overridden(training) if self.device == "cpu" else []
        if replaced:
            front.warn(
                f'target {self.plan.target_name} has device = "cpu": training.axolotl_extra\'s '
                f"{', '.join(replaced)} {word(len(replaced), 'is', 'are')} replaced by "
                "false for this run"
            )

    def created(self, run_id: str) -> ev.RunCreated:
        """The run's first event."""
        target = self.plan.target
        training = self.settings.training
        return ev.RunCreated(
            run_id=run_id,
            target=self.plan.target_name,
            kind=target.kind,
            remote_dir=(
                f"{target.workdir}/runs/{run_id}"
                if isinstance(target, SshTarget)
                else f"runs/{run_id}"
            ),
            settings_digest=self.settings.settings_digest(),
            base_model=training.base_model,
            adapter=training.adapter,
        )

    @asynccontextmanager
    async def open(self, run_id: str) -> AsyncIterator[Executor]:
        """Connect to the machine; a signal first stops the run before its job."""
        # A signal noted while the run was being created ends it here too.
        self._stop_if_interrupted(run_id, "connecting to the target")
        async with open_job(self.session, self.plan, run_id, raced=True) as executor:
            yield executor

    async def before_start(self, run_id: str) -> None:
        """A signal noted while connecting stops the run before its job."""
        self._stop_if_interrupted(run_id, "starting the job")

    def _stop_if_interrupted(self, run_id: str, stage: str) -> None:
        if self.session.interrupts.interrupted:
            raise _stopped(run_id, stage)

    def launch(self, run_id: str) -> Launch:
        """The trainer's commands, natively or in a container named after the run."""
        training = self.settings.training
        docker = self.plan.target.runtime == "docker"
        return Launch(
            trainer_commands(training, self.plan.axolotl, self.plan.target.job_processes),
            job_environment(training, device=self.device),
            container=f"overbrainer-{run_id}" if docker else None,
        )

    # -- a run that exists --

    async def settle_start(self, state: RunLog, command: Command) -> RunLog:
        """A run left ``preparing`` by a command that died: adopt its job or fail it."""
        from overbrainer.lifecycle.recover import settle_start

        async with self.reach(state) as executor:
            job = self.job(state.run.run_id, executor, state)
            return await settle_start(self.session, job, state)

    def reach(
        self, state: RunLog, *, recovers: bool = False
    ) -> AbstractAsyncContextManager[Executor]:
        """Connect to the machine the run's job runs on (it is never lost: ``recovers``
        changes nothing)."""
        return open_job(self.session, self.plan, state.run.run_id)

    # -- following and ending --

    def job(self, run_id: str, executor: Executor, state: RunLog) -> Job:
        """The job in ``runs/<id>`` under the machine's root: the run's own directory here."""
        remote_dir = f"runs/{run_id}"
        if isinstance(self.plan.target, SshTarget):
            where = f"{self.plan.target.workdir.rstrip('/')}/{remote_dir}"
            wait = f"they stay in {where} on {executor.location}"
            return Job(run_id, executor, remote_dir, results_wait=wait)
        return Job(run_id, executor, remote_dir, in_place=True)

    async def lost(self, job: Job, state: RunLog, lost: FollowLost) -> Stop:
        """The job keeps running where it is: record that following stopped, and say so."""
        await service.detach(self.session, job.run_id, reason="target unreachable")
        raise lost

    def detached(self, state: RunLog, job: Job) -> str:
        """Where the job keeps running, and the two ways on."""
        run_id = job.run_id
        return (
            f"interrupted: run {run_id} keeps running on {job.executor.location}; "
            f"{attach_hint(run_id)}, or stop it with `overbrainer train cancel {run_id}`"
        )

    async def end(self, job: Job, state: RunLog, retrieval: Retrieval) -> RunLog:
        """Nothing to end: the machine stays, and the job's files with it."""
        return state
