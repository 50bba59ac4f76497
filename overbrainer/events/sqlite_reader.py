"""A project's SQLite log read with plain ``sqlite3``: what the read commands need
(``runs ls``, ``runs show``, ``events``), without starting eventsourcing.

eventsourcing keeps each event as one row of ``stored_events`` (its position in the log is
the row's ``rowid``): the run's stream, its version, and a JSON object holding the
envelope — ``run_id``, ``name``, ``data``, ``actor`` and the ``timestamp``, which is the one
value its transcoder wraps (``{"_type_": "datetime_iso", "_data_": "…"}``). These rows are
decoded here into the same `Recorded` the store gives.

A log that is missing (no run yet) or holds no table of events reads as empty, with no file
created. Only the plain path is taken here: a log that is not in write-ahead mode, damaged
or unreadable, a row this reader does not recognise (another wrapped value, say),
and everything else a caller asks for, go to a full `RunStore` opened on first need, which
answers or fails with its own messages.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.ids import check_run_id
from overbrainer.events.locations import describe_store
from overbrainer.events.stream_ids import stream_key

if TYPE_CHECKING:
    # The store's code and the event types load only once rows are decoded: a runs view
    # that is up to date needs neither.
    from overbrainer.events.recorded import Recorded
    from overbrainer.events.store import RunStore

# The key of a value eventsourcing's transcoder wraps. Inside a JSON string a quote is
# escaped, so this never matches text within a value, only a key (or a value that is exactly
# this word, which merely sends the row to the store).
_WRAPPED = b'"_type_"'


# The classes every event of ours is stored as (their import paths never move).
_TOPICS = frozenset(
    {
        "overbrainer.events.stream:RunStream.Opened",
        "overbrainer.events.stream:RunStream.Recorded",
    }
)


class _NotPlain(Exception):
    """This reader cannot answer: the full store must."""


class _Empty(Exception):
    """There is no log yet (no file, or no table of events in it): every read is empty."""


def _iso(wrapped: Any) -> str:
    """An event's time as the store gives it (``…Z``), from the transcoder's wrapping."""
    if not (isinstance(wrapped, dict) and wrapped.get("_type_") == "datetime_iso"):
        raise _NotPlain
    text = wrapped["_data_"]
    if not isinstance(text, str) or not text.endswith("+00:00"):
        raise _NotPlain
    return text.replace("+00:00", "Z")


def _envelope(topic: object, state: object) -> dict[str, Any]:
    """A row's JSON envelope, when it is one of ours as this reader knows them."""
    # A row of another class (a newer version's), or holding a wrapped value other than the
    # timestamp, is left to the store, which decodes it or says why it cannot.
    text = bytes(state)  # type: ignore[call-overload]
    if str(topic) not in _TOPICS or not text.startswith(b"{") or text.count(_WRAPPED) != 1:
        raise _NotPlain
    body = json.loads(text)
    if not isinstance(body, dict):
        raise _NotPlain
    return body


def _decode(rows: Sequence[Sequence[Any]]) -> list[Recorded]:
    """Rows of (version, topic, state) as the store gives them."""
    if not rows:
        return []
    # Loaded only when there are events to build.
    from overbrainer.events.recorded import Recorded
    from overbrainer.events.types import event_from

    found = []
    for seq, topic, state in rows:
        body = _envelope(topic, state)
        found.append(
            Recorded(
                run_id=body["run_id"],
                seq=int(seq),
                at=_iso(body["timestamp"]),
                actor=dict(body["actor"]),
                event=event_from(body["name"], body["data"]),
            )
        )
    return found


