"""The recovery campaign: the real ``overbrainer`` on the Runpod target whose pod is lost
before its job ended — the fake Runpod and its living pods on loopback, acted on while
``train`` follows the run (or at a chosen moment of a recovery).

Cases: the pod vanishes (a 404 from then on, everything in it ending) at each phase of its
job — before the first checkpoint came home, after one did, while a checkpoint is being
fetched, while the job saves its end; it is stopped (EXITED) under the job; the job hangs
and is recovered as stalled; the recovery's new pod finds no capacity for a while;
``train`` is SIGKILLed during a recovery and ``train attach`` finishes it; a SIGINT comes
during a recovery's provisioning; ``max_recoveries`` is used up. ``--full`` adds: stopped
before the first checkpoint and while the job saves its end; lost once the job ended (its
end not seen yet) and while its results are retrieved; three losses in a row;
``max_recoveries`` 0; a recovery SIGKILLed as soon as it is recorded begun and with its new
pod ready; two SIGINTs; a lost pod found by ``train attach``.

Where the product chooses (a Ctrl-C during a recovery, a pod lost around its job's end),
what the run came to is noted (printed with the summary) rather than asserted, and held
only to this: no pod bills that the run does not name, the command says how to go on, and
``train attach`` finishes the run — or, ended failed, the run names its resume.

Invariants, beside the Runpod target's (see ``pods.py``): the run ends as its case says
(succeeded when the recoveries suffice, failed naming why when not) with the recoveries
it should have; one pod at a time (each ``pod.Created`` after the previous pod's
``pod.Deleted`` in the log); no pod of the run left live in the fake; every recovery's
``resumed_step`` is a checkpoint that was home when it began (the newest; 0 only when
none was); the run's spend counts every pod the fake made for it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from reliability.core import UNREACHED, Case
from reliability.invariants import check_outputs, log_state
from reliability.world import CANARY_API, Done, Project

# Forty steps of a twentieth of a second, a checkpoint every ten: a job of two seconds with
# four saves, long enough to be lost at any phase of it, short enough for a case to last
# seconds with its recoveries.
KNOBS = {
    "FAKE_AXOLOTL_STEPS": "40",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.05",
    "FAKE_AXOLOTL_SAVE_EVERY": "10",
}
OBSERVED: list[str] = []
"""What an interrupted recovery came to, case by case (printed with the summary): the
product's choice, noted rather than asserted."""

FETCHING = ".overbrainer-checkpoint-"  # checkpoints_home.FETCHING_PREFIX: one on its way
# A GPU type only the capacity cases ask for: the fake is shared by every case running,
# and its capacity taken away must not starve the others.
SCARCE = "NVIDIA RTX Recovery"

Phase = str  # "job", "checkpoint", "fetching", "end-save", "ended", "retrieval"
PHASES: dict[Phase, str] = {
    "job": "before the first checkpoint came home",
    "checkpoint": "after a checkpoint came home",
    "fetching": "while a checkpoint is being fetched",
    "end-save": "while its job saves its end",
    "ended": "once its job ended (its end not seen yet)",
    "retrieval": "while its results are being retrieved",
}


@dataclass(frozen=True)
class Loss:
    """The run's current pod lost at ``phase`` of its job: ``vanish`` (gone from the API)
    or ``stop`` (EXITED through the API)."""

    phase: Phase
    how: str = "vanish"


@dataclass(frozen=True)
class Scenario:
    """One case: what ``train`` meets, and how its run must end."""

    slug: str
    title: str
    losses: tuple[Loss, ...] = ()
    knobs: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    outcome: str = "succeeded"  # "either": what an interrupted recovery comes to is noted
    recoveries: int = 1  # finished recoveries the run ends with
    pods: int | None = None  # pods the fake made for the run (None: recoveries + 1)
    says: tuple[str, ...] = ()  # in the run's message (failed) or train's stderr
    reason: str = ""  # in the first recovery's reason
    # During the first recovery: "kill" (SIGKILL), "sigint", "sigint2" at the new pod's
    # status in pod.json ("" with "kill": as soon as the recovery is recorded begun).
    interrupt: str = ""
    interrupt_at: str = ""
    capacity_gap: float = 0.0  # no capacity for the new pod for this many seconds
    attach_finds_loss: bool = False  # lost while detached: `train attach` recovers it
    weight: float = 6.0


