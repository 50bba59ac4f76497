"""Ctrl-C, crash and fault cases of ``train``, ``train attach`` and ``train cancel`` on a
machine target (local or ssh), through the real ``overbrainer`` command.

Each command is first run once with a *trace* plan: the checkpoints it passes through are
the cases (see ``overbrainer/front/fault_injection.py``). A case then runs the command with an
*inject* plan acting at one checkpoint, recovers the run with ``train attach`` when it is
not final, and checks every invariant.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reliability.core import UNREACHED, Case
from reliability.invariants import (
    check_machine_runs,
    check_outputs,
    check_projections,
    log_state,
)
from reliability.world import MachineWorld, Project, case_project

COMMANDS = ("train", "train attach", "train cancel")

SIGNAL_CODES = {
    "sigint": 130,
    "sigint2": 130,
    "sigterm": 143,
    "sigterm2": 143,
    "sighup": 129,
    "sighup2": 129,
}
"""The exit code of a command a checkpoint plan's signal action stopped (128 + the
signal's number)."""

# The job of an attach case trains for about two seconds once released, so the attach
# follows it through at least one poll whatever the load.
_ATTACH_KNOBS = {
    "FAKE_AXOLOTL_STEPS": "10",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.2",
    "FAKE_AXOLOTL_SAVE_EVERY": "2",
}


@dataclass
class Setup:
    """A project made ready for a command: the arguments to run it with and its run."""

    args: tuple[str, ...]
    run_id: str | None


def detached_run(project: Project, timeout: float = 240) -> str:
    """A run whose job is held running, and that no command follows (Ctrl-C'd ``train``)."""
    project.hold.touch()
    started = time.monotonic()
    process = project.start("train")
    try:
        project.wait_for(
            lambda: any(project.run_state(r) == "running" for r in project.runs()),
            timeout=timeout,
            what="a running run",
        )
    finally:
        process.send_signal(signal.SIGINT)
        done = project.finish(process, ("train",), started, timeout=timeout)
    (run_id,) = project.runs()
    if done.code != 130:
        raise RuntimeError(f"setting up a detached run failed ({done.code}): {done.said()}")
    return run_id


def setup(project: Project, command: str) -> Setup:
    """Prepare ``project`` for ``command``."""
    if command == "train":
        return Setup(("train",), None)
    if command == "train attach":
        project.knobs(**_ATTACH_KNOBS)
        run_id = detached_run(project)
        return Setup(("train", "attach", run_id), run_id)
    if command == "train cancel":
        run_id = detached_run(project)
        return Setup(("train", "cancel", run_id), run_id)
    raise ValueError(command)


def before_command(project: Project, command: str) -> None:
    """What happens right before the command under test: an attach's job is let go."""
    if command == "train attach":
        project.hold.unlink(missing_ok=True)


def read_trace(path: Path) -> list[str]:
    """The checkpoint keys a traced command wrote, in order of first passage."""
    if not path.exists():
        return []
    return [json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()]


def trace(world: MachineWorld, command: str, name: str) -> tuple[list[str], list[str]]:
    """Run ``command`` cleanly with a trace plan: its checkpoints, and the violations the
    clean run itself shows (there should be none)."""
    with case_project(world, name) as project:
        prepared = setup(project, command)
        path = project.path.parent / "trace.jsonl"
        before_command(project, command)
        done = project.run(*prepared.args, plan={"trace": str(path)})
        project.hold.unlink(missing_ok=True)
        keys = read_trace(path)
        found = check_outputs(project.log)
        if done.code != 0:
            found.append(f"the clean `{' '.join(prepared.args)}` exited {done.code}")
        found += check_machine_runs(project)
        return keys, found


def short(key: str) -> str:
    """A checkpoint key, shortened for tables: the append, or the innermost frames (and a
    checkpoint's retrieval, when the await is inside one: ``--match checkpoints_home``)."""
    if not key.startswith("await "):
        return key
    frames = [f.split("/")[-1] for f in key[len("await ") :].split(" > ")]
    if len(frames) <= 2:
        return "await " + " > ".join(frames)
    inner = [f for f in frames[2:-1] if f.startswith("checkpoints_home.py:")][-1:]
    return " … ".join([f"await {frames[1]}", *inner, frames[-1]])


