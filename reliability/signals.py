"""The signals and outputs campaigns: what users' machines do to a command besides Ctrl-C.

- SIGTERM (``timeout``, systemd, a container stopping, CI cancelling) and SIGHUP (the
  terminal closed), once or twice in a row, wherever the Ctrl-C campaign sends SIGINT;
- stdout and stderr broken at a checkpoint: a reader gone (``| head`` done, ``| tee log``
  killed by the same Ctrl-C: EPIPE), a terminal gone (EIO), a descriptor closed (EBADF) —
  alone (the command must carry on to its end) or with the signal that comes with it.

A case is the Ctrl-C campaign's, with a :class:`Fault` in place of the SIGINT: the same
recovery and the same invariants (pods deleted or bounded as after Ctrl-C, no second
retrieval, projections and runs view equal to the log, the target agreeing with it, no
traceback, no secret), and the exit code each fault allows: the signal's own (143, 129;
0 when it came too late to stop anything), or — when only output was lost — the run's
outcome (0: the stand-in trainer always succeeds).

By default every *code site* of every command (as the Ctrl-C campaign samples them on the
ssh and Runpod targets) gets one of these faults, in turn: each fault kind lands on many
sites, each site on one kind, at the cost of one Ctrl-C pass; every site inside a
checkpoint's retrieval gets SIGTERM (once or twice). ``--full`` delivers every fault at
every checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reliability import machine
from reliability.core import Case

BOTH = ("stdout", "stderr")


@dataclass(frozen=True)
class Fault:
    """A checkpoint plan's ``action`` and the streams it breaks first, and how."""

    action: str  # "sigterm", "sighup2", "none"…
    breaks: tuple[str, ...] = ()
    how: str = "epipe"

    @property
    def campaign(self) -> str:
        """``outputs`` when a stream breaks, else ``signals``."""
        return "outputs" if self.breaks else "signals"

    @property
    def label(self) -> str:
        """As case names show it: ``sighup2 + stdout,stderr eio``."""
        broken = f"{','.join(self.breaks)} {self.how}" if self.breaks else ""
        if self.action == "none":
            return broken
        return f"{self.action} + {broken}" if broken else self.action

    @property
    def slug(self) -> str:
        """For directory names."""
        parts = [self.action] if self.action != "none" else []
        if self.breaks:
            parts += ["-".join(s[3:] for s in self.breaks), self.how]
        return "-".join(parts)


# What reaches a command at an await, in turn (half of them signals alone, half a broken
# stream, alone or with the signal that comes with it).
AT_AWAITS = (
    Fault("sigterm"),
    Fault("sighup", BOTH, "eio"),  # the terminal went away
    Fault("sighup"),
    Fault("sigint", BOTH, "epipe"),  # Ctrl-C, which also ends `2>&1 | tee log`
    Fault("sigterm2"),
    Fault("none", ("stdout",), "epipe"),  # `| head` has read enough
    Fault("sighup2"),
    Fault("sigterm", ("stderr",), "closed"),  # started with 2>&-, then stopped
    Fault("sigterm"),
    Fault("none", BOTH, "eio"),  # a terminal gone under `nohup`
    Fault("sighup"),
    Fault("none", ("stderr",), "epipe"),
    Fault("sigterm2"),
    Fault("none", ("stdout",), "closed"),
)
# At an append (where a first signal is only noted), mostly two in a row, in turn.
AT_APPENDS = (
    Fault("sigterm2"),
    Fault("sighup2", BOTH, "eio"),
    Fault("sighup2"),
    Fault("sigint2", BOTH, "epipe"),
    Fault("sigterm"),
    Fault("none", BOTH, "closed"),
)
# Inside a checkpoint's retrieval (which a signal must never tear: the checkpoint is home
# whole and recorded, or not home at all), SIGTERM at every site, once or twice in turn;
# the Ctrl-C campaign sends SIGINT to each of them.
AT_RETRIEVAL = (Fault("sigterm"), Fault("sigterm2"))
# --full: every one of these at every checkpoint.
EVERYWHERE = (
    Fault("sigterm"),
    Fault("sighup"),
    Fault("sigterm2"),
    Fault("sighup2"),
    *(Fault("none", (stream,), how) for stream in BOTH for how in ("epipe", "eio", "closed")),
    Fault("sigint", BOTH, "epipe"),
    Fault("sighup", BOTH, "eio"),
)


def planned(kind: str, traced: dict[str, list[str]], full: bool) -> list[tuple[str, str, Fault]]:
    """``(command, checkpoint, fault)`` for target ``kind``: with ``full`` every fault at
    every checkpoint; otherwise one fault per code site (the first checkpoint through it),
    in turn from :data:`AT_AWAITS`, :data:`AT_APPENDS` or, inside a checkpoint's
    retrieval, :data:`AT_RETRIEVAL`."""
    from reliability.plan import in_retrieval, sample

    if full:
        return [
            (command, key, fault)
            for command, keys in traced.items()
            for key in keys
            for fault in EVERYWHERE
        ]
    once, _ = sample("sites", traced, full=False)
    out: list[tuple[str, str, Fault]] = []
    rotations = {"await": AT_AWAITS, "append": AT_APPENDS, "retrieval": AT_RETRIEVAL}
    turns = dict.fromkeys(rotations, 0)
    for command, keys in once.items():
        for key in keys:
            if key.startswith("append-"):
                where = "append"
            else:
                where = "retrieval" if in_retrieval(key) else "await"
            rotation = rotations[where]
            out.append((command, key, rotation[turns[where] % len(rotation)]))
            turns[where] += 1
    return out


def cases(kind: str, worlds: Any, campaign: str, full: bool) -> list[Case]:
    """The ``campaign`` (``signals`` or ``outputs``) cases on target ``kind``."""
    traced = worlds.traces(kind)
    runpod = kind == "runpod"
    world = worlds.runpod() if runpod else worlds.machine(kind)
    out = []
    for command, key, fault in planned(kind, traced, full):
        if fault.campaign != campaign:
            continue
        i = machine.checkpoint_index(world, command, key)
        name = f"{kind} {command} {fault.label} @{i:02d} {machine.short(key)}"
        slug = f"{kind}-{command.replace(' ', '-')}-{fault.slug}-{i:02d}"
        run: Callable[[], list[str]]
        if runpod:
            run = _runpod_case(world, command, key, fault, slug)
        else:
            run = _machine_case(world, command, key, fault, slug)
        weight = 4.0 if runpod else (2.0 if command != "train" else 1.0)
        out.append(Case(campaign, name, run, weight=weight))
    return out


def _machine_case(
    world: Any, command: str, key: str, fault: Fault, slug: str
) -> Callable[[], list[str]]:
    return lambda: machine.inject_case(
        world, command, key, fault.action, slug, breaks=fault.breaks, how=fault.how
    )


def _runpod_case(
    world: Any, command: str, key: str, fault: Fault, slug: str
) -> Callable[[], list[str]]:
    return lambda: world.run_case(
        command, key, fault.action, slug, None, breaks=fault.breaks, how=fault.how
    )[1]
