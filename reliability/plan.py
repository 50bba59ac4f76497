"""Which cases each campaign runs, derived from the traced checkpoints of each command on
each target."""

from __future__ import annotations

import contextlib
import itertools
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


# The frames that only say which command runs: below them, `train attach` and `train`
# pass through the same code (following, settling, ending the target).
_ENTRY_PATHS = ("overbrainer/cli/",)
_ENTRY_FUNCTIONS = {"overbrainer/lifecycle/run.py": {"train", "attach", "cancel"}}


_CHECKPOINT_FETCH = "overbrainer/lifecycle/checkpoints_home.py:"
_RETRIEVAL = f"{_CHECKPOINT_FETCH}CheckpointFetcher.fetch:"


def in_checkpoint_fetch(key: str) -> bool:
    """Whether ``key`` is an await of the background fetch of checkpoints (their
    retrieval, the fetcher's loop, their removal)."""
    return key.startswith("await ") and _CHECKPOINT_FETCH in key


def in_retrieval(key: str) -> bool:
    """Whether ``key`` is an await inside one checkpoint's retrieval (its manifest and
    download, their check, its putting in place and record)."""
    return key.startswith("await ") and _RETRIEVAL in key


def code_site(key: str) -> str:
    """A checkpoint's call site below the command's entry point: the same code reached
    from two commands is one code site. In the background fetch of checkpoints, the site
    starts at its innermost frame there: the same code runs for each save, from the
    fetcher's loop while the job runs and from the end of following, and is one site."""
    if not key.startswith("await "):
        return key
    frames = call_site(key)[len("await ") :].split(" > ")
    fetch = [i for i, frame in enumerate(frames) if frame.startswith(_CHECKPOINT_FETCH)]
    if fetch:
        return "await " + " > ".join(frames[fetch[-1] :])
    while frames:
        path, _, rest = frames[0].partition(":")
        function = rest.rsplit(":", 1)[0]
        if path.startswith(_ENTRY_PATHS) or function in _ENTRY_FUNCTIONS.get(path, ()):
            frames = frames[1:]
            continue
        break
    return "await " + " > ".join(frames)


_JOURNAL = "overbrainer/session/journal.py:"


def is_append_await(key: str) -> bool:
    """Whether ``key`` is the await of a journal append: the append's own checkpoints
    (append-before/-after) stand for it. The innermost frames are the journal's: the append,
    then the runner it awaits its store call in."""
    if not key.startswith("await "):
        return False
    frames = key[len("await ") :].split(" > ")
    inner = itertools.takewhile(lambda frame: frame.startswith(_JOURNAL), reversed(frames))
    return any(":Journal.append:" in frame for frame in inner)


