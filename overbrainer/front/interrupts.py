"""Ctrl-C for a whole command: one SIGINT receiver and two primitives, ``shield`` and ``race``.

Why not simply let Ctrl-C raise ``KeyboardInterrupt``? trio delivers ``KeyboardInterrupt``
*ignoring* shielded cancel scopes, so it can tear work that must never be torn: a job spawned
but not yet recorded, a Runpod create whose pod id is not yet saved, half an event append.
So while a command runs, :func:`open_interrupts` holds ``trio.open_signal_receiver(SIGINT)``
open and turns each SIGINT into a call of :meth:`Interrupts.interrupt`; no
``KeyboardInterrupt`` is ever raised. What a Ctrl-C does is then decided by the command:

- :meth:`Interrupts.shield` runs work to its end in a shielded scope bounded by a time limit;
  a Ctrl-C during it is only noted, a further one says what is being finished and for how
  long at most (through ``notice``, so the front end decides how lines are shown).
- :meth:`Interrupts.race` runs work in a scope the first Ctrl-C cancels; once a Ctrl-C has
  been noted, a race does not even start.
- :meth:`Interrupts.check` raises :class:`StopRequested` between steps once a Ctrl-C has been
  noted (provisioning sends no create after it).

Nesting works as trio's scopes do: a race inside a shield is still cancelled by Ctrl-C (the
shield then carries on), and a shield inside a race finishes its work before the race ends.
"""

import contextlib
import math
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.front import checkpoints

T = TypeVar("T")

Notice = Callable[[str], None]
"""Shows one line to the user (the terminal front end prints it to stderr)."""

_REASON = "Ctrl-C"


def print_notice(line: str) -> None:
    """The default ``notice``: ``line`` on stderr."""
    print(line, file=sys.stderr, flush=True)


class ShieldTimeout(OverbrainerError):
    """Shielded work did not finish within its time limit and was stopped there."""

    def __init__(self, what: str, limit: float) -> None:
        super().__init__(f"{what} did not finish within {_seconds(limit)}")
        self.what = what
        self.limit = limit


class StopRequested(Interrupted):
    """Raised by :meth:`Interrupts.check` once a Ctrl-C has been noted (exit code 130)."""


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """A race whose work ran to its end, with what the work returned."""

    value: T


@dataclass(slots=True)
class _Shielded:
    what: str
    deadline: float


