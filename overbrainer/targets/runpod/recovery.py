"""Recovering a run whose pod was lost before its job ended: the driver of
``overbrainer.runpod.recovery.decide``.

What is left of the lost pod is ended first (deleted, or recorded gone): no new pod is
created while the old one may bill. Then the decision: recoveries left, and money left
of ``max_cost_usd`` (every pod of the run counts). A run not recovered fails, saying why
and the command that goes on. A recovered one records ``run.Recovering``, gets a new pod
by the same candidate walk as its first (its cost cap: what is left), has its inputs
uploaded with the newest checkpoint home and verified to resume from (from the start when
none is), its job started, and ``run.Recovered`` recorded; the caller follows the job on
the new pod.

Who else recovers a run (a stall's end, a supervisor) calls :func:`recovered_pod` with
the reason, once the job is known ended and nothing else follows it.
"""

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from overbrainer.config.model import RunpodTarget, Settings
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.types import RunState
from overbrainer.exec.base import Executor
from overbrainer.exec.manifest import checkpoint_path
from overbrainer.lifecycle import service
from overbrainer.lifecycle.run import secrets_of
from overbrainer.lifecycle.service import Job
from overbrainer.lifecycle.target import Launch
from overbrainer.projections.live import standing
from overbrainer.projections.spend import run_spend
from overbrainer.runpod.recovery import Fail, Off, cheapest_rate, decide
from overbrainer.targets.runpod.delete import delete_pod, forget_key_if_done, release
from overbrainer.targets.runpod.model_cache import volume_prepared_path
from overbrainer.targets.runpod.pods import PodContext
from overbrainer.targets.runpod.provision import (
    ProvisionCancelled,
    open_provisioned,
    remote_run_dir,
)
from overbrainer.targets.runpod.volume_data import LinkedUpload, VolumeData
from overbrainer.targets.runpod.volume_output import checkpoint_matches, link_output
from overbrainer.train.axolotl import prepare_run_dir, write_config
from overbrainer.train.data import check_data
from overbrainer.train.layout import OUTPUT_DIR
from overbrainer.train.parallelism import Choice

__all__ = ["UPLOAD_DIR", "next_command", "recovered_pod", "volume_candidate"]

UPLOAD_DIR = ".recovery-upload"
"""In ``runs/<id>/``: what a recovery uploads to the new pod (the run's inputs and the
checkpoint it resumes from; not what came home), removed once the job started."""


def next_command(state: RunLog) -> str:
    """What goes on with a run that is not recovered: a resume from its newest checkpoint
    home, or a new run."""
    if state.run.checkpoint is None:
        return "overbrainer train"
    return f"overbrainer train --resume-from {state.run.run_id}"


