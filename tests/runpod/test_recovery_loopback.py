"""A run whose pod is lost before its job ended goes on, on a new pod, from its newest
checkpoint home — the real ``overbrainer`` command against the fake Runpod API on
loopback, fake pods running the real bootstrap and watchdog behind a real SSH server, and
the stand-in trainer saving a checkpoint every few steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import trio

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


async def _train_losing_pods(w: World, losses: int) -> subprocess.CompletedProcess[str]:
    """``train``, its pod vanishing (everything in it ending) ``losses`` times, each once a
    checkpoint more than at the last loss came home on the pod then running."""
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
                    w.fake.vanish(pod_id)
                    await w.pods.on_deleted(w.fake.pod(pod_id))
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lose_pods)
        done = await w.run("train", timeout=240)
        nursery.cancel_scope.cancel()
    assert len(lost) == losses, (lost, done.stderr)
    return done


async def test_a_pod_lost_after_a_checkpoint_came_home_is_replaced_and_the_run_succeeds(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        done = await _train_losing_pods(w, 1)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]
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