def _vanish(phase: Phase, knobs: dict[str, str] | None = None) -> Scenario:
    """The pod vanishes at ``phase`` (one of :data:`PHASES`), and the run is recovered."""
    return Scenario(
        f"vanish-{phase}",
        "the pod vanishes " + PHASES[phase],
        (Loss(phase),),
        knobs=knobs or {},
        reason="no longer exists",
    )


def _scenarios(full: bool) -> list[Scenario]:
    out = [
        _vanish("job"),
        _vanish("checkpoint"),
        # Bigger checkpoints: their fetch takes long enough to be caught in.
        _vanish("fetching", knobs={"FAKE_AXOLOTL_CHECKPOINT_KB": "4096"}),
        _vanish("end-save", knobs={"FAKE_AXOLOTL_END_SAVE_SECONDS": "1.5"}),
        Scenario(
            "stopped",
            "the pod is stopped (EXITED) under its job",
            (Loss("checkpoint", "stop"),),
            reason="is EXITED (stopped) without the job's end",
        ),
        Scenario(
            "stall",
            "the job hangs (a stall) and is recovered",
            knobs={"FAKE_AXOLOTL_HANG_AFTER": "25", "FAKE_AXOLOTL_HANG_ONCE": "1"},
            env={
                "OVERBRAINER_TRAINING__STALL_MINUTES": "0.05",  # 3 s: no false stall under load
                "OVERBRAINER_TRAINING__FIRST_STEP_MINUTES": "0.5",
                "OVERBRAINER_TRAINING__STOP_TIMEOUT_MINUTES": "0.02",
            },
            reason="its job stalled",
        ),
        Scenario(
            "capacity",
            "the recovery's new pod gets no capacity for a while",
            (Loss("checkpoint"),),
            env={"OVERBRAINER_TARGETS__GPU__WAIT_FOR_CAPACITY": "5m"},
            capacity_gap=3.0,
            reason="no longer exists",
            weight=20.0,
        ),
        Scenario(
            "kill-recovery",
            "train SIGKILLed during a recovery (its new pod booting), then train attach",
            (Loss("checkpoint"),),
            interrupt="kill",
            interrupt_at="created",
        ),
        Scenario(
            "sigint-provisioning",
            "a SIGINT during a recovery's provisioning, then train attach",
            (Loss("checkpoint"),),
            outcome="either",
            interrupt="sigint",
            interrupt_at="created",
        ),
        Scenario(
            "exhausted",
            "max_recoveries (1) used up: the run fails saying so",
            (Loss("checkpoint"), Loss("checkpoint")),
            env={"OVERBRAINER_TARGETS__GPU__MAX_RECOVERIES": "1"},
            outcome="failed",
            pods=2,
            says=("recoveries exhausted (1/1, max_recoveries of target gpu)",),
        ),
    ]
    if not full:
        return out
    out += [
        Scenario(
            "vanish-three-times",
            "the pod vanishes three times in a row (max_recoveries 3): the run succeeds",
            (Loss("job"), Loss("checkpoint"), Loss("fetching")),
            knobs={"FAKE_AXOLOTL_CHECKPOINT_KB": "4096", "FAKE_AXOLOTL_STEPS": "60"},
            recoveries=3,
        ),
        Scenario(
            "stopped-job",
            "the pod is stopped (EXITED) before the first checkpoint came home",
            (Loss("job", "stop"),),
            reason="is EXITED (stopped) without the job's end",
        ),
        Scenario(
            "stopped-end-save",
            "the pod is stopped (EXITED) while its job saves its end",
            (Loss("end-save", "stop"),),
            knobs={"FAKE_AXOLOTL_END_SAVE_SECONDS": "1.5"},
        ),
        Scenario(
            "vanish-ended",
            "the pod vanishes " + PHASES["ended"],
            (Loss("ended"),),
            outcome="either",
        ),
        Scenario(
            "vanish-retrieval",
            "the pod vanishes " + PHASES["retrieval"] + ", then train attach",
            (Loss("retrieval"),),
            # Bigger results: their retrieval takes long enough to be caught in.
            knobs={"FAKE_AXOLOTL_OUTPUT_MB": "16"},
            outcome="either",
        ),
        Scenario(
            "no-recoveries",
            "max_recoveries 0: the run fails as its pod goes, no new pod",
            (Loss("checkpoint"),),
            env={"OVERBRAINER_TARGETS__GPU__MAX_RECOVERIES": "0"},
            outcome="failed",
            recoveries=0,
            pods=1,
        ),
        Scenario(
            "kill-recovery-begun",
            "train SIGKILLed as soon as a recovery is recorded begun, then train attach",
            (Loss("checkpoint"),),
            interrupt="kill",
            interrupt_at="",
        ),
        Scenario(
            "kill-recovery-ready",
            "train SIGKILLed during a recovery (its new pod ready), then train attach",
            (Loss("checkpoint"),),
            interrupt="kill",
            interrupt_at="ready",
        ),
        Scenario(
            "sigint2-provisioning",
            "two SIGINTs during a recovery's provisioning, then train attach",
            (Loss("checkpoint"),),
            outcome="either",
            interrupt="sigint2",
            interrupt_at="created",
        ),
        Scenario(
            "attach-finds-loss",
            "the pod of a run nothing follows vanishes: train attach recovers it",
            (Loss("checkpoint"),),
            attach_finds_loss=True,
            reason="no longer exists",
        ),
    ]
    return out


