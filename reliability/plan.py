"""Which cases each campaign runs, derived from the traced checkpoints of each command on
each target."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from reliability import machine
from reliability.core import Case, Result
from reliability.world import MachineWorld

LAYERS = ("overbrainer/exec/", "overbrainer/runpod/client.py", "overbrainer/front/interrupts.py")


def call_site(key: str) -> str:
    """The call site of a checkpoint: its key with each layer's (executor, API client,
    Ctrl-C controller) inner frames dropped and its entry point named without a line —
    every await under one call of the layer shares it."""
    if not key.startswith("await "):
        return key
    out: list[str] = []
    in_layer = False
    for frame in key[len("await ") :].split(" > "):
        path, _, rest = frame.partition(":")
        if path.startswith(LAYERS):
            if not in_layer:
                out.append(f"{path}:{rest.rsplit(':', 1)[0]}")
            in_layer = True
        else:
            in_layer = False
            out.append(frame)
    return "await " + " > ".join(out)


def first_per_call_site(keys: list[str]) -> list[str]:
    """One checkpoint per call site: the first that passes through it."""
    seen: set[str] = set()
    out = []
    for key in keys:
        site = call_site(key)
        if site not in seen:
            seen.add(site)
            out.append(key)
    return out


class Worlds:
    """The targets' worlds and their traced checkpoints, set up on first use."""

    def __init__(self, base: Path, targets: list[str], stack: contextlib.ExitStack) -> None:
        self.base = base
        self.targets = targets
        self.stack = stack
        self._machines: dict[str, MachineWorld] = {}
        self._traces: dict[str, dict[str, list[str]]] = {}
        self.clean: list[Result] = []
        self._lock = threading.Lock()
        self._runpod: Any = None

    def machine(self, kind: str) -> MachineWorld:
        """The local or ssh world."""
        with self._lock:
            if kind not in self._machines:
                world = MachineWorld(kind, self.base / kind)
                self._machines[kind] = self.stack.enter_context(world)
            return self._machines[kind]

    def runpod(self) -> Any:
        """The Runpod world (the fake API and pods on loopback)."""
        from reliability.pods import RunpodWorld

        with self._lock:
            if self._runpod is None:
                self._runpod = self.stack.enter_context(RunpodWorld(self.base / "runpod"))
            return self._runpod

    def traces(self, kind: str) -> dict[str, list[str]]:
        """Each command's checkpoints on target ``kind`` (traced once, in parallel)."""
        if kind in self._traces:
            return self._traces[kind]
        import time

        if kind == "runpod":
            world: Any = self.runpod()
            commands: tuple[str, ...] = world.COMMANDS
            trace: Callable[..., tuple[list[str], list[str]]] = world.trace
        else:
            world = self.machine(kind)
            commands = machine.COMMANDS
            trace = lambda command, name: machine.trace(world, command, name)  # noqa: E731

        def one(command: str) -> tuple[str, list[str], Result]:
            started = time.monotonic()
            keys, found = trace(command, f"trace-{command.replace(' ', '-')}")
            if not keys:
                found = [*found, f"harness: tracing `{command}` found no checkpoint"]
            name = f"{kind} {command} clean run ({len(keys)} checkpoints)"
            return command, keys, Result("ctrl-c", name, time.monotonic() - started, found)

        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            done = list(pool.map(one, commands))
        self._traces[kind] = {command: keys for command, keys, _ in done}
        self.clean += [result for _, _, result in done]
        return self._traces[kind]


def _pick(kind: str, keys: list[str], full: bool) -> list[str]:
    return keys if full or kind == "local" else first_per_call_site(keys)


def cases(campaign: str, worlds: Worlds, *, full: bool) -> list[Case]:
    """The cases of ``campaign`` over the worlds' targets."""
    out: list[Case] = []
    if campaign == "ctrl-c":
        for kind in worlds.targets:
            traced = worlds.traces(kind)
            out += _ctrl_c(kind, worlds, traced, full)
        out += [_done(result) for result in worlds.clean]
    elif campaign == "crash":
        for kind in worlds.targets:
            out += _crash(kind, worlds, worlds.traces(kind), full)
    elif campaign == "faults":
        from reliability import api_faults, store_faults

        out += api_faults.cases()
        for kind in worlds.targets:
            if kind in ("local", "ssh"):
                out += store_faults.cases(worlds.machine(kind), worlds.traces(kind))
            if kind == "ssh":
                out += store_faults.ssh_drop_cases(worlds.base / "ssh-drops", worlds.traces(kind))
            if kind == "runpod":
                out += worlds.runpod().fault_cases(worlds.traces(kind))
    elif campaign == "bad-input":
        from reliability import bad_input

        out += bad_input.cases(scale=4.0 if full else 1.0)
    return out


def _done(result: Result) -> Case:
    return Case(result.campaign, result.name, lambda: result.violations, weight=0.0)


def _ctrl_c(kind: str, worlds: Worlds, traced: dict[str, list[str]], full: bool) -> list[Case]:
    if kind == "runpod":
        return worlds.runpod().ctrl_c_cases(traced, full)
    world = worlds.machine(kind)
    return machine.ctrl_c_cases(world, {c: _pick(kind, k, full) for c, k in traced.items()})


def _crash(kind: str, worlds: Worlds, traced: dict[str, list[str]], full: bool) -> list[Case]:
    if kind == "runpod":
        return worlds.runpod().crash_cases(traced, full)
    world = worlds.machine(kind)
    return machine.crash_cases(world, {c: _pick(kind, k, full) for c, k in traced.items()})
