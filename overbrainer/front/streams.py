"""stdout and stderr that can never abort a command.

Writes to the standard streams fail in ordinary situations: the reader went away (``| head``,
or a ``| tee log`` killed by the same Ctrl-C: EPIPE), the terminal closed (EIO), the disk is
full (``>/dev/full``: ENOSPC), or the descriptor was closed before the command began
(``>&-``). A failed write must not abort what the command is doing — deleting a pod,
recording a run's end — so :func:`install` puts a :class:`GuardedStream` in place of
``sys.stdout`` and ``sys.stderr`` for the whole command, and everything written goes through
it (the front end, error reports, the read commands' listings, rich's live line).

The first failure silences that stream for the rest of the command: its descriptor is
pointed at ``/dev/null``, so what Python still holds in its buffer, its own flush at exit and
any child process that inherited the descriptor write nowhere instead of failing (no
"Exception ignored … BrokenPipeError" at exit). The loss is kept (:func:`loss_of`): a read
command stops early, and :func:`exit_code` decides what it means for the exit code.

A command's last words (its error: what keeps running, and the command that goes on) are
written by :func:`final_words`: when stdout and stderr are both gone — ``| tee log`` killed
by the same Ctrl-C — they reach the controlling terminal itself (``/dev/tty``), if any.
"""

import contextlib
import errno
import io
import os
import select
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

# Commands whose product is not what they print but what they do (to runs, pods, files):
# losing their stdout changes nothing about their exit code, which says what became of
# their work. Every other command's product is its stdout.
ACTING_COMMANDS = frozenset(
    {"train", "train attach", "train cancel", "pod rm", "store migrate", "init"}
)


@dataclass(frozen=True, slots=True)
class Loss:
    """Why a stream went silent."""

    stream: str  # "stdout" or "stderr"
    reason: str  # "broken pipe", "closed", or the system's words (No space left on device)

    @property
    def reader_left(self) -> bool:
        """The reader went away on purpose (``| head``): nothing went wrong."""
        return self.reason == "broken pipe"


def _reason(error: BaseException) -> str:
    if isinstance(error, BrokenPipeError) or getattr(error, "errno", None) == errno.EPIPE:
        return "broken pipe"
    if isinstance(error, ValueError) or getattr(error, "errno", None) == errno.EBADF:
        return "closed"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


class GuardedStream(io.TextIOBase):
    """A text stream forwarding to ``inner`` until a write or flush fails; then silent."""

    def __init__(self, inner: TextIO | None, name: str) -> None:
        super().__init__()
        self._inner = inner
        self._name = name
        self._loss: Loss | None = None
        if inner is None:
            self._loss = Loss(name, "closed")

    @property
    def loss(self) -> Loss | None:
        """Why the stream went silent (None while it works)."""
        return self._loss

    @property
    def inner(self) -> TextIO | None:
        """The stream written to while this one works."""
        return self._inner

    @property
    def name(self) -> str:
        return f"<{self._name}>"

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        if self._loss is not None or self._inner is None:
            return False
        try:
            return self._inner.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self._inner is None:
            raise io.UnsupportedOperation("the stream was closed")
        return self._inner.fileno()

    def write(self, text: str) -> int:
        if self._loss is None and self._inner is not None:
            try:
                self._inner.write(text)
            except UnicodeEncodeError:
                # A character the stream cannot encode (PYTHONIOENCODING=ascii, say) costs
                # that character, not the stream.
                self._write_escaped(text)
            except BlockingIOError:
                pass  # a non-blocking descriptor that is full: this text is dropped
            except (OSError, ValueError) as error:
                self._lose(error)
        return len(text)

    def flush(self) -> None:
        if self._loss is None and self._inner is not None:
            try:
                self._inner.flush()
            except BlockingIOError:
                pass
            except (OSError, ValueError) as error:
                self._lose(error)

    def close(self) -> None:
        # Closing the wrapper must not close the process's standard stream under it.
        self.flush()

    def check(self) -> None:
        """Notice a reader that went away, or a terminal that hung up, without writing (a
        follower with nothing new to print would otherwise learn it only at its next line)."""
        if self._loss is not None or self._inner is None:
            return
        try:
            fd = self._inner.fileno()
        except (OSError, ValueError):
            return
        poller = select.poll()
        poller.register(fd, 0)  # errors, hang-ups and bad descriptors are always reported
        for _, happened in poller.poll(0):
            if happened & select.POLLNVAL:
                self._lose(OSError(errno.EBADF, "closed"))
            elif happened & select.POLLHUP:  # a terminal that went away (also POLLERR)
                self._lose(OSError(errno.EIO, "the terminal hung up"))
            elif happened & select.POLLERR:  # a pipe nobody reads any more
                self._lose(BrokenPipeError(errno.EPIPE, "broken pipe"))

    def _write_escaped(self, text: str) -> None:
        assert self._inner is not None
        safe = text.encode(self.encoding, "backslashreplace").decode(self.encoding, "replace")
        try:
            self._inner.write(safe)
        except BlockingIOError:
            pass
        except (OSError, ValueError) as error:
            self._lose(error)

    def _lose(self, error: BaseException) -> None:
        self._loss = Loss(self._name, _reason(error))
        inner = self._inner
        if inner is None:
            return
        with contextlib.suppress(OSError, ValueError, AttributeError):
            _to_devnull(inner.fileno())
        # What the inner stream still holds now goes to /dev/null (or stays, unflushable,
        # in a stream without a descriptor): either way nothing raises later.
        with contextlib.suppress(OSError, ValueError):
            inner.flush()


