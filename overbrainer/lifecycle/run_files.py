"""A run's directory on this machine: the disk it takes, and removing it.

Removal renames ``runs/<id>/`` aside first (``runs/.removing-<id>``, on the same disk) and
deletes it from there: the run's directory is whole or gone, never half-deleted where a
command reads it. A removal cut short (a killed process) leaves at most that aside folder,
which the next ``runs rm`` or ``runs gc`` deletes (:func:`clear_leftovers`).
"""

import os
import stat
from pathlib import Path

from overbrainer.exec.transfer import remove as remove_path

REMOVING_PREFIX = ".removing-"
"""A run's directory on its way out: ``runs/.removing-<id>``."""


def disk_usage(path: Path) -> int:
    """The bytes ``path`` takes on disk (allocated blocks, as ``du`` counts them; a link
    counted as itself, never followed; a file with several links once); 0 when absent."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            info = current.lstat()
        except OSError:
            continue
        key = (info.st_dev, info.st_ino)
        if key in seen:
            continue
        seen.add(key)
        total += _allocated(info)
        if stat.S_ISDIR(info.st_mode):
            try:
                stack.extend(current.iterdir())
            except OSError:
                continue
    return total


def _allocated(info: os.stat_result) -> int:
    blocks = getattr(info, "st_blocks", None)
    return int(blocks) * 512 if blocks is not None else int(info.st_size)


def remove_run_dir(directory: Path) -> None:
    """Remove a run's directory: renamed aside, then deleted; absent is fine (removing
    again finishes a removal cut short)."""
    aside = directory.with_name(REMOVING_PREFIX + directory.name)
    remove_path(aside)
    try:
        directory.rename(aside)
    except FileNotFoundError:
        return
    except OSError:
        # Cannot be renamed (a mount point, say): deleted where it is.
        remove_path(directory)
        return
    remove_path(aside)


def clear_leftovers(runs_dir: Path) -> list[str]:
    """Delete what removals cut short left in ``runs/``; the run IDs they were of."""
    cleared = []
    try:
        entries = list(runs_dir.iterdir())
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(REMOVING_PREFIX):
            remove_path(entry)
            cleared.append(entry.name[len(REMOVING_PREFIX) :])
    return cleared
