"""``runs logs RUN``: a run's job log from wherever it is, and a Runpod pod's own log.

The job's log (``job.log``, the trainer's stdout and stderr) is read on the run's target —
this machine, an SSH host, its pod — while the run is not home, and from ``runs/<id>/``
once it is (an ended run whose results were retrieved: no network at all). ``--follow``
prints it as it grows until the job ends. Reading never records anything in the run's log.

``--pod`` reads the pod's own log through Runpod's API (``GET /pods/{id}/logs``): the host's
``system`` source (the image pull, the container's start) and the ``container`` source, so
a pod still pulling its image is visible before anything of ours runs on it.
"""

import codecs
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

import trio

from overbrainer.config.model import LocalTarget, RunpodTarget, Settings, SshTarget
from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import ExecError, Executor
from overbrainer.front.streams import stdout_gone
from overbrainer.plurals import plural

if TYPE_CHECKING:
    from overbrainer.runpod.client import RunpodClient
    from overbrainer.runpod.pod_logs import LogLine, LogSource

LOG_FILE = "job.log"
CHUNK = 1 << 20
TAIL_WINDOW = 64 * 1024
POLL = 1.0
QUIET_END = 2.0
"""Without ``--follow``, a pod's log stream is read until a line later than its opening
(Runpod streams the backfill first), or until it is quiet this long."""

Where = Literal["here", "target"]


def where_to_read(state: RunLog, log_home: bool) -> Where:
    """Where a run's job log is read: ``here`` once it is home for good (the job runs on
    this machine, or the run ended with its log retrieved), else on its target.

    Raises :class:`OverbrainerError` for a run that never had a job.
    """
    run = state.run
    if run.job is None:
        if run.state == RunState.preparing:
            pod = " (`overbrainer runs logs RUN --pod` shows its pod starting)"
            raise OverbrainerError(
                f"run {run.run_id} has no job yet: nothing is logged before its job starts"
                + (pod if run.kind == "runpod" else "")
            )
        raise OverbrainerError(
            f"run {run.run_id} never started a job ({run.state}"
            + (f": {run.message}" if run.message else "")
            + "): it has no job log; `overbrainer events RUN` tells what happened"
        )
    if run.kind == "local" or (log_home and state.final):
        return "here"
    return "target"


def last_lines_start(data: bytes, count: int, at_start: bool) -> int | None:
    """Where the last ``count`` lines of ``data`` begin (``data`` is the end of a file, which
    begins with it when ``at_start``); None when ``data`` holds fewer of them and does not
    start the file (read further back)."""
    if count <= 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        cut = data.rfind(b"\n", 0, end)
        if cut < 0:
            return 0 if at_start else None
        end = cut
    return end + 1


@dataclass
class Printer:
    """Writes a log's bytes to ``out`` as text (UTF-8, a character split across two reads
    kept whole; undecodable bytes replaced)."""

    out: TextIO

    def __post_init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes, *, final: bool = False) -> None:
        text = self._decoder.decode(data, final=final)
        if text:
            self.out.write(text)
            self.out.flush()


async def _tail_offset(executor: Executor, path: str, size: int, lines: int) -> int:
    """The offset of the last ``lines`` lines of ``path`` (of ``size`` bytes), read back
    from its end window by window."""
    window = TAIL_WINDOW
    while True:
        start = max(0, size - window)
        data = await executor.read_file(path, start, size - start)
        found = last_lines_start(data, lines, start == 0)
        if found is not None:
            return start + found
        window *= 4


@dataclass
class Reading:
    """How far a job's log has been printed: a follow that loses its target (the pod was
    deleted once the results came home) goes on from here in the copy at home."""

    printer: Printer
    offset: int | None = None


async def print_job_log(
    executor: Executor,
    job_dir: str,
    out: TextIO,
    *,
    tail: int | None,
    follow: bool,
    poll: float = POLL,
    reading: Reading | None = None,
) -> None:
    """Print the job's log in ``job_dir`` (its last ``tail`` lines, or all of it); with
    ``follow``, go on printing as it grows until the job has ended and it is drained.
    With ``reading``, start where it stands (if it has started) and keep it up to date."""
    path = f"{job_dir}/{LOG_FILE}"
    if reading is None:
        reading = Reading(Printer(out))
    printer = reading.printer
    size = await executor.file_size(path)
    if reading.offset is None:
        reading.offset = 0 if tail is None else await _tail_offset(executor, path, size, tail)
    # Without --follow, the log as it was when asked (it may grow meanwhile).
    end: float = float("inf") if follow else size
    while True:
        ended = (await executor.status(job_dir)).ended if follow else True
        while reading.offset < end:
            data = await executor.read_file(
                path, reading.offset, int(min(CHUNK, end - reading.offset))
            )
            if data:
                printer.write(data)
                reading.offset += len(data)
            if len(data) < CHUNK or stdout_gone():
                break
        if ended or stdout_gone():
            printer.write(b"", final=True)
            return
        await trio.sleep(poll)