class SqliteReader:
    """The read side of a `RunStore` over the SQLite log at ``path``; see the module's
    docstring. ``full`` opens the store the reader stands for, when it cannot answer."""

    shared = False

    def __init__(self, url: str | None, path: Path, full: Callable[[], RunStore]) -> None:
        self._open_full = full
        self._full: RunStore | None = None
        self._db: sqlite3.Connection | None = None
        # No log yet: every read is empty, as the store reads it (nothing is created).
        self._empty = False
        self.where = describe_store(url)
        try:
            self._db = _connect(path)
        except _Empty:
            self._empty = True
        except (_NotPlain, sqlite3.Error, OSError, ValueError):
            self._db = None

    def full(self) -> RunStore:
        """The store itself, opened once."""
        if self._full is None:
            self._full = self._open_full()
            self.where = self._full.where
        return self._full

    def __getattr__(self, name: str) -> Any:
        return getattr(self.full(), name)

    def close(self) -> None:
        """Close the file (and the store, if it was opened)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._full is not None:
            self._full.close()

    def _rows(self, sql: str, args: Iterable[Any]) -> list[tuple[Any, ...]]:
        if self._empty:
            return []
        if self._db is None:
            raise _NotPlain
        try:
            return self._db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error:
            raise _NotPlain from None

    def _records(self, run_id: str, after: int, until: int | None = None) -> list[Recorded]:
        sql = (
            "SELECT originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? AND originator_version > ?"
        )
        # The stream as eventsourcing's SQLite recorder stores it: hex, no dashes.
        args: list[Any] = [stream_key(run_id), after]
        if until is not None:
            sql += " AND originator_version <= ?"
            args.append(until)
        rows = self._rows(sql + " ORDER BY originator_version", args)
        try:
            return _decode(rows)
        except (ValueError, KeyError, TypeError):  # not an event of ours as we know them
            raise _NotPlain from None

    def history(self, run_id: str, after: int = 0) -> list[Recorded]:
        """Every event of ``run_id`` after sequence number ``after``, in order."""
        check_run_id(run_id)
        try:
            return self._records(run_id, after)
        except _NotPlain:
            return self.full().history(run_id, after)

    def origin(self, run_id: str) -> Recorded | None:
        """The run's first event."""
        check_run_id(run_id)
        try:
            found = self._records(run_id, 0, until=1)
        except _NotPlain:
            return self.full().origin(run_id)
        return found[0] if found else None

    def state(self, run_id: str) -> RunLog:
        """The current state of ``run_id``."""
        check_run_id(run_id)
        try:
            records = self._records(run_id, 0)
        except _NotPlain:
            return self.full().state(run_id)
        state = RunLog()
        for record in records:
            state.apply(record.event, record.at)
        return state

    def get(self, run_id: str) -> RunLog:
        """Like :meth:`state`, but an unknown run is an error naming the way out."""
        state = self.state(run_id)
        if not state.exists:
            from overbrainer.events.errors import UnknownRun

            raise UnknownRun.of(run_id, self.where)
        return state

    def max_position(self) -> int:
        """The position of the newest event in the log."""
        try:
            rows = self._rows("SELECT MAX(rowid) FROM stored_events", ())
        except _NotPlain:
            return self.full().max_position()
        return int(rows[0][0] or 0) if rows else 0

    def mark_at(self, position: int) -> tuple[str, int, str] | None:
        """The run, sequence number and time of the event at ``position`` of the log (None
        when none is there), read from its envelope alone: no event is built (an event of a
        type this version does not know still has its place)."""
        try:
            rows = self._rows(
                "SELECT originator_version, topic, state FROM stored_events WHERE rowid = ?",
                (position,),
            )
            if not rows:
                return None
            seq, topic, state = rows[0]
            body = _envelope(topic, state)
            return str(body["run_id"]), int(seq), _iso(body["timestamp"])
        except (_NotPlain, ValueError, KeyError, TypeError):
            return self.full().mark_at(position)

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, Recorded]]:
        """Events of all runs after position ``after``, in append order."""
        try:
            rows = self._rows(
                "SELECT rowid, originator_version, topic, state FROM stored_events "
                "WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (after, limit),
            )
            records = _decode([row[1:] for row in rows])
            return [(int(row[0]), record) for row, record in zip(rows, records, strict=True)]
        except (_NotPlain, ValueError, KeyError, TypeError):
            return self.full().notifications(after, limit)


def _connect(path: Path) -> sqlite3.Connection:
    """The log opened for reading as the store would open it read-only (never written)."""
    from overbrainer.events.sqlite_files import Unreadable, read_only_env

    try:
        env = read_only_env(path)
    except Unreadable:
        raise _NotPlain from None  # the store refuses it, saying why and what to do
    if env.get("PERSISTENCE_MODULE") == "eventsourcing.popo":
        raise _Empty  # the store would read an empty log in memory
    uri = env.get("SQLITE_DBNAME", "")
    if env.get("PERSISTENCE_MODULE") != "eventsourcing.sqlite" or not uri.startswith("file:"):
        raise _NotPlain  # one the store must open itself
    return sqlite3.connect(uri, uri=True, timeout=float(env.get("SQLITE_LOCK_TIMEOUT", "30")))
