"""The files of ``train --resume-from``: the checkpoints a run has at home and the config it
trained with (``prepare_run_dir`` places the checkpoint in the new run's directory)."""

from pathlib import Path
from typing import Any

import yaml

from overbrainer.train.axolotl import CONFIG_FILE
from overbrainer.train.layout import CHECKPOINT_PREFIX, OUTPUT_DIR
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
