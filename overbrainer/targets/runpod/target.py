"""A Runpod pod as a run's target: a pod per run, created before its job and deleted once
its results are home.

A signal before the job exists deletes the pod and fails the run. Once the job started, a
signal only stops following it: the job and the pod keep running, and the pod's watchdog
bounds the cost (or nothing does, with ``--keep-pod``, and the message says so). Following
never calls the API; it is bounded by the pod's deadline (``targets/runpod/following.py``).

A run still starting its pod (``preparing``) belongs to the command starting it: ``train
attach`` and ``train cancel`` act on it only once that command is provably gone
(``targets/runpod/starting.py``), or, for a cancel, ask it through the log and wait.

:class:`PodTarget` works on a :class:`~overbrainer.targets.runpod.pods.PodContext`, so tests
and the benchmark drive it on trio's MockClock with the fake API in-process;
:func:`for_train` and :func:`for_run` open the real context for a command.
"""

import contextlib
import ipaddress
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NoReturn
from urllib.parse import urlsplit

from overbrainer.config.model import RunpodTarget, Settings
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.types import RunState
from overbrainer.exec.base import Executor, NativeRuntime
from overbrainer.lifecycle import service
from overbrainer.lifecycle.elsewhere import lives_elsewhere
from overbrainer.lifecycle.report import already_ended, report
from overbrainer.lifecycle.service import FollowLost, Job, Retrieval
from overbrainer.lifecycle.target import (
    CancelledBeforeJob,
    Command,
    Launch,
    NotEnded,
    Recover,
    Resume,
    Stop,
    StoppedBeforeJob,
    TargetGone,
    TargetLost,
)
from overbrainer.projections.spend import run_spend
from overbrainer.runpod import cost_cap, messages
from overbrainer.runpod.candidates import NoCandidate, choose, wanted_of
from overbrainer.runpod.client import RunpodError
from overbrainer.runpod.clocks import ServerClock
from overbrainer.runpod.decide import interrupted_before_job
from overbrainer.runpod.models import GpuType, Pod
from overbrainer.runpod.pod_scripts import stall_bound
from overbrainer.runpod.timing import Timing
from overbrainer.runpod.volume_layout import on_pod, run_output_key
from overbrainer.session.session import Session, ended_by
from overbrainer.targets.runpod import following
from overbrainer.targets.runpod.billing import after_end
from overbrainer.targets.runpod.budget import month_budget
from overbrainer.targets.runpod.cluster_nodes import nodes_of
from overbrainer.targets.runpod.delete import release
from overbrainer.targets.runpod.ending import end_pod
from overbrainer.targets.runpod.model_cache import volume_prepared_path
from overbrainer.targets.runpod.podrm import end_abandoned, still_starting, warn_orphans
from overbrainer.targets.runpod.pods import PodContext, note_clock
from overbrainer.targets.runpod.preflight import parallelism_of
from overbrainer.targets.runpod.provision import (
    OverBudget,
    ProvisionCancelled,
    ProvisionInterrupted,
    ProvisionOvertaken,
    open_provisioned,
    pinned_ssh,
    remote_run_dir,
)
from overbrainer.targets.runpod.reach import connect, reach, record_gone
from overbrainer.targets.runpod.recovery import recovered_pod
from overbrainer.targets.runpod.starting import Start, start_of, wait_starting
from overbrainer.targets.runpod.volume_data import LinkedUpload, VolumeData
from overbrainer.targets.runpod.volume_output import (
    VolumeOutputError,
    link_output,
    resume_on_volume,
)
from overbrainer.train.axolotl import (
    RESUME_DIR,
    job_environment,
    model_ready_command,
    reasoning_template_warning,
    trainer_commands,
)
from overbrainer.train.parallelism import Choice

__all__ = [
    "PodTarget",
    "api_base_of",
    "follow_poll",
    "for_run",
    "for_train",
    "open_pod_context",
    "pod_commands",
    "target_of",
    "timing_for",
]

