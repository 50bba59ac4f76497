"""The REAL ``overbrainer`` command on a machine whose clock is 3 h behind, 2 years ahead, or
jumps 2 h mid-run (libfaketime: what the real code reads as the time is shifted, Python's
and every library's), against the fake Runpod API on loopback whose pods run the real
bootstrap and watchdog on their own (right) clock.

What must hold: no early deletion (the pods' watchdogs keep their bound), no unbounded pod
(a job outliving ``max_hours`` loses its pod to its watchdog at the real bound), no healthy
pod deleted, uptimes counted on Runpod's clock, and the offset recorded and warned about.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import trio

from overbrainer.runpod.pod_scripts import ENV_MAX_SECONDS
from overbrainer.testing.faketime import Jumping, skewed
from tests.runpod.test_train_loopback import World, world


def _events(w: World, run_id: str) -> list[dict[str, Any]]:
    """``events RUN --json`` (on the right clock)."""
    done = subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(w.project), "events", run_id, "--json"],
        env=w.env,
        capture_output=True,
        text=True,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def _fields(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["fields"] for e in events if e["event"] == name]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _creates_and_deletes(w: World, pod_id: str) -> tuple[float, list[float]]:
    """When Runpod created the pod, and when it was asked to delete it (its trio times)."""
    deletes = [
        r.time for r in w.fake.requests if r.method == "DELETE" and r.path == f"/pods/{pod_id}"
    ]
    return w.fake.pod(pod_id).created_at, deletes


def _check_recorded(events: list[dict[str, Any]], offset: float, err: str, said: str) -> None:
    (recorded,) = _fields(events, "run.ClockOffset")
    assert abs(recorded["offset_seconds"] - offset) < 5, recorded
    assert f"warning: this machine's clock is {said} Runpod's" in err, err


def _check_bound_from_runpod(
    w: World, events: list[dict[str, Any]], pod_id: str, hours: float
) -> None:
    """The create asked for max_hours only; the deadline is Runpod's createdAt plus it."""
    env = w.fake.pod_env(pod_id)
    assert "OVERBRAINER_DEADLINE" not in env
    assert env[ENV_MAX_SECONDS] == str(math.ceil(hours * 3600))
    (sent,) = _fields(events, "pod.AttemptSent")
    assert sent["max_hours"] == hours and sent["deadline"] == ""
    (created,) = _fields(events, "pod.Created")
    made = _at(created["created_at"])
    assert abs((made - datetime.now(UTC)).total_seconds()) < 120  # Runpod's (right) clock
    assert _at(created["deadline"]) - made == timedelta(seconds=math.ceil(hours * 3600))


async def test_a_clock_3h_behind_neither_loses_the_pod_nor_its_bound(tmp_path: Path) -> None:
    # max_hours 1: a deadline counted on this clock would be 2 h in the past.
    async with world(tmp_path, steps=10, step_seconds=0.1, max_hours=1.0) as w:
        w.env.update(skewed("-3h"))
        done = await w.run("train")
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        pod = w.pod_json(run_id)
        pod_id = str(pod["pod_id"])
        assert (pod["status"], pod["delete_reason"], pod["deleted_by"]) == (
            "deleted",
            "retrieved",
            "client",
        )
        assert w.run_json(run_id)["state"] == "succeeded"
        # One pod, kept to its end: none deleted at boot by its watchdog (and none more paid
        # for on the next GPU type).
        assert len(w.fake.create_requests()) == 1
        # The run was created on this clock: its ID says 3 h ago.
        assert abs(
            (datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
             - datetime.now(UTC)).total_seconds() + 3 * 3600
        ) < 120  # fmt: skip
        assert pod["uptime_seconds"] is not None and 0 < float(pod["uptime_seconds"]) < 60
        events = _events(w, run_id)
        _check_bound_from_runpod(w, events, pod_id, 1.0)
        _check_recorded(events, -3 * 3600, done.stderr, "3 h 0 min behind")
        # Recorded before the create: a command on another host judging whether this one
        # is still starting the pod corrects its times by it (the preflight's listing told
        # Runpod's clock; the run reuses that listing).
        names = [e["event"] for e in events]
        assert names.index("run.ClockOffset") < names.index("pod.AttemptSent"), names
        log = (w.pod_run_dir(pod_id, run_id) / ".pod" / "watchdog.log").read_text()
        assert "after its creation, counted on the pod" in log and "past the deadline" not in log