def _to_devnull(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _reserve_standard_descriptors() -> None:
    """Open ``/dev/null`` on any of descriptors 0, 1 and 2 that is closed.

    A command started with ``>&-`` has no descriptor 1: the next file it opens (the event
    store's database) would get it, and a child process writing to its stdout would write
    into that file.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            with contextlib.suppress(OSError):
                opened = os.open(os.devnull, os.O_RDWR)
                if opened != fd:
                    os.dup2(opened, fd)
                    os.close(opened)


def guard(stream: TextIO | None, name: str) -> GuardedStream:
    """``stream`` guarded (itself when it already is)."""
    if isinstance(stream, GuardedStream):
        return stream
    return GuardedStream(stream, name)


def install() -> Callable[[], None]:
    """Guard ``sys.stdout`` and ``sys.stderr`` for a command; return what puts the previous
    streams back (after flushing, quietly)."""
    _reserve_standard_descriptors()
    previous_out, previous_err = sys.stdout, sys.stderr
    out, err = guard(previous_out, "stdout"), guard(previous_err, "stderr")
    sys.stdout, sys.stderr = out, err

    def restore() -> None:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = previous_out, previous_err

    return restore


def loss_of(stream: object) -> Loss | None:
    """Why ``stream`` went silent, if it is a guarded stream that did."""
    return stream.loss if isinstance(stream, GuardedStream) else None


def stdout_gone() -> bool:
    """Whether stdout went silent (a read command can stop producing, then), checked
    afresh."""
    if isinstance(sys.stdout, GuardedStream):
        sys.stdout.check()
    return loss_of(sys.stdout) is not None


def final_words(text: str) -> None:
    """Write ``text``, a command's last words (its error: what keeps running, and the
    command that goes on), to stderr. When neither stderr nor stdout can be written any
    more — ``overbrainer train 2>&1 | tee log`` whose ``tee`` died with the same Ctrl-C —
    they go to the process's controlling terminal instead (:func:`reach_terminal`): the
    user who pressed Ctrl-C still reads what keeps running."""
    print(text, file=sys.stderr, flush=True)
    if loss_of(sys.stderr) is None:
        return
    if isinstance(sys.stdout, GuardedStream):
        sys.stdout.check()
    if loss_of(sys.stdout) is not None:
        reach_terminal(text)


def reach_terminal(text: str) -> bool:
    """Write ``text`` (a line) to the process's controlling terminal, ``/dev/tty``;
    whether it was written (not without a controlling terminal: a CI job, a cron job)."""
    try:
        # O_NOCTTY: a process without one must not acquire a terminal by this open.
        fd = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return False
    data = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def exit_code(command: str, code: int, stdout_loss: Loss | None) -> tuple[int, str | None]:
    """The exit code of ``command`` (the words after ``overbrainer``: ``"runs ls"``), which
    would exit ``code``, once its stdout was lost (``stdout_loss``), and the error to
    report, if any.

    A reader that left (``| head``) is no failure. Otherwise a command whose product is
    its stdout (a listing, a log) did not deliver it: an error, exit 1. A command that acts
    (``train``…) exits by what became of its work, whatever became of its output.
    """
    if stdout_loss is None or stdout_loss.reader_left or code != 0:
        return code, None
    if command in ACTING_COMMANDS:
        return code, None
    asked = f"overbrainer {command}".strip()
    return 1, f"could not write the output of `{asked}` ({stdout_loss.reason})"