class Interrupts:
    """The Ctrl-C state of one command and its two primitives; see the module docstring.

    Built by :func:`open_interrupts`; a test may build one directly and call
    :meth:`interrupt` instead of sending SIGINT.
    """

    def __init__(self, notice: Notice = print_notice) -> None:
        self._notice = notice
        self._count = 0
        self._races: set[trio.CancelScope] = set()
        self._shielded: list[_Shielded] = []

    @property
    def count(self) -> int:
        """How many Ctrl-C have been noted."""
        return self._count

    @property
    def interrupted(self) -> bool:
        """Whether a Ctrl-C has been noted."""
        return self._count > 0

    def interrupt(self) -> None:
        """Note one Ctrl-C: the first cancels every running race; a further one says what
        shielded work is still being finished, and for how long at most."""
        self._count += 1
        if self._count == 1:
            for scope in self._races:
                scope.cancel(reason=_REASON)
            return
        if not self._shielded:
            self._say("already stopping after Ctrl-C")
            return
        now = trio.current_time()
        for work in self._shielded:
            left = _seconds(max(0.0, work.deadline - now))
            self._say(f"still {work.what} (at most {left} more); it cannot be interrupted safely")

    def check(self, before: str | None = None) -> None:
        """Raise :class:`StopRequested` if a Ctrl-C has been noted.

        ``before`` names the step that will not happen, e.g. ``"creating pod"``.
        """
        if self.interrupted:
            step = f" before {before}" if before else ""
            raise StopRequested(f"interrupted by Ctrl-C{step}")

    async def shield(self, what: str, limit: float, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` to its end, untouched by Ctrl-C and by outer cancellation, for at most
        ``limit`` seconds.

        ``what`` says what the work does, as a phrase like ``"deleting pod k3x9"``; it appears
        in the line a further Ctrl-C prints and in the error on timeout.

        Raises:
            ShieldTimeout: ``fn`` was still running after ``limit`` seconds and was stopped.
        """
        if not limit > 0:
            raise ValueError(f"the time limit of {what!r} must be positive, not {limit!r}")
        work = _Shielded(what, trio.current_time() + limit)
        self._shielded.append(work)
        try:
            with trio.CancelScope(deadline=work.deadline, shield=True):
                return await fn()
        finally:
            self._shielded.remove(work)
        # Reached only when the deadline cancelled fn and the scope swallowed it.
        raise ShieldTimeout(what, limit)

    async def race(self, fn: Callable[[], Awaitable[T]]) -> Finished[T] | None:
        """Run ``fn`` until it ends or the first Ctrl-C cancels it.

        Returns ``Finished(value)`` when ``fn`` ran to its end, ``None`` when Ctrl-C stopped
        it, or when a Ctrl-C noted earlier kept it from starting at all.
        """
        if self.interrupted:
            await trio.lowlevel.checkpoint()
            return None
        with trio.CancelScope() as scope:
            self._races.add(scope)
            try:
                return Finished(await fn())
            finally:
                self._races.discard(scope)
        return None

    def _say(self, line: str) -> None:
        # A broken stderr must not end the listener, and with it the command.
        with contextlib.suppress(Exception):
            self._notice(line)


@contextlib.asynccontextmanager
async def open_interrupts(
    notice: Notice = print_notice, *, listen: bool = True
) -> AsyncIterator[Interrupts]:
    """Hold the command's Ctrl-C state open for the ``async with`` block.

    With ``listen`` (and in the main thread, the only one that may handle signals), every
    SIGINT becomes :meth:`Interrupts.interrupt` instead of a ``KeyboardInterrupt``; when the
    block ends, SIGINT goes back to its previous handler. An exception leaving the block
    leaves unchanged (not wrapped in an exception group).
    """
    interrupts = Interrupts(notice)
    # The reliability campaigns' recorder of checkpoints (nothing unless they enable it).
    uninstall = checkpoints.install(interrupts)
    try:
        if not listen or threading.current_thread() is not threading.main_thread():
            yield interrupts
            return
        async with _listening(interrupts):
            yield interrupts
    finally:
        uninstall()


@contextlib.asynccontextmanager
async def _listening(interrupts: Interrupts) -> AsyncIterator[None]:
    failure: BaseException | None = None
    # A Ctrl-C arriving while the block closes is re-delivered by trio to the handler that
    # was there before the receiver: with the command's work done, it must not become a
    # KeyboardInterrupt ("error: interrupted" after a run that succeeded). So the handler
    # underneath is one that only counts, until those late signals have been delivered.
    late = _LateCtrlC()
    previous = signal.signal(signal.SIGINT, late)
    try:
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_listen, signals, interrupts)
                try:
                    yield
                except BaseException as error:
                    # Raised again below, outside the nursery, so callers can catch it as is.
                    failure = error
                finally:
                    nursery.cancel_scope.cancel()
        # Signals caught just before the receiver closed reach the handler through trio's
        # run_sync_soon queue: let it run while the counting handler is in place.
        with trio.CancelScope(shield=True):
            for _ in range(3):
                await trio.lowlevel.checkpoint()
    finally:
        signal.signal(signal.SIGINT, previous)
    if failure is not None:
        raise failure


class _LateCtrlC:
    """The SIGINT handler while a command's receiver closes: counts, raises nothing."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1


async def _listen(signals: AsyncIterator[int], interrupts: Interrupts) -> None:
    async for _ in signals:
        interrupts.interrupt()


def _seconds(span: float) -> str:
    """``span`` rounded up, as ``"58 s"`` or, from two minutes on, ``"3 min"``."""
    # Float noise (58.0000001 for 58) must not add a second.
    whole = max(0, math.ceil(span - 1e-6))
    if whole < 120:
        return f"{whole} s"
    return f"{math.ceil(whole / 60)} min"
