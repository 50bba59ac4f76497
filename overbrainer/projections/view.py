"""The runs view behind ``runs ls``: one row per run, kept in step with the store's
notification log by catch-up from its last position, so a listing costs O(new events).

It lives in its own SQLite file (``.overbrainer/view.sqlite``), which is only a cache: delete
it and the next listing rebuilds it from the log.
"""

import hashlib
import json
import sqlite3
from pathlib import Path

from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.store import RunStore

_BATCH = 2000


def view_path(project_dir: Path) -> Path:
    """Where the view of a project's runs is kept."""
    return project_dir / ".overbrainer" / "view.sqlite"


class RunsView:
    """A table of run states with the log position it reflects."""

    def __init__(self, path: Path, store_identity: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30)
        self._db.executescript(
            "PRAGMA journal_mode=WAL;"
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, state TEXT NOT NULL);"
        )
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

    def catch_up(self, store: RunStore) -> int:
        """Fold every event appended since the view's position; returns how many."""
        position = self.position
        folded = 0
        while True:
            batch = store.notifications(position, _BATCH)
            if not batch:
                return folded
            states: dict[str, RunLog] = {}
            for note_id, record in batch:
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
                    "INSERT OR REPLACE INTO runs VALUES (?, ?)",
                    [(rid, json.dumps(s.to_json())) for rid, s in states.items()],
                )
                self._db.execute("UPDATE meta SET value=? WHERE key='position'", (str(position),))
            folded += len(batch)

    def _load(self, run_id: str) -> RunLog:
        row = self._db.execute("SELECT state FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return RunLog.from_json(json.loads(row[0])) if row else RunLog()

    def runs(self) -> list[RunLog]:
        """Every run, oldest first (run IDs sort by creation time)."""
        rows = self._db.execute("SELECT state FROM runs ORDER BY run_id").fetchall()
        return [RunLog.from_json(json.loads(row[0])) for row in rows]