@contextlib.asynccontextmanager
async def recovered_pod(
    ctx: PodContext,
    settings: Settings,
    spec: RunpodTarget,
    run_id: str,
    why: str,
    *,
    launch: Launch,
    keep: bool,
    api_base: str | None,
    device: str,
    choice: Choice,
) -> AsyncIterator[tuple[Executor, RunLog]]:
    """Recover run ``run_id``, whose pod was lost (``why``), on a new pod: its job running
    there again, through the SSH connection held for as long as the block runs, and the
    run's state then.

    Raises:
        OverbrainerError: the run was not recovered (no recovery left, not money enough, or
            its new pod or job could not start); the run failed and the message says why.
    """
    session = ctx.session
    state = await session.journal.state(run_id)
    lost = state.pod.pod_id
    if lost is not None and not state.pod.deleted(lost):
        # Stopped, not gone (or the new pod of a recovery a dead command left unfinished):
        # deleted before anything else, its spend recorded.
        await delete_pod(ctx, run_id, lost, "lost")
        state = await session.journal.state(run_id)
    # A recovery left unfinished (begun, its job never started) goes on as the same
    # attempt: only the finished ones count as done.
    finished = [r for r in state.run.recoveries if r["pod_id"] is not None]
    verdict = decide(
        run_id=run_id,
        target=state.run.target,
        why=why,
        done=len(finished),
        max_recoveries=spec.max_recoveries,
        spent=run_spend(state, None).total,
        max_cost_usd=spec.max_cost_usd,
        rate=cheapest_rate([cost.get("rate") for cost in state.pod.costs.values()]),
        max_hours=spec.max_hours,
        next_command=next_command(state),
    )
    if isinstance(verdict, Fail | Off):
        message = (
            verdict.message
            if isinstance(verdict, Fail)
            else f"run {run_id} failed: {why}; its job went with it"
        )
        state = await session.journal.append(run_id, lambda s: decisions.fail_lost(s, message))
        forget_key_if_done(ctx, run_id, state)
        raise OverbrainerError(message)
    run_dir = session.run_dir(run_id)
    seen = standing(state, run_dir)
    last_step = seen.summary.step if seen is not None else None
    checkpoint = state.run.checkpoint
    home_step = int(checkpoint["step"]) if checkpoint is not None else 0
    if home_step and not (run_dir / OUTPUT_DIR / f"checkpoint-{home_step}").is_dir():
        home_step = 0  # recorded home, but no longer there: from the start
    # The newest checkpoint recorded whole on the volume the new pod mounts, when it is
    # newer than the one home: resumed from there if it still matches its record.
    on_volume = volume_candidate(state, spec, home_step)
    step = on_volume[0] if on_volume is not None else home_step
    begun = ev.Recovering(
        reason=why,
        attempt=verdict.attempt,
        max_recoveries=verdict.max_recoveries,
        pod_id=lost,
        last_step=last_step,
    )
    state = await session.journal.append(run_id, lambda s: decisions.recovering(s, begun))
    last = state.run.recoveries[-1] if state.run.recoveries else None
    if state.final or last is None or last["attempt"] != verdict.attempt or last["pod_id"]:
        raise OverbrainerError(f"run {run_id} was {state.run.state} meanwhile: not recovered")
    start = f"checkpoint-{step}" if step else "the start (no checkpoint home)"
    if on_volume is not None:
        start += f" (on network volume {spec.volume})"
    cap = (
        ""
        if verdict.cost_left is None
        else f", its cost cap ${verdict.cost_left:.2f} (what is left)"
    )
    session.front.warn(
        f"run {run_id}: {why}: recovery {verdict.attempt}/{verdict.max_recoveries} on a new "
        f"pod{cap}, resuming from {start}"
    )
    pod_spec = spec
    if verdict.cost_left is not None:
        pod_spec = spec.model_copy(update={"max_cost_usd": verdict.cost_left})
    upload = run_dir / UPLOAD_DIR
    following = False
    try:
        # Prepared before any pod bills: a run whose inputs cannot be read creates none.
        from_volume = on_volume is not None
        _prepare_upload(upload, run_dir, settings, step, device, choice, spec, from_volume)
        # The data the first pod put on the volume is linked, not sent again.
        data = (
            None
            if spec.volume is None
            else VolumeData(run_id, run_dir, settings.runpod, session.front.info)
        )
        async with open_provisioned(
            ctx, run_id, pod_spec, keep=keep, api_base=api_base, volume_data=data
        ) as ready:
            pod_id = ready.pod.pod_id
            job = Job(run_id, ready.executor, remote_run_dir(run_id))
            try:
                if data is not None:
                    placed = await data.through_pod(ready.executor, ctx.root, ready.pod.remote_dir)
                    if placed is not None:
                        await session.journal.append(run_id, [placed])
                    job = Job(
                        run_id, LinkedUpload(ready.executor, upload, data.linked), job.remote_dir
                    )
                if spec.volume is not None:
                    await link_output(ready.executor, ctx.root, job.remote_dir, run_id)
                if on_volume is not None and spec.volume is not None:
                    from_volume = await _volume_checkpoint_fits(
                        ctx, job, spec.volume, on_volume, home_step
                    )
                    if not from_volume:
                        step = home_step
                        _prepare_upload(upload, run_dir, settings, step, device, choice, spec)
                state = await service.start(
                    session,
                    job,
                    launch.commands,
                    env=launch.env,
                    secrets=secrets_of(settings),
                    container=launch.container,
                    source=upload,
                )
            except (OverbrainerError, OSError):
                await release(ctx, run_id, "failed")
                raise
            state = await session.journal.append(
                run_id, lambda s: decisions.pod_job_running(s, pod_id)
            )
            done = ev.Recovered(
                attempt=verdict.attempt,
                pod_id=pod_id,
                resumed_step=step,
                lost_steps=None if last_step is None else max(0, last_step - step),
                from_volume=from_volume,
            )
            state = await session.journal.append(run_id, lambda s: decisions.recovered(s, done))
            shutil.rmtree(upload, ignore_errors=True)
            following = True
            yield ready.executor, state
    except StoreError:
        shutil.rmtree(upload, ignore_errors=True)
        raise
    except (OverbrainerError, OSError) as error:
        shutil.rmtree(upload, ignore_errors=True)
        if following:
            # The job runs on the new pod: what follows it says what became of the run.
            raise
        if isinstance(error, Interrupted):
            # A signal while the new pod was made: provisioning ended what it held, and the
            # recovery is left unfinished for `train attach` or `supervise` to go on with.
            raise Interrupted(
                f"{error}; run {run_id} is left in recovery {verdict.attempt}: `overbrainer "
                f"train attach {run_id}` (or `overbrainer supervise`) goes on with it"
            ) from error
        outcome = RunState.failed
        if isinstance(error, ProvisionCancelled):
            # `train cancel` asked through the log while the new pod was being started.
            outcome, message = RunState.cancelled, error.reason
        else:
            message = f"recovery {verdict.attempt} could not start: {error}"
        try:
            await session.journal.append(
                run_id, lambda s: decisions.fail_before_job(s, message, outcome=outcome)
            )
        except StoreError as trouble:
            session.front.warn(f"{trouble} (while recording that run {run_id} ended)")
        raise OverbrainerError(f"run {run_id} {outcome}: {message}") from error


