"""A log written by a newer overbrainer than the one reading it: read when this version
knows every kind of event in it (new fields are ignored), refused otherwise with a message
that names the event, the version that recorded it, this version and the upgrade — and
nothing is written."""

import json
import sqlite3
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.version import installed

RUN = "20260301-090000-abcd"
OTHER = "20260301-100000-efgh"
NEWER = Actor(command="train", user="bob", host="gpu-box", pid=7, version="99.1.0")


def _project(tmp_path: Path) -> Path:
    """A project whose log holds two local runs, every event recorded by overbrainer 99.1."""
    assert main(["init", str(tmp_path)]) == 0
    store = RunStore(None, tmp_path, NEWER)
    try:
        for run_id in (RUN, OTHER):
            store.create(
                ev.RunCreated(
                    run_id=run_id, target="box", kind="local", remote_dir="x", settings_digest="d"
                )
            )
            store.append(run_id, lambda _: [ev.JobStarted(job_dir="runs/x", pid=12)])
    finally:
        store.close()
    return tmp_path


def _db(project: Path) -> sqlite3.Connection:
    return sqlite3.connect(project / ".overbrainer" / "events.sqlite")


def _rows(project: Path) -> list[tuple[str, int, str, bytes]]:
    with _db(project) as db:
        return db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
            " ORDER BY rowid"
        ).fetchall()


def _add_event(project: Path, name: str, data: dict[str, object], topic: str = "") -> None:
    """Append to RUN's stream what a newer version would: the envelope of its last event
    with another name and payload (and, given ``topic``, an envelope class of its own)."""
    last = next(row for row in _rows(project) if row[1] == 2)  # RUN's second event
    state = json.loads(last[3])
    state.update(name=name, data=data)
    with _db(project) as db:
        db.execute(
            "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
            (last[0], 3, topic or last[2], json.dumps(state).encode()),
        )


def _set_fields(project: Path, extra: dict[str, object]) -> None:
    """Give every stored event's payload fields this version does not know."""
    with _db(project) as db:
        for oid, version, _topic, state in db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
        ).fetchall():
            loaded = json.loads(state)
            loaded["data"].update(extra)
            db.execute(
                "UPDATE stored_events SET state = ? WHERE originator_id = ? AND"
                " originator_version = ?",
                (json.dumps(loaded).encode(), oid, version),
            )


def test_known_events_with_new_fields_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path)
    capsys.readouterr()
    _set_fields(project, {"priority": "high", "gpu_hint": {"vendor": "x"}})
    assert main(["-C", str(project), "events", RUN, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["event"] for line in lines] == ["run.Created", "run.JobStarted"]
    assert {line["actor"]["version"] for line in lines} == {"99.1.0"}
    assert "priority" not in lines[0]["fields"]
    assert main(["-C", str(project), "runs", "ls", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((row["id"], row["state"]) for row in listed) == [
        (RUN, "running"),
        (OTHER, "running"),
    ]
    assert main(["-C", str(project), "runs", "show", RUN]) == 0
    assert RUN in capsys.readouterr().out


def _refused(out: str, err: str, seq: int, kind: str) -> None:
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert f"event {seq} of run {RUN} ({kind}) is of a kind" in err
    assert f"overbrainer {installed()} does not know" in err
    assert "recorded by overbrainer 99.1.0 on bob@gpu-box, a newer version" in err
    assert "upgrade overbrainer to 99.1.0 or later" in err
    assert "pipx upgrade overbrainer" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "topic, kind",
    [
        ("", "run.Paused"),
        (
            "overbrainer.events.stream:RunStream.Paused",
            "stored as overbrainer.events.stream:RunStream.Paused",
        ),
    ],
    ids=["new event name", "new envelope class"],
)
def test_an_event_this_version_does_not_know_is_refused_naming_both_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str, kind: str
) -> None:
    project = _project(tmp_path)
    capsys.readouterr()
    _add_event(project, "run.Paused", {"reason": "quota"}, topic)
    before = _rows(project)
    for argv in (
        ["events", RUN],
        ["runs", "show", RUN],
        ["runs", "ls"],
        ["train", "attach", RUN],
        ["train", "cancel", RUN],
    ):
        assert main(["-C", str(project), *argv]) == 1, argv
        captured = capsys.readouterr()
        _refused(captured.out, captured.err, 3, kind)
    # The other run's events are still read; nothing was written to the log.
    assert main(["-C", str(project), "events", OTHER, "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert _rows(project) == before


def test_an_unknown_event_from_a_version_not_newer_is_called_foreign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path)
    capsys.readouterr()
    with _db(project) as db:
        for oid, version, _topic, state in db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events"
        ).fetchall():
            loaded = json.loads(state)
            loaded["actor"]["version"] = "0.0.1"
            db.execute(
                "UPDATE stored_events SET state = ? WHERE originator_id = ? AND"
                " originator_version = ?",
                (json.dumps(loaded).encode(), oid, version),
            )
    _add_event(project, "run.Paused", {})
    assert main(["-C", str(project), "events", RUN]) == 1
    err = capsys.readouterr().err
    assert f"event 3 of run {RUN} (run.Paused) is of a kind overbrainer {installed()} " in err
    assert "(recorded by overbrainer 0.0.1 on bob@gpu-box)" in err
    assert "a different or damaged overbrainer" in err
