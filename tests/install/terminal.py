"""An interactive shell on a pseudo-terminal, typed into as a person would: what a
completion shows after Tab is read off the screen."""

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\r|\x07")


def _own_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is the pty (its
    stdin), as a login's shell has; job control and readline then work as for a person."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``argv`` (a shell) on a fresh pseudo-terminal of 200 columns."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
        main, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self._fd = main
        self.process = subprocess.Popen(
            list(argv),
            stdin=child,
            stdout=child,
            stderr=child,
            env=dict(env),
            cwd=cwd,
            preexec_fn=_own_terminal,
            close_fds=True,
        )
        os.close(child)
        self.screen = ""

    def type(self, keys: str) -> None:
        os.write(self._fd, keys.encode())

    def read_until(self, pattern: str, timeout: float = 20) -> str:
        """Everything shown so far (escape sequences removed) once ``pattern`` (a regular
        expression) appears in it; AssertionError with the screen after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text()):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} never showed; the screen:\n{self.text()}")
            ready, _, _ = select.select([self._fd], [], [], min(left, 0.2))
            if ready:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:
                    data = b""
                if not data and self.process.poll() is not None:
                    raise AssertionError(f"the shell exited; the screen:\n{self.text()}")
                self.screen += data.decode(errors="replace")
        return self.text()

    def text(self) -> str:
        return _ESCAPES.sub("", self.screen)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        os.close(self._fd)
