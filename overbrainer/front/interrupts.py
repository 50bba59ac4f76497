"""Ctrl-C, SIGTERM and SIGHUP for a whole command: one receiver for the three signals and
three primitives, ``shield``, ``race`` and ``stoppable``.

SIGTERM (``timeout``, systemd, a container stopping, CI cancelling a job) and SIGHUP (the
terminal closed) mean what Ctrl-C means: stop as soon as it is safe. So all three get the
same handling, and a command exits with the first one's conventional code (128 + its
number: 130, 143, 129); the messages name any signal but Ctrl-C. A signal ignored when the
command starts (``nohup`` ignores SIGHUP, a shell's background job SIGINT) stays ignored.

Why not simply let Ctrl-C raise ``KeyboardInterrupt``? trio delivers ``KeyboardInterrupt``
*ignoring* shielded cancel scopes, so it can tear work that must never be torn: a job spawned
but not yet recorded, a Runpod create whose pod id is not yet saved, half an event append.
(SIGTERM and SIGHUP would simply kill the process, pod and all.) So while a command runs,
:func:`open_interrupts` holds ``trio.open_signal_receiver`` open and turns each signal into a
call of :meth:`Interrupts.interrupt`; no ``KeyboardInterrupt`` is ever raised. What a signal
does is then decided by the command:

- :meth:`Interrupts.shield` runs work to its end in a shielded scope bounded by a time limit;
  a signal during it is only noted, a further one says what is being finished and for how
  long at most (through ``notice``, so the front end decides how lines are shown).
- :meth:`Interrupts.race` runs work in a scope the first signal cancels; once a signal has
  been noted, a race does not even start.
- :meth:`Interrupts.stoppable` runs long work that is safe to stop but worth finishing (the
  results coming home): the first signal only says what it is, how far it got and what a
  second signal would leave; a second one stops it.
- :meth:`Interrupts.check` raises :class:`StopRequested` between steps once a signal has
  been noted (provisioning sends no create after it).

Nesting works as trio's scopes do: a race inside a shield is still cancelled by a signal
(the shield then carries on), and a shield inside a race finishes its work before the race
ends. A stoppable section inside a shield leaves the shield at most :data:`AFTER_STOP`
seconds to finish what follows it (recording its outcome).
"""

import contextlib
import contextvars
import math
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.front import exiting, fault_injection

T = TypeVar("T")

