"""A local run of two processes through the real ``overbrainer train``: torchrun (the
stand-in, beside the stand-in trainer in the target's venv) starts both, each rank's lines
are in the job's log, and the run ends with its output home."""

import re
from pathlib import Path

from overbrainer.testing.stand_in import TORCHRUN
from tests.runs.conftest import Project


def test_two_processes_train_under_torchrun(project: Project) -> None:
    venv = Path(project.env["OVERBRAINER_TARGETS__LOCAL__VENV"])
    (venv / "bin" / "torchrun").symlink_to(TORCHRUN)
    config = project.path / "overbrainer.toml"
    config.write_text(
        config.read_text().replace(
            '\n[targets.local]\nkind = "local"', '\n[targets.local]\nkind = "local"\nprocesses = 2'
        )
    )
    done = project.run("train", OVERBRAINER_TRAINING__MERGE="true")
    assert done.returncode == 0, done.stderr
    match = re.match(r"^train: run (\S+) succeeded", done.stdout.strip().splitlines()[-1])
    assert match, done.stdout
    run_dir = project.path / "runs" / match.group(1)
    commands = (run_dir / "job.cmds").read_text()
    assert "'--nproc-per-node' '2' '--role' 'rank' '--tee' '3'" in commands
    log = (run_dir / "job.log").read_text().splitlines()
    assert any(line.startswith("[rank0]:") for line in log)
    assert any(line.startswith("[rank1]:") for line in log)
    # The adapter is home, and the merge ran after the training, as one process.
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()
    assert (run_dir / "output" / "merged" / "model.safetensors").is_file()
    # The preflight said how the two share the model.
    assert "2 processes, ddp:" in (project.run("train", "--check").stdout)