def cases(world: Any, *, full: bool = False) -> list[Case]:
    """The recovery cases on the Runpod world."""
    return [
        Case(
            "recovery",
            f"runpod train: {scenario.title}",
            partial(_case, world, scenario),
            weight=scenario.weight,
        )
        for scenario in _scenarios(full)
    ]


# --- what the case reads of the run while it goes ---------------------------------------


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _run_json(project: Project, run_id: str) -> dict[str, Any]:
    return _read(project.path / "runs" / run_id / "run.json")


def _pod_json(project: Project, run_id: str) -> dict[str, Any]:
    return _read(project.path / "runs" / run_id / "pod.json")


def _home(project: Project, run_id: str) -> list[int]:
    steps = _run_json(project, run_id).get("checkpoints")
    return [int(s) for s in steps] if isinstance(steps, list) else []


def _job_file(world: Any, pod_id: str, run_id: str, name: str) -> Path:
    root: Path = world.pods.root(pod_id)
    return root / "workspace" / "overbrainer" / "runs" / run_id / name


def _at_phase(
    world: Any, project: Project, run_id: str, pod_id: str, phase: Phase, newest: int
) -> bool:
    """Whether the job of ``pod_id`` is at ``phase`` (``newest``: the newest checkpoint
    home at the last loss; a later one must have come home since)."""
    home = _home(project, run_id)
    if phase == "job":
        return True
    if phase == "checkpoint":
        return bool(home) and max(home) > newest
    if phase == "fetching":
        # A fetch after one came home, so that a checkpoint home is what the recovery
        # resumes from: a folder on its way of a step past the newest home (the folder of
        # one just placed is removed only after its record).
        run_dir = project.path / "runs" / run_id
        try:
            names = [p.name for p in run_dir.iterdir() if p.name.startswith(FETCHING)]
        except OSError:
            return False
        steps = [name[len(FETCHING) :].split("-")[0] for name in names]
        fetching = [int(step) for step in steps if step.isdigit()]
        return bool(home) and max(home) > newest and any(s > max(home) for s in fetching)
    if phase == "end-save":
        try:
            metrics = _job_file(world, pod_id, run_id, "metrics.jsonl").read_text()
        except OSError:
            return False
        return '"saving_' in metrics
    if phase == "ended":
        return _job_file(world, pod_id, run_id, "exit_code").exists()
    if phase == "retrieval":
        # exec/transfer.py's STAGING_DIR at the top of the run's directory: the results'
        # download (a checkpoint's is in its own folder on its way).
        return (project.path / "runs" / run_id / ".overbrainer-download").exists()
    raise ValueError(phase)


