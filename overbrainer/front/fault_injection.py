"""Fault injection for the reliability campaigns: every place a command can be interrupted,
derived from the code as it runs, and a fault delivered at one of them.

These places are the campaigns' *checkpoints* (nothing to do with a model's checkpoints). A
checkpoint is either an ``await`` at which a task of overbrainer suspends (keyed by the
chain of overbrainer frames it is suspended in, outermost first, each as
``path:function:line``) or the moment just before or just after an event append (keyed by
the appended event names). Nothing lists them by hand: the reliability campaigns
(``python -m reliability``) run a command once with a *trace* plan to learn its checkpoints,
then once per checkpoint with an *inject* plan that acts there: a stop signal (SIGINT,
SIGTERM or SIGHUP), two in a row, a SIGKILL, a broken stdout or stderr, or a pause while the
campaign does something outside (drops a connection, fills the disk, deletes a pod).

Disabled — :data:`ENV` unset, the normal case — this module costs one attribute check per
event append and nothing per ``await``: no instrument is installed.

The plan is JSON in :data:`ENV`::

    {"trace": "/tmp/trace.jsonl",                 # optional: append each new checkpoint
     "at": "append-before run.JobStarted",        # optional: where to act ...
     "containing": ".download:",                  # ... or the first key containing this
     "nth": 1,                                    # ... on its n-th hit (default 1)
     "action": "sigint" | "sigint2" | "sigterm" | "sigterm2" | "sighup" | "sighup2"
               | "kill" | "pause" | "none",
     "break": ["stdout", "stderr"],               # optional: break these streams there ...
     "break_how": "epipe" | "eio" | "closed",     # ... so (default "epipe"), before acting
     "pause_file": "/tmp/paused"}                 # for "pause"

``sigint2`` (``sigterm2``, ``sighup2``) sends a second signal of the kind at the next
checkpoint once the first has been noted. A broken stream is what users' machines do: a
reader gone (``| tee log`` killed by the same Ctrl-C: EPIPE), a terminal closed (EIO: a
pseudo-terminal whose other side is gone), a descriptor that cannot be written (EBADF) —
the process's own descriptor is replaced, so the next write fails for real. ``"action":
"sighup", "break": ["stdout", "stderr"], "break_how": "eio"`` is a terminal that went away.

A pause writes the checkpoint's key to ``pause_file`` and blocks (the whole process, as a
debugger would) until the file is removed, for at most :data:`PAUSE_LIMIT` seconds; signals
sent meanwhile are handled once it goes on.
"""

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

    from overbrainer.events.aggregate import RunLog
    from overbrainer.events.types import Event

ENV = "OVERBRAINER_FAULT_PLAN"
"""The environment variable holding the plan (unset: checkpoints are off)."""

PAUSE_LIMIT = 30.0
"""The longest a ``pause`` blocks the process."""

SECOND_AFTER = 0.4
"""Seconds after the first signal was noted that a second one is sent: past the time in
which the same signal again is its echo (``interrupts.ECHO``)."""

_SIGNALLING = {
    "sigint": (signal.SIGINT, False),
    "sigint2": (signal.SIGINT, True),
    "sigterm": (signal.SIGTERM, False),
    "sigterm2": (signal.SIGTERM, True),
    "sighup": (signal.SIGHUP, False),
    "sighup2": (signal.SIGHUP, True),
}
ACTIONS = (*_SIGNALLING, "kill", "pause", "none")
STREAMS = {"stdout": 1, "stderr": 2}
BREAKS = ("epipe", "eio", "closed")

_PACKAGE = Path(__file__).resolve().parents[1]
_SELF = Path(__file__).resolve()


class Noted(Protocol):
    """What the instrument needs of the command's Ctrl-C state: how many were noted."""

    @property
    def count(self) -> int:
        """How many Ctrl-C have been noted."""
        ...


