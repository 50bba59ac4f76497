"""The plain-sqlite3 reader of a SQLite log gives exactly what the store gives (every event
type, every run, the notification log), and leaves to the store whatever it cannot read."""

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.errors import StoreError
from overbrainer.events.sqlite_reader import SqliteReader
from overbrainer.events.store import RunStore, UnknownRun
from tests.events.scripted import RUN_D_SCRIPT, SCRIPT_0_3

# The 0.3.0 log, then a run of the event types added since.
SCRIPT = [*SCRIPT_0_3, *RUN_D_SCRIPT]

FIXTURE = Path(__file__).with_name("logs") / "v0.3.0.sqlite"


def _project(tmp_path: Path) -> Path:
    """The 0.3.0 log, with the history of the event types added since appended to it."""
    (tmp_path / ".overbrainer").mkdir()
    shutil.copyfile(FIXTURE, tmp_path / ".overbrainer" / "events.sqlite")
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        for run_id, event in RUN_D_SCRIPT:
            if isinstance(event, ev.RunCreated):
                store.create(event)
            else:
                store.append(run_id, lambda _, event=event: [event])
    finally:
        store.close()
    return tmp_path


def _store(project: Path) -> RunStore:
    return RunStore(None, project, Actor.here("test"), read_only=True)


class _Opened:
    """Opens the store for the reader, counting how often it had to."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.count = 0

    def __call__(self) -> RunStore:
        self.count += 1
        return _store(self.project)


def _reader(project: Path) -> tuple[SqliteReader, _Opened]:
    opened = _Opened(project)
    return SqliteReader(None, project / ".overbrainer" / "events.sqlite", opened), opened


def test_every_run_and_the_log_read_plainly_are_what_the_store_gives(tmp_path: Path) -> None:
    project = _project(tmp_path)
    store = _store(project)
    reader, opened = _reader(project)
    try:
        runs = sorted({run_id for run_id, _ in SCRIPT})
        assert len(runs) >= 2
        for run_id in runs:
            assert reader.history(run_id) == store.history(run_id)
            assert reader.history(run_id, after=2) == store.history(run_id, after=2)
            assert reader.origin(run_id) == store.origin(run_id)
            assert reader.get(run_id) == store.get(run_id)
        assert reader.max_position() == store.max_position() == len(SCRIPT)
        assert reader.notifications(0, 10_000) == store.notifications(0, 10_000)
        assert reader.notifications(3, 4) == store.notifications(3, 4)
        for position in range(len(SCRIPT) + 2):
            assert reader.mark_at(position) == store.mark_at(position)
        assert reader.mark_at(1) == (SCRIPT[0][0], 1, store.notifications(0, 1)[0][1].at)
        assert reader.mark_at(len(SCRIPT) + 1) is None
        assert reader.state("20990101-000000-0000") == store.state("20990101-000000-0000")
        with pytest.raises(
            UnknownRun, match=r"no run 20990101-000000-0000 in \.overbrainer/events\.sqlite;"
        ):
            reader.get("20990101-000000-0000")
        assert opened.count == 0  # eventsourcing never started
    finally:
        reader.close()
        store.close()


def _wrapped(topic: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    # A value eventsourcing wraps (as a newer event might hold).
    body["data"]["extra"] = {"_type_": "decimal_str", "_data_": "1.5"}
    return topic, body


def _renamed(topic: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    body["name"] = "run.Paused"  # an event a newer version might record
    return topic, body


def _reclassed(topic: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "overbrainer.events.stream:RunStream.Paused", body


def _outcome(read: Callable[[], object]) -> object:
    try:
        return read()
    except Exception as error:  # the store's refusal, compared as it is
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("change", [_wrapped, _renamed, _reclassed])
def test_a_row_it_does_not_know_gets_the_stores_answer(
    tmp_path: Path, change: Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]
) -> None:
    project = _project(tmp_path)
    path = project / ".overbrainer" / "events.sqlite"
    with sqlite3.connect(path) as db:
        rowid, topic, state = db.execute(
            "SELECT rowid, topic, state FROM stored_events ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        topic, body = change(topic, json.loads(state))
        db.execute(
            "UPDATE stored_events SET topic = ?, state = ? WHERE rowid = ?",
            (topic, json.dumps(body).encode(), rowid),
        )
    run_id = body["run_id"]
    reader, opened = _reader(project)
    store = _store(project)
    try:
        assert _outcome(lambda: reader.history(run_id)) == _outcome(lambda: store.history(run_id))
        assert _outcome(lambda: reader.notifications(0)) == _outcome(lambda: store.notifications(0))
        assert opened.count == 1
        if change is _renamed:
            # Where an event stands in the log needs only its envelope: a type this version
            # does not know (which the store refuses to decode) still has its place.
            with sqlite3.connect(path) as db:
                (version,) = db.execute(
                    "SELECT originator_version FROM stored_events WHERE rowid = ?", (rowid,)
                ).fetchone()
            at = body["timestamp"]["_data_"].replace("+00:00", "Z")
            assert reader.mark_at(rowid) == (run_id, version, at)
        else:
            assert _outcome(lambda: reader.mark_at(rowid)) == _outcome(lambda: store.mark_at(rowid))
    finally:
        reader.close()
        store.close()


def test_no_log_yet_reads_as_empty_without_the_store_or_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    (missing / ".overbrainer").mkdir(parents=True)
    emptied = tmp_path / "emptied"  # a file without the log's table
    (emptied / ".overbrainer").mkdir(parents=True)
    sqlite3.connect(emptied / ".overbrainer" / "events.sqlite").close()
    for project in (missing, emptied):
        store = _store(project)
        reader, opened = _reader(project)
        try:
            run_id = "20260101-000000-aaaa"
            assert reader.history(run_id) == store.history(run_id) == []
            assert reader.history(run_id, after=3) == []
            assert reader.origin(run_id) is store.origin(run_id) is None
            assert reader.state(run_id) == store.state(run_id)
            assert not reader.state(run_id).exists
            with pytest.raises(UnknownRun, match=rf"no run {run_id} in \.overbrainer/events"):
                reader.get(run_id)
            assert reader.max_position() == store.max_position() == 0
            assert reader.notifications(0) == store.notifications(0) == []
            assert reader.mark_at(1) is store.mark_at(1) is None
            assert opened.count == 0  # eventsourcing never started
        finally:
            reader.close()
            store.close()
    assert not (missing / ".overbrainer" / "events.sqlite").exists()
    assert sorted(p.name for p in (missing / ".overbrainer").iterdir()) == []


def test_a_damaged_log_is_the_stores_to_answer(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    (damaged / ".overbrainer").mkdir(parents=True)
    (damaged / ".overbrainer" / "events.sqlite").write_bytes(b"not a database" * 100)
    reader, opened = _reader(damaged)
    with pytest.raises(StoreError, match="damaged"):
        reader.history("20260101-000000-aaaa")
    assert opened.count == 1
    reader.close()


def test_appends_after_the_reader_opened_are_read(tmp_path: Path) -> None:
    project = _project(tmp_path)
    reader, opened = _reader(project)
    writer = RunStore(None, project, Actor.here("test"))
    try:
        before = reader.max_position()
        run_id = "20260303-000000-eeee"
        writer.create(
            ev.RunCreated(
                run_id=run_id, target="t", kind="local", remote_dir="r", settings_digest="d"
            )
        )
        writer.append(run_id, lambda _s: [ev.NoteAdded(note='ünïcödé "quoted" _type_:')])
        assert reader.max_position() == before + 2
        assert reader.history(run_id) == writer.history(run_id)
        assert reader.history(run_id)[-1].event == ev.NoteAdded(note='ünïcödé "quoted" _type_:')
        assert opened.count == 0
    finally:
        writer.close()
        reader.close()


def test_a_log_that_cannot_be_read_without_writing_is_the_stores_to_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (A read-only directory whose log's write-ahead journal still holds events: not
    # something a test running as root can make, so the finding itself is given here.)
    from overbrainer.events import sqlite_files

    project = _project(tmp_path)
    why = "cannot read the log without writing: its write-ahead journal holds events"

    def unreadable(_path: Path) -> dict[str, str]:
        raise sqlite_files.Unreadable(why)

    monkeypatch.setattr(sqlite_files, "read_only_env", unreadable)
    reader, opened = _reader(project)
    try:
        with pytest.raises(StoreError, match=why):
            reader.history("20260101-000000-aaaa")
        assert opened.count == 1
    finally:
        reader.close()