def _lose(world: Any, pod_id: str, how: str) -> None:
    """Lose pod ``pod_id``: gone from the API (and everything in it ending), or stopped."""
    import trio

    from overbrainer.runpod.client import RunpodClient

    async def vanish() -> None:
        # The fake applies a vanishing at its next request; a machine lost ends what runs
        # on it at once (its SSH server, its job), so the fake pod is ended now.
        world.fake.vanish(pod_id)
        await world.pods.on_deleted(world.fake.pod(pod_id))

    async def stop() -> None:
        async with RunpodClient(CANARY_API, world.url) as client:
            await client.pod_action(pod_id, "stop")

    trio.from_thread.run(vanish if how == "vanish" else stop, trio_token=world.trio_token)


def _no_capacity(world: Any, seconds: float) -> None:
    """No GPU of :data:`SCARCE` free for ``seconds`` from now (the fake's clock)."""

    def take() -> None:
        import trio

        world.fake.set_capacity(SCARCE, 0)
        world.fake.set_capacity_at(trio.current_time() + seconds, SCARCE, 10_000)

    world.call(take)


@dataclass
class Driven:
    """What the case did to the run, and what it could not do (its phases not reached)."""

    run_id: str | None = None
    lost: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    interrupted: bool = False
    error: BaseException | None = None


def _current(project: Project, run_id: str, lost: list[str]) -> str | None:
    """The run's pod that ran its job (running it, or its results awaited), if it is one
    not lost yet."""
    pod = _pod_json(project, run_id)
    pod_id = pod.get("pod_id")
    ran = pod.get("status") in ("job_running", "awaiting_retrieval")
    if ran and pod_id and pod_id not in lost:
        return str(pod_id)
    return None


def _drive(world: Any, project: Project, process: Any, scenario: Scenario, driven: Driven) -> None:
    """Lose the run's pods as ``scenario`` says, then interrupt its recovery if asked."""
    try:
        _drive_losses(world, project, process, scenario, driven)
        if scenario.interrupt and driven.run_id is not None:
            _interrupt_recovery(project, process, scenario, driven)
    except BaseException as error:  # reported as the case's violation
        driven.error = error


def _drive_losses(
    world: Any, project: Project, process: Any, scenario: Scenario, driven: Driven
) -> None:
    newest = -1
    for loss in scenario.losses:
        pod_id = None
        while process.poll() is None:
            runs = project.runs()
            if runs:
                driven.run_id = runs[-1]
                pod_id = _current(project, driven.run_id, driven.lost)
                if pod_id and _at_phase(world, project, driven.run_id, pod_id, loss.phase, newest):
                    break
            pod_id = None
            time.sleep(0.005)
        if pod_id is None or driven.run_id is None:
            driven.missed.append(f"{loss.how} {PHASES[loss.phase]}")
            return
        home = _home(project, driven.run_id)
        if loss.phase == "job" and home:
            driven.missed.append(f"{loss.how} {PHASES['job']} (checkpoint-{max(home)} was)")
        newest = max(home, default=newest)
        if scenario.capacity_gap:
            _no_capacity(world, scenario.capacity_gap)
        _lose(world, pod_id, loss.how)
        driven.lost.append(pod_id)


def _interrupt_recovery(project: Project, process: Any, scenario: Scenario, driven: Driven) -> None:
    """Signal ``train`` once its recovery is under way (the new pod at ``interrupt_at``)."""
    assert driven.run_id is not None
    run_id = driven.run_id
    while process.poll() is None:
        recoveries = _run_json(project, run_id).get("recoveries") or []
        pod = _pod_json(project, run_id)
        begun = bool(recoveries) and recoveries[-1].get("pod_id") is None
        new = pod.get("pod_id") not in (None, *driven.lost)
        if begun and (
            not scenario.interrupt_at or (new and pod.get("status") == scenario.interrupt_at)
        ):
            break
        time.sleep(0.002)
    if process.poll() is not None:
        driven.missed.append(f"{scenario.interrupt} during recovery at {scenario.interrupt_at}")
        return
    if scenario.interrupt == "kill":
        process.kill()
    else:
        process.send_signal(signal.SIGINT)
        if scenario.interrupt == "sigint2":
            time.sleep(0.05)
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
    driven.interrupted = True


