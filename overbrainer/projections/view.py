"""The runs view behind ``runs ls``: one row per run, kept in step with the store's
notification log by catch-up from its last position, so a listing costs O(new events).

It lives in its own SQLite file (``.overbrainer/view.sqlite``), which is only a cache: delete
it and the next listing rebuilds it from the log.
"""

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from overbrainer.events.aggregate import InvalidTransition, RunLog

if TYPE_CHECKING:
    # Not loaded at run time: a listing whose view is current never opens the store.
    from overbrainer.events.store import RunStore

_BATCH = 2000


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30)
    try:
        db.executescript(
            "PRAGMA journal_mode=WAL;"
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS runs "
            "(run_id TEXT PRIMARY KEY, state TEXT NOT NULL, host TEXT);"
        )
        # A table of another shape under the same name (an older view, say) is damage too.
        db.execute("SELECT key, value FROM meta LIMIT 1").fetchall()
        db.execute("SELECT run_id, state, host FROM runs LIMIT 1").fetchall()
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


def view_path(project_dir: Path) -> Path:
    """Where the view of a project's runs is kept."""
    return project_dir / ".overbrainer" / "view.sqlite"


class RunsView:
    """A table of run states with the log position it reflects."""

    def __init__(self, path: Path, store_identity: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = _open(path)
        except sqlite3.DatabaseError:
            # Not a database any more (edited, truncated): it is only a cache, so it is
            # thrown away and rebuilt from the log.
            for damaged in (
                path,
                path.with_name(path.name + "-wal"),
                path.with_name(path.name + "-shm"),
            ):
                damaged.unlink(missing_ok=True)
            self._db = _open(path)
        self._store: RunStore | None = None
        # A view built from another store (the url changed) is thrown away.
        identity = hashlib.sha256(store_identity.encode()).hexdigest()
        row = self._db.execute("SELECT value FROM meta WHERE key='store'").fetchone()
        if row is None or row[0] != identity:
            with self._db:
                self._db.execute("DELETE FROM runs")
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('store', ?)", (identity,))
                self._db.execute("INSERT OR REPLACE INTO meta VALUES ('position', '0')")

    def close(self) -> None:
        """Close the view's file."""
        self._db.close()

    @property
    def position(self) -> int:
        """The last notification folded in."""
        row = self._db.execute("SELECT value FROM meta WHERE key='position'").fetchone()
        return int(row[0]) if row else 0

    def runs_at(self, latest: int) -> list[RunLog] | None:
        """Every run, oldest first, when the view has folded the log exactly up to position
        ``latest`` (the store's newest); None when it must catch up first (a row or the
        position is damaged, or the log is behind the view: it is not the log the view was
        built from, so the view is emptied and the catch-up rebuilds it)."""
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

    def catch_up(self, store: "RunStore") -> int:
        """Fold every event appended since the view's position; returns how many."""
        self._store = store
        try:
            return self._catch_up(store)
        except _Damaged:
            self._reset()
            return self._catch_up(store)

    def _reset(self) -> None:
        """Forget every row: the next catch-up rebuilds the view from the log's start."""
        with self._db:
            self._db.execute("DELETE FROM runs")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('position', '0')")

    def _catch_up(self, store: "RunStore") -> int:
        try:
            position = self.position
        except ValueError:
            raise _Damaged from None
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
            folded += len(batch)

    def _load(self, run_id: str) -> RunLog:
        row = self._db.execute("SELECT state FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return _decode(row[0]) if row else RunLog()

    def runs(self) -> list[RunLog]:
        """Every run, oldest first (run IDs sort by creation time)."""
        try:
            return self._rows()
        except _Damaged:
            # A row edited by hand: the view is rebuilt from the log, never trusted.
            if self._store is None:
                from overbrainer.events.store import StoreError

                raise StoreError(
                    "the runs view (.overbrainer/view.sqlite) is damaged; delete it and list "
                    "the runs again"
                ) from None
            self._reset()
            self._catch_up(self._store)
            return self._rows()

    def hosts(self) -> dict[str, str]:
        """The host each run was created on (its ``run.Created`` actor), by run ID."""
        rows = self._db.execute("SELECT run_id, host FROM runs WHERE host IS NOT NULL")
        return {str(run_id): str(host) for run_id, host in rows.fetchall()}

    def _rows(self) -> list[RunLog]:
        rows = self._db.execute("SELECT state FROM runs ORDER BY run_id").fetchall()
        return [_decode(row[0]) for row in rows]


class _Damaged(Exception):
    """A row of the view does not hold a run's state."""


def _decode(text: object) -> RunLog:
    try:
        data = json.loads(text) if isinstance(text, str | bytes) else None
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return RunLog.from_json(data)
    except (ValueError, TypeError, KeyError) as error:
        raise _Damaged(str(error)) from None