# The job's commands on a pod first take the image's environment (PATH, CUDA libraries,
# HF_HOME) that the bootstrap wrote, then put the venv first on PATH. The venv is passed as
# an argument ($1), never pasted into the script.
_WITH_JOB_ENV = '. ./.pod/job.env && PATH="$1/bin:$PATH" && export PATH && shift && exec "$@"'


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

    Runpod's own API gets the standard timing. An API on a loopback address is the fake
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


def pod_commands(
    settings: Settings, spec: RunpodTarget, cluster_run: str | None = None
) -> list[list[str]]:
    """The commands of a job on a pod, each run through the pod's job environment file with
    the target's venv first on ``PATH``: the base model made ready in ``HF_HOME`` by the
    venv's Python (:func:`model_ready_command`; on the volume's cache, with a network
    volume), then the trainer's. ``[training.env]`` is applied again after that file
    (through ``env``), so the project's values win over the pod's own (``HF_HOME``, say)."""
    venv = spec.venv.rstrip("/") or "/"
    axolotl = f"{venv}/bin/axolotl"
    training = settings.training
    again = ["env", *(f"{name}={value}" for name, value in training.env.items())]
    commands = [
        model_ready_command(f"{venv}/bin/python", training),
        # A cluster's node joins the others by their static rendezvous (its processes:
        # one per GPU of the node).
        *trainer_commands(training, axolotl, spec.gpu_count, cluster_run=cluster_run),
    ]
    return [
        ["sh", "-c", _WITH_JOB_ENV, "sh", venv, *(again if training.env else []), *command]
        for command in commands
    ]


