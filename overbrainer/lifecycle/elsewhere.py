"""``train attach`` and ``train cancel`` of a run whose files live in another checkout.

With a team store every checkout sees every run, but a run's job is reached only from the
checkout that started it: its ``runs/<id>/`` holds the job's files and, for a pod, the SSH
keys. ``train attach`` elsewhere says where to go (or, for a run that ended, what it came
to). ``train cancel`` elsewhere asks through the log: it records ``run.CancelRequested``
with ``relay="asked"``, and whichever command follows the run there takes it
(``service.take_relayed_cancel``), records that, stops the job and ends the run as any
cancel does. The asker waits for that, and says so plainly when nobody follows the run.
``train stop`` elsewhere asks the same way (``run.StopRequested``, relay ``asked``): the
follower writes the request on the target and follows the job to its end; a job that has
not stopped within the bound is then asked to cancel, through the log too.
"""

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.aggregate import RunLog
from overbrainer.events.home import RunHome, has_local_files
from overbrainer.events.types import RunState
from overbrainer.session.limits import CANCEL_LIMIT, COLLECT_LIMIT
from overbrainer.session.session import Session

__all__ = [
    "attach_elsewhere",
    "cancel_elsewhere",
    "lives_elsewhere",
    "stop_elsewhere",
    "where_text",
]

# How often the asker reads the log while it waits.
_WAIT_POLL = 0.25


def lives_elsewhere(session: Session, state: RunLog) -> bool:
    """Whether the run's job can be reached only from another checkout: it has a job, and
    this checkout's ``runs/<id>/`` holds nothing of it but projections."""
    return state.run.job is not None and not has_local_files(session.run_dir(state.run.run_id))


async def home_of(session: Session, state: RunLog) -> RunHome | None:
    """Where the run was started (host, user, command), from its first event."""
    return await session.journal.home(state)


def where_text(home: RunHome | None) -> str:
    """``host laptop-a (started by `train` as alice)``, or a plain fallback."""
    if home is None:
        return "another checkout"
    return f"host {home.host} (started by `{home.command}` as {home.user})"


async def attach_elsewhere(session: Session, state: RunLog) -> int:
    """``train attach`` of a run that lives elsewhere: an ended run is reported from the
    log; one still going is refused, naming the host and the command to run there."""
    run_id = state.run.run_id
    home = await home_of(session, state)
    where = where_text(home)
    if state.final:
        session.front.result(
            f"train: run {run_id} {state.run.state}"
            + (f" ({state.run.message})" if state.run.message else "")
            + f"; it ran from {where}, where its output is (runs/{run_id}/output)"
        )
        return 0 if state.run.state == RunState.succeeded else 1
    raise OverbrainerError(
        f"run {run_id} lives on {where}: its job and its files (runs/{run_id}/) are reached "
        f"from there. Run `overbrainer train attach {run_id}` in that checkout, or stop it "
        f"from here with `overbrainer train cancel {run_id}`"
    )


async def cancel_elsewhere(session: Session, state: RunLog, *, follower_poll: float) -> int:
    """``train cancel`` of a run that lives elsewhere: ask the run's follower through the
    log, then wait until the run ends. Without a follower taking the request within a few
    of its polls, fail naming what will honour it and where.

    ``follower_poll`` is how often a follower reads the log (its job-status poll).
    """
    run_id = state.run.run_id
    front = session.front
    if state.final:
        front.result(f"train: run {run_id} had already ended ({state.run.state})")
        return 0
    home = await home_of(session, state)
    where = where_text(home)
    # A cancel already asked or under way elsewhere is joined, not asked twice.
    state = await session.journal.append(run_id, decisions.ask_cancel)
    front.info(
        f"train: run {run_id} lives on {where}: asked the command following it there to "
        "cancel it; waiting"
    )
    ack_wait = 5.0 + 10 * follower_poll
    finished = await session.interrupts.race(
        lambda: _wait_for_end(session, run_id, ack_wait=ack_wait)
    )
    if finished is None:
        raise Interrupted(
            f"stopped waiting; the cancel of run {run_id} stays requested: "
            f"`overbrainer events {run_id} --follow` shows when it is done"
        )
    final = finished.value
    if final is None:
        latest = await session.journal.state(run_id)
        raise OverbrainerError(_nobody_following(run_id, where, latest))
    if final.run.state == RunState.cancelled:
        host = f"host {home.host}" if home is not None else "another checkout"
        front.result(f"train: run {run_id} cancelled by the command following it on {host}")
    else:
        front.result(
            f"train: run {run_id} {final.run.state} before the cancel took effect"
            + (f" ({final.run.message})" if final.run.message else "")
        )
    return 0


