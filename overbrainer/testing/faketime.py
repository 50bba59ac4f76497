"""A process's wall clock set wrong, with libfaketime (Debian's ``faketime`` package): what the
real code reads as the time, in Python, in a shell, in ``date`` and ``curl``, is shifted.

- :func:`skewed`: the environment of a process whose clock is a constant offset away
  (``-3h``, ``+730d``). libfaketime shifts the monotonic clock by the same constant, which
  changes no span of time (and keeps Python's ``time.sleep`` working).
- :class:`Jumping`: the environment of a process whose wall clock can be made to jump
  while it runs (:meth:`Jumping.jump`), as a laptop waking up or a clock set by hand; its
  monotonic clock is left alone, as a real step of the wall clock leaves it — or jumps
  with it (``monotonic=True``), as a VM restored or a machine whose monotonic clock counts
  its sleep moves it (only forward: nothing goes on waiting right once a monotonic clock
  went back, and none does). With libfaketime 0.9.10,
  Python's ``time.sleep`` (an absolute ``clock_nanosleep``) fails with EINVAL in such a
  process: nothing that ``train`` on a pod runs sleeps that way (trio waits on ``epoll``).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

_PATTERNS = ("/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")


def library() -> str:
    """The path of libfaketime's multi-threaded preload library."""
    for pattern in _PATTERNS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise RuntimeError(
        "libfaketime is not installed: the clock tests need it (Debian: apt-get install "
        "faketime; `.ci/run` installs it)"
    )


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose clock is ``offset`` away (``-3h``, ``+730d``)."""
    return {"LD_PRELOAD": library(), "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "0"}


@dataclass
class Jumping:
    """A wall clock that starts right and jumps when told; ``file`` holds its offset."""

    file: Path
    monotonic: bool = False

    def __post_init__(self) -> None:
        self.file.write_text("+0\n")

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process on this clock (its children share it)."""
        return {
            "LD_PRELOAD": library(),
            "FAKETIME_TIMESTAMP_FILE": str(self.file),
            # Read at every look at the clock: the jump shows at once.
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "0" if self.monotonic else "1",
        }

    def jump(self, offset: str) -> None:
        """From now on, the clock is ``offset`` away (``+2h``)."""
        self.file.write_text(offset + "\n")