# --- a case ---------------------------------------------------------------------------


def _case(world: Any, scenario: Scenario) -> list[str]:
    project = world.project(f"runpod-recovery-{scenario.slug}")
    try:
        project.knobs(**{**KNOBS, **scenario.knobs})
        project.env.update(scenario.env)
        if scenario.capacity_gap:
            _scarce_target(world, project)
        return _run_case(world, project, scenario)
    finally:
        project.hold.unlink(missing_ok=True)
        project.close()


def _scarce_target(world: Any, project: Project) -> None:
    """The project's pods are of :data:`SCARCE`, a type only it asks for."""
    from overbrainer.testing.runpod_api import FakeGpuType

    gpu = FakeGpuType(SCARCE, SCARCE.removeprefix("NVIDIA "), 48, 0.39)
    world.call(world.fake.add_gpu_type, gpu)
    world.call(world.fake.set_capacity, SCARCE, 10_000)
    toml = project.path / "overbrainer.toml"
    text = toml.read_text()
    toml.write_text(text.replace('gpu_types = ["NVIDIA A40"]', f'gpu_types = ["{SCARCE}"]', 1))


def _run_case(world: Any, project: Project, scenario: Scenario) -> list[str]:
    found: list[str] = []
    driven = Driven()
    if scenario.attach_finds_loss:
        first = _lost_while_detached(world, project, scenario, driven)
    else:
        started = time.monotonic()
        process = project.start("train")
        driver = threading.Thread(
            target=_drive, args=(world, project, process, scenario, driven), daemon=True
        )
        driver.start()
        first = project.finish(process, ("train",), started, timeout=240)
        driver.join(30)
    if driven.error is not None:
        found.append(f"harness: acting on the run failed: {driven.error!r}")
    for missed in driven.missed:
        UNREACHED.append(f"runpod recovery {scenario.slug}: {missed}")
    runs = project.runs()
    if len(runs) != 1:
        return [*found, f"expected one run, found {runs}: {first.said()[-700:]}"]
    (run_id,) = runs
    found += _first_command(scenario, first, driven)
    if driven.interrupted or scenario.outcome == "either":
        # What the interrupted recovery left (or the loss the product decides about):
        # every pod known and bounded, the run saying where it is. Then `train attach`
        # finishes it.
        found += world.check_guarded(project)
        found += _said_where(project, run_id, first)
        state, _ = log_state(project, run_id)
        then = f"{state.run.state} ({state.run.message})"
        if not state.final or state.pod.may_bill():
            attach = project.run("train", "attach", run_id, timeout=240)
            if attach.code != 0:
                found.append(
                    f"`train attach` after the {scenario.interrupt} exited "
                    f"{attach.code}: {attach.said()[-700:]}"
                )
            state, _ = log_state(project, run_id)
            then += f"; `train attach` exited {attach.code}, the run {state.run.state}"
        last = first.err.strip().splitlines()[-1:] or [""]
        OBSERVED.append(
            f"{scenario.slug}: `train` exited {first.code} ({last[0][:200]}); the run was {then}"
        )
    found += world.check_guarded(project)
    found += _recovery_checks(world, project, run_id, scenario, driven)
    found += world.recover_all(project)
    found += check_outputs(project.log, _allowed(scenario))
    found += world.check_after(
        project, "train", "kill" if scenario.interrupt == "kill" else "recovery"
    )
    return found