class Pauser:
    """Runs ``during`` when the command pauses at its checkpoint, then lets it go on."""

    def __init__(self, pause_file: Path, during: Callable[[], None]) -> None:
        self.pause_file = pause_file
        self.during = during
        self.ran = False
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.pause_file.exists():
                try:
                    self.during()
                except BaseException as error:  # reported by the case
                    self.error = error
                finally:
                    self.ran = True
                    self.pause_file.unlink(missing_ok=True)
                return
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def recover(project: Project, run_ids: list[str]) -> list[str]:
    """What a user does next: ``train attach`` every run that is not final (its held job
    let go first); ``runs show`` the others (reading a run rebuilds its projections).
    Returns the violations of these commands' exit codes."""
    project.hold.unlink(missing_ok=True)
    found = []
    for run_id in run_ids:
        state, _ = log_state(project, run_id)
        if state.exists and not state.final:
            done = project.run("train", "attach", run_id, timeout=90)
            allowed = {0, 1}
        elif state.exists and check_projections(project, run_id, state):
            done = project.run("runs", "show", run_id, timeout=60)
            allowed = {0}
        else:
            continue
        if done.code not in allowed:
            found.append(f"recovery `{' '.join(done.args)}` exited {done.code}: {done.said()}")
    return found


def expected_end(command: str, state: Any, killed: bool) -> list[str]:
    """What the run's final state should be: the stand-in trainer always succeeds, so a
    run whose job started ends succeeded — or cancelled by a cancel that got through."""
    run = state.run
    if not state.final or run.job is None:
        return []
    allowed = {"succeeded"}
    if command == "train cancel":
        allowed = {"cancelled", "succeeded"} if killed else {"cancelled"}
    if run.state not in allowed:
        return [f"run {run.run_id} ended {run.state} ({run.message}); expected {sorted(allowed)}"]
    return []


def inject_case(
    world: MachineWorld,
    command: str,
    key: str,
    action: str,
    name: str,
    during: Callable[[Project], None] | None = None,
    codes: set[int] | None = None,
    prepare: Callable[[Project], None] | None = None,
    after: Callable[[Project], None] | None = None,
    breaks: tuple[str, ...] = (),
    how: str = "epipe",
) -> list[str]:
    """Run ``command`` acting ``action`` at checkpoint ``key``, recover, check.

    ``prepare`` adjusts the fresh project first (its store, say); ``after`` runs once the
    command has ended, before recovery (a server put back, say); ``breaks`` are the
    streams broken there first, ``how`` as the checkpoint plan says."""
    with case_project(world, name) as project:
        if prepare is not None:
            prepare(project)
        prepared = setup(project, command)
        trace_path = project.path.parent / "trace.jsonl"
        plan: dict[str, Any] = {"trace": str(trace_path), "at": key, "action": action}
        if breaks:
            plan.update({"break": list(breaks), "break_how": how})
        pauser = None
        if action == "pause":
            pause_file = project.path.parent / "paused"
            plan["pause_file"] = str(pause_file)
            assert during is not None
            pauser = Pauser(pause_file, lambda: during(project))
        before_command(project, command)
        runs_before = set(project.runs())
        try:
            done = project.run(*prepared.args, plan=plan)
        finally:
            if pauser is not None:
                pauser.close()
            if after is not None:
                after(project)
        reached = key in read_trace(trace_path)
        if not reached:
            UNREACHED.append(name)
        found: list[str] = []
        if pauser is not None and pauser.error is not None:
            found.append(f"harness: the injected fault failed: {pauser.error!r}")
        if action == "kill":
            allowed = {-9} if reached else {0}
        elif action in SIGNAL_CODES:
            allowed = {0, SIGNAL_CODES[action]}
        elif action == "none":
            # Only output was lost: the command exits by what became of its run.
            allowed = {0}
        else:
            allowed = codes if codes is not None else {0, 1}
        if "stderr" not in breaks:
            found += said_next_step(done, action, sorted(set(project.runs()) - runs_before))
        if done.code not in allowed:
            found.append(
                f"`{' '.join(done.args)}` exited {done.code} (expected {sorted(allowed)}): "
                f"{done.said()[-600:]}"
            )
        found += recover(project, project.runs())
        found += check_outputs(project.log)
        found += check_machine_runs(project)
        for run_id in project.runs():
            state, _ = log_state(project, run_id)
            found += expected_end(command, state, killed=action == "kill" or action == "pause")
        return found


