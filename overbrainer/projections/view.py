"""The runs view behind ``runs ls``: one row per run, kept in step with the store's
notification log by catch-up from its last position, so a listing costs O(new events).

It lives in its own SQLite file (``.overbrainer/view.sqlite``), which is only a cache: delete
it and the next listing rebuilds it from the log. Only a damaged file is deleted: when the
file cannot be read or written (a read-only or full disk), the view is kept in memory for
the command and built from the log, and the file is left as it is.
"""

import hashlib
import json
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from overbrainer.events.aggregate import InvalidTransition, PodView, RunLog, RunView
from overbrainer.events.sqlite_files import is_damage

if TYPE_CHECKING:
    # Not loaded at run time: a listing whose view is current never opens the store.
    from overbrainer.events.recorded import Recorded
    from overbrainer.events.store import RunStore

_BATCH = 2000

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL, host TEXT);"
)
_SQLITE_ERROR = 1  # SQLite's generic result code: here, a table of another shape


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30)
    try:
        db.executescript("PRAGMA journal_mode=WAL;" + _SCHEMA)
        # A table of another shape under the same name (an older view, say) is damage too.
        db.execute("SELECT key, value FROM meta LIMIT 1").fetchall()
        db.execute("SELECT run_id, state, host FROM runs LIMIT 1").fetchall()
    except sqlite3.OperationalError as error:
        db.close()
        if getattr(error, "sqlite_errorcode", None) == _SQLITE_ERROR:
            raise _Damaged(str(error)) from None
        raise
    except BaseException:
        db.close()
        raise
    return db


def _in_memory() -> sqlite3.Connection:
    """A view kept in memory for one command, when its file cannot be used."""
    db = sqlite3.connect(":memory:")
    db.executescript(_SCHEMA)
    return db


def _open_file(path: Path, *, damaged: bool = False) -> sqlite3.Connection:
    """The view's file, rebuilt when it is ``damaged`` or found so; a view in memory when
    the file cannot be read or written (a read-only or full disk, a directory in its
    place): the listing then comes from the log, and the file is left for a command that
    can write it."""
    if not damaged:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return _open(path)
        except OSError:
            return _in_memory()
        except (sqlite3.Error, _Damaged) as error:
            if not isinstance(error, _Damaged) and not is_damage(error):
                return _in_memory()
    # Not a database any more (edited, truncated): it is only a cache, so it is thrown
    # away and rebuilt from the log.
    try:
        for stale in (
            path,
            path.with_name(path.name + "-wal"),
            path.with_name(path.name + "-shm"),
        ):
            if stale.is_symlink() or stale.is_file():
                stale.unlink()
        return _open(path)
    except (OSError, sqlite3.Error, _Damaged):
        return _in_memory()


def view_path(project_dir: Path) -> Path:
    """Where the view of a project's runs is kept."""
    return project_dir / ".overbrainer" / "view.sqlite"


