"""A run left ``preparing`` by a command that died before it recorded its job's start.

``train`` appends ``run.JobStarted`` only once the job's pid is known; a process killed
(SIGKILL, a crash, a reboot) between spawning the job and that append leaves a job running
that the log does not know, and a process killed earlier leaves a run that nothing will
ever end. ``train attach`` and ``train cancel`` settle such a run first: when the command
that was starting it is gone, the job it spawned — if its pid is on the target — is
adopted (``run.JobStarted`` appended, then followed or cancelled as usual); with no job
there, the run fails saying so.
"""

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.actor import starter_alive
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import JobStatus
from overbrainer.exec.job import COMMANDS_FILE, CONTAINER_FILE
from overbrainer.lifecycle.service import Job
from overbrainer.session.session import Session

# A wrapper spawned just before its starter died records its pid within milliseconds;
# the files of the spawn without a pid are waited on this long before giving up on it.
PID_WAIT = 3.0
PID_POLL = 0.1


class StillStarting(OverbrainerError):
    """The command starting the run may still be alive: nothing is decided for it."""


async def settle_start(session: Session, job: Job, state: RunLog) -> RunLog:
    """Settle a run that is still ``preparing``: adopt the job its dead starter spawned, or
    fail the run; returns the run's state after that (unchanged if it was not preparing).

    Raises:
        StillStarting: the command starting the run is alive here, or ran on another host.
    """
    run = state.run
    if run.state != RunState.preparing:
        return state
    records = await session.journal.history(run.run_id)
    last = records[-1].actor if records else {}
    alive = starter_alive(last)
    who = f"`{last.get('command', '?')}` (pid {last.get('pid', '?')})"
    if alive is None:
        raise StillStarting(
            f"run {run.run_id} is being started by {who} on host {last.get('host', '?')}; "
            f"follow it from there, or wait until it started and run "
            f"`overbrainer train attach {run.run_id}` again"
        )
    if alive:
        raise StillStarting(
            f"run {run.run_id} is still being started by {who}; wait until its job has "
            f"started, then run `overbrainer train attach {run.run_id}` again"
        )
    pid, container = await _spawned(job)
    stopped = pid is not None and (await job.executor.status(job.remote_dir)).status in (
        JobStatus.cancelled,
        JobStatus.cancelling,
    )

    if pid is not None and not stopped:
        session.front.warn(
            f"run {run.run_id} was left starting by {who}, which is gone; its job "
            f"(pid {pid}) runs on {job.executor.location}: following it"
        )
    return await session.journal.append(
        run.run_id,
        lambda s: decisions.adopt_or_fail_start(
            s, job_dir=job.remote_dir, pid=pid, container=container, stopped=stopped, who=who
        ),
    )


async def _spawned(job: Job) -> tuple[int | None, str | None]:
    """The pid (and container) of a job spawned in the run's directory, if any."""
    executor, where = job.executor, job.remote_dir
    end = trio.current_time() + PID_WAIT
    while True:
        pid = _pid(await executor.read_file(f"{where}/job.pid", 0, 64))
        if pid is not None:
            break
        spawning = await executor.read_file(f"{where}/{COMMANDS_FILE}", 0, 1)
        if not spawning or trio.current_time() >= end:
            return None, None
        await trio.sleep(PID_POLL)
    marker = (await executor.read_file(f"{where}/{CONTAINER_FILE}", 0, 256)).split()
    container = marker[1].decode(errors="replace") if len(marker) > 1 else None
    return pid, container


def _pid(data: bytes) -> int | None:
    words = data.split()
    if not words or not words[0].isdigit():
        return None
    value = int(words[0])
    return value if value > 1 else None
