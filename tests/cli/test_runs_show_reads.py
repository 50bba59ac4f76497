"""`runs show` reads: it writes a run's projection only when it is missing or behind."""

import json
import subprocess
import sys
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore

RUN = "20260101-000000-5a0e"


def _show(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(project), "runs", "show", RUN],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_runs_show_rewrites_run_json_only_when_missing_or_behind(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    store.create(
        ev.RunCreated(run_id=RUN, target="t", kind="local", remote_dir="r", settings_digest="d")
    )
    store.close()
    cached = tmp_path / "runs" / RUN / "run.json"
    assert not cached.exists()
    _show(tmp_path)  # missing: written
    first = cached.stat()
    assert json.loads(cached.read_text())["run_id"] == RUN
    _show(tmp_path)  # current: left alone
    assert (cached.stat().st_ino, cached.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    cached.write_text('{"run_id": "stale"}\n')
    _show(tmp_path)  # behind the log: rewritten
    assert json.loads(cached.read_text())["run_id"] == RUN
