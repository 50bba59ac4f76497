"""SQLite's own failures, each produced for real, sorted into damage (a cache may be
rebuilt) and the disk's or the permissions' (the file must be kept), each with a message
naming the file and the fix; and the log read without writing a byte."""

import errno
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from overbrainer.events import sqlite_files as sf
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.events.types import RunCreated

RUN = "20260301-101500-a1b2"


def _created(run_id: str) -> RunCreated:
    return RunCreated(run_id=run_id, target="t", kind="local", remote_dir="r", settings_digest="")


def _failure(make: Callable[[Path], None], tmp_path: Path) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        make(tmp_path / "db.sqlite")
    return caught.value


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"x" * 4096)
    sqlite3.connect(path).execute("SELECT * FROM sqlite_master").fetchall()


def _read_only_write(path: Path) -> None:
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.execute("INSERT INTO t VALUES (1)")


def _a_directory(path: Path) -> None:
    path.mkdir()
    sqlite3.connect(path).execute("SELECT * FROM sqlite_master").fetchall()


def _no_such_table(path: Path) -> None:
    sqlite3.connect(path).execute("SELECT * FROM nothing").fetchall()


@pytest.mark.parametrize(
    ("make", "damage", "io", "says"),
    [
        (_not_a_database, True, False, ("is damaged", "mv ", ".damaged")),
        (_read_only_write, False, True, ("cannot be written", "chmod -R u+w")),
        (_a_directory, False, True, ("cannot open", "not a file")),
        (_no_such_table, False, False, ()),
    ],
    ids=["not-a-database", "read-only", "directory", "plain-error"],
)
def test_sqlite_failures_are_sorted_and_explained(
    tmp_path: Path,
    make: Callable[[Path], None],
    damage: bool,
    io: bool,
    says: tuple[str, ...],
) -> None:
    error = _failure(make, tmp_path)
    # eventsourcing wraps them: the cause is found behind its exceptions too.
    wrapped = RuntimeError("persistence failed")
    wrapped.__cause__ = error
    for seen in (error, wrapped):
        assert sf.is_damage(seen) is damage
        assert sf.is_io_failure(seen) is io
        problem = sf.io_problem(tmp_path / "db.sqlite", seen)
        if says:
            assert problem is not None and str(tmp_path / "db.sqlite") in problem
            assert all(part in problem for part in says), problem
        else:
            assert problem is None


@pytest.mark.parametrize(
    ("number", "says"),
    [
        (errno.ENOSPC, "is full"),
        (errno.EFBIG, "is full"),
        (errno.EROFS, "chmod -R u+w"),
        (errno.EACCES, "chmod -R u+w"),
        (errno.ENOTDIR, "make it a directory you can write to"),
    ],
)
def test_os_failures_name_the_file_and_the_fix(tmp_path: Path, number: int, says: str) -> None:
    problem = sf.io_problem(tmp_path / "x" / "events.sqlite", OSError(number, "failed"))
    assert problem is not None and says in problem and "run the command again" in problem


def test_reading_never_writes_nor_creates(tmp_path: Path) -> None:
    log = tmp_path / ".overbrainer" / "events.sqlite"
    # No file: an empty log, and still no file.
    empty = RunStore(None, tmp_path, Actor.here("test"), read_only=True)
    assert empty.max_position() == 0 and not empty.state(RUN).exists
    empty.close()
    assert not (tmp_path / ".overbrainer").exists()

    writer = RunStore(None, tmp_path, Actor.here("test"))
    writer.create(_created(RUN))
    writer.close()
    for journal in log.parent.glob("*-wal"):
        assert journal.stat().st_size == 0
    before = log.read_bytes()
    reader = RunStore(None, tmp_path, Actor.here("test"), read_only=True)
    assert [r.event.name for r in reader.history(RUN)] == ["run.Created"]
    with pytest.raises(Exception, match="opened to read"):
        reader.create(_created("20260301-101500-ffff"))
    reader.close()
    assert log.read_bytes() == before

    # An emptied file is an empty log, read as such.
    log.write_bytes(b"")
    emptied = RunStore(None, tmp_path, Actor.here("test"), read_only=True)
    assert emptied.max_position() == 0 and not emptied.state(RUN).exists
    emptied.close()
    assert log.read_bytes() == b""