def volume_candidate(state: RunLog, spec: RunpodTarget, home_step: int) -> tuple[int, str] | None:
    """The step and recorded manifest digest of the newest checkpoint the log has whole on
    the network volume, when the target mounts one and it is newer than the checkpoint
    home (``home_step``; 0: none): the one to resume from, nothing uploaded."""
    if spec.volume is None or not state.run.volume_checkpoints:
        return None
    newest = state.run.volume_checkpoints[-1]
    step = int(newest["step"])
    if step < home_step:
        return None
    return step, str(newest["manifest_digest"])


async def _volume_checkpoint_fits(
    ctx: PodContext, job: Job, volume: str, candidate: tuple[int, str], home_step: int
) -> bool:
    """Whether the new pod finds the checkpoint of ``candidate`` on the volume as recorded;
    says which checkpoint the job resumes from either way."""
    step, digest = candidate
    fits, why = await checkpoint_matches(job.executor, job.remote_dir, step, digest)
    run_id = job.run_id
    if fits:
        ctx.session.front.info(
            f"train: run {run_id} resumes from checkpoint-{step} on network volume {volume} "
            "(it matches its recorded manifest): nothing uploaded from home"
        )
        return True
    fallback = f"checkpoint-{home_step} uploaded from home" if home_step else "the start"
    ctx.session.front.warn(
        f"run {run_id}: checkpoint-{step} on network volume {volume} cannot be resumed from "
        f"({why}): resuming from {fallback}"
    )
    return False


def _prepare_upload(
    upload: Path,
    run_dir: Path,
    settings: Settings,
    step: int,
    device: str,
    choice: Choice,
    spec: RunpodTarget,
    from_volume: bool = False,
) -> None:
    """The run's inputs, as its first job had them, and the checkpoint of ``step`` to
    resume from (none: from the start), in ``upload``; ``from_volume``: the checkpoint is
    the one in the job's ``output`` on the network volume, and is not uploaded. The data
    is the run's own copy: the project's may have changed since the run began."""
    shutil.rmtree(upload, ignore_errors=True)
    data = check_data(run_dir)
    prepare_run_dir(
        upload,
        run_dir,
        settings.training,
        data,
        device=device,
        choice=choice,
        resume=(run_dir, step) if step and not from_volume else None,
        prepared=volume_prepared_path(spec),
    )
    if step and from_volume:
        # The trainer reads it where it saved it, through the pod's link to the volume.
        write_config(
            upload, settings.training, data.has_eval, device, checkpoint_path(step), choice
        )
