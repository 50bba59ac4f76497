"""Checkpoints on the project's network volume, through the REAL ``overbrainer`` command (the
fake Runpod API on loopback, fake pods whose volumes are directories they share, the
stand-in trainer saving a checkpoint every 10 steps): the job saves them on the volume,
each recorded once whole; ``checkpoints_home`` says which come home; a recovery on a new
pod resumes from the volume, uploading nothing from home, unless the checkpoint there no
longer matches its record."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import trio

from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.test_train_loopback import World, world
from tests.runpod.test_volume_loopback import VOLUME

SAVING = "FAKE_AXOLOTL_SAVE_EVERY=10 FAKE_AXOLOTL_CHECKPOINT_KB=16"
"""The job saves a checkpoint every 10 steps."""


def _run_field(w: World, run_id: str, key: str) -> list[object]:
    try:
        value = w.run_json(run_id).get(key)
    except (OSError, ValueError):
        return []
    return list(value) if isinstance(value, list) else []


def _on_volume(w: World, run_id: str) -> list[int]:
    """The steps the log has whole on the volume."""
    return [int(c["step"]) for c in _run_field(w, run_id, "volume_checkpoints")]  # type: ignore[index]


def _running_pod(w: World, run_id: str) -> str | None:
    try:
        pod = w.pod_json(run_id)
    except (OSError, ValueError):
        return None
    return str(pod["pod_id"]) if pod.get("pod_id") and pod.get("status") == "job_running" else None


def volume_output_of(w: World, run_id: str) -> Path:
    """The run's output folder on the (only) volume."""
    (volume,) = w.fake.live_volumes(CANARY_KEY)
    return w.pods.volume_dir(volume.id) / f"overbrainer/runs/{run_id}/output"


def checkpoint_files_on_disk(root: Path) -> list[str]:
    """The files under ``root`` in a checkpoint's folder, no link followed (what was put on
    the pod's own disk)."""
    found = []
    for directory, _, names in os.walk(root, followlinks=False):
        for name in names:
            path = Path(directory) / name
            if "checkpoint-" in str(path.relative_to(root)) and not path.is_symlink():
                found.append(str(path.relative_to(root)))
    return found


async def _train_losing_the_pod(
    w: World, *, when: str = "on_volume", tamper: bool = False
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``train``, its pod vanishing once a checkpoint is recorded (``when``: on the volume,
    or ``home``); ``tamper``: a file is then added to every checkpoint of the run on the
    volume, before the new pod is made. The command's result and the lost pod."""
    lost: list[str] = []

    async def lose_the_pod() -> None:
        while not lost:
            for run_id in w.runs()[-1:]:
                pod_id = _running_pod(w, run_id)
                seen = (
                    _on_volume(w, run_id)
                    if when == "on_volume"
                    else _run_field(w, run_id, "checkpoints")
                )
                if pod_id and seen:
                    w.fake.vanish(pod_id)
                    await w.pods.on_deleted(w.fake.pod(pod_id))
                    lost.append(pod_id)
                    if tamper:
                        for folder in volume_output_of(w, run_id).glob("checkpoint-*"):
                            (folder / "changed-meanwhile").write_text("not the job's")
            await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lose_the_pod)
        done = await w.run("train", timeout=240, env=w.env | VOLUME)
        nursery.cancel_scope.cancel()
    assert lost, done.stderr
    return done, lost[0]


def first_step(metrics: Path) -> int:
    return next(
        json.loads(line)["step"]
        for line in metrics.read_text().splitlines()
        if json.loads(line)["event"] == "log"
    )


