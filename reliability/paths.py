"""The paths campaign: every target's worlds again, each case's project in a directory
whose name has a non-ASCII letter, quotes, spaces and characters special to the shell and
to OpenSSH's configuration (``josé p'q "r\\s``, ``josé p'q #%h``), as users' home
directories and synced folders do.

Each command runs cleanly there (its traced run, checked as a case), then a representative
subset of the other campaigns' faults at the stages where a path is used: the job's start
and the results' retrieval (a stop signal, a crash, a terminal gone), following, a pod
being created and booting. ``--full`` adds a Ctrl-C at every code site. A project there
must train on every target, or be refused before anything is created with a message
naming the problem.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reliability import machine
from reliability.core import Case, Result
from reliability.signals import BOTH, Fault

# Where each target's projects lie: a quote or backslash cannot be written quoted into an
# SSH config (its path is then written relative), a `#` or `%` can (and must be): the
# Runpod target, whose runs get an SSH config, gets the second.
SUBDIRS = {"local": "josé p'q \"r\\s", "ssh": "josé p'q \"r\\s", "runpod": "josé p'q #%h"}

# (command, where: the first checkpoint containing one of these marks, fault)
_MACHINE = (
    ("train", ("",), Fault("none", ("stdout",), "epipe")),
    ("train", (".spawn:",), Fault("sigterm")),
    ("train", ("append-before run.JobStarted",), Fault("kill")),
    ("train", ("service.py:watch",), Fault("sigint")),
    ("train", (".download:", "bring_home"), Fault("sighup", BOTH, "eio")),
    ("train attach", ("append-before run.Ended",), Fault("sigint2")),
    ("train cancel", (".cancel:",), Fault("sigterm")),
)
_RUNPOD = (
    ("train", ("",), Fault("none", ("stderr",), "closed")),
    ("train", ("RunpodClient.create_pod",), Fault("kill")),
    ("train", ("_Walk._boot",), Fault("sigint")),
    ("train", ("service.py:watch",), Fault("sighup", BOTH, "eio")),
    ("train", (".download:",), Fault("sigterm")),
    ("train", ("append-before pod.Deleting",), Fault("sigterm2")),
    ("train attach", ("service.py:watch",), Fault("sigint", BOTH, "epipe")),
    ("pod rm", ("",), Fault("sigterm")),
)


def cases(worlds: Any, *, full: bool) -> list[Case]:
    """The paths cases on the worlds' targets (their own worlds, under ``paths/``)."""
    from reliability.plan import Worlds, sample

    weird = Worlds(
        worlds.base / "paths",
        worlds.targets,
        worlds.stack,
        {kind: SUBDIRS[kind] for kind in worlds.targets},
        numbered=False,
    )
    out: list[Case] = []
    for kind in worlds.targets:
        traced = weird.traces(kind)
        runpod = kind == "runpod"
        world = weird.runpod() if runpod else weird.machine(kind)
        picks: list[tuple[str, str, Fault]] = []
        for command, marks, fault in _RUNPOD if runpod else _MACHINE:
            keys = traced.get(command, [])
            key = next((k for m in marks for k in keys if m in k), None)
            if key is None:
                out.append(_missing(kind, command, marks))
                continue
            picks.append((command, key, fault))
        if full:
            once, _ = sample(kind + "-sites", traced, full=False)
            picks += [(c, k, Fault("sigint")) for c, keys in once.items() for k in keys]
        for command, key, fault in picks:
            label = fault.label if fault.action != "kill" else "kill"
            slug = f"paths-{kind}-{command.replace(' ', '-')}-{fault.slug}-{len(out):02d}"
            out.append(
                Case(
                    "paths",
                    f"{kind} {command} {label} @ {machine.short(key)} (in {SUBDIRS[kind]})",
                    _bind(world, runpod, command, key, fault, slug),
                    weight=4.0 if runpod else 2.0,
                )
            )
    # The traced clean runs, checked as cases too.
    for result in list(weird.clean):
        out.append(_done(result))
    return out


def _bind(
    world: Any, runpod: bool, command: str, key: str, fault: Fault, slug: str
) -> Callable[[], list[str]]:
    if runpod:
        return lambda: world.run_case(
            command, key, fault.action, slug, None, breaks=fault.breaks, how=fault.how
        )[1]
    return lambda: machine.inject_case(
        world, command, key, fault.action, slug, breaks=fault.breaks, how=fault.how
    )


def _done(result: Result) -> Case:
    """A case already run (a traced clean run): its violations as found."""
    found = list(result.violations)
    return Case("paths", f"{result.name} (in a quoted path)", lambda: found)


def _missing(kind: str, command: str, marks: tuple[str, ...]) -> Case:
    message = f"harness: no checkpoint of `{command}` on {kind} contains any of {marks}"
    return Case("paths", f"{kind} {command} @ {marks[0]}", lambda: [message])
