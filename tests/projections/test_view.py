"""The runs view: where each run lives is kept with it, and a view file from before that
(another table shape) is rebuilt from the log, never misread."""

import hashlib
import json
import sqlite3
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.projections.view import RunsView, view_path

RUN_A, RUN_B = "20260301-101500-a1b2", "20260301-111500-c3d4"


def _created(run_id: str) -> ev.RunCreated:
    return ev.RunCreated(
        run_id=run_id, target="here", kind="local", remote_dir=f"runs/{run_id}", settings_digest="d"
    )


def _actor(host: str) -> Actor:
    return Actor(command="train", user="alice", host=host, pid=1, version="0.3.0")


def test_each_run_keeps_the_host_it_was_created_on(tmp_path: Path) -> None:
    laptop = RunStore(None, tmp_path, _actor("laptop-a"))
    laptop.create(_created(RUN_A))
    view = RunsView(view_path(tmp_path), "local")
    view.catch_up(laptop)
    assert view.hosts() == {RUN_A: "laptop-a"}
    # Later events by another host do not move the run; a new run has its own host.
    workstation = RunStore(None, tmp_path, _actor("workstation-b"))
    workstation.append(RUN_A, lambda _s: [ev.JobStarted(job_dir="x", pid=7)])
    workstation.create(_created(RUN_B))
    view.catch_up(workstation)
    assert view.hosts() == {RUN_A: "laptop-a", RUN_B: "workstation-b"}
    assert [s.run.state for s in view.runs()] == ["running", "preparing"]
    view.close()
    laptop.close()
    workstation.close()


def test_a_view_of_the_older_shape_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, _actor("laptop-a"))
    store.create(_created(RUN_A))
    path = view_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('position', '99');"
    )
    old.close()
    view = RunsView(path, "local")
    assert view.position == 0
    view.catch_up(store)
    assert [s.run.run_id for s in view.runs()] == [RUN_A]
    assert view.hosts() == {RUN_A: "laptop-a"}
    view.close()
    store.close()


def test_a_view_file_that_fills_up_is_kept_and_the_listing_comes_from_the_log(
    tmp_path: Path,
) -> None:
    store = RunStore(None, tmp_path, _actor("laptop-a"))
    runs = [f"20260301-1015{n:02d}-a1b2" for n in range(60)]
    for run_id in runs:
        store.create(_created(run_id))
    path = view_path(tmp_path)
    view = RunsView(path, "local")
    view.close()
    kept = path.read_bytes()
    view = RunsView(path, "local")
    # SQLite's own "database or disk is full", for real: the file may not grow a page.
    pages = view._db.execute("PRAGMA page_count").fetchone()[0]
    view._db.execute(f"PRAGMA max_page_count={pages}")
    view.catch_up(store)
    assert [s.run.run_id for s in view.runs()] == runs
    assert view.hosts() == dict.fromkeys(runs, "laptop-a")
    view.close()
    assert path.read_bytes() == kept  # not deleted, not rewritten: it was never damaged
    store.close()


def test_a_view_of_another_log_at_the_same_position_is_rebuilt(tmp_path: Path) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    store = RunStore(None, mine, _actor("laptop-a"))
    store.create(_created(RUN_A))
    view = RunsView(view_path(mine), "local")
    view.catch_up(store)
    store.close()
    other = RunStore(None, theirs, _actor("workstation-b"))
    other.create(_created(RUN_B))
    # Same position (1), another event there: only the mark tells them apart.
    assert view.catch_up(other) == 1
    assert [s.run.run_id for s in view.runs()] == [RUN_B]
    view.close()
    other.close()


def test_runs_created_within_one_second_are_listed_in_the_order_they_were_created(
    tmp_path: Path,
) -> None:
    # Their IDs share the second; the random suffixes sort the other way round.
    later_id, earlier_id = "20260301-101500-0000", "20260301-101500-ffff"
    store = RunStore(None, tmp_path, _actor("laptop-a"))
    for run_id in (earlier_id, later_id, RUN_B):
        store.create(_created(run_id))
    view = RunsView(view_path(tmp_path), "local")
    view.catch_up(store)
    assert [s.run.run_id for s in view.runs()] == [earlier_id, later_id, RUN_B]
    view.close()
    store.close()


def test_a_view_built_by_a_fold_with_other_fields_is_rebuilt_from_the_log(
    tmp_path: Path,
) -> None:
    store = RunStore(None, tmp_path, _actor("laptop-a"))
    store.create(_created(RUN_A))
    attached = ev.VolumeAttached(
        volume_id="vol1aaaaaa", volume_name="cache", data_center="US-KS-2", created=True
    )
    store.append(RUN_A, lambda _s: [attached])
    path = view_path(tmp_path)
    view = RunsView(path, "local")
    view.catch_up(store)
    view.close()
    # The file as a fold without PodView.volume left it: its rows lack the volume, under
    # the identity such a fold gave it (the store's alone).
    db = sqlite3.connect(path)
    row = db.execute("SELECT state FROM runs").fetchone()[0]
    data = json.loads(row)
    del data["pod"]["volume"]
    identity = hashlib.sha256(b"local").hexdigest()
    with db:
        db.execute("UPDATE runs SET state = ?", (json.dumps(data),))
        db.execute("UPDATE meta SET value = ? WHERE key = 'store'", (identity,))
    db.close()
    view = RunsView(path, "local")
    view.catch_up(store)
    (state,) = view.runs()
    assert state.pod.volume is not None and state.pod.volume["id"] == "vol1aaaaaa"
    view.close()
    store.close()