async def test_a_recovery_with_a_volume_resumes_from_it_uploading_nothing_from_home(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        done, lost = await _train_losing_the_pod(w)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]
        step = recovery["resumed_step"]
        assert recovery["lost_pod"] == lost and recovery["from_volume"] is True, recovery
        assert step > 0 and step % 10 == 0, recovery
        story = await w.run("events", run_id)
        shown = await w.run("runs", "show", run_id, "--no-plot")

    new = str(recovery["pod_id"])
    on_pod = w.pod_run_dir(new, run_id)
    # Nothing of a checkpoint was put on the new pod: it read the one on the volume, through
    # its output's link, and trained on from the step after it.
    assert checkpoint_files_on_disk(on_pod) == []
    assert not (on_pod / "resume").exists()
    # Nor the data: the new pod links to what the first put on the volume.
    train = on_pod / "data" / "train.jsonl"
    assert train.is_symlink() and "blobs" in str(train.resolve())
    assert train.read_bytes() == (w.project / "runs" / run_id / "data" / "train.jsonl").read_bytes()
    assert (on_pod / "output").is_symlink()
    assert (
        f"resume_from_checkpoint: ./output/checkpoint-{step}\n"
        in (on_pod / "axolotl.yaml").read_text()
    )
    assert first_step(on_pod / "metrics.jsonl") == step + 1
    # Said as it happened, and in the run's story and summary.
    assert (
        f"run {run_id} resumes from checkpoint-{step} on network volume cache (it matches "
        "its recorded manifest): nothing uploaded from home"
    ) in done.stderr
    assert (
        f"resumed from step {step} on the network volume (nothing uploaded from home)"
        in story.stdout
    )
    assert f"from step {step} on the network volume (nothing uploaded from home)" in shown.stdout
    # Each checkpoint saved was recorded whole on the volume; with a volume only the last
    # comes home (checkpoints_home defaults to "last"), with the final output, verified.
    recorded = _on_volume(w, run_id)
    assert recorded == sorted(set(recorded)) and recorded[-1] == 150 and step in recorded
    assert w.run_json(run_id)["checkpoints"] == [150]
    home = w.project / "runs" / run_id / "output"
    assert sorted(p.name for p in home.glob("checkpoint-*")) == ["checkpoint-150"]
    assert (home / "adapter_model.safetensors").is_file()


async def test_a_recovery_whose_volume_checkpoint_changed_uploads_the_one_from_home(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=150, step_seconds=0.02, knobs=SAVING) as w:
        w.env["OVERBRAINER_TARGETS__GPU__CHECKPOINTS_HOME"] = "all"
        done, _ = await _train_losing_the_pod(w, when="home", tamper=True)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        run = w.run_json(run_id)
        assert run["state"] == "succeeded", run
        (recovery,) = run["recoveries"]  # type: ignore[misc]

    step = recovery["resumed_step"]
    assert recovery["from_volume"] is False and step > 0, recovery
    assert "its files differ from those recorded when it was saved" in done.stderr
    assert f"resuming from checkpoint-{step} uploaded from home" in done.stderr
    on_pod = w.pod_run_dir(str(recovery["pod_id"]), run_id)
    assert (on_pod / "resume" / f"checkpoint-{step}" / "trainer_state.json").is_file()
    assert first_step(on_pod / "metrics.jsonl") == step + 1


@pytest.mark.parametrize(
    ("policy", "home"),
    [("last", ["checkpoint-40"]), ("none", []), ("all", ["checkpoint-30", "checkpoint-40"])],
)
async def test_checkpoints_home_says_which_checkpoints_come_home_beside_the_final_output(
    tmp_path: Path, policy: str, home: list[str]
) -> None:
    async with world(tmp_path, steps=40, step_seconds=0.02, knobs=SAVING) as w:
        env = VOLUME | {
            "OVERBRAINER_TARGETS__GPU__CHECKPOINTS_HOME": policy,
            "OVERBRAINER_TRAINING__KEEP_CHECKPOINTS": "2",
        }
        done = await w.run("train", env=env)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        names = await w.events(run_id)
        shown = await w.run("runs", "show", run_id, "--no-plot", env=env)

    run = w.run_json(run_id)
    assert run["state"] == "succeeded"
    output = w.project / "runs" / run_id / "output"
    assert sorted(p.name for p in output.glob("checkpoint-*")) == home
    assert run["checkpoints"] == [int(name.rsplit("-", 1)[1]) for name in home]
    # The final output always comes home, verified.
    assert (output / "adapter_model.safetensors").read_bytes() == (
        volume_output_of(w, run_id) / "adapter_model.safetensors"
    ).read_bytes()
    assert "run.ArtifactsRetrieved" in names
    # Every checkpoint lies on the volume, recorded whole, whatever came home.
    assert _on_volume(w, run_id) == [10, 20, 30, 40]
    assert names.count("run.CheckpointOnVolume") == 4
    assert "  on volume  checkpoints of step 10, 20, 30, 40, each recorded whole" in shown.stdout
    for step in (10, 20, 30, 40):
        assert (volume_output_of(w, run_id) / f"checkpoint-{step}" / "trainer_state.json").is_file()


