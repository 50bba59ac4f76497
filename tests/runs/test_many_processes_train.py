"""Local runs of two processes through the real ``overbrainer train``: torchrun (the
stand-in, beside the stand-in trainer in the target's venv) starts both, each rank's lines
are in the job's log, the run records its shape, a rank that fails ends the run, and a
checkpoint is resumed only by a job of the shape that saved it."""

import re
from pathlib import Path

from overbrainer.testing.stand_in import TORCHRUN
from tests.runs.conftest import Project

_LOCAL = '\n[targets.local]\nkind = "local"'


def _processes(project: Project, count: int | None) -> None:
    """Give the local target ``count`` processes (None: the setting unset)."""
    venv = Path(project.env["OVERBRAINER_TARGETS__LOCAL__VENV"])
    launcher = venv / "bin" / "torchrun"
    if not launcher.exists():
        launcher.symlink_to(TORCHRUN)
    config = project.path / "overbrainer.toml"
    text = re.sub(r"\nprocesses = \d+", "", config.read_text())
    if count is not None:
        text = text.replace(_LOCAL, f"{_LOCAL}\nprocesses = {count}")
    config.write_text(text)


def _run_of(stdout: str, outcome: str) -> str:
    match = re.search(rf"^train: run (\S+) {outcome}", stdout, re.MULTILINE)
    assert match, stdout
    return match.group(1)


def test_two_processes_train_under_torchrun(project: Project) -> None:
    _processes(project, 2)
    done = project.run("train", OVERBRAINER_TRAINING__MERGE="true")
    assert done.returncode == 0, done.stderr
    run_id = _run_of(done.stdout, "succeeded")
    run_dir = project.path / "runs" / run_id
    commands = (run_dir / "job.cmds").read_text()
    assert "'--nproc-per-node' '2' '--role' 'rank' '--tee' '3'" in commands
    log = (run_dir / "job.log").read_text().splitlines()
    assert any(line.startswith("[rank0]:") for line in log)
    assert any(line.startswith("[rank1]:") for line in log)
    # The adapter is home, and the merge ran after the training, as one process.
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()
    assert (run_dir / "output" / "merged" / "model.safetensors").is_file()
    # The preflight said how the two share the model; the run recorded it.
    assert "2 processes, ddp:" in (project.run("train", "--check").stdout)
    shown = project.run("runs", "show", run_id, "--no-plot")
    assert "  shape      2 processes (ddp)" in shown.stdout.splitlines(), shown.stdout
    # One process's lines, unmarked.
    ranked = project.run("runs", "logs", run_id, "--rank", "1")
    assert ranked.returncode == 0, ranked.stderr
    lines = ranked.stdout.splitlines()
    assert lines and "[stand-in axolotl] rank 1: training beside rank 0" in lines
    assert not any(line.startswith("[rank") for line in lines)
    assert not any(line.startswith("[stand-in axolotl] training ") for line in lines)  # rank 0's
    last = project.run("runs", "logs", run_id, "--rank", "1", "--tail", "1")
    assert last.stdout.splitlines() == [lines[-1]]


def test_a_rank_that_fails_ends_the_run_with_its_last_lines(project: Project) -> None:
    _processes(project, 2)
    done = project.run("train", FAKE_AXOLOTL_FAIL_RANK="1", FAKE_AXOLOTL_STEPS="400", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    run_id = project.runs()[-1]
    assert project.run_json(run_id)["state"] == "failed"
    assert "[rank1]:[stand-in axolotl] rank 1: RuntimeError" in done.stderr, done.stderr
    assert "worker failed: rank 1" in done.stderr


def test_a_checkpoint_is_resumed_only_by_a_job_of_its_shape(project: Project) -> None:
    _processes(project, 1)
    done = project.run("train", FAKE_AXOLOTL_STEPS="4", FAKE_AXOLOTL_SAVE_EVERY="2")
    assert done.returncode == 0, done.stderr
    source = _run_of(done.stdout, "succeeded")
    _processes(project, 2)
    before = project.runs()
    checked = project.run("train", "--check", "--resume-from", source)
    assert checked.returncode == 1
    said = (
        "the job would run 2 processes (ddp) here but the checkpoint was saved by a job of "
        "1 process"
    )
    assert said in checked.stdout + checked.stderr
    refused = project.run("train", "--resume-from", source)
    assert refused.returncode == 1
    assert said in refused.stderr, refused.stderr
    assert "no run was created" in refused.stderr
    assert project.runs() == before
    # Back to its shape, it goes on.
    _processes(project, 1)
    resumed = project.run("train", "--resume-from", source)
    assert resumed.returncode == 0, resumed.stderr