def _lost_while_detached(world: Any, project: Project, scenario: Scenario, driven: Driven) -> Done:
    """``train`` followed until a checkpoint came home, then Ctrl-C'd (nothing follows the
    job); its pod lost; ``train attach`` — the command the case checks."""
    started = time.monotonic()
    process = project.start("train")
    try:
        project.wait_for(
            lambda: any(_home(project, r) for r in project.runs()),
            timeout=120,
            what="a checkpoint home",
        )
    finally:
        process.send_signal(signal.SIGINT)
        project.finish(process, ("train",), started, timeout=120)
    (run_id,) = project.runs()
    driven.run_id = run_id
    pod_id = str(_pod_json(project, run_id).get("pod_id"))
    _lose(world, pod_id, scenario.losses[0].how)
    driven.lost.append(pod_id)
    return project.run("train", "attach", run_id, timeout=240)


def _allowed(scenario: Scenario) -> dict[str, set[int]]:
    codes = {"succeeded": {0}, "failed": {1}}.get(scenario.outcome, {0, 1})
    train = {
        "kill": {-9},
        "sigint": {0, 1, 130},
        "sigint2": {0, 1, 130},
    }.get(scenario.interrupt, codes)
    if scenario.attach_finds_loss:
        return {"train": {130}, "train attach": codes, "pod rm": {0, 1}, "runs show": {0}}
    return {"train": train, "train attach": {0}, "pod rm": {0, 1}, "runs show": {0}}


def _first_command(scenario: Scenario, done: Done, driven: Driven) -> list[str]:
    """The command the case followed ended as the case says."""
    if driven.interrupted or scenario.outcome == "either":
        return []
    found = []
    want = 0 if scenario.outcome == "succeeded" else 1
    if done.code != want:
        found.append(
            f"`{' '.join(done.args)}` exited {done.code} (expected {want}): {done.said()[-700:]}"
        )
    if scenario.outcome == "failed" and "--resume-from" not in done.err:
        found.append(f"`{' '.join(done.args)}` failed without saying how to go on: {done.err}")
    return found


def _said_where(project: Project, run_id: str, done: Done) -> list[str]:
    """An interrupted recovery says where the run is: what goes on with it, or that it
    ended; a pod it may have left is named by the log."""
    if done.code == -9:
        return []
    state, _ = log_state(project, run_id)
    told = ("overbrainer train attach", "train --resume-from", "nothing is left to do")
    if state.final and (state.run.message or state.run.state == "succeeded"):
        return []
    if any(words in done.err for words in told):
        return []
    return [f"`train` interrupted during a recovery did not say how to go on: {done.err[-700:]}"]


# --- the recovery invariants ------------------------------------------------------------


def _recovery_checks(
    world: Any, project: Project, run_id: str, scenario: Scenario, driven: Driven
) -> list[str]:
    from overbrainer.events import types as ev

    state, records = log_state(project, run_id)
    run = state.run
    found: list[str] = []
    if not state.final:
        found.append(f"run {run_id} is still {run.state} after the case's commands")
    elif scenario.outcome == "either":
        if run.state != "succeeded" and "--resume-from" not in (run.message or "") + "".join(
            d.err for d in project.log
        ):
            found.append(f"run {run_id} ended {run.state} ({run.message}) naming no resume")
    elif run.state != scenario.outcome:
        found.append(f"run {run_id} ended {run.state} ({run.message}); expected {scenario.outcome}")
    if scenario.outcome == "failed" and run.state == "failed":
        said = (run.message or "") + "".join(d.err for d in project.log)
        found += [
            f"run {run_id} failed without saying {words!r}"
            for words in scenario.says
            if words not in said
        ]
        if not run.message:
            found.append(f"run {run_id} failed without a message")
    finished = [r for r in run.recoveries if r.get("pod_id") is not None]
    if run.state == scenario.outcome and len(finished) != scenario.recoveries:
        found.append(
            f"run {run_id} has {len(finished)} finished recoveries, expected "
            f"{scenario.recoveries}: {run.recoveries}"
        )
    if scenario.reason and run.recoveries:
        reason = str(run.recoveries[0].get("reason"))
        if scenario.reason not in reason:
            found.append(f"run {run_id}'s recovery says {reason!r}, not {scenario.reason!r}")
    begun = [r.event.attempt for r in records if isinstance(r.event, ev.Recovering)]
    if begun != list(range(1, len(begun) + 1)):
        found.append(f"run {run_id} recorded its recoveries begun as attempts {begun}")
    if scenario.capacity_gap and run.recoveries:
        names = [r.event.name for r in records]
        waited = "pod.CapacityAwaited" in names[names.index("run.Recovering") :]
        if not waited:
            found.append(f"run {run_id}'s recovery never waited for capacity")
    for recovery in run.recoveries:
        if recovery.get("lost_pod") is not None and recovery["lost_pod"] == recovery.get("pod_id"):
            found.append(f"run {run_id}: recovery {recovery['attempt']} went on on its lost pod")
    found += _one_pod_at_a_time(run_id, records, ev)
    found += _resumed_from_home(run_id, records, ev)
    pods = world.account(run_id)
    found += [
        f"pod {p['id']} of run {run_id} is still {p['status']} in the fake"
        for p in pods
        if p["status"] != "TERMINATED"
    ]
    want = scenario.pods if scenario.pods is not None else scenario.recoveries + 1
    if run.state == scenario.outcome and not scenario.interrupt and len(pods) != want:
        found.append(f"the fake made {len(pods)} pods for run {run_id}, expected {want}")
    found += _spend_counts_every_pod(run_id, state, {p["id"] for p in pods})
    return found


