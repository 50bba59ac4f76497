"""How a job on this machine ended, read from the markers ``job.sh`` leaves in its
directory (see ``base.py``), without writing anything and without ``ctl.sh``.

The read commands (``runs ls``, ``runs show``) use it for a run the log still calls
running: once a follower was interrupted the job goes on alone, and only these markers know
that it ended. ``exit_code`` is written atomically when the trainer's commands are done
(its time is when the job ended), ``cancelled`` by a cancel once the job is stopped. A job
that left neither and whose process group is gone died without a word (``lost``).
"""

import contextlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

EXIT_CODE = "exit_code"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
PID_FILE = "job.pid"

How = Literal["exited", "cancelled", "lost"]


@dataclass(frozen=True)
class JobEnd:
    """How and when a job ended: its exit code when it exited (None if unreadable), the
    time its marker was written (None for a lost job, which wrote none)."""

    how: How
    exit_code: int | None = None
    at: datetime | None = None

    def text(self) -> str:
        """``exited with code 0 at 2026-01-01 12:00:00Z``, for people."""
        if self.how == "exited":
            code = "an unreadable code" if self.exit_code is None else f"code {self.exit_code}"
            said = f"exited with {code}"
        elif self.how == "cancelled":
            said = "was cancelled"
        else:
            said = "is gone without an exit code"
        if self.at is not None:
            said += f" at {self.at:%Y-%m-%d %H:%M:%S}Z"
        return said

    def to_json(self) -> dict[str, object]:
        """As JSON primitives (``runs ls --json``, ``runs show --json``)."""
        return {
            "how": self.how,
            "exit_code": self.exit_code,
            "at": self.at.isoformat().replace("+00:00", "Z") if self.at is not None else None,
        }


def _written_at(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0)
    except OSError:
        return None


def _from_markers(directory: Path) -> JobEnd | None:
    cancelled = directory / CANCELLED
    if cancelled.exists():
        return JobEnd("cancelled", at=_written_at(cancelled))
    if (directory / CANCELLING).exists():
        return None  # being stopped: not ended yet
    exit_code = directory / EXIT_CODE
    if not exit_code.exists():
        return None
    code: int | None = None
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = exit_code.read_text(encoding="ascii").strip()
        code = int(text) if text.isdigit() else None
    return JobEnd("exited", code, _written_at(exit_code))


def _group_gone(directory: Path) -> bool:
    """Whether the job's process group (its pid in ``job.pid``) has no process left; False
    when it cannot be told."""
    try:
        text = (directory / PID_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    if not text.isdigit() or int(text) <= 1:
        return False
    group = int(text)
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # another user's, or cannot tell: alive as far as we know

    # A group whose processes are all zombies (a leader nobody reaps: its parent exited
    # and the container's init does not reap) is gone as ``ctl.sh`` judges it: Linux's
    # /proc tells; elsewhere it counts as alive.
    def lives(stat: Path) -> bool:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return int(fields[2]) == group and fields[0] not in ("Z", "X")
        return False

    proc = Path("/proc")
    if lives(proc / str(group) / "stat"):
        return False  # its leader runs: the common case, answered without a scan
    try:
        entries = [e for e in proc.iterdir() if e.name.isdigit()]
    except OSError:
        return False
    return not any(lives(entry / "stat") for entry in entries)


def job_end(directory: Path) -> JobEnd | None:
    """How the job in ``directory`` on this machine ended; None while it runs (or is being
    cancelled), or when its directory tells nothing."""
    found = _from_markers(directory)
    if found is not None or (directory / CANCELLING).exists():
        return found  # a cancel in progress says when the job is gone (``cancelled``)
    # The group is looked at before the markers again: a job writes its exit code while
    # its group still lives, so a group seen gone has left its markers already.
    if _group_gone(directory):
        return _from_markers(directory) or JobEnd("lost")
    return None
