"""What a command says of a run once it is done with it: the final line, and an error when
the run did not succeed."""

from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.lifecycle.logs import failure_tail
from overbrainer.lifecycle.service import Retrieval, attach_hint
from overbrainer.projections.summary import resume_clause
from overbrainer.projections.words import shown_path
from overbrainer.session.session import Session, ended_by
from overbrainer.train.metrics import MetricsSummary, summary_line


def report(
    session: Session,
    state: RunLog,
    summary: MetricsSummary | None,
    retrieved: bool,
    *,
    more: str = "",
) -> int:
    """Print the final line; a run that did not succeed (or stop, as asked) is an error
    (exit 1), ending with ``more`` (``; …``: what the caller adds) and, when its last
    checkpoint is home, how to go on from it."""
    run = state.run
    if summary is None and run.metrics:
        summary = MetricsSummary.from_dict(run.metrics)
    if run.state == RunState.running:
        why = f" ({run.note})" if run.note else ""
        raise OverbrainerError(
            f"the job of run {run.run_id} ended but its results could not be retrieved and "
            f"verified{why}; {attach_hint(run.run_id)} to collect them{more}"
        )
    done = run.state in (RunState.succeeded, RunState.stopped)
    output = None
    if done and retrieved and run.files_removed is None:  # `runs rm` took the output away
        output = shown_path(session.run_dir(run.run_id) / "output", session.project_dir)
    session.front.result(summary_line(run.run_id, run.state, summary, output))
    if run.state == RunState.succeeded:
        if run.stop_requested:
            session.front.info(
                f"train: the job of run {run.run_id} ended its training before it could act "
                "on the request to save and stop: the run succeeded, with its whole output"
            )
        return 0
    if run.state == RunState.stopped:
        # Who asked, what was saved (or why not) and a merge skipped; then how to go on.
        if run.message:
            session.front.result(f"train: run {run.run_id} {run.message}")
        session.front.result(resume_hint(state))
        return 0
    if run.state == RunState.failed and run.job is not None:
        # The output ends with what the job said last, and where the rest of it is.
        for line in failure_tail(session.project_dir, run.run_id):
            session.front.info(line)
    note = f" ({run.note})" if run.note else ""
    why = f": {run.message}" if run.message and run.message != run.state else ""
    raise OverbrainerError(f"run {run.run_id} {run.state}{why}{note}{more}{resume_clause(state)}")


def resume_hint(state: RunLog) -> str:
    """How a stopped run goes on: from its checkpoint, or why it cannot."""
    run = state.run
    if run.checkpoint is None:
        return (
            f"train: run {run.run_id} stopped without a checkpoint home: nothing to resume; "
            "train again from the start with `overbrainer train`"
        )
    return (
        f"train: checkpoint-{run.checkpoint['step']} of run {run.run_id} is home; resume "
        f"with `overbrainer train --resume-from {run.run_id}`"
    )


def report_retrieval(
    session: Session, state: RunLog, summary: MetricsSummary | None, retrieval: Retrieval
) -> int:
    """:func:`report`, then an error when the results are not home (even for a run another
    command recorded as succeeded)."""
    code = report(session, state, summary, retrieval.ok)
    if not retrieval.ok:
        run_id = state.run.run_id
        raise OverbrainerError(
            f"the results of run {run_id} could not be retrieved ({retrieval.problem}); "
            f"{attach_hint(run_id)} to collect them"
        )
    return code


async def report_ended_meanwhile(session: Session, state: RunLog) -> int:
    """Report a run another command ended while this one followed it — what that command
    did, then the run's real outcome (exit 0 only if it succeeded)."""
    run_id = state.run.run_id
    who = await ended_by(session, run_id)
    session.front.info(f"train: run {run_id} was ended{who} while this command followed it")
    return report(session, state, None, state.run.artifacts is not None and not state.run.note)


async def already_ended(session: Session, state: RunLog) -> int:
    """``train cancel`` of a run that ended before the cancel took effect: say how, and by
    whom; nothing is left to do."""
    run_id = state.run.run_id
    who = await ended_by(session, run_id)
    message = f" ({state.run.message})" if state.run.message else ""
    session.front.result(
        f"train: run {run_id} had already ended ({state.run.state}){who}{message}; "
        "nothing to cancel"
    )
    return 0