async def test_a_clock_2y_ahead_leaves_no_pod_unbounded(tmp_path: Path) -> None:
    # The pods' watchdogs check every 0.2 s (not every minute).
    overrides = {"OVERBRAINER_INTERVAL": "0.2"}
    async with world(tmp_path, steps=10, step_seconds=0.1, max_hours=1.0, overrides=overrides) as w:
        w.env.update(skewed("+730d"))
        # A run that ends well: its uptime is seconds, not 17,520 h.
        done = await w.run("train")
        assert done.returncode == 0, done.stderr
        (first,) = w.runs()
        pod = w.pod_json(first)
        assert pod["uptime_seconds"] is not None and 0 < float(pod["uptime_seconds"]) < 60
        _check_recorded(_events(w, first), 730 * 86400, done.stderr, "2 years ahead of")

        # A job that outlives max_hours (0.002 h: 7.2 s) loses its pod to its watchdog at
        # the real bound, after its creation - not in 2 years.
        w.env["OVERBRAINER_TARGETS__GPU__MAX_HOURS"] = "0.002"
        # Not asked to save first (the watchdog's save before a bound would end it stopped,
        # tested in test_watchdog.py): here the bound itself is what is shown.
        w.env["OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES"] = "0"
        w.env["OVERBRAINER_TARGETS__GPU__VENV"] = str(_slow_trainer(w, tmp_path))
        done = await w.run("train", timeout=90)
        assert done.returncode == 1, done.stderr
        (run_id,) = [r for r in w.runs() if r != first]
        pod_id = str(w.pod_json(run_id)["pod_id"])
        created, deletes = _creates_and_deletes(w, pod_id)
        assert deletes and 6.0 < deletes[0] - created < 10.5, deletes
        # Deleted by the pod's own watchdog (its key), at its deadline.
        (by,) = [
            r.auth for r in w.fake.requests if r.method == "DELETE" and r.path == f"/pods/{pod_id}"
        ][:1]
        assert by == f"pod:{pod_id}"
        log = (w.pod_run_dir(pod_id, run_id) / ".pod" / "watchdog.log").read_text()
        assert "past the deadline, 8s after the pod's creation" in log
        state = w.pod_json(run_id)
        assert f"error: run {run_id} failed: pod {pod_id} reached its deadline (" in done.stderr
        assert f"{state['deadline']}, max_hours = 0.002 after its creation)" in done.stderr
        assert "Traceback" not in done.stderr
        assert w.run_json(run_id)["state"] == "failed"
        events = _events(w, run_id)
        _check_bound_from_runpod(w, events, pod_id, 0.002)


async def _booting(w: World) -> None:
    """Until the newest run's pod exists and its job has not started."""
    with trio.fail_after(30):
        while True:
            for run_id in w.runs()[-1:]:
                try:
                    if w.pod_json(run_id).get("status") in ("created", "ready"):
                        return
                except (OSError, ValueError):
                    pass
            await trio.sleep(0.02)


def _slow_trainer(w: World, tmp_path: Path) -> Path:
    """A venv whose trainer runs far longer than the pod may live."""
    from tests.runpod.test_train_loopback import STAND_IN

    venv = tmp_path / "slow-venv"
    (venv / "bin").mkdir(parents=True)
    wrapper = venv / "bin" / "axolotl"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"FAKE_AXOLOTL_STEPS=600 FAKE_AXOLOTL_STEP_SECONDS=0.1 exec {sys.executable} "
        f'{STAND_IN} "$@"\n'
    )
    wrapper.chmod(0o755)
    return venv


async def test_a_clock_jumping_2h_mid_run_deletes_no_healthy_pod(tmp_path: Path) -> None:
    # max_hours 1: after a 2 h jump, a deadline counted on this clock is long past.
    async with world(tmp_path, steps=20, step_seconds=0.1, max_hours=1.0) as w:
        clock = Jumping(tmp_path / "faketime")
        env = {**w.env, **clock.env}
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "overbrainer", "-C", str(w.project), "train"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        out, err = bytearray(), bytearray()

        async def drain(stream: Any, sink: bytearray) -> None:
            async for chunk in stream:
                sink.extend(chunk)

        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, process.stdout, out)
                nursery.start_soon(drain, process.stderr, err)
                # While the pod boots: the deadline was once computed before this point, and
                # compared with this clock after it.
                await _booting(w)
                clock.jump("+2h")
                await process.wait()
        said = err.decode()
        assert process.returncode == 0, said
        (run_id,) = w.runs()
        pod = w.pod_json(run_id)
        pod_id = str(pod["pod_id"])
        assert (pod["delete_reason"], pod["deleted_by"]) == ("retrieved", "client")
        assert w.run_json(run_id)["state"] == "succeeded"
        assert pod["uptime_seconds"] is not None and 0 < float(pod["uptime_seconds"]) < 60
        events = _events(w, run_id)
        _check_bound_from_runpod(w, events, pod_id, 1.0)
        # Seen (and said) once the command next heard from Runpod: at the pod's delete.
        _check_recorded(events, 2 * 3600, said, "2 h 0 min ahead of")
        names = [e["event"] for e in events]
        assert names[-4:] == ["pod.Deleting", "pod.Deleted", "run.ClockOffset", "pod.Billed"]
        # The jump really reached the command: its later events are stamped 2 h on.
        times = [_at(e["time"]) for e in events]
        assert (times[-1] - times[0]).total_seconds() > 2 * 3600 - 60