class RunsView:
    """A table of run states with the log position it reflects.

    The position comes with a mark of the event at it (its run, sequence number and time),
    so a log that is not the one the view was built from — emptied, replaced, restored
    from an older copy — is recognised and the view rebuilt: it never lists a run the log
    does not hold.
    """

    def __init__(self, path: Path, store_identity: str) -> None:
        self._store: RunStore | None = None
        # A view built from another store (the url changed), or by a fold whose states have
        # other fields (rows without a field a newer fold fills), is thrown away.
        shape = ",".join(f.name for cls in (RunView, PodView) for f in fields(cls))
        self._identity = hashlib.sha256(f"{store_identity}\n{shape}".encode()).hexdigest()
        self._path = path
        self._db = _open_file(path)
        try:
            self._claim()
        except sqlite3.Error as error:
            self._recover(error)

    def _claim(self) -> None:
        """Empty the view unless it was built from this store."""
        row = self._db.execute("SELECT value FROM meta WHERE key='store'").fetchone()
        if row is None or row[0] != self._identity:
            with self._db:
                self._db.execute("DELETE FROM runs")
                self._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('store', ?)", (self._identity,)
                )
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('position', '0')")
                self._db.execute("DELETE FROM meta WHERE key='mark'")

    def _recover(self, error: sqlite3.Error) -> None:
        """Go on, with an empty view the next catch-up fills from the whole log, after
        ``error`` on the view's file: a damaged file is replaced by a new one; any other
        failure (a read-only or full disk) leaves the file alone and keeps the view in
        memory."""
        self._db.close()
        if is_damage(error):
            self._db = _open_file(self._path, damaged=True)
            try:
                self._claim()
                self._reset()
                return
            except sqlite3.Error:
                self._db.close()
        self._to_memory()

    def _to_memory(self) -> None:
        self._db = _in_memory()
        self._claim()

    def close(self) -> None:
        """Close the view's file."""
        self._db.close()

    @property
    def position(self) -> int:
        """The last notification folded in."""
        row = self._db.execute("SELECT value FROM meta WHERE key='position'").fetchone()
        return int(row[0]) if row else 0

    def _mark(self) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key='mark'").fetchone()
        return str(row[0]) if row else None

    def runs_at(self, latest: int) -> list[RunLog] | None:
        """Every run, oldest first, when the view has folded the log exactly up to position
        ``latest`` (the store's newest); None when it must catch up first (a row or the
        position is damaged, the file cannot be read, or the log is behind the view: it is
        not the log the view was built from, so the view is emptied and the catch-up
        rebuilds it)."""
        try:
            position = self.position
            if position > latest:
                self._reset()
                return None
            if position < latest:
                return None
            return self._rows()
        except (ValueError, _Damaged):
            return None
        except sqlite3.Error as error:
            self._recover(error)
            return None

    def catch_up(self, store: "RunStore") -> int:
        """Fold every event appended since the view's position; returns how many."""
        self._store = store
        for _ in range(2):
            try:
                return self._catch_up(store)
            except _Damaged:
                try:
                    self._reset()
                except sqlite3.Error as error:
                    self._recover(error)
            except sqlite3.Error as error:
                self._recover(error)
        # The file failed twice: a view in memory, which a disk cannot fail.
        self._db.close()
        self._to_memory()
        return self._catch_up(store)

    def _reset(self) -> None:
        """Forget every row: the next catch-up rebuilds the view from the log's start."""
        with self._db:
            self._db.execute("DELETE FROM runs")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('position', '0')")
            self._db.execute("DELETE FROM meta WHERE key='mark'")

    def _continues(self, store: "RunStore", position: int) -> bool:
        """Whether the log still holds, at ``position``, the event the view folded there."""
        found = store.mark_at(position)
        return found is not None and _mark_text(*found) == self._mark()

    def _catch_up(self, store: "RunStore") -> int:
        try:
            position = self.position
        except ValueError:
            raise _Damaged from None
        if position and not self._continues(store, position):
            self._reset()
            position = 0
        folded = 0
        while True:
            batch = store.notifications(position, _BATCH)
            if not batch:
                return folded
            states: dict[str, RunLog] = {}
            hosts: dict[str, str] = {}
            for note_id, record in batch:
                if record.event.name == "run.Created":
                    # Where the run lives: `runs ls` names it when it is not this machine.
                    hosts[record.run_id] = str(record.actor.get("host", ""))
                state = states.get(record.run_id) or self._load(record.run_id)
                try:
                    state.apply(record.event, record.at)
                except InvalidTransition:
                    # The view never stops a listing; `events RUN` shows the raw log.
                    state.run.version += 1
                states[record.run_id] = state
                position = note_id
            with self._db:
                self._db.executemany(
                    "INSERT INTO runs VALUES (?, ?, ?) ON CONFLICT(run_id) DO UPDATE SET "
                    "state=excluded.state, host=COALESCE(excluded.host, runs.host)",
                    [(rid, json.dumps(s.to_json()), hosts.get(rid)) for rid, s in states.items()],
                )
                self._db.execute("UPDATE meta SET value=? WHERE key='position'", (str(position),))
                self._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('mark', ?)", (_mark_of(batch[-1][1]),)
                )
            folded += len(batch)

    def _load(self, run_id: str) -> RunLog:
        row = self._db.execute("SELECT state FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return _decode(row[0]) if row else RunLog()

    def runs(self) -> list[RunLog]:
        """Every run, oldest first."""
        try:
            return self._rows()
        except (_Damaged, sqlite3.Error) as error:
            # A row edited by hand, or a file that fails: the view is rebuilt from the log,
            # never trusted.
            if self._store is None:
                from overbrainer.events.errors import StoreError

                raise StoreError(
                    "the runs view (.overbrainer/view.sqlite) is damaged; delete it and list "
                    "the runs again"
                ) from None
            try:
                if isinstance(error, sqlite3.Error):
                    raise error
                self._reset()
            except sqlite3.Error as failed:
                self._recover(failed)
            self.catch_up(self._store)
            return self._rows()

    def hosts(self) -> dict[str, str]:
        """The host each run was created on (its ``run.Created`` actor), by run ID."""
        try:
            rows = self._db.execute("SELECT run_id, host FROM runs WHERE host IS NOT NULL")
            found = rows.fetchall()
        except sqlite3.Error as error:
            if self._store is None:
                raise
            self._recover(error)
            self.catch_up(self._store)
            found = self._db.execute(
                "SELECT run_id, host FROM runs WHERE host IS NOT NULL"
            ).fetchall()
        return {str(run_id): str(host) for run_id, host in found}

    def _rows(self) -> list[RunLog]:
        rows = self._db.execute("SELECT state FROM runs ORDER BY run_id").fetchall()
        states = [_decode(row[0]) for row in rows]
        # Run IDs carry their creation time to the second only; two runs created within one
        # second are put in order by the time their creation was recorded.
        return sorted(states, key=lambda state: (state.run.run_id[:15], state.run.created_at or ""))


class _Damaged(Exception):
    """A row of the view does not hold a run's state (or a table is of another shape)."""


def _mark_text(run_id: str, seq: int, at: str) -> str:
    """What identifies the event at a position of the log: its run, number and time."""
    return f"{run_id}/{seq}/{at}"


def _mark_of(record: "Recorded") -> str:
    return _mark_text(record.run_id, record.seq, record.at)


def _decode(text: object) -> RunLog:
    try:
        data = json.loads(text) if isinstance(text, str | bytes) else None
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return RunLog.from_json(data)
    except (ValueError, TypeError, KeyError) as error:
        raise _Damaged(str(error)) from None
