"""A pod that dies mid-run loses at most what was trained since the last save: its
checkpoints came home verified as they were saved, and ``train --resume-from`` goes on
from the last one — the real ``overbrainer`` command against the fake Runpod API on
loopback, fake pods running the real bootstrap and watchdog behind a real SSH server, and
the stand-in trainer saving a checkpoint every few steps."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.test_train_loopback import STAND_IN, World, world


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def test_a_pod_deleted_at_its_deadline_leaves_its_last_checkpoint_home_to_resume_from(
    tmp_path: Path,
) -> None:
    # A watchdog checking every 0.2 s and a deadline 7.2 s after the create; the job would
    # train for 40 s, saving every 0.5 s. The watchdog is not to ask for a save before the
    # deadline (that ends the run stopped, tested on its own): the pod is deleted mid-run.
    overrides = {"OVERBRAINER_INTERVAL": "0.2", "OVERBRAINER_RETRIEVE_GRACE": "0.5"}
    async with world(tmp_path, steps=800, overrides=overrides, max_hours=0.002, knobs=SAVING) as w:
        w.env["OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES"] = "0"
        done, seen_on_pod = await _train_watching_the_pod(w)
        (run_id,) = w.runs()
        pod = w.pod_json(run_id)
        assert (pod["status"], pod["deleted_by"]) == ("deleted", "watchdog"), pod
        assert f"pod {pod['pod_id']} reached its deadline" in done.stderr
        last = _assert_last_checkpoint_home(w, run_id, done, seen_on_pod)
        await _assert_resumes(w, tmp_path, run_id, last)


async def test_a_pod_that_vanishes_mid_run_leaves_its_last_checkpoint_home_to_resume_from(
    tmp_path: Path,
) -> None:
    # No bound comes near: the pod disappears from Runpod's answers (404) and everything in
    # it ends, once two checkpoints are home — as a pod lost to a host failure does.
    async with world(tmp_path, steps=800, knobs=SAVING) as w:
        # A target that recovers nothing: the run fails with its pod (recoveries:
        # tests/runpod/test_recovery_loopback.py).
        w.env["OVERBRAINER_TARGETS__GPU__MAX_RECOVERIES"] = "0"

        async def vanish_once_two_checkpoints_are_home() -> None:
            while True:
                for run_id in w.runs()[-1:]:
                    if len(_home(w, run_id)) >= 2 and _has_pod(w, run_id):
                        pod_id = str(w.pod_json(run_id)["pod_id"])
                        w.fake.vanish(pod_id)
                        await w.pods.on_deleted(w.fake.pod(pod_id))
                        return
                await trio.sleep(0.05)

        done, seen_on_pod = await _train_watching_the_pod(w, vanish_once_two_checkpoints_are_home)
        (run_id,) = w.runs()
        pod_id = w.pod_json(run_id)["pod_id"]
        assert f"pod {pod_id} no longer exists" in done.stderr, done.stderr
        last = _assert_last_checkpoint_home(w, run_id, done, seen_on_pod)
        await _assert_resumes(w, tmp_path, run_id, last)


async def test_a_pod_deleted_at_its_cost_cap_leaves_its_last_checkpoint_home_to_resume_from(
    tmp_path: Path,
) -> None:
    # Listed at $0.50/h (so a $10 cap passes the choice of GPU) but billed $3,600/h: the
    # pod costs its cap 10 s after its creation. The job ignores the save asked at 95 % (a
    # job that does not stop in time), so the pod is deleted at its cap mid-run.
    async with world(tmp_path, steps=800, knobs=f"{SAVING} FAKE_AXOLOTL_NO_STOP=1") as w:
        listed = list(w.fake.gpu_types.values())
        for gpu in listed:
            w.fake.add_gpu_type(dataclasses.replace(gpu, price=0.5, billed_price=3600.0))
        w.fake.accounts[CANARY_KEY].balance = 10_000.0  # an hour at that rate
        w.env["OVERBRAINER_TARGETS__GPU__MAX_COST_USD"] = "10"
        done, seen_on_pod = await _train_watching_the_pod(w)
        (run_id,) = w.runs()
        pod = w.pod_json(run_id)
        assert pod["status"] == "deleted", pod
        assert "cost cap" in done.stderr, done.stderr
        last = _assert_last_checkpoint_home(w, run_id, done, seen_on_pod)
        # The resume on a pod at its listed price, with no cap.
        for gpu in listed:
            w.fake.add_gpu_type(gpu)
        del w.env["OVERBRAINER_TARGETS__GPU__MAX_COST_USD"]
        await _assert_resumes(w, tmp_path, run_id, last)


SAVING = "FAKE_AXOLOTL_SAVE_EVERY=10 FAKE_AXOLOTL_CHECKPOINT_KB=64"
"""The job saves a checkpoint of 64 KiB every 10 steps (every 0.5 s)."""


async def _train_watching_the_pod(
    w: World, *also: Callable[[], Awaitable[None]]
) -> tuple[subprocess.CompletedProcess[str], dict[int, dict[str, str]]]:
    """``train`` (expected to fail: its pod goes mid-run), and what the pod held of each
    checkpoint it wrote, to compare with what came home; ``also``: tasks beside it."""
    seen_on_pod: dict[int, dict[str, str]] = {}

    async def copy_checkpoints_while_the_pod_lives() -> None:
        while True:
            for run_id in w.runs()[-1:]:
                if not _has_pod(w, run_id):
                    continue
                output = w.pod_run_dir(str(w.pod_json(run_id)["pod_id"]), run_id) / "output"
                for folder in output.glob("checkpoint-*"):
                    if (folder / "trainer_state.json").is_file():
                        step = int(folder.name.removeprefix("checkpoint-"))
                        seen_on_pod.setdefault(step, _files(folder))
            await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(copy_checkpoints_while_the_pod_lives)
        for task in also:
            nursery.start_soon(task)
        done = await w.run("train", timeout=90)
        nursery.cancel_scope.cancel()
    assert done.returncode == 1, done.stderr
    return done, seen_on_pod


def _assert_last_checkpoint_home(
    w: World,
    run_id: str,
    done: subprocess.CompletedProcess[str],
    seen_on_pod: dict[int, dict[str, str]],
) -> int:
    """The failed run's last checkpoint home is one of the last the pod saved, every one
    home is the very files the pod held, at most two are kept, and the message says how to
    go on; the last step."""
    run = w.run_json(run_id)
    assert run["state"] == "failed"
    home = run["checkpoints"]
    assert isinstance(home, list) and home, done.stderr
    assert sorted(home) == _home(w, run_id)
    last = max(home)
    assert run["checkpoint"]["step"] == last  # type: ignore[index]
    # At most what was trained since the last saves is lost: the last home is one of the
    # pod's last (the one in flight when the pod went, saved half a second apart).
    assert last in sorted(seen_on_pod)[-3:], (last, sorted(seen_on_pod))
    run_dir = w.project / "runs" / run_id
    for kept in home:
        assert _files(run_dir / "output" / f"checkpoint-{kept}") == seen_on_pod[kept]
    assert len(home) <= 2
    assert f"`overbrainer train --resume-from {run_id}` goes on from checkpoint-{last}" in (
        done.stderr
    )
    return last


async def _assert_resumes(w: World, tmp_path: Path, run_id: str, last: int) -> None:
    """A resume on a new pod with room to finish starts after the saved step and ends."""
    venv_axolotl = tmp_path / "venv" / "bin" / "axolotl"
    venv_axolotl.write_text(
        f"#!/bin/sh\nFAKE_AXOLOTL_STEPS={last + 5} FAKE_AXOLOTL_STEP_SECONDS=0.01 "
        f'exec {sys.executable} {STAND_IN} "$@"\n'
    )
    resumed = await w.run(
        "train",
        "--resume-from",
        run_id,
        env={"OVERBRAINER_TARGETS__GPU__MAX_HOURS": "1"},
        timeout=90,
    )
    assert resumed.returncode == 0, resumed.stderr
    new_id = w.runs()[-1]
    new = w.run_json(new_id)
    assert (new["state"], new["resumed_from"]) == ("succeeded", {"run": run_id, "step": last})
    lines = (w.project / "runs" / new_id / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(x)["step"] for x in lines if json.loads(x)["event"] == "log"]
    assert steps[0] == last + 1 and steps[-1] == last + 5


def _home(w: World, run_id: str) -> list[int]:
    """The steps of the checkpoints in the run's output folder at home."""
    output = w.project / "runs" / run_id / "output"
    return sorted(int(p.name.removeprefix("checkpoint-")) for p in output.glob("checkpoint-*"))


def _has_pod(w: World, run_id: str) -> bool:
    try:
        return bool(w.pod_json(run_id).get("pod_id"))
    except (OSError, ValueError):
        return False
