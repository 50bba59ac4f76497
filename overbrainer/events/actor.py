"""Who appended an event (the command, user, host, process and overbrainer version), and
whether that process still runs."""

import getpass
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from overbrainer.version import installed


def this_host() -> str:
    """This machine's name, as actors record it: the kernel's host name, which is what
    ``socket.gethostname()`` gives, without loading the socket module (a read command
    compares it with every run's)."""
    return os.uname().nodename


@dataclass(frozen=True)
class Actor:
    """The stamp every event carries."""

    command: str
    user: str
    host: str
    pid: int
    version: str

    @classmethod
    def here(cls, command: str) -> "Actor":
        """The actor for ``command`` run by this process."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (containers)
            user = str(os.getuid())
        return cls(
            command=command,
            user=user,
            host=this_host(),
            pid=os.getpid(),
            version=installed(),
        )

    def to_json(self) -> dict[str, Any]:
        """As JSON primitives."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Actor":
        """Tolerant of missing keys (older or hand-made logs)."""
        return cls(
            command=str(data.get("command", "?")),
            user=str(data.get("user", "?")),
            host=str(data.get("host", "?")),
            pid=int(data.get("pid", 0) or 0),
            version=str(data.get("version", "?")),
        )

    def describe(self) -> str:
        """``train attach by alice@laptop (pid 42, v0.3.0)``."""
        return f"{self.command} by {self.user}@{self.host} (pid {self.pid}, v{self.version})"


def starter_alive(actor: dict[str, object]) -> bool | None:
    """Whether the process of ``actor`` (an event's stamp) still runs an overbrainer
    command on this host; None when it ran on another host (unknowable from here)."""
    if actor.get("host") != this_host():
        return None
    pid = actor.get("pid")
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc: a live pid is taken as the starter
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return b"overbrainer" in cmdline