async def _wait_for_end(session: Session, run_id: str, *, ack_wait: float) -> RunLog | None:
    """The run's state once it ended; None when nobody took the request in ``ack_wait``
    seconds. Once taken, the wait is bounded by the follower's own limits."""
    taken_by = trio.current_time() + ack_wait
    limit = trio.current_time() + ack_wait + CANCEL_LIMIT + COLLECT_LIMIT
    while trio.current_time() < limit:
        state = await session.journal.state(run_id)
        if state.final:
            return state
        if state.run.cancel_pending and trio.current_time() >= taken_by:
            return None
        await trio.sleep(_WAIT_POLL)
    return None


def _nobody_following(run_id: str, where: str, state: RunLog, asked: str = "cancel") -> str:
    bound = ""
    pod = state.pod
    if pod.pod_id is not None and pod.deadline and not pod.keep:
        bound = f"; until then its pod {pod.pod_id} bills, bounded by its watchdog ({pod.deadline})"
    elif pod.pod_id is not None:
        bound = f"; until then its pod {pod.pod_id} bills"
    return (
        f"the {asked} of run {run_id} is recorded, but no command is following the run to "
        f"take it: it lives on {where}. There, `overbrainer train attach {run_id}` stops its "
        f"job (or `overbrainer train cancel {run_id}`){bound}"
    )


async def stop_elsewhere(
    session: Session, state: RunLog, *, follower_poll: float, within: float
) -> int:
    """``train stop`` of a run that lives elsewhere: ask the run's follower through the
    log, then wait until the run ends. Without a follower taking the request within a few
    of its polls, fail naming what will honour it and where; a job still running
    ``within`` seconds after the request is asked to cancel, through the log too."""
    run_id = state.run.run_id
    front = session.front
    if not decisions.can_stop(state):
        front.result(f"train: run {run_id} is {state.run.state}: nothing to stop")
        return 0
    home = await home_of(session, state)
    where = where_text(home)
    await session.journal.append(run_id, decisions.ask_stop)
    front.info(
        f"train: run {run_id} lives on {where}: asked the command following it there to "
        "have its job save a checkpoint and stop; waiting"
    )
    ack_wait = 5.0 + 10 * follower_poll

    async def wait() -> RunLog | None:
        taken_by = trio.current_time() + ack_wait
        overdue = trio.current_time() + within
        cancelled = False
        limit = overdue + ack_wait + CANCEL_LIMIT + COLLECT_LIMIT
        while trio.current_time() < limit:
            latest = await session.journal.state(run_id)
            if latest.final:
                return latest
            if latest.run.stop_pending and trio.current_time() >= taken_by:
                return None
            if not cancelled and trio.current_time() >= overdue:
                front.warn(
                    f"the job of run {run_id} did not stop within {within / 60:g} minutes "
                    "of the request to save and stop; asking to cancel it"
                )
                await session.journal.append(run_id, decisions.ask_cancel)
                cancelled = True
            await trio.sleep(_WAIT_POLL)
        return None

    finished = await session.interrupts.race(wait)
    if finished is None:
        raise Interrupted(
            f"stopped waiting; the stop of run {run_id} stays requested: "
            f"`overbrainer events {run_id} --follow` shows when it is done"
        )
    final = finished.value
    if final is None:
        latest = await session.journal.state(run_id)
        raise OverbrainerError(_nobody_following(run_id, where, latest, "stop"))
    message = f" ({final.run.message})" if final.run.message else ""
    front.result(f"train: run {run_id} {final.run.state}{message}")
    return 0 if final.run.state in (RunState.stopped, RunState.succeeded) else 1