@pytest.mark.parametrize("changed", [False, True], ids=["as recorded", "changed on the volume"])
async def test_resume_from_with_a_volume_reads_the_checkpoint_there_uploading_nothing(
    tmp_path: Path, changed: bool
) -> None:
    async with world(tmp_path, steps=20, step_seconds=0.02, knobs=SAVING) as w:
        w.env |= VOLUME | {"OVERBRAINER_TARGETS__GPU__CHECKPOINTS_HOME": "all"}
        first = await w.run("train")
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        if changed:
            (volume_output_of(w, run_a) / "checkpoint-10" / "changed-meanwhile").write_text("x")
        done = await w.run("train", "--resume-from", f"{run_a}:10")
        assert done.returncode == 0, done.stderr
        (run_b,) = set(w.runs()) - {run_a}
        story = await w.run("events", run_b)
        shown = await w.run("runs", "show", run_b, "--no-plot")

    run = w.run_json(run_b)
    assert run["state"] == "succeeded", run
    on_pod = w.pod_run_dir(str(w.pod_json(run_b)["pod_id"]), run_b)
    # Either way the job trained on from the step after the checkpoint.
    assert first_step(on_pod / "metrics.jsonl") == 11
    if changed:
        assert run["resumed_from"] == {"run": run_a, "step": 10}
        assert (
            f"checkpoint-10 of run {run_a} on network volume cache cannot be resumed from "
            "(its files differ from those recorded when it was saved): uploading it from home"
        ) in done.stderr
        assert (on_pod / "resume" / "checkpoint-10" / "trainer_state.json").is_file()
        assert not (on_pod / "resume").is_symlink()
        return
    assert run["resumed_from"] == {"run": run_a, "step": 10, "from_volume": True}
    # Nothing of the checkpoint was put on the new pod's disk: its resume folder is the
    # first run's output on the volume.
    assert (on_pod / "resume").is_symlink()
    assert (on_pod / "resume").resolve() == volume_output_of(w, run_a)
    assert checkpoint_files_on_disk(on_pod) == []
    assert not (w.project / "runs" / run_b / "resume").exists()
    said = (
        f"resumes from checkpoint-10 of run {run_a} on network volume cache (it matches its "
        "recorded manifest): nothing uploaded from home"
    )
    assert f"train: run {run_b} {said}" in done.stderr
    assert (
        f"resumes from checkpoint-10 of run {run_a} on the network volume (it matches its "
        "recorded manifest): nothing uploaded from home"
    ) in story.stdout
    assert "checkpoint-10 on the network volume (nothing uploaded from home)" in shown.stdout


@pytest.mark.parametrize("changed", [False, True], ids=["as recorded", "changed on the volume"])
async def test_resume_from_a_checkpoint_kept_only_on_the_volume(
    tmp_path: Path, changed: bool
) -> None:
    # checkpoints_home = "last" (the default with a volume): checkpoint-10 is on the volume
    # only; --resume-from RUN:10 reads it there, or fails before its job when it changed.
    async with world(tmp_path, steps=20, step_seconds=0.02, knobs=SAVING) as w:
        w.env |= VOLUME
        first = await w.run("train")
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        assert w.run_json(run_a)["checkpoints"] == [20]
        checked = await w.run("train", "--check", "--resume-from", f"{run_a}:10")
        if changed:
            (volume_output_of(w, run_a) / "checkpoint-10" / "changed-meanwhile").write_text("x")
        done = await w.run("train", "--resume-from", f"{run_a}:10")
        (run_b,) = set(w.runs()) - {run_a}

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "on the network volume only: the new run's pod reads it there" in checked.stdout
    assert not (w.project / "runs" / run_b / "resume").exists()
    run = w.run_json(run_b)
    if changed:
        assert done.returncode == 1, done.stderr
        assert run["state"] == "failed", run
        assert (
            f"checkpoint-10 of run {run_a} on network volume cache cannot be resumed from "
            "(its files differ from those recorded when it was saved), and no copy of it is at "
            f"home; `overbrainer train --resume-from {run_a}` resumes from its last checkpoint"
        ) in done.stderr
        assert w.fake.live_pods() == []
        return
    assert done.returncode == 0, done.stderr
    assert run["state"] == "succeeded", run
    assert run["resumed_from"] == {"run": run_a, "step": 10, "from_volume": True}
    on_pod = w.pod_run_dir(str(w.pod_json(run_b)["pod_id"]), run_b)
    assert (on_pod / "resume").resolve() == volume_output_of(w, run_a)
    assert checkpoint_files_on_disk(on_pod) == []
    assert first_step(on_pod / "metrics.jsonl") == 11
