"""Run a command with less than its user has, as the disk faults of real machines do.

``python -m tests.fakes.confine MODE -- COMMAND…`` then ``exec``s ``COMMAND``:

- ``read-only``: permissions are enforced even for root. A root process normally writes
  into a directory whatever its mode (``CAP_DAC_OVERRIDE``); here that capability and
  ``CAP_FOWNER`` are dropped from the bounding set before the ``exec``, so a directory
  made ``a-w`` stops the command as it stops any user (the test suite often runs as
  root, where ``chmod`` alone proves nothing). Other users need no change.
- ``full``: a file-size limit of zero (``RLIMIT_FSIZE``): every write that would put a
  byte in a file fails (``EFBIG``), as on a full disk. Python ignores ``SIGXFSZ``, so the
  command sees the error instead of being killed.
"""

import ctypes
import os
import resource
import sys

_PR_CAPBSET_DROP = 24  # <linux/prctl.h>
_CAP_DAC_OVERRIDE, _CAP_FOWNER = 1, 3  # <linux/capability.h>


def _drop_override() -> None:
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_FOWNER):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            number = ctypes.get_errno()
            raise SystemExit(f"confine: cannot drop capability {cap}: {os.strerror(number)}")


def main(argv: list[str]) -> None:
    """Apply MODE, then become COMMAND."""
    if len(argv) < 3 or argv[1] != "--" or argv[0] not in ("read-only", "full"):
        raise SystemExit("usage: python -m tests.fakes.confine read-only|full -- COMMAND…")
    mode, command = argv[0], argv[2:]
    if mode == "read-only":
        _drop_override()
    else:
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
