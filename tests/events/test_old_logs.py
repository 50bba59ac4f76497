"""A log written by an older overbrainer still replays after the code moved.

eventsourcing stores each event with the import path of its class (a topic,
``module:Class``), and decoding an event imports what that path names. A log is kept for
as long as its project, so the paths written by every released version must keep resolving.
``logs/v0.3.0.sqlite`` is the scripted history of every event type (``scripted.py``),
recorded by overbrainer 0.3.0 before its packages were rearranged; it is replayed here as
it is.
"""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from eventsourcing.utils import resolve_topic

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore
from tests.events.scripted import RUN_A
from tests.events.scripted import SCRIPT_0_3 as SCRIPT

FIXTURE = Path(__file__).with_name("logs") / "v0.3.0.sqlite"
# What 0.3.0 wrote: the envelope classes of overbrainer/events/stream.py.
OLD_TOPICS = {
    "overbrainer.events.stream:RunStream.Opened",
    "overbrainer.events.stream:RunStream.Recorded",
}
OLD_AGGREGATE = "overbrainer.events.stream:RunStream"
NEW_RUN = "20260202-100000-dddd"


def _project(tmp_path: Path) -> Path:
    # A copy: even a read-only look at a SQLite log in WAL mode writes beside it.
    (tmp_path / ".overbrainer").mkdir()
    shutil.copyfile(FIXTURE, tmp_path / ".overbrainer" / "events.sqlite")
    return tmp_path


def _stored(project: Path) -> list[tuple[str, dict[str, object]]]:
    with sqlite3.connect(project / ".overbrainer" / "events.sqlite") as db:
        rows = db.execute("SELECT topic, state FROM stored_events ORDER BY rowid").fetchall()
    return [(topic, json.loads(state)) for topic, state in rows]


def test_the_log_holds_the_old_topics_and_each_still_names_a_class(tmp_path: Path) -> None:
    stored = _stored(_project(tmp_path))
    assert len(stored) == len(SCRIPT)
    assert {topic for topic, _ in stored} == OLD_TOPICS
    openers = [state for topic, state in stored if topic.endswith(".Opened")]
    assert {state["originator_topic"] for state in openers} == {OLD_AGGREGATE}
    for topic in (*OLD_TOPICS, OLD_AGGREGATE):
        assert isinstance(resolve_topic(topic), type), topic


def test_every_run_of_the_old_log_replays_to_its_events_and_their_fold(tmp_path: Path) -> None:
    store = RunStore(None, _project(tmp_path), Actor.here("test"), read_only=True)
    try:
        for run_id in dict.fromkeys(r for r, _ in SCRIPT):
            script = [event for r, event in SCRIPT if r == run_id]
            history = store.history(run_id)
            assert [r.event for r in history] == script
            assert {r.actor["host"] for r in history} == {"laptop-a"}
            folded = RunLog()
            for record, event in zip(history, script, strict=True):
                folded.apply(event, record.at)
            assert store.get(run_id).to_json() == folded.to_json()
        notes = store.notifications(0)
        assert [(n, r.event) for n, r in notes] == [
            (i, event) for i, (_, event) in enumerate(SCRIPT, start=1)
        ]
    finally:
        store.close()


def test_an_old_log_takes_new_events_and_the_commands_read_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path)
    store = RunStore(None, project, Actor.here("test"))
    try:
        created = ev.RunCreated(
            run_id=NEW_RUN, target="here", kind="local", remote_dir="x", settings_digest="d"
        )
        state, _ = store.create(created)
        assert state.run.state == "preparing"
        assert [n for n, _ in store.notifications(len(SCRIPT))] == [len(SCRIPT) + 1]
    finally:
        store.close()

    assert main(["-C", str(project), "events", RUN_A, "--json"]) == 0
    out, _ = capsys.readouterr()
    names = [json.loads(line)["event"] for line in out.splitlines()]
    assert names == [event.name for r, event in SCRIPT if r == RUN_A]
    assert main(["-C", str(project), "runs", "ls", "--json"]) == 0
    out, _ = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    # Listed by creation time: the new run's is this machine's clock, whatever its date.
    assert sorted((row["id"], row["host"]) for row in rows) == sorted(
        [
            *((run_id, "laptop-a") for run_id in {r for r, _ in SCRIPT}),
            (NEW_RUN, Actor.here("x").host),
        ]
    )
