"""``runs logs RUN``: a run's job log from wherever it is, and a Runpod pod's own log.

The job's log (``job.log``, the trainer's stdout and stderr) is read on the run's target —
this machine, an SSH host, its pod — while the run is not home, and from ``runs/<id>/``
once it is (an ended run whose results were retrieved: no network at all). ``--follow``
prints it as it grows until the job ends. Reading never records anything in the run's log.

What reaches the job on its target is the target's (``targets/choose.py``); a pod's own log
(``--pod``) is Runpod's (``targets/runpod/logs.py``).
"""

import codecs
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import Executor
from overbrainer.front.streams import stdout_gone
from overbrainer.plurals import plural

LOG_FILE = "job.log"
CHUNK = 1 << 20
TAIL_WINDOW = 64 * 1024
POLL = 1.0

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
                + (pod if run.kind_facts.rents_pod else "")
            )
        raise OverbrainerError(
            f"run {run.run_id} never started a job ({run.state}"
            + (f": {run.message}" if run.message else "")
            + "): it has no job log; `overbrainer events RUN` tells what happened"
        )
    if run.kind_facts.runs_here or (log_home and state.final):
        return "here"
    return "target"


def last_lines_start(
    data: bytes, count: int, at_start: bool, only: bytes | None = None
) -> int | None:
    """Where the last ``count`` lines of ``data`` begin (``data`` is the end of a file, which
    begins with it when ``at_start``); None when ``data`` holds fewer of them and does not
    start the file (read further back). ``only``: count just the lines it begins."""
    if count <= 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    found = 0
    while found < count:
        cut = data.rfind(b"\n", 0, end)
        if cut < 0:
            if at_start:
                return 0
            return None
        if only is None or data.startswith(only, cut + 1):
            found += 1
        end = cut
    return end + 1


@dataclass
class Printer:
    """Writes a log's bytes to ``out`` as text (UTF-8, a character split across two reads
    kept whole; undecodable bytes replaced). ``only``: just the lines it begins, without
    it (one process's lines of a job of several)."""

    out: TextIO
    only: bytes | None = None

    def __post_init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = b""

    def write(self, data: bytes, *, final: bool = False) -> None:
        if self.only is not None:
            data = self._kept(data, final)
        text = self._decoder.decode(data, final=final)
        if text:
            self.out.write(text)
            self.out.flush()

    def _kept(self, data: bytes, final: bool) -> bytes:
        only = self.only
        assert only is not None
        pieces = (self._partial + data).split(b"\n")
        # The last piece is a line not ended yet: kept for the next read.
        self._partial = pieces.pop()
        kept = b"".join(line[len(only) :] + b"\n" for line in pieces if line.startswith(only))
        if final:
            last, self._partial = self._partial, b""
            if last.startswith(only):
                kept += last[len(only) :]  # the log's last line, unended
        return kept


async def _tail_offset(
    executor: Executor, path: str, size: int, lines: int, only: bytes | None = None
) -> int:
    """The offset of the last ``lines`` lines of ``path`` (of ``size`` bytes), read back
    from its end window by window."""
    window = TAIL_WINDOW
    while True:
        start = max(0, size - window)
        data = await executor.read_file(path, start, size - start)
        found = last_lines_start(data, lines, start == 0, only)
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
        reading.offset = (
            0 if tail is None else await _tail_offset(executor, path, size, tail, printer.only)
        )
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
        async with log_at_home(project_dir, state.run.run_id) as (executor, job_dir):
            await print_job_log(
                executor, job_dir, reading.printer.out, tail=None, follow=False, reading=reading
            )


# --- the job's log at home -------------------------------------------------------------


@asynccontextmanager
async def log_at_home(project_dir: Path, run_id: str) -> AsyncIterator[tuple[Executor, str]]:
    """This machine, to read the run's job log in its directory here (``runs/<id>``)."""
    from overbrainer.exec.local import LocalExecutor

    local = LocalExecutor(project_dir)
    try:
        yield local, f"runs/{run_id}"
    finally:
        await local.aclose()


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
