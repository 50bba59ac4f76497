"""A run whose pod is lost before its job ended goes on, on a new pod, from its newest
checkpoint home — the real ``overbrainer`` command against the fake Runpod API on
loopback, fake pods running the real bootstrap and watchdog behind a real SSH server, and
the stand-in trainer saving a checkpoint every few steps."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
from pathlib import Path
from typing import Any, Literal

import trio

from overbrainer.projections.curves import curves_of
from overbrainer.projections.live import curve_events
from overbrainer.runpod.client import RunpodClient
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.train.metrics import MetricsEvent, parse_metrics_lines
from tests.runpod.test_train_loopback import World, world

SAVING = "FAKE_AXOLOTL_SAVE_EVERY=10 FAKE_AXOLOTL_CHECKPOINT_KB=16"
"""The job saves a checkpoint every 10 steps."""


def _home(w: World, run_id: str) -> list[int]:
    try:
        home = w.run_json(run_id).get("checkpoints")
    except (OSError, ValueError):
        return []
    return list(home) if isinstance(home, list) else []


def _pod_id(w: World, run_id: str) -> str | None:
    try:
        pod = w.pod_json(run_id)
    except (OSError, ValueError):
        return None
    return str(pod["pod_id"]) if pod.get("pod_id") and pod.get("status") == "job_running" else None


async def _train_losing_pods(
    w: World, losses: int, *, how: Literal["vanish", "stop", "gpus", "ssh"] = "vanish"
) -> subprocess.CompletedProcess[str]:
    """``train``, its pod vanishing (everything in it ending) ``losses`` times, each once a
    checkpoint more than at the last loss came home on the pod then running; ``how``:
    ``stop``: stopped through the API instead (EXITED, the job gone with it); ``gpus``:
    restarted by its host with no GPU (RUNNING, the job gone with the restart); ``ssh``:
    its SSH server stops answering (RUNNING, the job going on)."""
    lost: list[str] = []

    async def lose_pods() -> None:
        newest = -1
        while len(lost) < losses:
            for run_id in w.runs()[-1:]:
                pod_id = _pod_id(w, run_id)
                home = _home(w, run_id)
                if pod_id and pod_id not in lost and home and max(home) > newest:
                    newest = max(home)
                    lost.append(pod_id)
                    if how == "stop":
                        async with RunpodClient(CANARY_KEY, w.base_url) as client:
                            await client.pod_action(pod_id, "stop")
                    elif how == "gpus":
                        await w.fake.lose_gpus(pod_id)
                    elif how == "ssh":
                        await w.pods.block_ssh(pod_id)
                    else:
                        w.fake.vanish(pod_id)
                        await w.pods.on_deleted(w.fake.pod(pod_id))
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lose_pods)
        done = await w.run("train", timeout=240)
        nursery.cancel_scope.cancel()
    assert len(lost) == losses, (lost, done.stderr)
    return done


async def _recovered(
    w: World, losses: int = 1, *, how: Literal["vanish", "stop", "gpus", "ssh"] = "vanish"
) -> tuple[subprocess.CompletedProcess[str], str, dict[str, Any]]:
    """:func:`_train_losing_pods`, which must succeed: its output, the run and its run.json."""
    done = await _train_losing_pods(w, losses, how=how)
    assert done.returncode == 0, done.stderr
    (run_id,) = w.runs()
    run = w.run_json(run_id)
    assert run["state"] == "succeeded", run
    return done, run_id, run


async def test_a_pod_lost_after_a_checkpoint_came_home_is_replaced_and_the_run_succeeds(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        done, run_id, run = await _recovered(w)
        (recovery,) = run["recoveries"]
        assert recovery["attempt"] == 1 and run["max_recoveries"] == 3
        step = recovery["resumed_step"]
        assert step > 0 and step % 10 == 0, recovery
        assert recovery["lost_steps"] is None or recovery["lost_steps"] >= 0
        first, second = recovery["lost_pod"], recovery["pod_id"]
        assert first != second
        pod = w.pod_json(run_id)
        assert pod["pod_id"] == second and pod["status"] == "deleted"
        assert w.fake.live_pods() == []
        names = await w.events(run_id)
        assert names.count("run.Recovering") == names.count("run.Recovered") == 1
        assert (
            names.index("run.Recovering") < names.index("run.Recovered") < names.index("run.Ended")
        )
        # The second job trained from the checkpoint on: its first step is the next one.
        metrics = w.pod_run_dir(second, run_id) / "metrics.jsonl"
        steps = [
            json.loads(line)["step"]
            for line in metrics.read_text().splitlines()
            if json.loads(line)["event"] == "log"
        ]
        assert steps[0] == step + 1 and steps[-1] == 150, steps[:3]
        assert f"recovery 1/3 on a new pod, resuming from checkpoint-{step}" in done.stderr
        # Both pods count in the run's spend.
        costs = pod["costs"]
        assert isinstance(costs, dict) and set(costs) == {first, second}


async def test_a_pod_lost_three_times_ends_succeeded_with_every_pod_gone_and_counted(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=300, step_seconds=0.02, knobs=SAVING) as w:
        _, run_id, run = await _recovered(w, 3)
        recoveries = run["recoveries"]
        assert isinstance(recoveries, list)
        assert [r["attempt"] for r in recoveries] == [1, 2, 3]
        # Each from the newest checkpoint home when its pod was lost, each later than the last.
        resumed = [r["resumed_step"] for r in recoveries]
        assert resumed == sorted(set(resumed)) and resumed[0] > 0, recoveries
        # At most what was trained since the last save is lost (the one in flight, too).
        assert all(r["lost_steps"] is None or r["lost_steps"] <= 20 for r in recoveries)
        # No pod left; four pods, one at a time, each in the run's costs.
        assert w.fake.live_pods() == []
        pods = {p.id for p in w.fake.pods.values()}
        assert len(pods) == 4
        costs = w.pod_json(run_id)["costs"]
        assert isinstance(costs, dict) and set(costs) == pods
        # The run's spend is the sum of its pods' costs; none is under what the fake billed
        # (a lost pod is counted until it was found gone, a few seconds past its end).
        listed = await w.run("runs", "ls", "--json")
        (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
        estimates = [costs[p]["estimate"] for p in pods]
        assert all(e is not None for e in estimates), costs
        assert abs(row["estimate_usd"] - sum(estimates)) < 1e-3, (row, costs)
        for pod_id in pods:
            fake = w.fake.pod(pod_id)
            bill = fake.price * fake.billed_seconds(0.0, trio.current_time()) / 3600
            assert bill - 1e-3 <= costs[pod_id]["estimate"] <= bill + fake.price * 30 / 3600


async def test_a_recovery_max_cost_usd_cannot_pay_for_creates_no_pod_and_fails_the_run(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=300, step_seconds=0.02, knobs=SAVING) as w:
        # Listed at $0.50/h (a $10 cap passes the choice) but billed $36/h: a recovery's
        # pod needs an hour at $36, far more than what is left of $10.
        for gpu in list(w.fake.gpu_types.values()):
            w.fake.add_gpu_type(dataclasses.replace(gpu, price=0.5, billed_price=36.0))
        w.fake.accounts[CANARY_KEY].balance = 1000.0
        w.env["OVERBRAINER_TARGETS__GPU__MAX_COST_USD"] = "10"
        done = await _train_losing_pods(w, 1)
        assert done.returncode == 1, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "failed" and run["recoveries"] == [], run
        assert len(w.fake.pods) == 1 and w.fake.live_pods() == []
        message = str(run["message"])
        assert "no recovery: its pods cost $" in message and "of max_cost_usd $10.00" in message
        assert "a recovery's pod needs at least $36.00 (1 h at $36.00/h)" in message
        assert "no new pod was created" in message
        assert f"go on with `overbrainer train --resume-from {run_id}`" in done.stderr
        assert "run.Recovering" not in await w.events(run_id)


async def test_a_run_whose_recoveries_are_used_up_fails_saying_so(tmp_path: Path) -> None:
    async with world(tmp_path, steps=300, step_seconds=0.02, knobs=SAVING) as w:
        w.env["OVERBRAINER_TARGETS__GPU__MAX_RECOVERIES"] = "1"
        done = await _train_losing_pods(w, 2)
        assert done.returncode == 1, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "failed" and len(run["recoveries"]) == 1, run  # type: ignore[arg-type]
        assert "recoveries exhausted (1/1, max_recoveries of target gpu)" in done.stderr
        assert f"go on with `overbrainer train --resume-from {run_id}`" in done.stderr
        assert len(w.fake.pods) == 2 and w.fake.live_pods() == []


async def test_a_pod_stopped_under_its_job_is_deleted_and_the_run_recovered(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        _, run_id, run = await _recovered(w, how="stop")
        (recovery,) = run["recoveries"]
        first = recovery["lost_pod"]
        assert recovery["reason"] == f"pod {first} is EXITED (stopped) without the job's end"
        # The stopped pod (which bills its disk) was deleted before the new one was created.
        assert w.fake.status(first) == "TERMINATED" and w.fake.live_pods() == []
        names = await w.events(run_id)
        deleted = [i for i, name in enumerate(names) if name == "pod.Deleted"]
        assert deleted[0] < names.index("run.Recovering")


async def _followed_until_a_checkpoint_came_home_then_lost(w: World) -> tuple[str, str, int]:
    """``train`` followed until a checkpoint came home, then interrupted (the laptop goes:
    the job runs on, nothing follows it), then its pod vanishes; the run, the lost pod and
    the newest checkpoint home."""
    process = await w.start("train", output=False)
    run_id = await w.wait_for("job_running")
    with trio.fail_after(60):
        while not _home(w, run_id):
            await trio.sleep(0.02)
    process.send_signal(signal.SIGINT)
    with trio.fail_after(30):
        await process.wait()
    assert process.returncode == 130
    assert w.run_json(run_id)["state"] == "running"
    pod_id = str(w.pod_json(run_id)["pod_id"])
    w.fake.vanish(pod_id)
    await w.pods.on_deleted(w.fake.pod(pod_id))
    return run_id, pod_id, max(_home(w, run_id))


def _one_pod_at_a_time(names: list[str]) -> bool:
    """Whether each pod the run created came after the one before it was deleted."""
    pods = [name for name in names if name in ("pod.Created", "pod.Deleted")]
    return pods == ["pod.Created", "pod.Deleted"] * (len(pods) // 2)


async def test_train_attach_finding_the_pod_lost_recovers_the_run_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.04, knobs=SAVING) as w:
        run_id, lost, newest = await _followed_until_a_checkpoint_came_home_then_lost(w)
        done = await w.run("train", "attach", run_id, timeout=120)
        assert done.returncode == 0, done.stderr
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        assert recovery["lost_pod"] == lost
        assert recovery["reason"] == f"pod {lost} no longer exists"
        assert recovery["resumed_step"] >= newest
        assert "recovery 1/3 on a new pod, resuming from checkpoint-" in done.stderr
        assert w.fake.live_pods() == []
        assert _one_pod_at_a_time(await w.events(run_id))


async def test_a_supervisor_killed_mid_recovery_is_followed_by_one_that_finishes_it_once(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.04, knobs=SAVING) as w:
        run_id, lost, _ = await _followed_until_a_checkpoint_came_home_then_lost(w)
        # The new pod takes seconds to boot: the supervisor dies with it half made.
        w.fake.provisioning_seconds = 3.0
        first = await w.start("supervise", output=False)
        with trio.fail_after(60):
            while str(w.pod_json(run_id).get("pod_id")) == lost:
                await trio.sleep(0.02)
        half_made = str(w.pod_json(run_id)["pod_id"])
        first.kill()
        await first.wait()
        run = w.run_json(run_id)
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        assert recovery["pod_id"] is None and run["state"] == "preparing", run
        w.fake.provisioning_seconds = 0.2
        done = await w.run("supervise", "--once", timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"train: run {run_id} succeeded" in done.stdout
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        # One recovery, finished by the second supervisor on a third pod.
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        assert recovery["attempt"] == 1 and recovery["pod_id"] not in (lost, half_made)
        assert "recovery 1 was left unfinished" in done.stderr
        names = await w.events(run_id)
        assert names.count("run.Recovering") == names.count("run.Recovered") == 1
        assert _one_pod_at_a_time(names)
        assert len(w.fake.pods) == 3 and w.fake.live_pods() == []


async def test_a_stalled_job_is_ended_and_its_run_recovered_from_the_newest_checkpoint(
    tmp_path: Path,
) -> None:
    # Checkpoints at 10 and 20, then a hang at step 25 (only a job trained from scratch
    # hangs); the stall bound 1.8 s, the stop timeout 1.2 s.
    async with world(
        tmp_path,
        steps=60,
        step_seconds=0.04,
        knobs=f"{SAVING} FAKE_AXOLOTL_HANG_AFTER=25 FAKE_AXOLOTL_HANG_ONCE=1",
        overrides={"OVERBRAINER_INTERVAL": "0.2"},
    ) as w:
        w.env.update(
            OVERBRAINER_TRAINING__STALL_MINUTES="0.03",
            OVERBRAINER_TRAINING__FIRST_STEP_MINUTES="0.5",
            OVERBRAINER_TRAINING__STOP_TIMEOUT_MINUTES="0.02",
        )
        done = await w.run("train", timeout=120)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        # Seconds: the bound (1.8 s) and up to a look more.
        assert re.fullmatch(
            r"its job stalled: it wrote no metrics line for [1-4] seconds? after its last "
            r"one \(at step 25\)",
            str(recovery["reason"]),
        ), recovery
        assert recovery["resumed_step"] == 20 and recovery["last_step"] == 25, recovery
        assert "asking it to save a checkpoint and stop, then ending it within" in done.stderr
        names = await w.events(run_id)
        assert names.index("run.Stalled") < names.index("run.Recovering")
        assert "run.StopRequested" not in names and names.count("run.Ended") == 1
        assert _one_pod_at_a_time(names)
        assert len(w.fake.pods) == 2 and w.fake.live_pods() == []
        # The stalled job was ended before its pod went; the new job went on from step 21.
        first = str(recovery["lost_pod"])
        assert (w.pod_run_dir(first, run_id) / "cancelled").exists()
        metrics = w.pod_run_dir(str(recovery["pod_id"]), run_id) / "metrics.jsonl"
        steps = [
            json.loads(line)["step"]
            for line in metrics.read_text().splitlines()
            if json.loads(line)["event"] == "log"
        ]
        assert steps[0] == 21 and steps[-1] == 60, steps[:3]


async def test_a_pod_restarted_with_no_gpu_is_deleted_and_the_run_recovered(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        _, run_id, run = await _recovered(w, how="gpus")
        (recovery,) = run["recoveries"]
        first = recovery["lost_pod"]
        assert recovery["reason"] == (
            f"pod {first} restarted with no GPU (it was created with 1): its job ended with "
            "the restart and cannot train there"
        )
        assert recovery["resumed_step"] > 0
        # The GPU-less pod (which bills) was deleted before the new one was created.
        assert w.fake.status(first) == "TERMINATED" and w.fake.live_pods() == []
        assert _one_pod_at_a_time(await w.events(run_id))


async def test_a_pod_that_stops_answering_ssh_is_recovered_after_unreachable_minutes(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=400, step_seconds=0.02, knobs=SAVING) as w:
        w.env["OVERBRAINER_TARGETS__GPU__UNREACHABLE_MINUTES"] = "0.05"  # 3 s
        done, run_id, run = await _recovered(w, how="ssh")
        (recovery,) = run["recoveries"]
        first = recovery["lost_pod"]
        assert recovery["reason"] == (
            f"pod {first} did not answer SSH for 0.05 min (unreachable_minutes of target gpu)"
        )
        assert f"pod {first} of run {run_id} does not answer SSH; looking at it again" in (
            done.stderr
        )
        # The unreachable pod (running, billing) was deleted before the new one was made.
        assert w.fake.status(first) == "TERMINATED" and w.fake.live_pods() == []
        assert _one_pod_at_a_time(await w.events(run_id))


async def test_a_pod_whose_ssh_moves_while_followed_is_followed_on_with_no_recovery(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=250, step_seconds=0.02, knobs=SAVING) as w:
        moved: list[str] = []

        async def move() -> None:
            while not moved:
                for run_id in w.runs()[-1:]:
                    pod_id = _pod_id(w, run_id)
                    if pod_id and _home(w, run_id):
                        await w.pods.move_ssh_server(pod_id)
                        moved.append(pod_id)
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(move)
            done = await w.run("train", timeout=240)
            nursery.cancel_scope.cancel()
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "succeeded" and run["recoveries"] == [], run
        assert f"pod {moved[0]} of run {run_id} answers SSH again: following on" in done.stderr
        assert len(w.fake.pods) == 1 and w.fake.live_pods() == []
        assert (await w.events(run_id)).count("pod.EndpointSeen") == 2


async def test_a_ctrl_c_while_a_recovery_makes_its_pod_leaves_it_for_train_attach(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.04, knobs=SAVING) as w:
        lost: list[str] = []

        async def lose_then_interrupt(process: trio.Process) -> None:
            while not lost:
                for run_id in w.runs()[-1:]:
                    pod_id = _pod_id(w, run_id)
                    if pod_id and _home(w, run_id):
                        # The new pod takes seconds to boot: the Ctrl-C comes while it does.
                        w.fake.provisioning_seconds = 3.0
                        w.fake.vanish(pod_id)
                        await w.pods.on_deleted(w.fake.pod(pod_id))
                        lost.append(pod_id)
                await trio.sleep(0.02)
            run_id = w.runs()[-1]
            while str(w.pod_json(run_id).get("pod_id")) == lost[0]:
                await trio.sleep(0.02)
            process.send_signal(signal.SIGINT)

        process = await w.start("train", output=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lose_then_interrupt, process)
            with trio.fail_after(120):
                await process.wait()
        assert process.returncode == 130
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        assert recovery["pod_id"] is None and run["state"] == "preparing", run
        assert w.fake.live_pods() == []  # the half-made pod went with the Ctrl-C
        w.fake.provisioning_seconds = 0.2
        done = await w.run("train", "attach", run_id, timeout=120)
        assert done.returncode == 0, done.stderr
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        assert recovery["attempt"] == 1 and recovery["pod_id"] is not None
        names = await w.events(run_id)
        assert names.count("run.Recovering") == names.count("run.Recovered") == 1
        assert _one_pod_at_a_time(names)
        assert len(w.fake.pods) == 3 and w.fake.live_pods() == []


async def test_the_curve_of_a_run_recovered_three_times_has_every_step_once_across_its_pods(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=300, step_seconds=0.02, knobs=SAVING) as w:
        _, run_id, run = await _recovered(w, 3)
        recoveries = run["recoveries"]
        assert isinstance(recoveries, list) and len(recoveries) == 3
        resumed = [r["resumed_step"] for r in recoveries]
        run_dir = w.project / "runs" / run_id
        # What the follower saw of each pod's job is kept apart, the retrieval clobbering none.
        assert sorted(p.name for p in run_dir.glob("metrics.seen*")) == [
            "metrics.seen.jsonl",
            *(f"metrics.seen.recovery-{n}.jsonl" for n in (1, 2, 3)),
        ]
        # The results brought home only the last pod's lines: from its resumed step on.
        retrieved = curves_of(curve_events_of_file(run_dir / "metrics.jsonl"))
        assert retrieved.loss[0][0] == resumed[-1] + 1, (retrieved.loss[:2], resumed)
        # The run's curve has the earlier pods' lines too, each step once, in order.
        curve = curves_of(curve_events(run_dir))
        assert [int(step) for step, _ in curve.loss] == list(range(1, 301))
        # The first pod's losses, as its own file has them, up to where the next resumed.
        first = w.pod_run_dir(recoveries[0]["lost_pod"], run_id) / "metrics.jsonl"
        lost_pod = dict(curves_of(curve_events_of_file(first)).loss)
        assert dict(curve.loss[: resumed[0]]) == {
            step: loss for step, loss in lost_pod.items() if step <= resumed[0]
        }
        # Each step's loss is the one the trainer logged at it (whichever pod it ran on).
        assert all(loss == round(2.5 / (1 + 0.5 * step), 4) for step, loss in curve.loss)
        # `runs show` draws it (a table of its values off a terminal) from the first pod's
        # step 1 to the last pod's last step.
        shown = await w.run("runs", "show", run_id)
        assert shown.returncode == 0, shown.stderr
        rows = [line.split()[:2] for line in shown.stdout.splitlines()]
        assert ["1", "1.667"] in rows and ["300", "0.01660"] in rows, shown.stdout[-2000:]


def curve_events_of_file(path: Path) -> list[MetricsEvent]:
    """The metrics lines of one file."""
    events, _, _ = parse_metrics_lines(path.read_bytes(), final=True)
    return events


async def test_a_pod_vanishing_while_its_results_download_is_said_gone_and_attach_recovers(
    tmp_path: Path,
) -> None:
    knobs = f"{SAVING} FAKE_AXOLOTL_OUTPUT_MB=16"
    async with world(tmp_path, steps=60, step_seconds=0.02, knobs=knobs) as w:
        lost: list[str] = []

        async def lose_during_download() -> None:
            while not lost:
                for run_id in w.runs():
                    if (w.project / "runs" / run_id / ".overbrainer-download").exists():
                        pod_id = str(w.pod_json(run_id)["pod_id"])
                        w.fake.vanish(pod_id)
                        await w.pods.on_deleted(w.fake.pod(pod_id))
                        lost.append(pod_id)
                await trio.sleep(0.02)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lose_during_download)
            done = await w.run("train", timeout=240)
            nursery.cancel_scope.cancel()
        (run_id,) = w.runs()
        if not lost:
            raise AssertionError(f"the download was never seen: {done.stderr}")
        (first,) = lost
        assert done.returncode == 1, done.stderr
        assert f"pod {first}" in done.stderr and "is gone: what was not home went" in done.stderr
        assert "left running" not in done.stderr
        assert f"`overbrainer train attach {run_id}` settles the run" in done.stderr
        # attach finds it lost and recovers it from the newest checkpoint home.
        attached = await w.run("train", "attach", run_id, timeout=240)
        assert attached.returncode == 0, attached.stderr
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]
        assert recovery["lost_pod"] == first
        assert w.fake.live_pods() == []