@dataclass
class Plan:
    """What to record and where to act; see the module docstring."""

    trace: Path | None = None
    at: str | None = None
    nth: int = 1
    action: str = "sigint"
    pause_file: Path | None = None
    containing: str | None = None
    breaks: tuple[str, ...] = ()
    break_how: str = "epipe"
    roots: tuple[Path, ...] = (_PACKAGE,)
    noted: Noted | None = None  # the command's Ctrl-C state, once installed
    hits: dict[str, int] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    second_pending: int | None = None  # the signal to send again, once the first is noted
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def parse(cls, text: str) -> "Plan":
        """The plan in ``text`` (JSON); a malformed one is an error naming the variable."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            action = str(data.get("action", "sigint"))
            if action not in ACTIONS:
                raise ValueError(f"unknown action {action!r}")
            nth = int(data.get("nth", 1))
            if nth < 1:
                raise ValueError("nth must be at least 1")
            breaks = tuple(str(name) for name in data.get("break", ()))
            unknown = [name for name in breaks if name not in STREAMS]
            if unknown:
                raise ValueError(f"unknown stream {unknown[0]!r} to break")
            how = str(data.get("break_how", "epipe"))
            if how not in BREAKS:
                raise ValueError(f"unknown way {how!r} to break a stream")
        except (ValueError, TypeError) as error:
            raise ValueError(f"{ENV} is not a valid checkpoint plan ({error})") from None
        trace, pause = data.get("trace"), data.get("pause_file")
        return cls(
            trace=Path(trace) if trace else None,
            at=str(data["at"]) if data.get("at") else None,
            nth=nth,
            action=action,
            pause_file=Path(pause) if pause else None,
            containing=str(data["containing"]) if data.get("containing") else None,
            breaks=breaks,
            break_how=how,
        )

    def wanted(self, key: str) -> bool:
        """Whether ``key`` is where the plan acts (on its ``nth`` hit)."""
        if self.at is not None:
            return key == self.at
        return self.containing is not None and self.containing in key

    def hit(self, key: str, noted: Noted | None) -> None:
        """One pass through checkpoint ``key``: record it, act if it is the plan's."""
        with self.lock:
            count = self.hits.get(key, 0) + 1
            self.hits[key] = count
            new = key not in self.seen
            self.seen.add(key)
            second = self.second_pending
            if second is not None and noted is not None and noted.count >= 1:
                self.second_pending = None
            else:
                second = None
            act = self.wanted(key) and count == self.nth
            if act and self.at is None:
                self.containing = None  # the first matching key only
        if new and self.trace is not None:
            # A fault under test (a full disk) must not break the recorder itself.
            with contextlib.suppress(OSError), self.trace.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key}) + "\n")
        if second is not None:
            # The first signal has been noted: this one arrives while it is being handled,
            # late enough to be a second request (as a person's is), not the first one's
            # echo (as GNU timeout sends, which counts once: interrupts.ECHO).
            time.sleep(SECOND_AFTER)
            os.kill(os.getpid(), second)
        if act:
            self._act(key)

    def _act(self, key: str) -> None:
        for name in self.breaks:
            break_stream(STREAMS[name], self.break_how)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.action in _SIGNALLING:
            signum, twice = _SIGNALLING[self.action]
            self.second_pending = signum if twice else None
            noted = self.noted
            before = noted.count if noted is not None else 0
            os.kill(os.getpid(), signum)
            if noted is not None and threading.current_thread() is not threading.main_thread():
                # At an append (a worker thread): hold it until the command has noted the
                # signal, so it lands during the append, every time.
                end = time.monotonic() + 2.0
                while noted.count <= before and time.monotonic() < end:
                    time.sleep(0.001)
        elif self.action == "pause" and self.pause_file is not None:
            # Appears whole (written aside, then renamed): the campaign acts as soon as it
            # sees the file, maybe by making every further write of this process fail.
            aside = self.pause_file.with_name(self.pause_file.name + ".tmp")
            aside.write_text(key + "\n", encoding="utf-8")
            aside.replace(self.pause_file)
            end = time.monotonic() + PAUSE_LIMIT
            while self.pause_file.exists() and time.monotonic() < end:
                time.sleep(0.005)


def break_stream(fd: int, how: str) -> None:
    """Make every further write to descriptor ``fd`` fail as ``how`` says: ``epipe`` (a
    pipe whose reader is gone), ``eio`` (a terminal whose other side is gone) or ``closed``
    (a descriptor that cannot be written: EBADF)."""
    if how == "eio":
        master, broken = os.openpty()
        os.close(master)
    elif how == "closed":
        broken = os.open(os.devnull, os.O_RDONLY)
    else:
        reader, broken = os.pipe()
        os.close(reader)
    os.dup2(broken, fd)
    os.close(broken)


def _load() -> Plan | None:
    text = os.environ.get(ENV)
    if not text:
        return None
    try:
        return Plan.parse(text)
    except ValueError as error:
        print(f"warning: {error}; checkpoints are off", file=sys.stderr)
        return None


PLAN: Plan | None = _load()
"""The process's plan, read once from :data:`ENV` (None: checkpoints are off)."""


# --- awaits ----------------------------------------------------------------------------


# Layers whose inner call chains are one step for the command: within a run of their
# frames only the first (the entry point, e.g. ``SshExecutor.download:601``) and the last
# (the innermost await) make the key.
_LAYERS = ("overbrainer/exec/", "overbrainer/front/interrupts.py", "overbrainer/runpod/client.py")