def _one_pod_at_a_time(run_id: str, records: list[Any], ev: Any) -> list[str]:
    """Each ``pod.Created`` after the ``pod.Deleted`` of every pod created before it."""
    found = []
    alive: list[str] = []
    for record in records:
        event = record.event
        if isinstance(event, ev.PodCreated):
            if alive:
                found.append(f"run {run_id}: pod {event.pod_id} created while {alive} lived")
            alive.append(event.pod_id)
        elif isinstance(event, ev.PodDeleted) and event.pod_id in alive:
            alive.remove(event.pod_id)
    return found


def _resumed_from_home(run_id: str, records: list[Any], ev: Any) -> list[str]:
    """Every recovery resumed from the newest checkpoint home when it began (from the start
    only when none was)."""
    found = []
    home: set[int] = set()
    began: dict[int, set[int]] = {}
    for record in records:
        event = record.event
        if isinstance(event, ev.CheckpointRetrieved):
            home.add(event.step)
        elif isinstance(event, ev.CheckpointPruned):
            home.discard(event.step)
        elif isinstance(event, ev.Recovering):
            began[event.attempt] = set(home)
        elif isinstance(event, ev.Recovered):
            had = began.get(event.attempt)
            step = event.resumed_step
            if had is None:
                found.append(f"run {run_id}: recovery {event.attempt} recovered, never begun")
            elif step == 0 and had:
                found.append(
                    f"run {run_id}: recovery {event.attempt} resumed from the start though "
                    f"checkpoint-{max(had)} was home"
                )
            elif step and step not in had:
                found.append(
                    f"run {run_id}: recovery {event.attempt} resumed from checkpoint-{step}, "
                    f"not home when it began (home: {sorted(had)})"
                )
            elif step and step != max(had):
                found.append(
                    f"run {run_id}: recovery {event.attempt} resumed from checkpoint-{step}, "
                    f"not the newest home ({max(had)})"
                )
    return found


def _spend_counts_every_pod(run_id: str, state: Any, made: set[str]) -> list[str]:
    """The run's spend has a cost for every pod the fake made for it."""
    from overbrainer.projections.spend import run_spend

    found = []
    costs = state.pod.costs
    missing = sorted(made - set(costs))
    if missing:
        found.append(f"run {run_id}'s costs miss pods {missing} (it has {sorted(costs)})")
    unknown = sorted(
        p
        for p in made & set(costs)
        if costs[p].get("estimate") is None and costs[p].get("billed") is None
    )
    if unknown:
        found.append(f"run {run_id}'s costs have no amount for pods {unknown}")
    spend = run_spend(state, None)
    if spend.pods < len(made):
        found.append(f"run {run_id}'s spend counts {spend.pods} pods of the {len(made)} made")
    return found
