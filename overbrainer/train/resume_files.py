"""The files of ``train --resume-from``: the checkpoints a run has at home, the config it
trained with, and the checkpoint placed in the new run's directory (uploaded with it)."""

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from overbrainer.exec.manifest import CHECKPOINT_PREFIX
from overbrainer.train.axolotl import CONFIG_FILE, OUTPUT_DIR, RESUME_DIR
from overbrainer.train.resume import ResumeError

TRAINER_STATE = "trainer_state.json"
"""What the trainer writes last in a checkpoint (with the step it was saved at): a folder
without it is not one to resume from."""


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The steps of the complete checkpoints in ``run_dir/output``, in order."""
    steps: list[int] = []
    try:
        children = list((run_dir / OUTPUT_DIR).iterdir())
    except OSError:
        return []
    for child in children:
        number = child.name.removeprefix(CHECKPOINT_PREFIX)
        if (
            child.name.startswith(CHECKPOINT_PREFIX)
            and number.isdigit()
            and not child.is_symlink()
            and (child / TRAINER_STATE).is_file()
        ):
            steps.append(int(number))
    return sorted(steps)


def trained_config(run_dir: Path, run_id: str) -> dict[str, Any]:
    """The ``axolotl.yaml`` run ``run_id`` trained with."""
    path = run_dir / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ResumeError(
            f"cannot read the config run {run_id} trained with (runs/{run_id}/{CONFIG_FILE}): "
            f"{error}"
        ) from error
    if not isinstance(data, dict):
        raise ResumeError(f"runs/{run_id}/{CONFIG_FILE} is not a mapping of settings")
    return data


def resume_path(step: int) -> str:
    """Where a resumed run's directory holds its checkpoint (run-relative)."""
    return f"{RESUME_DIR}/{CHECKPOINT_PREFIX}{step}"


def place_checkpoint(source_run_dir: Path, step: int, run_dir: Path) -> str:
    """Put checkpoint ``step`` of the run in ``source_run_dir`` into ``run_dir`` (hard
    links where the filesystem allows: the trainer only reads it); its run-relative path."""
    source = source_run_dir / OUTPUT_DIR / f"{CHECKPOINT_PREFIX}{step}"
    rel = resume_path(step)
    target = run_dir / rel
    for directory, _, names in os.walk(source):
        here = Path(directory)
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            _link_or_copy(here / name, into / name)
    return rel


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(source, target, follow_symlinks=False)