def frame_key(frames: Iterable[tuple[FrameType, int]], roots: Sequence[Path]) -> str | None:
    """The key of a suspended task: its frames under ``roots``, outermost first, as
    ``path:function:line`` joined by `` > `` (a transport layer's inner frames collapsed to
    its entry point and its innermost await); None when no frame is under ``roots`` (a
    task of trio or a library only) or when it is the Ctrl-C listener waiting."""
    parts: list[str] = []
    layer: list[str] = []
    current: str | None = None  # the layer of the frames in ``layer``
    for frame, line in frames:
        path = Path(frame.f_code.co_filename)
        if path == _SELF:
            continue
        for root in roots:
            if path.is_relative_to(root):
                rel = str(path.relative_to(root.parent))
                part = f"{rel}:{frame.f_code.co_qualname}:{line}"
                which = next((name for name in _LAYERS if rel.startswith(name)), None)
                if which is None or which != current:
                    parts.extend(_ends(layer))
                    layer = []
                current = which
                if which is None:
                    parts.append(part)
                else:
                    layer.append(part)
                break
    parts.extend(_ends(layer))
    if not parts or _is_listener(parts):
        return None
    return "await " + " > ".join(parts)


def _ends(layer: list[str]) -> list[str]:
    return layer[:1] + layer[-1:] if len(layer) > 1 else layer


def _is_listener(parts: list[str]) -> bool:
    # The task turning SIGINTs into notes waits for signals all command long.
    return len(parts) == 1 and ":_listen:" in parts[0] and "interrupts.py" in parts[0]


def _instrument_class() -> type:
    import trio

    class _Instrument(trio.abc.Instrument):
        """Records where each task suspends (and acts there, per the plan)."""

        def __init__(self, plan: Plan, noted: Noted | None) -> None:
            self.plan = plan
            self.noted = noted

        def after_task_step(self, task: "trio.lowlevel.Task") -> None:
            key = frame_key(task.iter_await_frames(), self.plan.roots)
            if key is not None:
                self.plan.hit(key, self.noted)

    return _Instrument


def install(noted: Noted | None = None, plan: Plan | None = None) -> Callable[[], None]:
    """Install the await recorder in the running trio loop when a plan is active; return
    what removes it. ``noted`` tells the instrument when a first Ctrl-C has been noted
    (for ``sigint2``). Without a plan, nothing is installed and removing is a no-op."""
    plan = plan or PLAN
    if plan is None:
        return lambda: None
    import trio

    plan.noted = noted
    instrument = _instrument_class()(plan, noted)
    trio.lowlevel.add_instrument(instrument)

    def remove() -> None:
        with contextlib.suppress(KeyError, RuntimeError):
            trio.lowlevel.remove_instrument(instrument)

    return remove


# --- appends ---------------------------------------------------------------------------


def _names(events: Sequence["Event"]) -> str:
    return "+".join(event.name for event in events)


def before_append(
    decide: Callable[["RunLog"], Sequence["Event"]],
) -> Callable[["RunLog"], Sequence["Event"]]:
    """``decide``, passing the checkpoint ``append-before NAMES`` once it has decided on
    events, i.e. just before they are saved."""
    plan = PLAN

    def decided(state: "RunLog") -> Sequence["Event"]:
        events = list(decide(state))
        if plan is not None and events:
            plan.hit(f"append-before {_names(events)}", None)
        return events

    return decided


def after_append(events: Sequence["Event"]) -> None:
    """The checkpoint ``append-after NAMES``: the events are saved, the projections not yet
    rewritten."""
    if PLAN is not None and events:
        PLAN.hit(f"append-after {_names(events)}", None)


# --- enumerating -------------------------------------------------------------------------


def enumerate_checkpoints(
    fn: Callable[[], Any], roots: Sequence[Path], *, clock: Any = None
) -> list[str]:
    """Run the async function ``fn`` under trio with the recorder installed and return the
    checkpoints it passed through, in order of first passage (awaits under ``roots``, and
    appends through :func:`before_append` / :func:`after_append`)."""
    import trio

    global PLAN
    plan = Plan(roots=tuple(Path(r).resolve() for r in roots))
    order: list[str] = []
    hit = plan.hit

    def recording(key: str, noted: Noted | None) -> None:
        if key not in plan.seen:
            order.append(key)
        hit(key, noted)

    plan.hit = recording  # type: ignore[method-assign]
    previous, PLAN = PLAN, plan
    try:

        async def main() -> None:
            remove = install(None, plan)
            try:
                await fn()
            finally:
                remove()

        trio.run(main, clock=clock)
    finally:
        PLAN = previous
    return order