@contextlib.asynccontextmanager
async def open_pod_context(
    session: Session,
    settings: Settings,
    spec: RunpodTarget | None = None,
    *,
    quick: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> AsyncIterator[PodContext]:
    """The API client (the key from the settings) and, given the run's target ``spec``,
    the pinned SSH connector of one command, for as long as the block runs.

    ``quick``: a command that only reads (``pod ls``) gives up on an API it cannot reach
    within a few seconds, instead of retrying for as long as a pod's delete would.
    ``on_wait`` is told each wait on Runpod of more than a second (``RunpodClient``)."""
    from overbrainer.runpod.client import RunpodClient

    key = settings.require_runpod_api_key()
    base = settings.runpod.base_url
    if quick:
        client = RunpodClient(
            key,
            base,
            timeout=5.0,
            max_retry_seconds=3.0,
            backoff_initial=0.5,
            on_wait=on_wait,
        )
    else:
        client = RunpodClient(key, base, on_wait=on_wait)
    async with client:
        yield PodContext(
            client=client,
            session=session,
            timing=timing_for(base),
            connect=pinned_ssh(NativeRuntime(venv=spec.venv)) if spec is not None else None,
        )


def target_of(settings: Settings, state: RunLog) -> RunpodTarget:
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


@contextlib.asynccontextmanager
async def for_train(
    session: Session,
    settings: Settings,
    name: str,
    spec: RunpodTarget,
    *,
    keep: bool,
    pods: list[Pod] | None = None,
    runpod_clock: ServerClock | None = None,
    catalog: Sequence[GpuType] | None = None,
) -> AsyncIterator["PodTarget"]:
    """The Runpod target ``name`` for ``overbrainer train [--keep-pod]``.

    ``pods`` is the account's listing the preflight made, if any (no second listing),
    ``runpod_clock`` Runpod's clock as its answers told it, and ``catalog`` the GPU
    catalog it read (the GPU candidates are chosen from it, with no second read)."""
    async with open_pod_context(session, settings, spec) as ctx:
        if runpod_clock is not None and runpod_clock.date is not None:
            # Same process, same monotonic clock: carried on, it is Runpod's time now.
            ctx.client.server_clock.saw(runpod_clock.date, runpod_clock.at)
        yield PodTarget(
            ctx,
            settings,
            spec,
            name=name,
            keep=keep,
            api_base=api_base_of(settings),
            pods=pods,
            poll=follow_poll(settings),
            catalog=catalog,
        )


@contextlib.asynccontextmanager
async def for_run(
    session: Session, settings: Settings, state: RunLog
) -> AsyncIterator["PodTarget"]:
    """The Runpod target of an existing run (``train attach``, ``train cancel``)."""
    spec = target_of(settings, state)
    async with open_pod_context(session, settings, spec) as ctx:
        yield PodTarget(ctx, settings, spec, name=state.run.target, poll=follow_poll(settings))


# --- the target ------------------------------------------------------------------------


@dataclass
class PodTarget:
    """A run's pod (see :class:`~overbrainer.lifecycle.target.Target`), for one command.

    ``name`` is the target's name in ``overbrainer.toml``; ``keep`` is ``--keep-pod``;
    ``api_base`` is told to the pod's watchdog when the API is not Runpod's own; ``pods``
    is a fresh listing of the account's pods, when the command has one; ``poll`` is how
    often following reads the job's status and metrics; ``catalog`` Runpod's GPU catalog,
    when the command read it already.
    """

    ctx: PodContext
    settings: Settings
    spec: RunpodTarget
    name: str = ""
    keep: bool = False
    api_base: str | None = None
    pods: list[Pod] | None = None
    poll: float = service.POLL_SECONDS
    device: str = "auto"
    catalog: Sequence[GpuType] | None = None

    @property
    def parallelism(self) -> Choice:
        """How the job's processes share the model among the pod's GPUs (their memory from
        the catalog the preflight read)."""
        return parallelism_of(self.settings, self.spec, self.catalog)

    @property
    def prepared_path(self) -> str | None:
        """On the target's network volume, when it has one: tokenised once per volume."""
        return volume_prepared_path(self.spec)

    @property
    def billed(self) -> "PodTarget":
        """A pod is rented for its run: it has every member of a billed target."""
        return self

    @property
    def session(self) -> Session:
        """The command's journal, front end and signal controller."""
        return self.ctx.session

    # -- a new run --

    async def before_create(self) -> None:
        """Refuse a run that could pass the project's monthly budget; warn about the chat
        template, and about leftover pods nothing will delete.

        Raises:
            OverBudget: the run's bound and the month's spend would pass the budget.
        """
        await self._within_budget()
        warning = reasoning_template_warning(self.settings.training)
        if warning:
            self.session.front.warn(warning)
        await warn_orphans(self.ctx, self.pods)

    async def _within_budget(self) -> None:
        """With a monthly budget, the run's bound (its candidates chosen from the catalog,
        read here when the preflight did not) against the month's spend. When no candidate
        may be tried the walk refuses the run itself, saying why."""
        budget = self.settings.project.monthly_budget_usd
        if budget is None:
            return
        wanted = wanted_of(self.name, self.spec, priced=True)
        if self.catalog is None and wanted.needs_catalog:
            try:
                self.catalog = await self.ctx.client.list_gpu_types(
                    availability=True, gpu_count=wanted.gpu_count, product=wanted.product
                )
            except RunpodError:
                return  # provisioning reads it again, and refuses without it
        try:
            chosen = choose(wanted, self.catalog)
        except NoCandidate:
            return
        verdict = await month_budget(self.session, budget, wanted, chosen, self.ctx.clock())
        if not verdict.fits:
            raise OverBudget(verdict.refusal(self.name, "no run"))

    def created(self, run_id: str) -> ev.RunCreated:
        """The run's first event: its pod's directory, ``--keep-pod``."""
        training = self.settings.training
        return ev.RunCreated(
            run_id=run_id,
            target=self.name,
            kind="runpod",
            remote_dir=f"{self.ctx.root.rstrip('/')}/{remote_run_dir(run_id)}",
            settings_digest=self.settings.settings_digest(),
            base_model=training.base_model,
            adapter=training.adapter,
            keep_pod=self.keep,
        )

    @contextlib.asynccontextmanager
    async def open(self, run_id: str) -> AsyncIterator[Executor]:
        """Provision the run's pod (shielded) and hold the SSH connection its job starts
        through; a walk interrupted or cancelled deleted the pod it held."""
        try:
            # Runpod's clock is known from the listing above: say so if this one is far off.
            await note_clock(self.ctx, run_id)
            data = await self._volume_data(run_id)
            async with open_provisioned(
                self.ctx,
                run_id,
                self.spec,
                keep=self.keep,
                api_base=self.api_base,
                catalog=self.catalog,
                monthly_budget=self.settings.project.monthly_budget_usd,
                stall=stall_bound(self.settings.training),
                volume_data=data,
            ) as ready:
                executor = ready.executor
                if data is not None:
                    try:
                        # Once, through one pod: every node mounts the same volume.
                        placed = await data.through_pod(
                            ready.primary, self.ctx.root, ready.pod.remote_dir
                        )
                        if placed is not None:
                            await self.session.journal.append(run_id, [placed])
                    except OverbrainerError:
                        await release(self.ctx, run_id, "failed")
                        raise
                    executor = LinkedUpload(ready.executor, data.run_dir, data.linked)
                if self.spec.volume is not None:
                    await self._save_on_volume(run_id, ready.executor)
                    await self._resume_on_volume(run_id, ready.executor, data)
                yield executor
        except ProvisionInterrupted as stop:
            # The walk recorded where it stopped (run.Interrupted).
            raise StoppedBeforeJob(str(stop), stage=None) from None
        except ProvisionCancelled as cancelled:
            raise CancelledBeforeJob(str(cancelled), reason=cancelled.reason) from None

    async def _volume_data(self, run_id: str) -> VolumeData | None:
        """What of the run's directory lives on the target's volume (None without one)."""
        if self.spec.volume is None:
            return None
        state = await self.session.journal.state(run_id)
        resumed = state.run.resumed_from
        resume = None if resumed is None else (str(resumed["run"]), int(resumed["step"]))
        return VolumeData(
            run_id,
            self.session.run_dir(run_id),
            self.settings.runpod,
            self.session.front.info,
            resume=resume,
            resume_recorded=resume is not None and await self._on_volume(*resume) is not None,
        )

    async def _on_volume(self, source_run: str, step: int) -> str | None:
        """The manifest digest run ``source_run`` recorded for its checkpoint ``step`` on the
        volume (None: not recorded there)."""
        try:
            recorded = (await self.session.journal.state(source_run)).run.volume_checkpoints
        except StoreError:
            return None
        return next((str(c["manifest_digest"]) for c in recorded if c["step"] == step), None)

    async def _save_on_volume(self, run_id: str, executor: Executor) -> None:
        """Link the run directory's ``output`` on the pod to the volume's folder of the run
        (``volume_output``), so the job saves there; a failure releases the pod."""
        try:
            await link_output(executor, self.ctx.root, remote_run_dir(run_id), run_id)
        except VolumeOutputError:
            await release(self.ctx, run_id, "failed")
            raise
        self.session.front.info(
            f"train: run {run_id} saves its checkpoints and output on network volume "
            f"{self.spec.volume} ({on_pod(run_output_key(run_id))})"
        )

    async def _resume_on_volume(
        self, run_id: str, executor: Executor, data: VolumeData | None
    ) -> None:
        """A run resumed from a checkpoint (``train --resume-from``) that its run saved on
        the volume, or that ``data`` put there through the S3 API before the pod: when the
        pod finds it there as recorded (as sent), the job reads it there and the copy
        placed at home is not uploaded (``run.ResumedFromVolume``); otherwise it is
        uploaded, as without a volume. Either is said."""
        session = self.session
        state = await session.journal.state(run_id)
        source = state.run.resumed_from
        if source is None:
            return
        source_run, step = str(source["run"]), int(source["step"])
        digest = await self._on_volume(source_run, step)
        as_what, sent = "its recorded manifest", "nothing uploaded from home"
        if digest is None and data is not None and data.resume_placed is not None:
            as_what, sent = "what the S3 API was sent", "not sent again through the pod"
            digest = data.resume_placed
        volume = self.spec.volume
        # No copy at home: it was picked on the volume only (its run kept it nowhere else).
        at_home = (session.run_dir(run_id) / RESUME_DIR).exists()
        if digest is None:
            if not at_home:
                await self._nothing_to_resume(run_id, source_run, step, "it is not recorded")
            session.front.info(
                f"train: checkpoint-{step} of run {source_run} is not recorded on network "
                f"volume {volume}: uploading it from home"
            )
            return
        try:
            fits, why = await resume_on_volume(
                executor, self.ctx.root, remote_run_dir(run_id), source_run, step, str(digest)
            )
            if fits and at_home:
                # Not sent: the job reads the checkpoint on the volume.
                try:
                    shutil.rmtree(session.run_dir(run_id) / RESUME_DIR)
                except OSError as error:
                    raise VolumeOutputError(
                        f"cannot leave the copy of checkpoint-{step} at home out of the upload "
                        f"(runs/{run_id}/{RESUME_DIR}: {error.strerror or error})"
                    ) from error
        except VolumeOutputError:
            await release(self.ctx, run_id, "failed")
            raise
        if not fits:
            if not at_home:
                await self._nothing_to_resume(run_id, source_run, step, why)
            session.front.warn(
                f"checkpoint-{step} of run {source_run} on network volume {volume} cannot be "
                f"resumed from ({why}): uploading it from home"
            )
            return
        await session.journal.append(
            run_id, partial(decisions.resumed_from_volume, source=source_run, step=step)
        )
        session.front.info(
            f"train: run {run_id} resumes from checkpoint-{step} of run {source_run} on "
            f"network volume {volume} (it matches {as_what}): {sent}"
        )

    async def _nothing_to_resume(self, run_id: str, source: str, step: int, why: str) -> NoReturn:
        """The checkpoint picked on the volume only cannot be read there (``why``), and no
        copy is at home: the pod is released and the run fails before its job."""
        await release(self.ctx, run_id, "failed")
        raise VolumeOutputError(
            f"checkpoint-{step} of run {source} on network volume {self.spec.volume} cannot be "
            f"resumed from ({why}), and no copy of it is at home; `overbrainer train "
            f"--resume-from {source}` resumes from its last checkpoint"
        )

    async def before_start(self, run_id: str) -> None:
        """The last look before the job starts: a signal since the pod got ready deletes it;
        a cancel asked through the log is taken (the pod deleted); a run another command
        ended (or whose pod it is deleting) starts nothing.

        Raises:
            StoppedBeforeJob: a signal came.
            CancelledBeforeJob: the cancel was taken.
            ProvisionOvertaken: another command ended the run or is deleting its pod.
        """
        session = self.session
        if session.interrupts.interrupted:
            await release(self.ctx, run_id, "interrupted")
            state = await session.journal.state(run_id)
            raise StoppedBeforeJob(interrupted_before_job(state), stage="starting the job")
        state = await session.journal.state(run_id)
        pod_id = state.pod.pod_id
        verdict = decisions.before_start(state)
        if verdict is decisions.Before.overtaken:
            await release(self.ctx, run_id, "failed")
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
            await release(self.ctx, run_id, "cancelled")
            reason = f"cancelled before its job started{asker}"
            raise CancelledBeforeJob(
                f"run {run_id} {reason}; pod {pod_id} was deleted", reason=reason
            )

    def launch(self, run_id: str) -> Launch:
        """The trainer's commands through the pod's job environment (:func:`pod_commands`)."""
        return Launch(
            pod_commands(self.settings, self.spec, run_id if self.spec.nodes > 1 else None),
            job_environment(self.settings.training),
        )

    async def not_started(self, run_id: str) -> None:
        """No job runs (or none that anything recorded): the pod has nothing left to do."""
        await release(self.ctx, run_id, "failed")

    async def started(self, run_id: str, state: RunLog) -> RunLog:
        """The job runs on the pod (``pod.JobRunning``); a kept pod is said kept only now:
        until the job started, a signal or a failure deleted it."""
        pod = state.pod
        if pod.keep:
            self.session.front.warn(messages.keep_warning(pod, run_id))
        assert pod.pod_id is not None  # provisioning recorded it
        pod_id = pod.pod_id
        try:
            return await self.session.journal.append(
                run_id, lambda s: decisions.pod_job_running(s, pod_id)
            )
        except OverbrainerError as error:
            # The job runs on a billed pod: the error says how to reach or remove it.
            raise OverbrainerError(f"{messages.job_on_pod(pod, run_id)} ({error})") from error

    # -- a run that exists --

    async def settle_start(self, state: RunLog, command: Command) -> RunLog | int:
        """A run still starting its pod: left to its starter while that may be alive
        (``train cancel`` asks it through the log, and waits); ended here once it is
        provably gone. The state to go on with once the run got its job meanwhile."""
        if command == "attach":
            return await self._attach_starting(state)
        return await self._cancel_starting(state)

    @contextlib.asynccontextmanager
    async def reach(self, state: RunLog, *, recovers: bool = False) -> AsyncIterator[Executor]:
        """A fresh look at the run's pod (its endpoint may have changed), then an SSH
        connection to it. ``recovers``: a pod lost under the running job is
        :class:`TargetLost` when this target recovers runs (``max_recoveries``)."""
        reached = await reach(self.ctx, state, recovers=recovers and self.recovers)
        if reached is None:
            raise TargetGone
        async with contextlib.AsyncExitStack() as stack:
            primary = await connect(self.ctx, stack, reached, state)
            # A cluster's other nodes too: the job runs on every one.
            yield await nodes_of(self.ctx, stack, state, primary)

    async def gone(self, state: RunLog, command: Command) -> int:
        """A run whose pod is gone: ``train attach`` reports it from the local files (a run
        still running failed, its job gone with the pod); ``train cancel`` has nothing to
        cancel."""
        session = self.session
        run_id = state.run.run_id
        state = await session.journal.state(run_id)
        if command == "cancel":
            raise OverbrainerError(
                f"run {run_id} has no pod left: nothing to cancel (the run is "
                f"{state.run.state}; see `overbrainer events {run_id}`)"
            )
        pod_id = state.pod.pod_id
        if pod_id is not None and not state.final:
            state = await record_gone(self.ctx, run_id, pod_id)
        why = ""
        if state.pod.deleted_by == "watchdog" and state.pod.delete_reason == "cost_cap":
            why = f" (its watchdog deleted it at its cost cap: {cost_cap.cap_text(state.pod)})"
        elif state.pod.deleted_by == "watchdog" and state.pod.delete_reason == "deadline":
            why = " (its watchdog deleted it at its deadline)"
        session.front.info(
            f"pod {pod_id or '(none)'} of run {run_id} no longer exists{why}: from the local files"
        )
        return report(session, state, None, state.run.artifacts is not None)

    # -- following and ending --

    def job(self, run_id: str, executor: Executor, state: RunLog) -> Job:
        """The run's job on its pod, reached through ``executor``; its results wait there
        for the retrieve grace (or until ``pod rm``, for a kept pod)."""
        if state.pod.keep:
            wait = "the kept pod keeps them until `overbrainer pod rm` deletes it"
        else:
            wait = (
                f"the pod keeps them for {self.spec.retrieve_grace_minutes} min after the job "
                "ended (its watchdog's retrieve grace)"
            )
        return Job(run_id, executor, remote_run_dir(run_id), results_wait=wait)

    def seconds_left(self, state: RunLog) -> float:
        """Until the pod's deadline plus the slack (see ``targets/runpod/following.py``)."""
        return following.seconds_left(self.ctx, state)

    async def confirm_left(self, state: RunLog) -> float:
        """Until the pod's deadline plus the slack, or its cost cap, on Runpod's clock read
        afresh (``following.confirm_left``)."""
        return await following.confirm_left(self.ctx, state)

    def spend(self, state: RunLog) -> Callable[[], float | None] | None:
        """The pod's rate times its uptime, on Runpod's clock; a recovered run's earlier
        pods added (their cost as recorded), the whole run's spend."""
        earlier = run_spend(state, None).total if state.run.recoveries else 0.0
        return partial(following.spend_so_far, state.pod, self.ctx, earlier)

    def at_each_poll(self, state: RunLog) -> Callable[[], Awaitable[None]] | None:
        """Record once when the pod nears its cost cap (``following.CostCapWatch``)."""
        return following.CostCapWatch(self.ctx, state.run.run_id, state.pod)

    async def past_deadline(self, job: Job) -> int:
        """The pod's first bound: past its deadline, delete the pod its watchdog should
        have deleted and fail the run; at its cost cap (less a margin), stop the job,
        collect its results so far, delete the pod and fail the run (``cost_cap``)."""
        run_id = job.run_id
        state = await self.session.journal.state(run_id)
        if cost_cap.first_bound(state.pod, following.DEADLINE_SLACK) is cost_cap.Bound.deadline:
            await following.past_deadline(self.ctx, run_id, default_hours=self.spec.max_hours)
        return await self._at_cost_cap(job, state)

    async def _at_cost_cap(self, job: Job, state: RunLog) -> int:
        session = self.session
        run_id = job.run_id
        pod = state.pod
        message = following.cost_cap_message(pod)
        # Near first, in the log as on the pod: following stops the job no sooner.
        await following.CostCapWatch(self.ctx, run_id, pod, at_bound=True)()
        session.front.warn(
            f"run {run_id}: pod {pod.pod_id} is about to reach its cost cap "
            f"({cost_cap.cap_text(pod)}): stopping its job, retrieving its results so far, "
            "then deleting the pod"
        )
        retrieval: Retrieval | None = None
        problems: list[str] = []
        try:
            state, retrieval = await service.stop_and_collect(session, job, message)
        except OverbrainerError as error:
            problems.append(f"its job could not be stopped and collected ({error})")
        try:
            state = await following.at_cost_cap(
                self.ctx, run_id, message, collected=retrieval is not None
            )
        except OverbrainerError as error:
            problems.append(str(error))
            state = await session.journal.state(run_id)
        if retrieval is not None and not retrieval.ok:
            problems.append(f"its results could not be retrieved ({retrieval.problem})")
        raise_more = (
            f"raise max_cost_usd of target {state.run.target} in overbrainer.toml if the job "
            "needs more"
        )
        but = f", but: {'; '.join(problems)}" if problems else ""
        code = report(
            session,
            state,
            None,
            retrieval is not None and retrieval.ok,
            more=f"{but}; {raise_more}",
        )
        if problems:
            raise OverbrainerError(f"run {run_id}: {'; '.join(problems)}")
        return code

    async def lost(self, job: Job, state: RunLog, lost: FollowLost) -> Stop | Recover | Resume:
        """The run is recovered on a new pod when its pod is lost (gone, stopped or without
        its GPUs under the job, or not answering SSH for ``unreachable_minutes``) and the
        target recovers runs, followed again when it answers; it fails only if the pod is
        confirmed gone."""
        found = await following.lost(
            self.ctx,
            job.run_id,
            state,
            lost,
            default_hours=self.spec.max_hours,
            recovers=self.recovers,
            unreachable_minutes=self.spec.unreachable_minutes,
        )
        return Stop.detached if found is None else found

    @property
    def recovers(self) -> bool:
        """Whether the target recovers runs: ``max_recoveries`` > 0."""
        return self.spec.max_recoveries > 0

    async def job_vanished(self, state: RunLog) -> Recover | None:
        """A job gone without an exit code on a pod Runpod shows stopped or restarted with
        no GPU (``following.lost_status``) is recovered, when the target recovers runs."""
        pod_id = state.pod.pod_id
        if not self.recovers or pod_id is None:
            return None
        why = await following.lost_status(self.ctx, pod_id)
        return None if why is None else Recover(why)

    @contextlib.asynccontextmanager
    async def recover(
        self, run_id: str, recover: Recover
    ) -> AsyncIterator[tuple[Executor, RunLog]]:
        """A new pod for the run whose pod was lost (``targets/runpod/recovery.py``)."""
        async with recovered_pod(
            self.ctx,
            self.settings,
            self.spec,
            run_id,
            recover.why,
            launch=self.launch(run_id),
            keep=self.keep,
            api_base=self.api_base,
            device=self.device,
            choice=self.parallelism,
        ) as (executor, state):
            yield executor, state

    def detached(self, state: RunLog, job: Job) -> str:
        """Where the job keeps running, what bounds its pod, and the ways on."""
        return messages.detached(state.pod, state.run.run_id, self.spec.retrieve_grace_minutes)

    async def end(self, job: Job, state: RunLog, retrieval: Retrieval) -> RunLog:
        """End the pod (``ending.end_pod``: deleted, kept, or left to its watchdog), and say
        how to reach a kept one."""
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
            raise NotEnded(f"run {run_id} ended, but not its pod: {pod_error}") from pod_error
        if ending is messages.Ending.deleted:
            await after_end(self.ctx, run_id)
        state = await self.session.journal.state(run_id)
        line = messages.report_line(state.pod, ending, run_id)
        if line is not None:
            self.session.front.warn(line)
        return state

    # -- leftovers and runs left starting --

    async def _attach_starting(self, state: RunLog) -> RunLog | int:
        """``train attach`` of a run still starting its pod: one whose starter is provably
        gone (*abandoned while starting*) is ended — its pods deleted, the run failed; one
        whose starter may be alive is left to it."""
        run_id = state.run.run_id
        start = await start_of(self.ctx, state)
        if start is None:
            # It got its job (or ended) since it was read.
            return await self.session.journal.state(run_id)
        if not start.abandoned:
            raise OverbrainerError(
                f"{still_starting(start)}; `overbrainer train attach {run_id}` follows it "
                "once its job started"
            )
        recoveries = state.run.recoveries
        if recoveries and recoveries[-1]["pod_id"] is None and self.recovers:
            # Its recovery was left unfinished: it goes on here, as the same attempt (what
            # the dead command's recovery holds is ended first, by the recovery).
            attempt = recoveries[-1]["attempt"]
            raise TargetLost(
                f"recovery {attempt} was left unfinished: {start.who()} is gone ({start.why}); "
                f"it was recovering from: {recoveries[-1]['reason']}"
            )
        self.session.front.info(
            f"train: run {run_id} was abandoned while starting its pod: {start.who()} is "
            f"gone ({start.why}); ending it"
        )
        await end_abandoned(self.ctx, run_id, RunState.failed, f"train attach {run_id}")
        return report(self.session, await self.session.journal.state(run_id), None, False)

    async def _cancel_starting(self, state: RunLog) -> RunLog | int:
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
                return await already_ended(session, state)
            return state
        if start.abandoned:
            session.front.info(
                f"train: run {run_id} was abandoned while starting its pod: {start.who()} is "
                f"gone ({start.why}); ending it"
            )
            await end_abandoned(self.ctx, run_id, RunState.cancelled, f"train cancel {run_id}")
            session.front.result(f"train: run {run_id} cancelled")
            return 0
        await session.journal.append(run_id, decisions.ask_cancel)
        session.front.info(
            f"train: run {run_id} is starting its pod ({start.who()}): asked it to stop and "
            "delete its pod; waiting"
        )
        finished = await session.interrupts.race(lambda: wait_starting(self.ctx, run_id, self.poll))
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
            await end_abandoned(self.ctx, run_id, RunState.cancelled, f"train cancel {run_id}")
            session.front.result(f"train: run {run_id} cancelled")
            return 0
        if outcome is None:
            state = await session.journal.state(run_id)
            if state.run.state == RunState.running and not lives_elsewhere(session, state):
                # Its job started, and nothing follows it to take the request: stop the
                # job from here, as any cancel of a started run does.
                return state
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
