"""The front end: the one object commands talk to for everything a person sees.

Results go to stdout; progress, events, warnings and notices to stderr. On a terminal the
training progress is a live line (rich); elsewhere it is a plain line at most every
``throttle`` seconds. Milestones (each evaluation, each phase) are always printed.

Both streams are guarded (``overbrainer/front/streams.py``): a reader that went away, a
terminal that closed or a full disk silence a stream, never the command's work.
"""

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO, cast

from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import Recorded
from overbrainer.front.progress import progress_text
from overbrainer.front.streams import guard
from overbrainer.train.metrics import MetricsSummary


class Front:
    """What a command shows, and where."""

    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        *,
        terminal: bool | None = None,
        throttle: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        # Every line goes through these: a stream that fails goes silent, nothing raises.
        self._out = guard(self.out, "stdout")
        self._err = guard(self.err, "stderr")
        self.terminal = self._err.isatty() if terminal is None else terminal
        self.throttle = throttle
        self._clock = clock
        self._last_plain: float | None = None
        self._last_text = ""
        self._printed = ""  # the last progress line printed as a plain line
        self._live: Any = None
        self._status = ""  # the last status line shown
        self._status_at: float | None = None

    # -- lines -----------------------------------------------------------------------

    def result(self, text: str) -> None:
        """A result line on stdout (the final ``train:`` line, listings)."""
        self._above()
        self._out.write(text + "\n")
        self._out.flush()

    def info(self, text: str) -> None:
        """A line of commentary on stderr."""
        self._err_line(text)

    def warn(self, text: str) -> None:
        """``warning: …`` on stderr."""
        self._err_line(f"warning: {text}")

    def notice(self, text: str) -> None:
        """A notice (a second Ctrl-C during shielded work, say) on stderr."""
        self._err_line(text)

    def event(self, record: Recorded, state: RunLog) -> None:
        """An event just appended, told by the same renderer as ``events RUN``."""
        from overbrainer.projections.timeline import describe

        self._err_line(f"{record.event.name}: {describe(record.event, state)}")

    def other(self, record: Recorded) -> None:
        """An event another process appended to the run meanwhile (it decided first)."""
        from overbrainer.events.actor import Actor
        from overbrainer.projections.timeline import describe

        who = Actor.from_json(record.actor)
        self._err_line(
            f"meanwhile {who.command} on {who.host} (pid {who.pid}) recorded "
            f"{record.event.name}: {describe(record.event)}"
        )

    # -- progress --------------------------------------------------------------------

    def milestone(self, text: str) -> None:
        """A line of the run's own story (an evaluation, a phase), always printed."""
        self._err_line(text)

    def progress(self, summary: MetricsSummary, spend: float | None = None) -> None:
        """Show training progress (evaluations and phases are :meth:`milestone` lines)."""
        if summary.lines == 0 or summary.step is None:
            # Nothing to show before the first step (the trainer's `begin` line has none):
            # an empty line would take the throttle's slot of the first real one.
            return
        text = progress_text(summary, spend)
        if text == self._last_text:
            return
        self._last_text = text
        if self.terminal:
            self._live_update(text)
            return
        now = self._clock()
        if self._last_plain is None or now - self._last_plain >= self.throttle:
            self._last_plain = now
            self._printed = text
            self._err_line(f"progress: {text}")

    def status(self, text: str, *, milestone: bool = False) -> None:
        """Where something being prepared stands (a pod pulling its image): the live line on
        a terminal; elsewhere a plain line, at most every ``throttle`` seconds unless it is
        a ``milestone``."""
        if not text or text == self._status:
            return
        self._status = text
        if self.terminal:
            self._live_update(text)
            return
        now = self._clock()
        if milestone or self._status_at is None or now - self._status_at >= self.throttle:
            self._status_at = now
            self._err_line(text)

    def progress_done(self, summary: MetricsSummary, spend: float | None = None) -> None:
        """The last progress line, whatever the throttle (once: not again if just shown)."""
        text = progress_text(summary, spend)
        self.close()
        if summary.lines and summary.step is not None and text != self._printed:
            self._printed = text
            self._err_line(f"progress: {text}")

    def close(self) -> None:
        """Stop the live line, if any."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- internals -------------------------------------------------------------------

    def _live_update(self, text: str) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        if self._live is None:
            console = Console(file=cast("TextIO", self._err), force_terminal=True)
            self._live = Live(Text(text), console=console, transient=True, auto_refresh=False)
            self._live.start()
        self._live.update(Text(text), refresh=True)

    def _above(self) -> None:
        # Lines printed while the live line shows go above it.
        if self._live is not None:
            self._live.refresh()

    def _err_line(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        self._err.write(text + "\n")
        self._err.flush()
