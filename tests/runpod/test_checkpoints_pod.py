"""A pod that dies mid-run loses at most what was trained since the last save: its
checkpoints came home verified as they were saved, and ``train --resume-from`` goes on
from the last one — the real ``overbrainer`` command against the fake Runpod API on
loopback, fake pods running the real bootstrap and watchdog behind a real SSH server, and
the stand-in trainer saving a checkpoint every few steps."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import trio

from tests.runpod.test_train_loopback import STAND_IN, world


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
    async with world(
        tmp_path,
        steps=800,
        step_seconds=0.05,
        overrides=overrides,
        max_hours=0.002,
        knobs="FAKE_AXOLOTL_SAVE_EVERY=10 FAKE_AXOLOTL_CHECKPOINT_KB=64",
    ) as w:
        w.env["OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES"] = "0"
        seen_on_pod: dict[int, dict[str, str]] = {}

        async def copy_checkpoints_while_the_pod_lives() -> None:
            # What the pod held of each checkpoint, to compare with what came home.
            while True:
                for run_id in w.runs()[-1:]:
                    pod_id = w.pod_json(run_id).get("pod_id") if _has_pod(w, run_id) else None
                    if pod_id is None:
                        continue
                    output = w.pod_run_dir(str(pod_id), run_id) / "output"
                    for folder in output.glob("checkpoint-*"):
                        if (folder / "trainer_state.json").is_file():
                            step = int(folder.name.removeprefix("checkpoint-"))
                            seen_on_pod.setdefault(step, _files(folder))
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy_checkpoints_while_the_pod_lives)
            done = await w.run("train", timeout=90)
            nursery.cancel_scope.cancel()
        assert done.returncode == 1, done.stderr
        (run_id,) = w.runs()
        pod = w.pod_json(run_id)
        assert (pod["status"], pod["deleted_by"]) == ("deleted", "watchdog"), pod
        assert f"pod {pod['pod_id']} reached its deadline" in done.stderr
        run = w.run_json(run_id)
        assert run["state"] == "failed"
        home = run["checkpoints"]
        assert isinstance(home, list) and home, done.stderr
        last = max(home)
        assert run["checkpoint"]["step"] == last  # type: ignore[index]
        # At most what was trained since the last saves is lost: the last home is one of
        # the pod's last (the one in flight when the pod went, saved half a second apart).
        assert last in sorted(seen_on_pod)[-3:], (last, sorted(seen_on_pod))
        # Every checkpoint home is whole: the very files the pod held.
        run_dir = w.project / "runs" / run_id
        for kept in home:
            assert _files(run_dir / "output" / f"checkpoint-{kept}") == seen_on_pod[kept]
        assert len(home) <= 2
        assert f"`overbrainer train --resume-from {run_id}` goes on from checkpoint-{last}" in (
            done.stderr
        )

        # Resume on a new pod with room to finish: the job starts after the saved step.
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


def _has_pod(w: object, run_id: str) -> bool:
    try:
        return bool(w.pod_json(run_id).get("pod_id"))  # type: ignore[attr-defined]
    except (OSError, ValueError):
        return False