Notice = Callable[[str], None]
"""Shows one line to the user (the terminal front end prints it to stderr)."""

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that ask a command to stop."""

AFTER_STOP = 120.0
"""How long a shield may still take once a stoppable section inside it ended."""


def signal_label(signum: int) -> str:
    """How a message names the signal: ``Ctrl-C`` for SIGINT, else its name."""
    if signum == signal.SIGINT:
        return "Ctrl-C"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


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
    """Raised by :meth:`Interrupts.check` once a signal has been noted (exit code 130 for
    Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """A race whose work ran to its end, with what the work returned."""

    value: T


@dataclass(slots=True)
class _Shielded:
    what: str
    deadline: float
    scope: trio.CancelScope
    # Stoppable sections running inside: their own notices speak for this work meanwhile.
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class Offer:
    """What a stoppable section says of itself.

    ``what`` is a phrase like ``"collecting the results of run r1"``; ``progress`` says how
    far it got, as ``"12.5 MB so far"`` (asked when a notice is shown); ``if_stopped`` says
    what stopping it leaves and how to go on.
    """

    what: str
    if_stopped: str
    progress: Callable[[], str] | None = None


@dataclass(slots=True)
class _Stoppable:
    offer: Offer
    scope: trio.CancelScope
    enclosing: tuple[_Shielded, ...]
    offered: bool = False
    stopped: bool = False


# The shields around the current task's code, innermost last.
_ENCLOSING: contextvars.ContextVar[tuple[_Shielded, ...]] = contextvars.ContextVar(
    "overbrainer_shields", default=()
)


class Interrupts:
    """The interruption state of one command and its primitives; see the module docstring.

    Built by :func:`open_interrupts`; a test may build one directly and call
    :meth:`interrupt` instead of sending a signal.
    """

    def __init__(self, notice: Notice = print_notice) -> None:
        self._notice = notice
        self._count = 0
        self._first: int | None = None
        self._races: set[trio.CancelScope] = set()
        self._shielded: list[_Shielded] = []
        self._stoppables: list[_Stoppable] = []

    @property
    def count(self) -> int:
        """How many signals have been noted."""
        return self._count

    @property
    def interrupted(self) -> bool:
        """Whether a signal has been noted."""
        return self._count > 0

    @property
    def signum(self) -> int | None:
        """The first signal noted (None before any)."""
        return self._first

    @property
    def label(self) -> str:
        """The first signal noted as messages name it (``Ctrl-C`` before any)."""
        return signal_label(self._first if self._first is not None else signal.SIGINT)

    @property
    def exit_code(self) -> int:
        """The conventional exit code of a command stopped by the first signal noted."""
        return 128 + int(self._first if self._first is not None else signal.SIGINT)

    @property
    def reason(self) -> str:
        """Why following stopped, as the run's log records it."""
        if self._first is None or self._first == signal.SIGINT:
            return "interrupted"
        return f"interrupted by {self.label}"

    def finish(self, code: int) -> int:
        """The exit code of a command that ran to its end with ``code``: a noted signal's
        conventional one when ``code`` is 0 (the caller asked the command to stop: a script,
        ``timeout`` or CI must hear so, whatever became of the run, which the command printed
        and recorded), said in one line."""
        if code != 0 or not self.interrupted:
            return code
        self._say(f"{self.label}: finished before stopping; nothing is left to do")
        return self.exit_code

    def interrupt(self, signum: int = signal.SIGINT) -> None:
        """Note one signal: the first cancels every running race and tells what a stoppable
        section is doing; a further one stops stoppable sections, or says what shielded work
        is still being finished, and for how long at most."""
        self._count += 1
        label = signal_label(signum)
        if self._count == 1:
            self._first = signum
            for scope in self._races:
                scope.cancel(reason=label)
            for section in self._stoppables:
                self._offer(section)
            return
        if self._stoppables:
            for section in list(self._stoppables):
                self._stop(section, label)
            return
        if not self._shielded:
            self._say(f"already stopping after {self.label}")
            return
        now = trio.current_time()
        for work in self._shielded:
            if work.waiting:
                continue
            left = _seconds(max(0.0, work.deadline - now))
            self._say(f"still {work.what} (at most {left} more); it cannot be interrupted safely")

    def check(self, before: str | None = None) -> None:
        """Raise :class:`StopRequested` if a signal has been noted.

        ``before`` names the step that will not happen, e.g. ``"creating pod"``.
        """
        if self.interrupted:
            step = f" before {before}" if before else ""
            stop = StopRequested(f"interrupted by {self.label}{step}")
            raise stop.by(self.label, self.exit_code)

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
        deadline = trio.current_time() + limit
        work = _Shielded(what, deadline, trio.CancelScope(deadline=deadline, shield=True))
        self._shielded.append(work)
        token = _ENCLOSING.set((*_ENCLOSING.get(), work))
        try:
            with work.scope:
                return await fn()
        finally:
            _ENCLOSING.reset(token)
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

    async def stoppable(
        self, offer: Offer, limit: float, fn: Callable[[], Awaitable[T]]
    ) -> Finished[T] | None:
        """Run ``fn``, untouched by a first signal, until it ends or a second signal stops
        it; at most ``limit`` seconds (then :class:`ShieldTimeout`).

        A first signal (before or during it) makes it say what it does, how far it got and
        what a second signal would leave (``offer``); a signal after that cancels ``fn``.
        Returns ``Finished(value)`` when ``fn`` ran to its end, ``None`` when it was stopped.
        """
        if not limit > 0:
            raise ValueError(f"the time limit of {offer.what!r} must be positive, not {limit!r}")
        scope = trio.CancelScope(deadline=trio.current_time() + limit, shield=True)
        section = _Stoppable(offer, scope, _ENCLOSING.get())
        for work in section.enclosing:
            work.waiting += 1
        self._stoppables.append(section)
        try:
            if self.interrupted:
                self._offer(section)
            with scope:
                return Finished(await fn())
        finally:
            if section in self._stoppables:
                self._stoppables.remove(section)
            # What follows the long work in the shields around it is short (recording its
            # outcome): bound it so, and say so honestly to a further signal.
            deadline = trio.current_time() + AFTER_STOP
            for work in section.enclosing:
                work.waiting -= 1
                if deadline < work.deadline:
                    work.deadline = deadline
                    work.scope.deadline = deadline
        if section.stopped:
            return None
        # Reached only when the deadline cancelled fn and the scope swallowed it.
        raise ShieldTimeout(offer.what, limit)

    def _offer(self, section: _Stoppable) -> None:
        if section.offered:
            return
        section.offered = True
        offer = section.offer
        again = "Ctrl-C again" if self._first == signal.SIGINT else f"another {self.label}"
        self._say(
            f"{self.label}: {offer.what} first{_progress(offer)}; {again} stops it now: "
            f"{offer.if_stopped}"
        )

    def _stop(self, section: _Stoppable, label: str) -> None:
        self._stoppables.remove(section)
        section.stopped = True
        section.scope.cancel(reason=label)
        offer = section.offer
        self._say(f"{label}: stopped {offer.what}{_progress(offer)}")

    def _say(self, line: str) -> None:
        # A broken stderr must not end the listener, and with it the command.
        with contextlib.suppress(Exception):
            self._notice(line)


def _progress(offer: Offer) -> str:
    if offer.progress is None:
        return ""
    try:
        said = offer.progress()
    except Exception:  # a progress that cannot be told must not end the listener
        return ""
    return f" ({said})" if said else ""


@contextlib.asynccontextmanager
async def open_interrupts(
    notice: Notice = print_notice, *, listen: bool = True
) -> AsyncIterator[Interrupts]:
    """Hold the command's interruption state open for the ``async with`` block.

    With ``listen`` (and in the main thread, the only one that may handle signals), every
    SIGINT, SIGTERM and SIGHUP (those not ignored when the block begins) becomes
    :meth:`Interrupts.interrupt` instead of a ``KeyboardInterrupt`` or the end of the
    process; when the block ends, each goes back to its previous handler. An exception
    leaving the block leaves unchanged (not wrapped in an exception group); an
    :class:`Interrupted` one is told which signal it was (its message and exit code).
    """
    interrupts = Interrupts(notice)
    # The reliability campaigns' recorder of checkpoints (nothing unless they enable it).
    uninstall = fault_injection.install(interrupts)
    try:
        if not listen or threading.current_thread() is not threading.main_thread():
            yield interrupts
            return
        async with _listening(interrupts):
            yield interrupts
    except BaseException as error:
        if interrupts.interrupted:
            _tell_signal(error, interrupts)
        raise
    finally:
        uninstall()


def _tell_signal(error: BaseException, interrupts: Interrupts) -> None:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            _tell_signal(inner, interrupts)
    elif isinstance(error, Interrupted):
        error.by(interrupts.label, interrupts.exit_code)


def listened_signals() -> tuple[int, ...]:
    """The stop signals this process does not ignore (``nohup`` ignores SIGHUP, a shell's
    background job SIGINT: they stay ignored)."""
    return tuple(s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN)


@contextlib.asynccontextmanager
async def _listening(interrupts: Interrupts) -> AsyncIterator[None]:
    failure: BaseException | None = None
    signums = listened_signals()
    if not signums:
        yield
        return
    # A signal arriving while the block closes is re-delivered by trio to the handler that
    # was there before the receiver: with the command's work done, it must not become a
    # KeyboardInterrupt ("error: interrupted" after a run that succeeded), nor end the
    # process. So the handler underneath is one that only counts, until those late signals
    # have been delivered.
    late = _LateSignals()
    previous: dict[int, Any] = {}
    try:
        for signum in signums:
            previous[signum] = signal.signal(signum, late)
        with trio.open_signal_receiver(*signums) as signals:
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
        if not (exiting.exits_after_command() and interrupts.interrupted):
            for signum, handler in previous.items():
                # None: a handler not set from Python, which can only be the default.
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    if failure is not None:
        raise failure


class _LateSignals:
    """The stop signals' handler while a command's receiver closes: counts, raises
    nothing."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1


ECHO = 0.3
"""Seconds within which the same signal again is the same request (GNU ``timeout`` signals
the command and then its whole process group, so the command gets it twice at once); a
person pressing Ctrl-C again, having read what the first one did, takes longer."""


async def _listen(signals: AsyncIterator[int], interrupts: Interrupts) -> None:
    last: tuple[int, float] | None = None
    async for signum in signals:
        now = time.monotonic()  # real signals, real time (a test's trio clock may stand)
        if last is not None and last[0] == signum and now - last[1] < ECHO:
            continue
        last = (signum, now)
        interrupts.interrupt(signum)


def _seconds(span: float) -> str:
    """``span`` rounded up, as ``"58 s"`` or, from two minutes on, ``"3 min"``."""
    # Float noise (58.0000001 for 58) must not add a second.
    whole = max(0, math.ceil(span - 1e-6))
    if whole < 120:
        return f"{whole} s"
    return f"{math.ceil(whole / 60)} min"
