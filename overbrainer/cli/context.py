"""What every command knows about its invocation: the project directory (found upward from
where it was started), the environment (with the project's ``.env`` under it) and which
command is running."""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from overbrainer.errors import OverbrainerError


@dataclass(frozen=True)
class Invocation:
    """One run of the ``overbrainer`` program."""

    project_dir: Path
    command: str
    argv: tuple[str, ...] = ()
    base_environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # Where the command was started (the current directory, or -C DIR): the project is
    # there or above it. None: the project directory itself.
    start_dir: Path | None = None

    @property
    def started_in(self) -> Path:
        """The directory the command was started in (or -C DIR named)."""
        return self.project_dir if self.start_dir is None else self.start_dir

    def environ(self) -> dict[str, str]:
        """The process environment over the project's ``.env`` (the process wins)."""
        from overbrainer.config.dotenv import read_dotenv

        merged = dict(read_dotenv(self.project_dir / ".env"))
        merged.update(self.base_environ)
        return merged


_current: Invocation | None = None


def set_current(invocation: Invocation) -> None:
    """Make ``invocation`` the one commands see (called once by ``main``)."""
    global _current
    _current = invocation


def current() -> Invocation:
    """The running invocation."""
    if _current is None:
        raise OverbrainerError("internal: no invocation is set")
    return _current
