"""``python -m e2e [--full] [PYTEST ARGS…]`` (``just e2e``): build the CPU Axolotl
environment and the tiny model if their pins changed (else reuse them), then run the e2e
suite. Prints how long the build took and, at the end, each case's time."""

import signal
import sys
import time

from e2e import build


def main(argv: list[str]) -> int:
    """Build, then run pytest on ``e2e/`` with ``argv`` (``--full`` among them)."""
    # A shell without job control starts a background job with SIGINT ignored, and an
    # ignored signal stays ignored in every child: the Ctrl-C cases would meet no Ctrl-C.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    code = build.main()
    if code:
        return code
    print(f"e2e: ready in {time.monotonic() - started:.1f} s", flush=True)
    import pytest

    args = ["e2e", "--timeout=1800", *argv]
    result = int(pytest.main(args))
    print(f"e2e: total {time.monotonic() - started:.1f} s", flush=True)
    return result


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