def said_next_step(done: Any, action: str, new_runs: Sequence[str] = ()) -> list[str]:
    """An interrupted command says what was left and the exact next command; one that says
    it created no run (Ctrl-C during the preflight) created none."""
    if action not in SIGNAL_CODES or done.code != SIGNAL_CODES[action]:
        return []
    if "no run was created" in done.err:
        if new_runs:
            return [f"`{' '.join(done.args)}` said no run was created, but created {new_runs}"]
        return []
    told = ("overbrainer train attach", "stopped before its job started", "nothing is left to do")
    if any(words in done.err for words in told):
        return []
    return [f"`{' '.join(done.args)}` was interrupted without saying how to go on: {done.err}"]


def ctrl_c_cases(
    world: MachineWorld, once: dict[str, list[str]], twice: dict[str, list[str]]
) -> list[Case]:
    """A SIGINT at each of ``once``, two in a row at each of ``twice`` (per command)."""
    cases = []
    for action, keys in (("sigint", once), ("sigint2", twice)):
        for command, found in keys.items():
            for key in found:
                i = checkpoint_index(world, command, key)
                name = f"{world.kind} {command} {action} @{i:02d} {short(key)}"
                slug = f"{world.kind}-{command.replace(' ', '-')}-{action}-{i:02d}"
                cases.append(
                    Case(
                        "ctrl-c",
                        name,
                        _bind(inject_case, world, command, key, action, slug),
                        weight=2.0 if command != "train" else 1.0,
                    )
                )
    return cases


def two_process_cases(
    world: MachineWorld, keys: list[str], one_process: list[str], full: bool
) -> list[Case]:
    """A SIGINT to ``train`` of a job of two processes at each checkpoint (``keys``, its
    trace) that ``train`` of one process (``one_process``) does not pass; with ``full``, at
    each it passes."""
    seen = set(one_process)
    cases = []
    for i, key in enumerate(keys):
        if not full and key in seen:
            continue
        slug = f"local-2p-train-sigint-{i:02d}"
        cases.append(
            Case(
                "ctrl-c",
                f"local-2p train sigint @{i:02d} {short(key)}",
                _bind(inject_case, world, "train", key, "sigint", slug),
            )
        )
    return cases


TRACED_ORDER: dict[tuple[str, str], list[str]] = {}


def remember_order(kind: str, command: str, keys: list[str]) -> None:
    """The traced order of a command's checkpoints (for stable case numbers)."""
    TRACED_ORDER[(kind, command)] = list(keys)


def checkpoint_index(world: Any, command: str, key: str) -> int:
    order = TRACED_ORDER.get((world.kind, command), [])
    return order.index(key) if key in order else len(order)


def is_transfer_or_call(key: str) -> bool:
    """An await inside a file transfer or an API call (where a crash tears I/O)."""
    marks = (
        ".upload:",
        ".download:",
        "._untar:",
        "copy_results",
        "_copy_tree",
        "RunpodClient._send:",
        ".manifest:",
        ".spawn:",
        ".cancel:",
    )
    return key.startswith("await ") and any(mark in key for mark in marks)


def crash_cases(world: MachineWorld, keys: dict[str, list[str]]) -> list[Case]:
    """SIGKILL just before and just after every append, and inside every transfer."""
    cases = []
    for command, found in keys.items():
        for key in found:
            if not (key.startswith("append-") or is_transfer_or_call(key)):
                continue
            i = checkpoint_index(world, command, key)
            name = f"{world.kind} {command} kill @{i:02d} {short(key)}"
            slug = f"{world.kind}-{command.replace(' ', '-')}-kill-{i:02d}"
            cases.append(Case("crash", name, _bind(inject_case, world, command, key, "kill", slug)))
    return cases


def _bind(fn: Callable[..., list[str]], *args: Any, **kw: Any) -> Callable[[], list[str]]:
    return lambda: fn(*args, **kw)
