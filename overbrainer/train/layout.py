"""Where the trainer's output sits in a run directory, and what its checkpoints take there:
plain names and a walk of the disk, so a read command knows them without loading the
training code."""

from pathlib import Path

OUTPUT_DIR = "output"
"""Axolotl's ``output_dir``, relative to the run directory."""

CHECKPOINT_PREFIX = "checkpoint-"
"""How the trainer names a checkpoint's folder in ``output_dir``: ``checkpoint-STEP``."""


def checkpoints_size(run_dir: Path, steps: list[int]) -> int:
    """The bytes the checkpoints of ``steps`` take in ``run_dir/output`` (what is missing
    counts nothing)."""
    total = 0
    for step in steps:
        folder = run_dir / OUTPUT_DIR / f"{CHECKPOINT_PREFIX}{step}"
        if folder.is_symlink():
            continue
        for path in folder.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink():
                    total += path.stat().st_size
            except OSError:
                continue
    return total