async def follow_onto_home(
    remote: Callable[[], Awaitable[None]],
    project_dir: Path,
    state: RunLog,
    reading: Reading,
    *,
    follow: bool,
    home_log: Path,
) -> None:
    """``remote()`` prints the job's log on its target into ``reading``; if a follow loses
    the target once the log is home (the run ended and its results were retrieved, then
    its pod deleted, before the follow saw the end), the rest is printed from the copy at
    home: the same file, verified when it came."""
    try:
        await remote()
    except OverbrainerError:
        if not (follow and reading.offset is not None and await trio.Path(home_log).is_file()):
            raise
        async with job_log_executor(project_dir, None, state, "here") as (executor, job_dir):
            await print_job_log(
                executor, job_dir, reading.printer.out, tail=None, follow=False, reading=reading
            )


# --- reaching the job's log ------------------------------------------------------------


@asynccontextmanager
async def job_log_executor(
    project_dir: Path,
    settings: Settings | None,
    state: RunLog,
    where: Where,
    client: "RunpodClient | None" = None,
) -> AsyncIterator[tuple[Executor, str]]:
    """An executor that reads the run's job log, and the job's directory in its terms."""
    from overbrainer.exec.local import LocalExecutor

    run = state.run
    if where == "here":
        local = LocalExecutor(project_dir)
        try:
            yield local, f"runs/{run.run_id}"
        finally:
            await local.aclose()
        return
    assert settings is not None
    spec = settings.targets.get(run.target)
    if run.kind == "ssh":
        from overbrainer.exec.ssh import UserHost, open_ssh

        if not isinstance(spec, SshTarget):
            raise _no_target(run.run_id, run.target, "an ssh")
        host = settings.require_host(run.target)
        async with open_ssh(UserHost(host), workdir=spec.workdir) as executor:
            yield executor, f"runs/{run.run_id}"
        return
    if run.kind == "runpod":
        if not isinstance(spec, RunpodTarget):
            raise _no_target(run.run_id, run.target, "a runpod")
        assert client is not None
        async with _pod_executor(project_dir, state, client) as executor:
            yield executor, f"runs/{run.run_id}"
        return
    if isinstance(spec, LocalTarget) or run.kind == "local":
        local = LocalExecutor(project_dir)
        try:
            yield local, f"runs/{run.run_id}"
        finally:
            await local.aclose()
        return
    raise OverbrainerError(f"run {run.run_id} is on a target of unknown kind {run.kind!r}")


def _no_target(run_id: str, target: str, kind: str) -> OverbrainerError:
    return OverbrainerError(
        f"target `{target}` of run {run_id} is no longer {kind} target in overbrainer.toml; "
        "declare it again to read the run's log there"
    )


@asynccontextmanager
async def _pod_executor(
    project_dir: Path, state: RunLog, client: "RunpodClient"
) -> AsyncIterator[Executor]:
    """The pinned SSH executor of the run's pod, at the endpoint Runpod shows now (read
    only: nothing is recorded)."""
    from overbrainer.runpod.keys import client_key_path
    from overbrainer.runpod.models import PodStatus, UnsafeSshEndpoint
    from overbrainer.targets.runpod.pods import PodAccess
    from overbrainer.targets.runpod.provision import pinned_ssh

    run, pod = state.run, state.pod
    logs = f"runs/{run.run_id}/{LOG_FILE}"
    if pod.pod_id is None or pod.host_public_key is None or not pod.may_bill():
        raise OverbrainerError(
            f"run {run.run_id} has no pod left to read its job log from, and its log is not "
            f"home ({logs}); `overbrainer runs logs {run.run_id} --pod` shows what Runpod kept"
        )
    remote = await client.get_pod(pod.pod_id)
    if remote is None or remote.status is PodStatus.TERMINATED:
        raise OverbrainerError(
            f"pod {pod.pod_id} of run {run.run_id} is gone, and the run's log is not home "
            f"({logs}); `overbrainer train attach {run.run_id}` settles the run"
        )
    try:
        endpoint = remote.ssh_endpoint()
    except UnsafeSshEndpoint as error:
        raise OverbrainerError(f"{error}; not connecting") from None
    if endpoint is None:
        status = remote.raw_status or remote.status.value
        raise OverbrainerError(
            f"pod {pod.pod_id} of run {run.run_id} cannot be reached now ({status}, no SSH "
            f"endpoint); `overbrainer runs logs {run.run_id} --pod` shows its own log"
        )
    ssh_dir = project_dir / "runs" / run.run_id / "ssh"
    access = PodAccess(endpoint, client_key_path(ssh_dir), pod.host_public_key)
    try:
        async with pinned_ssh()(access) as executor:
            yield executor
    except ExecError as error:
        raise OverbrainerError(
            f"cannot read the job log of run {run.run_id} on pod {pod.pod_id} ({error})"
        ) from error


