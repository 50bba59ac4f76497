"""``runs/<id>/run.json`` and ``runs/<id>/pod.json``: caches of a run's state, always
rebuildable from its events, rewritten atomically after every append."""

import json
import os
from pathlib import Path
from typing import Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.ids import check_run_id


def run_dir(project_dir: Path, run_id: str) -> Path:
    """``runs/<id>/`` of the project (the ID is checked first: it never escapes ``runs/``)."""
    return project_dir / "runs" / check_run_id(run_id)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON so a reader sees the old file or the new one, never half."""
    import tempfile  # only when writing: the read commands mostly leave these files alone

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=True)
            handle.write("\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` so a reader sees the old file or the new one, never half."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_projections(project_dir: Path, state: RunLog) -> None:
    """Rewrite the run's ``run.json`` (and ``pod.json`` for a run on a rented pod); never for
    a run whose files were removed (its directory stays gone)."""
    if not state.exists or state.run.files_removed is not None:
        return
    directory = run_dir(project_dir, state.run.run_id)
    data = state.to_json()
    write_json_atomic(directory / "run.json", data["run"])
    if state.run.kind_facts.rents_pod:
        write_json_atomic(directory / "pod.json", data["pod"])


def refresh_projections(project_dir: Path, state: RunLog) -> bool:
    """Rewrite the run's projections only where they differ from ``state``; True if one was
    rewritten. A process killed between an append and its projection write leaves them
    behind the log: the next command that reads the run brings them up to date."""
    if not state.exists or state.run.files_removed is not None:
        return False
    directory = run_dir(project_dir, state.run.run_id)
    data = state.to_json()
    names = ["run"] + (["pod"] if state.run.kind_facts.rents_pod else [])
    stale = False
    for name in names:
        try:
            have = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            have = None
        if have != json.loads(json.dumps(data[name])):
            stale = True
    if stale:
        write_projections(project_dir, state)
    return stale
