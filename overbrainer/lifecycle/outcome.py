"""What a job's end means for its run: pure decisions, tested without any I/O."""

from dataclasses import dataclass

from overbrainer.events.types import RunState
from overbrainer.exec.base import JobState, JobStatus
from overbrainer.train.metrics import MetricsSummary, stop_reason_text


@dataclass(frozen=True)
class Verdict:
    """The final state a job's end gives its run, and why."""

    state: RunState
    message: str | None
    exit_code: int | None


def judge(
    job: JobState,
    summary: MetricsSummary,
    *,
    has_output: bool,
    run_id: str,
    checkpoint_home: bool = True,
) -> Verdict:
    """A run succeeds only when its job exited 0, its metrics plugin wrote at least one line
    and it left something under ``output/``; it is ``stopped`` when it did so after saving
    the checkpoint a save-and-stop request asked for (``checkpoint_home``: whether that
    checkpoint's files came home); every other end is a failure naming its reason (or a
    cancellation)."""
    log = f"runs/{run_id}/job.log"
    if job.node is not None:
        return _node_failed(job, job.node)
    if job.status is JobStatus.cancelled:
        return Verdict(RunState.cancelled, "cancelled", None)
    if job.status is JobStatus.lost:
        return Verdict(
            RunState.failed,
            "the job vanished without an exit code (lost: killed, or its "
            f"machine restarted); see {log}",
            None,
        )
    if job.status is not JobStatus.exited:
        raise ValueError(f"the job has not ended ({job.status})")
    code = job.exit_code
    if code is None:
        return Verdict(RunState.failed, f"the job's exit code is unreadable; see {log}", None)
    if code != 0:
        return Verdict(RunState.failed, f"the job exited with code {code}; see {log}", code)
    # Lines of the plugin only: a merge step's phase line is written by the job's shell.
    if summary.lines - summary.malformed - summary.phases <= 0:
        return Verdict(
            RunState.failed,
            "the job exited 0 without writing any metrics: the metrics "
            f"plugin was not loaded; see {log}",
            0,
        )
    if not has_output:
        return Verdict(
            RunState.failed, f"the job exited 0 but left nothing under output/; see {log}", 0
        )
    if summary.stopped_step is not None:
        return Verdict(RunState.stopped, stopped_message(summary, run_id, checkpoint_home), 0)
    return Verdict(RunState.succeeded, None, 0)


def _node_failed(job: JobState, node: int) -> Verdict:
    """Another node than rank 0 ended the job: the run fails naming it."""
    if job.status is JobStatus.exited and job.exit_code is not None:
        how = f"exited with code {job.exit_code}"
    elif job.status is JobStatus.cancelled:
        how = "was cancelled"
    else:
        how = "vanished without an exit code"
    said = f" (its log ends: {' | '.join(job.said)[-400:]})" if job.said else ""
    return Verdict(
        RunState.failed,
        f"the job on node {node} {how}{said}; the other nodes' jobs were stopped",
        job.exit_code,
    )


def stopped_message(summary: MetricsSummary, run_id: str, checkpoint_home: bool = True) -> str:
    """The message of a run that stopped at ``summary.stopped_step``, asked by whom its
    request says: its checkpoint saved, or none home to resume from; and, when the job
    skipped its merge, why and what to do instead."""
    step = summary.stopped_step
    asked = stop_reason_text(summary.stopped_reason)
    if checkpoint_home:
        message = f"saved checkpoint-{step} and stopped, {asked}"
    else:
        message = (
            f"stopped at step {step}, {asked}, but no checkpoint-{step} came home (the job "
            "left none in output/): there is nothing to resume from"
        )
    if summary.merge_skipped:
        message += (
            "; the adapter was not merged, its training stopped before its end: merge it "
            f"as it is with `axolotl merge-lora axolotl.yaml` in runs/{run_id}, or train "
            f"it to the end, merged then, with `overbrainer train --resume-from {run_id}`"
        )
    return message