# --- a pod's own log -------------------------------------------------------------------


async def print_pod_log(
    client: "RunpodClient",
    pod_id: str,
    out: TextIO,
    *,
    source: "LogSource | None",
    tail: int | None,
    follow: bool,
    gone: Callable[[], Awaitable[bool]],
    quiet_end: float = QUIET_END,
) -> None:
    """Print the pod's log (``tail`` backfilled lines, Runpod's 100 by default); with
    ``follow``, go on, reconnecting after a drop where it left off, until the pod is gone
    (``gone``). Without, stop at the first line later than the stream's opening or once
    it is quiet for ``quiet_end`` seconds."""
    from overbrainer.runpod.client import PodNotFound, RunpodApiError

    cursor: str | None = None
    with_source = source is None
    while True:
        try:
            async with client.pod_logs(
                pod_id, source=source, tail=tail, last_event_id=cursor
            ) as stream:
                opened = stream.opened_at
                while True:
                    batch: list[LogLine] | None = []
                    with trio.move_on_after(quiet_end if not follow else float("inf")):
                        batch = await stream.next_lines()
                    if batch is None:
                        break  # the stream ended (the pod is gone, or Runpod closed it)
                    if not batch and not follow:
                        return  # quiet: the backfill is over
                    for line in batch:
                        if not follow and _later(line.ts, opened):
                            return
                        out.write(line.text(with_source=with_source) + "\n")
                    out.flush()
                    if stdout_gone():
                        return
                    cursor = stream.cursor or cursor
        except PodNotFound:
            if cursor is None:
                raise OverbrainerError(
                    f"Runpod does not know pod {pod_id} (deleted): its own log is gone with it"
                ) from None
            return
        except RunpodApiError:
            if not follow or await gone():
                raise
            await trio.sleep(POLL)
            continue
        if not follow or await gone():
            return
        await trio.sleep(POLL)


def _later(ts: datetime | None, opened: datetime | None) -> bool:
    return ts is not None and opened is not None and ts > opened


# --- the end of a failed run's log -----------------------------------------------------

FAILURE_LINES = 20
"""How many of its job log's last lines a failed run's output ends with."""
_CONTROL = dict.fromkeys(c for c in range(32) if c != 9)
_CONTROL[127] = None


def shown_lines(data: bytes, count: int) -> list[str]:
    """The last ``count`` lines of the end of a log, as a terminal would leave them (a line
    rewritten with carriage returns, as progress bars do, shows its last state) and with no
    control character (no escape sequence reaches the terminal)."""
    start = last_lines_start(data, count, True) or 0
    text = data[start:].decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shown = []
    for line in lines:
        last = [part for part in line.split("\r") if part.strip()] or [""]
        shown.append(last[-1].translate(_CONTROL).replace("\x1b", ""))
    return shown


def failure_tail(project_dir: Path, run_id: str, count: int = FAILURE_LINES) -> list[str]:
    """What a failed run's output ends with: the last ``count`` lines of its job log with a
    heading naming the whole log, or where the log is when it is not home."""
    path = project_dir / "runs" / run_id / LOG_FILE
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_WINDOW))
            data = handle.read()
    except OSError:
        return [
            f"the job's log of run {run_id} is not home: `overbrainer runs logs {run_id}` "
            "reads it on its target"
        ]
    if size > TAIL_WINDOW:
        data = data[data.find(b"\n") + 1 :]
    lines = shown_lines(data, count)
    if not lines:
        return [f"the job's log (runs/{run_id}/{LOG_FILE}) is empty"]
    which = "the last line" if len(lines) == 1 else f"the last {plural(len(lines), 'line')}"
    return [
        f"{which} of the job's log (all of it: runs/{run_id}/{LOG_FILE}, or "
        f"`overbrainer runs logs {run_id}`):",
        *(f"  | {line}" for line in lines),
    ]
