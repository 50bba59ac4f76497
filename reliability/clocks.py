"""The clocks campaign: the real ``overbrainer`` on a machine whose clock is 3 h behind or
2 years ahead (every command of the case, set-up and recovery included), or jumps 2 h
either way while ``train`` or ``train attach`` runs (its monotonic clock with it, once: 2 h
ahead while ``train`` follows its job) — through libfaketime, so what the real
code reads as the time is shifted, Python's and every library's. The fake Runpod and its
pods keep the right time, as Runpod's and a pod's clocks would; so does an SSH host.

On the local and ssh targets nothing bounds a job by the clock: a case there proves that
``train`` on a clock far off, or jumping while it follows its job, ends as on a right one,
with every machine invariant (the stand-in trainer keeps the right time: it is not what is
tested, and Python's ``time.sleep`` fails under a jumping libfaketime).

On Runpod, invariants added to the target's: the command ends as it would on a right clock
(exit 0; ``train`` and ``train attach`` succeed, ``train cancel`` cancels); no pod's
watchdog found it past its deadline (runs take seconds, ``max_hours`` is 1); no pod's
recorded uptime is the offset's (it is counted on Runpod's clock); each pod's deadline is
Runpod's ``createdAt`` plus ``max_hours``; a clock far off is recorded in the run's log
(``run.ClockOffset``, the right offset) and warned about.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from overbrainer.testing.faketime import Jumping, skewed
from reliability.core import UNREACHED, Case
from reliability.invariants import check_machine_runs, check_outputs, log_state
from reliability.world import Done, MachineWorld, Project, case_project

SKEWS = {"3 h behind": ("-3h", -3 * 3600.0), "2 years ahead": ("+730d", 730 * 86400.0)}
JUMPS = {"+2h": 2 * 3600.0, "-2h": -2 * 3600.0}
# What the newest run's pod.json says when train's clock jumps: booting, ready, following
# its job, being deleted.
PHASES = ("created", "ready", "job_running", "deleting")


def cases(world: Any) -> list[Case]:
    """Every command on a clock far off; train (at each phase) and attach with a jump."""
    out: list[Case] = []
    for label, (offset, seconds) in SKEWS.items():
        for command in world.COMMANDS:
            slug = f"runpod-clock-{command.replace(' ', '-')}-{offset}"
            out.append(
                Case(
                    "clocks",
                    f"runpod {command}: this machine's clock {label}",
                    partial(_skewed_case, world, command, offset, seconds, slug),
                    weight=4.0,
                )
            )
    for jump, seconds in JUMPS.items():
        for phase in PHASES:
            slug = f"runpod-clock-train-jump{jump}-{phase}"
            out.append(
                Case(
                    "clocks",
                    f"runpod train: this machine's clock jumps {jump} while its pod is {phase}",
                    partial(_jump_case, world, "train", phase, jump, seconds, slug),
                    weight=4.0,
                )
            )
        slug = f"runpod-clock-attach-jump{jump}"
        out.append(
            Case(
                "clocks",
                f"runpod train attach: this machine's clock jumps {jump} while following",
                partial(_jump_case, world, "train attach", "following", jump, seconds, slug),
                weight=4.0,
            )
        )
    # Both clocks jump ahead, the monotonic one too (a VM restored): by them the pod is past
    # its deadline; by Runpod's, read again before anything is done, it is not.
    slug = "runpod-clock-train-monotonic-jump+2h-job_running"
    out.append(
        Case(
            "clocks",
            "runpod train: this machine's wall and monotonic clocks jump +2h while its pod is "
            "job_running",
            partial(_jump_case, world, "train", "job_running", "+2h", 7200.0, slug, monotonic=True),
            weight=4.0,
        )
    )
    return out


def machine_cases(world: MachineWorld) -> list[Case]:
    """``train`` on a clock far off, and jumping either way while it follows its job."""
    out: list[Case] = []
    for label, (offset, _) in SKEWS.items():
        slug = f"{world.kind}-clock-train-{offset}"
        out.append(
            Case(
                "clocks",
                f"{world.kind} train: this machine's clock {label}",
                partial(_machine_case, world, slug, skew=offset),
                weight=1.0,
            )
        )
    for jump in JUMPS:
        slug = f"{world.kind}-clock-train-jump{jump}"
        out.append(
            Case(
                "clocks",
                f"{world.kind} train: this machine's clock jumps {jump} while following",
                partial(_machine_case, world, slug, jump=jump),
                weight=1.0,
            )
        )
    return out


def _machine_case(
    world: MachineWorld, name: str, *, skew: str | None = None, jump: str | None = None
) -> list[str]:
    with case_project(world, name) as project:
        project.knobs(FAKE_AXOLOTL_STEPS="10", FAKE_AXOLOTL_STEP_SECONDS="0.1")
        clock = None
        if skew is not None:
            project.env.update(skewed(skew))
        else:
            clock = Jumping(project.path.parent / "faketime")
            project.env.update(clock.env)
        started = time.monotonic()
        process = project.start("train")
        jumped = threading.Event()
        if clock is not None and jump is not None:
            running = _run_state(project, "running")
            watcher = threading.Thread(
                target=_jump_when, args=(process, running, clock, jump, jumped), daemon=True
            )
            watcher.start()
        done = project.finish(process, ("train",), started, timeout=120)
        if jump is not None and not jumped.is_set():
            UNREACHED.append(f"{world.kind} train clock jump {jump} while following")
        found: list[str] = []
        if done.code != 0:
            found.append(f"`train` exited {done.code}: {done.said()[-700:]}")
        found += check_outputs(project.log)
        found += check_machine_runs(project)
        for run_id in project.runs():
            state, _ = log_state(project, run_id)
            if state.run.state != "succeeded":
                found.append(f"run {run_id} ended {state.run.state} ({state.run.message})")
        return found


def _run_state(project: Project, wanted: str) -> Callable[[], bool]:
    return lambda: any(project.run_state(r) == wanted for r in project.runs())


def _jump_when(
    process: Any, reached: Callable[[], bool], clock: Jumping, jump: str, jumped: threading.Event
) -> None:
    while process.poll() is None and not reached():
        time.sleep(0.005)
    if process.poll() is None:
        clock.jump(jump)
        jumped.set()


def _skewed_case(world: Any, command: str, offset: str, seconds: float, name: str) -> list[str]:
    project = world.project(name)
    project.env.update(skewed(offset))
    try:
        args, _ = world.setup(project, command)
        if command == "train attach":
            project.hold.unlink(missing_ok=True)
        done = project.run(*args, timeout=150)
        found = _checks(world, project, command, done)
        found += _offset_recorded(project, seconds)
        return found
    finally:
        project.hold.unlink(missing_ok=True)
        project.close()


def _jump_case(
    world: Any,
    command: str,
    phase: str,
    jump: str,
    seconds: float,
    name: str,
    *,
    monotonic: bool = False,
) -> list[str]:
    project = world.project(name)
    try:
        args, _ = world.setup(project, command)  # on the right clock
        clock = Jumping(project.path.parent / "faketime", monotonic=monotonic)
        project.env.update(clock.env)
        if command == "train attach":
            project.hold.unlink(missing_ok=True)
        started = time.monotonic()
        process = project.start(*args)
        jumped = threading.Event()
        watcher = threading.Thread(
            target=_jump_at, args=(project, process, phase, clock, jump, jumped), daemon=True
        )
        watcher.start()
        done = project.finish(process, args, started, timeout=150)
        watcher.join(10)
        if not jumped.is_set():
            UNREACHED.append(f"runpod {command} clock jump {jump} at {phase}")
        found = _checks(world, project, command, done)
        if jumped.is_set():
            found += _offset_recorded(project, seconds, required=False)
        return found
    finally:
        project.hold.unlink(missing_ok=True)
        project.close()


def _jump_at(
    project: Project,
    process: Any,
    phase: str,
    clock: Jumping,
    jump: str,
    jumped: threading.Event,
) -> None:
    """Jump the command's clock once the newest run's pod is at ``phase`` (``following``:
    half a second into the command)."""
    if phase == "following":
        time.sleep(0.5)
    else:
        reached = _pod_status(project, phase)
        while process.poll() is None and not reached():
            time.sleep(0.005)
        if not reached():
            return
    if process.poll() is None:
        clock.jump(jump)
        jumped.set()


def _pod_status(project: Project, status: str) -> Callable[[], bool]:
    def check() -> bool:
        import json

        for run_id in project.runs()[-1:]:
            try:
                pod = json.loads((project.path / "runs" / run_id / "pod.json").read_text())
            except (OSError, ValueError):
                return False
            return bool(pod.get("status") == status)
        return False

    return check


def _checks(world: Any, project: Project, command: str, done: Done) -> list[str]:
    from reliability.pods import expected_pod_end

    found: list[str] = []
    if done.code != 0:
        found.append(f"`{' '.join(done.args)}` exited {done.code}: {done.said()[-700:]}")
    found += world.check_guarded(project)
    found += _bounded(world, project)
    for run_id in project.runs():
        state, _ = log_state(project, run_id)
        found += expected_pod_end(command, "trace", state)  # as on a right clock
    found += world.recover_all(project)
    found += check_outputs(project.log)
    found += world.check_after(project, command, "clock")
    return found


def _bounded(world: Any, project: Project) -> list[str]:
    """No watchdog deleted a pod early; uptimes and deadlines on Runpod's (right) clock."""
    from overbrainer.events import types as ev
    from overbrainer.utc import parse_utc

    found: list[str] = []
    now = datetime.now(UTC)
    for run_id in project.runs():
        state, records = log_state(project, run_id)
        for pod in world.account(run_id):
            log = pod["root"] / "workspace" / "overbrainer" / "runs" / run_id / ".pod"
            try:
                said = (log / "watchdog.log").read_text(errors="replace")
            except OSError:
                continue
            if "past the deadline" in said:
                found.append(f"pod {pod['id']} of run {run_id} was deleted early by its watchdog")
        for record in records:
            event = record.event
            uptime = event.uptime_seconds if isinstance(event, ev.PodDeleted) else None
            if uptime is not None and not 0 <= uptime < 3600:
                found.append(
                    f"pod {event.pod_id} of run {run_id} recorded an uptime of {uptime:.0f} s"
                )
            if isinstance(event, ev.PodCreated):
                made, deadline = parse_utc(event.created_at), parse_utc(event.deadline)
                if made is None or deadline is None or deadline - made != timedelta(hours=1):
                    found.append(
                        f"pod {event.pod_id} of run {run_id}: deadline {event.deadline} is not "
                        f"max_hours after its creation {event.created_at}"
                    )
                elif abs((made - now).total_seconds()) > 3600:
                    found.append(
                        f"pod {event.pod_id} of run {run_id}: creation {event.created_at} is "
                        "not on Runpod's clock"
                    )
        if state.pod.uptime_seconds is not None and state.pod.uptime_seconds >= 3600:
            found.append(f"run {run_id} says its pod ran {state.pod.uptime_seconds:.0f} s")
    return found


def _offset_recorded(project: Project, seconds: float, *, required: bool = True) -> list[str]:
    """The offset is in the run's log, right to within a minute, and was warned about."""
    from overbrainer.events import types as ev

    found: list[str] = []
    for run_id in project.runs():
        _, records = log_state(project, run_id)
        offsets = [r.event.offset_seconds for r in records if isinstance(r.event, ev.ClockOffset)]
        if required and not offsets:
            found.append(f"run {run_id}: this machine's clock being off is not in its log")
        found += [
            f"run {run_id}: recorded clock offset {offset:.0f} s, expected {seconds:.0f} s"
            for offset in offsets
            if abs(offset - seconds) > 60
        ]
    if required and not any("warning: this machine's clock is" in d.err for d in project.log):
        found.append("no command warned that this machine's clock is off")
    return found
