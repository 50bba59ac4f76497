"""A real ``overbrainer`` process with one extra command, ``probe SCENARIO MARKER``, for
test_sigint.py to send real SIGINTs to.

It goes through the real entry point (``overbrainer.cli.main.main``) and the real command
tree; the probe command only adds itself to that tree. It prints lines to stdout (flushed)
that the test waits for before it signals:

- ``READY <phase>``: the phase has begun, with the SIGINT receiver open;
- ``NOTED <n>``: the controller has noted ``n`` Ctrl-C;
- what happened: ``SHIELD DONE``, ``RACE STOPPED``, ``RACE DONE``, ``LATER SKIPPED``, ...;
- ``MAIN RETURNED`` (scenario ``late``): the command ended; the process exits 2 s later.

Every scenario ends with ``interrupts.check(...)``, so an interrupted probe exits through
``StopRequested`` (an ``Interrupted``, exit code 130) the way a command does.
"""

import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from overbrainer.cli.app import app
from overbrainer.cli.main import main
from overbrainer.front.exiting import exit_after_command
from overbrainer.front.interrupts import Interrupts, open_interrupts

# Bounds on how long shielded probe work waits for the test's signals: ample for a slow
# machine, short enough to keep a failing test quick.
_SIGNAL_WAIT = 3.0
_AFTER_SIGNALS = 0.5


def _say(line: str) -> None:
    print(line, flush=True)


async def _report_counts(interrupts: Interrupts) -> None:
    said = 0
    while True:
        await trio.sleep(0.005)
        while said < interrupts.count:
            said += 1
            _say(f"NOTED {said}")


async def _until_noted(interrupts: Interrupts, count: int) -> None:
    """Shielded work that lasts until the test has sent ``count`` SIGINTs, then a little
    more, so the signals surely arrive while it runs."""
    with trio.move_on_after(_SIGNAL_WAIT):
        while interrupts.count < count:
            await trio.sleep(0.005)
    await trio.sleep(_AFTER_SIGNALS)


async def _later_race(interrupts: Interrupts) -> None:
    async def later() -> None:
        _say("LATER STARTED")

    outcome = await interrupts.race(later)
    _say("LATER SKIPPED" if outcome is None else "LATER FINISHED")


async def _shield(interrupts: Interrupts, marker: Path) -> None:
    """Two SIGINTs during shielded work: it finishes, the second one says so."""

    async def work() -> None:
        _say("READY shield")
        await _until_noted(interrupts, 2)
        marker.write_text("written\n")
        _say("SHIELD DONE")

    await interrupts.shield("writing the probe's marker", 5, work)
    await _later_race(interrupts)


async def _race(interrupts: Interrupts, marker: Path) -> None:
    """A SIGINT during a race: it stops at once."""

    async def follow() -> None:
        _say("READY race")
        await trio.sleep(30)
        marker.write_text("raced to the end\n")
        _say("RACE DONE")

    outcome = await interrupts.race(follow)
    _say("RACE STOPPED" if outcome is None else "RACE FINISHED")
    await _later_race(interrupts)


async def _nested(interrupts: Interrupts, marker: Path) -> None:
    """A SIGINT during a shield inside a race: the shield finishes, then the race stops."""

    async def save() -> None:
        await _until_noted(interrupts, 1)
        marker.write_text("written\n")
        _say("SHIELD DONE")

    async def follow() -> None:
        _say("READY nested")
        await interrupts.shield("saving the probe's record", 5, save)
        await trio.sleep(30)
        _say("RACE DONE")

    outcome = await interrupts.race(follow)
    _say("RACE STOPPED" if outcome is None else "RACE FINISHED")
    await _later_race(interrupts)


_SCENARIOS: dict[str, Callable[[Interrupts, Path], Awaitable[None]]] = {
    "shield": _shield,
    "race": _race,
    "nested": _nested,
    "late": _race,  # then a second signal once main() returned
}


async def probe(scenario: str, marker: Path) -> None:
    """Run one SIGINT scenario of the probe."""
    async with open_interrupts() as interrupts:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report_counts, interrupts)
            await _SCENARIOS[scenario](interrupts, marker)
            nursery.cancel_scope.cancel()
        interrupts.check("the probe's next step")
        _say("PROBE END")


if __name__ == "__main__":
    app.command(probe, name="probe")
    if app.backend is None:
        # Until main() runs async commands on trio itself.
        app.backend = "trio"
    exit_after_command()  # as overbrainer's own entry point does
    code = main(["probe", *sys.argv[1:]])
    if sys.argv[1] == "late":
        # The command is done: a signal now must not change how the process exits.
        _say("MAIN RETURNED")
        time.sleep(_AFTER_SIGNALS * 4)
    sys.exit(code)
