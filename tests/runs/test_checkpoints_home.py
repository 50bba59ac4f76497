"""Checkpoints come home as the trainer saves them, verified, and only the last
``[training] keep_checkpoints`` stay — on this machine (the job's own directory) and over
SSH (a real sshd on loopback), with the stand-in trainer saving every few steps as the
Trainer's ``save_steps`` does."""

import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

from tests.runs.conftest import Project
from tests.runs.ssh_project import SshProject, ssh_project

__all__ = ["ssh_project"]


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _run_id(stdout: str) -> str:
    line = next(x for x in stdout.splitlines() if x.startswith("train: run "))
    return line.split()[2]


def _events(project: Project, run_id: str) -> list[dict[str, object]]:
    shown = project.run("events", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def test_on_this_machine_each_save_is_recorded_and_the_older_ones_pruned(
    project: Project,
) -> None:
    done = project.run(
        "train",
        FAKE_AXOLOTL_STEPS="9",
        FAKE_AXOLOTL_SAVE_EVERY="2",
        OVERBRAINER_TRAINING__KEEP_CHECKPOINTS="2",
    )
    assert done.returncode == 0, done.stderr
    run_id = _run_id(done.stdout)
    run = project.run_json(run_id)
    assert run["state"] == "succeeded"
    assert (run["checkpoints"], run["pruned"]) == ([6, 8], [2, 4])
    assert run["checkpoint"]["step"] == 8  # type: ignore[index]
    output = project.path / "runs" / run_id / "output"
    # checkpoint-1 is a folder the trainer never announced (no trainer_state.json): left be.
    assert sorted(p.name for p in output.glob("checkpoint-*")) == [
        "checkpoint-1",
        "checkpoint-6",
        "checkpoint-8",
    ]
    assert "run.CheckpointRetrieved: checkpoint of step 8 retrieved" in done.stderr
    names = [e["event"] for e in _events(project, run_id)]
    assert names.count("run.CheckpointPruned") == 2
    # The default keeps two as well; one is enough for some.
    shown = project.run("runs", "show", run_id, "--no-plot")
    assert shown.returncode == 0, shown.stderr
    assert "checkpoints 2 home (steps 6, 8;" in shown.stdout, shown.stdout

    # A pruned step is refused by name, with the steps there are.
    pruned = project.run("train", "--resume-from", f"{run_id}:4")
    assert pruned.returncode == 1
    assert (
        f"checkpoint-4 of run {run_id} was removed from this machine (only the last "
        "[training] keep_checkpoints stay): it has 6, 8"
    ) in pruned.stderr, pruned.stderr
    assert len(project.runs()) == 1


def _pruning(project: Project) -> tuple[str, "subprocess.Popen[str]"]:
    """``train`` in the background keeping one checkpoint of a save every 3 steps, once
    three have been pruned."""
    train = project.start(
        "train",
        FAKE_AXOLOTL_STEPS="400",
        FAKE_AXOLOTL_STEP_SECONDS="0.05",
        FAKE_AXOLOTL_SAVE_EVERY="3",
        OVERBRAINER_TRAINING__KEEP_CHECKPOINTS="1",
    )
    run_id = project.wait_for_state("running")
    deadline = time.monotonic() + 90
    while len(project.run_json(run_id).get("pruned") or []) < 3:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, "no checkpoint was pruned"
        time.sleep(0.1)
    return run_id, train


def test_stop_never_calls_a_checkpoint_pruned_on_purpose_not_whole(project: Project) -> None:
    run_id, train = _pruning(project)
    stop = project.run(
        "train", "stop", run_id, timeout=120, OVERBRAINER_TRAINING__KEEP_CHECKPOINTS="1"
    )
    assert stop.returncode == 0, stop.stderr
    _out, err = train.communicate(timeout=120)
    assert train.returncode == 0, err
    run = project.run_json(run_id)
    assert run["state"] == "stopped"
    assert len(run["pruned"]) >= 3  # type: ignore[arg-type]
    for said in (stop.stderr, err):
        assert "not whole" not in said, said
        assert "warning" not in said, said


def test_attach_after_ctrl_c_never_calls_a_checkpoint_pruned_on_purpose_not_whole(
    project: Project,
) -> None:
    run_id, train = _pruning(project)
    train.send_signal(signal.SIGINT)
    _out, err = train.communicate(timeout=60)
    assert train.returncode == 130, err
    attach = project.run(
        "train", "attach", run_id, timeout=180, OVERBRAINER_TRAINING__KEEP_CHECKPOINTS="1"
    )
    assert attach.returncode == 0, attach.stderr
    run = project.run_json(run_id)
    assert run["state"] == "succeeded"
    assert len(run["checkpoints"]) == 1  # type: ignore[arg-type]
    # Every save before the Ctrl-C was pruned while training: none is warned about.
    assert "not whole" not in attach.stderr, attach.stderr
    assert "warning" not in attach.stderr, attach.stderr


def test_a_job_that_fails_after_saving_says_how_to_go_on_from_its_last_checkpoint(
    project: Project,
) -> None:
    done = project.run(
        "train", FAKE_AXOLOTL_STEPS="5", FAKE_AXOLOTL_SAVE_EVERY="2", FAKE_AXOLOTL_EXIT="3"
    )
    assert done.returncode == 1, done.stderr
    run_id = project.runs()[-1]
    run = project.run_json(run_id)
    assert (run["state"], run["checkpoint"]["step"]) == ("failed", 4)  # type: ignore[index]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: run {run_id} failed"), done.stderr
    assert error.endswith(
        f"; its checkpoint of step 4 is home and verified: `overbrainer train --resume-from "
        f"{run_id}` goes on from checkpoint-4"
    ), error

    # Without a checkpoint home, no such advice.
    bare = project.run("train", FAKE_AXOLOTL_STEPS="3", FAKE_AXOLOTL_EXIT="3")
    assert bare.returncode == 1
    assert "--resume-from" not in bare.stderr, bare.stderr


def test_over_ssh_each_save_comes_home_verified_while_the_job_runs(
    ssh_project: SshProject,
) -> None:
    ssh_project.knobs(
        FAKE_AXOLOTL_STEPS="40",
        FAKE_AXOLOTL_STEP_SECONDS="0.1",
        FAKE_AXOLOTL_SAVE_EVERY="10",
        FAKE_AXOLOTL_CHECKPOINT_KB="256",
    )
    train = ssh_project.start("train")
    run_id = ssh_project.wait_for_state("running")
    local = ssh_project.path / "runs" / run_id
    remote = ssh_project.remote_run(run_id)
    # The first save is home while the job still trains (not only at its end).
    deadline = time.monotonic() + 60
    while ssh_project.run_json(run_id).get("checkpoints") != [10]:
        assert time.monotonic() < deadline, "checkpoint-10 did not come home while training"
        time.sleep(0.1)
    assert ssh_project.run_json(run_id)["state"] == "running"
    assert _files(local / "output" / "checkpoint-10") == _files(remote / "output" / "checkpoint-10")
    _out, err = train.communicate(timeout=120)
    assert train.returncode == 0, err
    run = ssh_project.run_json(run_id)
    assert run["state"] == "succeeded"
    assert run["checkpoints"] == [30, 40]
    for step in (30, 40):
        name = f"checkpoint-{step}"
        assert _files(local / "output" / name) == _files(remote / "output" / name)
    # Pruned here, never on the host; the results' collection left the checkpoints home.
    assert not (local / "output" / "checkpoint-10").exists()
    assert (remote / "output" / "checkpoint-10").is_dir()
    assert (local / "output" / "adapter_model.safetensors").is_file()
    assert not [p for p in local.iterdir() if p.name.startswith(".overbrainer-")]
    assert run["pruned"] in ([10], [10, 20])

    # The last checkpoint home is one to resume from, on the host again.
    ssh_project.knobs(FAKE_AXOLOTL_STEPS="45")
    resumed = ssh_project.run("train", "--resume-from", run_id)
    assert resumed.returncode == 0, resumed.stderr
    new_id = ssh_project.runs()[-1]
    new = ssh_project.run_json(new_id)
    assert (new["state"], new["resumed_from"]) == ("succeeded", {"run": run_id, "step": 40})
    text = (ssh_project.path / "runs" / new_id / "metrics.jsonl").read_text()
    assert '"step":41,' in text and '"step":40,' not in text