def sample(
    kind: str, traced: dict[str, list[str]], full: bool
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Where each command gets one Ctrl-C, and where two in a row.

    ``full``: every checkpoint, both ways. The local target, whose cases are cheap: every
    checkpoint both ways too, but the background fetch of checkpoints, whose checkpoints
    repeat with each save, once per code site both ways. Otherwise one Ctrl-C at each code
    site (the first checkpoint through it, whichever command passes there first), and two
    in a row at each append (where the first is only noted: an append is never torn, and
    a second Ctrl-C must say what is being finished).
    """
    if full:
        return dict(traced), dict(traced)
    local = kind == "local"
    seen: set[str] = set()
    once: dict[str, list[str]] = {}
    twice: dict[str, list[str]] = {}
    for command, keys in traced.items():
        once[command], twice[command] = [], []
        for key in keys:
            if local and not in_checkpoint_fetch(key):
                once[command].append(key)
                twice[command].append(key)
                continue
            site = code_site(key)
            if site in seen or (is_append_await(key) and not local):
                continue
            seen.add(site)
            once[command].append(key)
            if local or key.startswith("append-"):
                twice[command].append(key)
    return once, twice


class Worlds:
    """The targets' worlds and their traced checkpoints, set up on first use."""

    def __init__(
        self,
        base: Path,
        targets: list[str],
        stack: contextlib.ExitStack,
        subdirs: dict[str, str] | None = None,
        *,
        numbered: bool = True,
    ) -> None:
        self.base = base
        self.targets = targets
        self.stack = stack
        # Per target: the directory every case's project lies in (see MachineWorld).
        self.subdirs = dict(subdirs or {})
        self.numbered = numbered  # whose traces number the cases (machine.remember_order)
        self._machines: dict[str, MachineWorld] = {}
        self._traces: dict[str, dict[str, list[str]]] = {}
        self.clean: list[Result] = []
        self._lock = threading.Lock()
        self._runpod: Any = None
        self._postgres: Any = None
        self._cluster_keys: list[str] | None = None

    def machine(self, kind: str) -> MachineWorld:
        """The local or ssh world."""
        with self._lock:
            if kind not in self._machines:
                world = MachineWorld(kind, self.base / kind, self.subdirs.get(kind))
                self._machines[kind] = self.stack.enter_context(world)
            return self._machines[kind]

    def two_processes(self) -> MachineWorld:
        """The local world whose runs are jobs of two processes (a CPU rehearsal)."""
        with self._lock:
            if "local-2" not in self._machines:
                world = MachineWorld("local", self.base / "local-2", processes=2)
                self._machines["local-2"] = self.stack.enter_context(world)
            return self._machines["local-2"]

    def two_process_trace(self) -> list[str]:
        """The checkpoints of ``train`` of a job of two processes (traced once; its clean
        run checked like the others')."""
        import time

        started = time.monotonic()
        keys, found = machine.trace(self.two_processes(), "train", "trace-2p-train")
        if not keys:
            found = [*found, "harness: tracing a two-process `train` found no checkpoint"]
        name = f"local-2p train clean run ({len(keys)} checkpoints)"
        self.clean.append(Result("ctrl-c", name, time.monotonic() - started, found))
        return keys

    def cluster_trace(self) -> list[str]:
        """The checkpoints of ``train`` on a Runpod cluster of two pods (traced once; its
        clean run checked like the others')."""
        import time

        from reliability.pods import CLUSTER_TRAIN

        if self._cluster_keys is not None:
            return self._cluster_keys
        started = time.monotonic()
        world = self.runpod()
        keys, found = world.trace(CLUSTER_TRAIN, "trace-cluster-train")
        if not keys:
            found = [*found, "harness: tracing `train` on a cluster found no checkpoint"]
        if self.numbered:
            machine.remember_order("runpod", CLUSTER_TRAIN, keys)
        name = f"runpod {CLUSTER_TRAIN} clean run ({len(keys)} checkpoints)"
        self.clean.append(Result("ctrl-c", name, time.monotonic() - started, found))
        self._cluster_keys = keys
        return keys

    def postgres(self) -> Any:
        """A PostgreSQL server for the team-store faults (started on first use), or the
        error saying which binaries are missing."""
        from overbrainer.testing.pg import PgCluster, PgUnavailable

        with self._lock:
            if self._postgres is None:
                try:
                    cluster = PgCluster()
                except PgUnavailable as error:
                    self._postgres = error
                else:
                    self.stack.callback(cluster.destroy)
                    self._postgres = cluster.start()
            if isinstance(self._postgres, Exception):
                raise self._postgres
            return self._postgres

    def runpod(self) -> Any:
        """The Runpod world (the fake API and pods on loopback)."""
        from reliability.pods import RunpodWorld

        with self._lock:
            if self._runpod is None:
                world = RunpodWorld(self.base / "runpod", self.subdirs.get("runpod"))
                self._runpod = self.stack.enter_context(world)
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
        for command, keys, _ in done:
            if self.numbered:
                machine.remember_order(kind, command, keys)
        self.clean += [result for _, _, result in done]
        return self._traces[kind]


def cases(campaign: str, worlds: Worlds, *, full: bool) -> list[Case]:
    """The cases of ``campaign`` over the worlds' targets."""
    out: list[Case] = []
    if campaign == "ctrl-c":
        for kind in worlds.targets:
            traced = worlds.traces(kind)
            out += _ctrl_c(kind, worlds, traced, full)
            if kind == "runpod":
                out += worlds.runpod().cluster_ctrl_c_cases(worlds.cluster_trace(), traced, full)
        if "local" in worlds.targets:
            keys = worlds.two_process_trace()
            out += machine.two_process_cases(
                worlds.two_processes(), keys, worlds.traces("local")["train"], full
            )
    elif campaign in ("signals", "outputs"):
        from reliability import signals

        for kind in worlds.targets:
            out += signals.cases(kind, worlds, campaign, full)
    elif campaign == "crash":
        for kind in worlds.targets:
            out += _crash(kind, worlds, worlds.traces(kind), full)
    elif campaign == "faults":
        from reliability import api_faults, store_faults

        out += api_faults.cases()
        for kind in worlds.targets:
            if kind in ("local", "ssh"):
                # The store is the same whatever the target: every append on the local
                # target; on ssh, the one where a job on the target awaits its record.
                only = None if kind == "local" or full else "run.JobStarted"
                out += store_faults.cases(worlds.machine(kind), worlds.traces(kind), only)
            if kind == "local":
                out += store_faults.postgres_cases(
                    worlds.machine(kind), worlds.traces(kind), worlds.postgres
                )
            if kind == "ssh":
                out += store_faults.ssh_drop_cases(worlds.base / "ssh-drops", worlds.traces(kind))
            if kind == "runpod":
                out += worlds.runpod().fault_cases(worlds.traces(kind))
                out += worlds.runpod().store_fault_cases()
    elif campaign == "clocks":
        from reliability import clocks

        for kind in worlds.targets:
            if kind == "runpod":
                out += clocks.cases(worlds.runpod())
            else:
                out += clocks.machine_cases(worlds.machine(kind))
    elif campaign == "paths":
        from reliability import paths

        out += paths.cases(worlds, full=full)
    elif campaign == "bad-input":
        from reliability import bad_input

        out += bad_input.cases(scale=4.0 if full else 1.0)
    elif campaign == "recovery":
        from reliability import recovery

        if "runpod" in worlds.targets:
            out += recovery.cases(worlds.runpod(), full=full)
    elif campaign == "node-lost":
        from reliability import nodes_lost

        if "runpod" in worlds.targets:
            out += nodes_lost.cases(worlds.runpod(), worlds.cluster_trace(), full=full)
    return out


def _ctrl_c(kind: str, worlds: Worlds, traced: dict[str, list[str]], full: bool) -> list[Case]:
    once, twice = sample(kind, traced, full)
    if kind == "runpod":
        return worlds.runpod().ctrl_c_cases(once, twice)
    return machine.ctrl_c_cases(worlds.machine(kind), once, twice)


def _crash(kind: str, worlds: Worlds, traced: dict[str, list[str]], full: bool) -> list[Case]:
    once, _ = sample(kind, traced, full)
    if kind == "runpod":
        return worlds.runpod().crash_cases(once)
    return machine.crash_cases(worlds.machine(kind), once)