async def _following(w: World) -> None:
    """Until the newest run's job runs on its pod and its first steps were followed."""
    with trio.fail_after(60):
        while True:
            for run_id in w.runs()[-1:]:
                try:
                    if w.pod_json(run_id).get("status") == "job_running":
                        await trio.sleep(1.0)
                        return
                except (OSError, ValueError):
                    pass
            await trio.sleep(0.02)


async def _train_while(
    w: World, clock: Jumping, steps: Any, *, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """``train`` on ``clock``, with ``steps`` (an async function of the world) run beside
    it once its job is followed; its exit code and what it said."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "overbrainer", "-C", str(w.project), "train"],
        env={**w.env, **clock.env, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    said = bytearray()

    async def drain() -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            said.extend(chunk)

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            await _following(w)
            assert process.poll() is None, said.decode()
            await steps()
            await process.wait()
    return process.returncode, said.decode()


def _succeeded_and_deleted_once(w: World) -> tuple[str, str]:
    """The run succeeded and its pod was deleted once, by the client, its results home."""
    (run_id,) = w.runs()
    pod = w.pod_json(run_id)
    pod_id = str(pod["pod_id"])
    assert w.run_json(run_id)["state"] == "succeeded"
    assert (pod["delete_reason"], pod["deleted_by"]) == ("retrieved", "client")
    assert len(_creates_and_deletes(w, pod_id)[1]) == 1
    return run_id, pod_id


async def test_a_monotonic_clock_jumping_2h_ahead_while_following_ends_no_healthy_pod(
    tmp_path: Path,
) -> None:
    # A VM restored, or a machine whose monotonic clock counts its sleep: both of this
    # machine's clocks jump 2 h ahead while train follows the job. By them, the pod is past
    # its deadline (max_hours 1) and its cost cap ($0.50 at $0.40/h: 1 h 15 min); by
    # Runpod's clock, read again before acting, it is minutes old.
    async with world(tmp_path, steps=150, step_seconds=0.1, max_hours=1.0) as w:
        clock = Jumping(tmp_path / "faketime", monotonic=True)

        async def jump() -> None:
            clock.jump("+2h")

        code, said = await _train_while(
            w, clock, jump, env={"OVERBRAINER_TARGETS__GPU__MAX_COST_USD": "0.5"}
        )
        assert code == 0, said
        assert "past the deadline" not in said and "cost cap" not in said, said
        run_id, pod_id = _succeeded_and_deleted_once(w)
        assert (
            f"warning: run {run_id}: this machine's clock jumped (2 h 0 min ahead of Runpod's "
            f"since its last answer); by Runpod's clock pod {pod_id} has not reached its bound: "
            "following goes on"
        ) in said, said
        events = _events(w, run_id)
        (jumped,) = _fields(events, "run.ClockJumped")
        assert abs(jumped["seconds"] - 2 * 3600) < 60, jumped
        assert not _fields(events, "pod.CostCapNear")
        (created,) = _fields(events, "pod.Created")
        assert _at(created["deadline"]) - _at(created["created_at"]) == timedelta(hours=1)


async def test_a_wall_clock_stepped_2h_forward_then_back_while_following_ends_no_healthy_pod(
    tmp_path: Path,
) -> None:
    # An NTP step, a clock set by hand: the wall clock alone moves, 2 h ahead, then back.
    async with world(tmp_path, steps=150, step_seconds=0.1, max_hours=1.0) as w:
        clock = Jumping(tmp_path / "faketime")

        async def forward_and_back() -> None:
            clock.jump("+2h")
            await trio.sleep(2.0)
            clock.jump("-2h")

        code, said = await _train_while(w, clock, forward_and_back)
        assert code == 0, said
        assert "past the deadline" not in said, said
        run_id, _ = _succeeded_and_deleted_once(w)
        # Nothing jumped on the clock that carries Runpod's between its answers.
        assert not _fields(_events(w, run_id), "run.ClockJumped")
