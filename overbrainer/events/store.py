"""The event store: every run's stream in eventsourcing, SQLite by default.

A synchronous driver (eventsourcing is a sync library); trio code reaches it through
``journal.Journal``, which runs each call in a worker thread.

Appends take a *decision*: a function from the run's current state to the events to
append. When another process appended first (optimistic concurrency), the store reloads
the new events, decides again on the fresh state, and retries — so two processes acting on
one run never lose or duplicate a transition.
"""

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from overbrainer.errors import OverbrainerError
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.types import Event, RunCreated, event_from
from overbrainer.runs.ids import check_run_id

Decision = Callable[[RunLog], Sequence[Event]]

_RETRIES = 50


class StoreError(OverbrainerError):
    """The event store cannot be reached or used."""


class UnknownRun(OverbrainerError):
    """No run with that ID in this store."""


@dataclass(frozen=True)
class Recorded:
    """One stored event: its sequence number in the run (from 1), time and actor."""

    run_id: str
    seq: int
    at: str
    actor: dict[str, Any]
    event: Event

    def to_json(self) -> dict[str, Any]:
        """The form ``events --json`` prints."""
        return {"run": self.run_id, "seq": self.seq, "time": self.at, "actor": self.actor,
                "event": self.event.name, "fields": self.event.fields()}


def default_sqlite_path(project_dir: Path) -> Path:
    """Where a project's log lives unless ``[store] url`` says otherwise."""
    return project_dir / ".overbrainer" / "events.sqlite"


def store_environment(url: str | None, project_dir: Path,
                      environ: dict[str, str] | None = None) -> dict[str, str]:
    """eventsourcing's settings for the store at ``url`` (None: the project's SQLite file)."""
    environ = dict(os.environ if environ is None else environ)
    if url is None or url.startswith("sqlite:"):
        if url is None:
            path = default_sqlite_path(project_dir)
        else:
            rest = url[len("sqlite:"):]
            rest = rest[2:] if rest.startswith("//") else rest
            path = Path(rest) if Path(rest).is_absolute() else project_dir / rest
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(path),
            # Another process may hold the write lock for a moment; wait rather than fail.
            "SQLITE_LOCK_TIMEOUT": "30",
        }
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        password = unquote(parts.password) if parts.password else environ.get("PGPASSWORD", "")
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": parts.path.lstrip("/") or "overbrainer",
            "POSTGRES_HOST": parts.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(parts.port or 5432),
            "POSTGRES_USER": unquote(parts.username) if parts.username else "postgres",
            "POSTGRES_PASSWORD": password,
            "POSTGRES_CONNECT_TIMEOUT": "5",
        }
    raise StoreError(
        "[store] url must be sqlite:///PATH or postgresql://USER@HOST[:PORT]/DB; "
        "fix it in overbrainer.toml or OVERBRAINER_STORE__URL"
    )


def describe_store(url: str | None) -> str:
    """The store's location for messages (never a password)."""
    if url is None:
        return ".overbrainer/events.sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        return f"PostgreSQL at {parts.hostname}:{parts.port or 5432}{parts.path}"
    return url


class RunStore:
    """The runs of one project (or team), as eventsourcing streams."""

    def __init__(self, url: str | None, project_dir: Path, actor: Actor) -> None:
        from eventsourcing.application import Application

        self.actor = actor
        self.url = url
        self._where = describe_store(url)
        env = store_environment(url, project_dir)
        try:
            self._app: Any = Application(env=env)
        except Exception as error:
            raise StoreError(f"cannot open the event store ({self._where}): "
                             f"{type(error).__name__}") from error
        self.recorder = self._app.recorder
        # One command holds each run's state it touched: appends then cost O(new events).
        self._cache: dict[str, RunLog] = {}

    def close(self) -> None:
        """Release the store's connections."""
        self._app.close()

    # -- reading ---------------------------------------------------------------------

    def _records(self, run_id: str, after: int = 0) -> Iterator[Recorded]:
        from overbrainer.events.stream import iso, stream_id

        stored: Any
        for stored in self._app.events.get(stream_id(run_id), gt=after or None):
            yield Recorded(run_id=run_id, seq=stored.originator_version, at=iso(stored.timestamp),
                           actor=dict(stored.actor), event=event_from(stored.name, stored.data))

    def history(self, run_id: str) -> list[Recorded]:
        """Every event of ``run_id``, in order."""
        check_run_id(run_id)
        try:
            return list(self._records(run_id))
        except OverbrainerError:
            raise
        except Exception as error:
            raise StoreError(f"cannot read run {run_id} from {self._where}: "
                             f"{type(error).__name__}: {error}") from error

    def state(self, run_id: str) -> RunLog:
        """The current state of ``run_id`` (new events since the last call are folded in)."""
        check_run_id(run_id)
        cached = self._cache.get(run_id)
        state = cached.copy() if cached is not None else RunLog()
        for record in self._records(run_id, state.run.version):
            state.apply(record.event, record.at)
        if state.exists:
            self._cache[run_id] = state
            return state.copy()
        return state

    def get(self, run_id: str) -> RunLog:
        """Like :meth:`state`, but an unknown run is an error naming the way out."""
        state = self.state(run_id)
        if not state.exists:
            raise UnknownRun(
                f"no run {run_id} in {self._where}; list the runs with `overbrainer runs ls`"
            )
        return state

    def max_position(self) -> int:
        """The position of the newest event in the store's notification log."""
        return int(self.recorder.max_notification_id() or 0)

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, Recorded]]:
        """Events of all runs after position ``after``, in append order."""
        from overbrainer.events.stream import iso

        found: list[tuple[int, Recorded]] = []
        for note in self.recorder.select_notifications(start=after + 1, limit=limit):
            stored: Any = self._app.mapper.to_domain_event(note)
            found.append((note.id, Recorded(
                run_id=stored.run_id,
                seq=stored.originator_version, at=iso(stored.timestamp), actor=dict(stored.actor),
                event=event_from(stored.name, stored.data))))
        return found

    # -- writing ---------------------------------------------------------------------

    def append(self, run_id: str, decide: Decision) -> tuple[RunLog, list[Recorded]]:
        """Append what ``decide`` returns for the run's current state.

        ``decide`` may be called again on a fresher state when another process appended
        meanwhile; it must be pure. Returns the new state and what was appended (nothing
        when ``decide`` returns no event).
        """
        from eventsourcing.persistence import IntegrityError

        check_run_id(run_id)
        for _ in range(_RETRIES):
            state = self.state(run_id)
            events = list(decide(state.copy()))
            if not events:
                return state, []
            trial = state.copy()
            now = datetime.now(UTC)
            from overbrainer.events.stream import iso

            for event in events:
                trial.apply(event, iso(now))  # raises InvalidTransition before anything is saved
            stored = self._envelopes(run_id, state.run.version, events, now)
            try:
                self._app.save(*stored)
            except IntegrityError:
                # Somebody else appended first: decide again on what they wrote.
                continue
            except Exception as error:
                raise StoreError(f"cannot append to run {run_id} in {self._where}: "
                                 f"{type(error).__name__}") from error
            self._cache[run_id] = trial.copy()
            actor = self.actor.to_json()
            return trial, [
                Recorded(run_id=run_id, seq=state.run.version + i + 1, at=iso(now),
                         actor=actor, event=event)
                for i, event in enumerate(events)
            ]
        raise StoreError(f"run {run_id} changed {_RETRIES} times while appending; try again")

    def create(self, event: RunCreated) -> tuple[RunLog, list[Recorded]]:
        """Start the stream of a new run."""

        def decide(state: RunLog) -> Sequence[Event]:
            if state.exists:
                raise InvalidTransition(f"run {event.run_id} already exists")
            return [event]

        return self.append(event.run_id, decide)

    def _envelopes(self, run_id: str, version: int, events: Sequence[Event],
                   now: datetime) -> list[Any]:
        from eventsourcing.utils import get_topic

        from overbrainer.events.stream import RunStream, stream_id

        sid = stream_id(run_id)
        actor = self.actor.to_json()
        # The envelopes' fields come from eventsourcing's metaclass, which mypy cannot see.
        opened: Any = RunStream.Opened
        recorded: Any = RunStream.Recorded
        out: list[Any] = []
        for i, event in enumerate(events):
            number = version + i + 1
            if number == 1:
                out.append(opened(
                    originator_id=sid, originator_version=1, timestamp=now,
                    originator_topic=get_topic(RunStream), run_id=run_id, name=event.name,
                    data=event.fields(), actor=actor))
            else:
                out.append(recorded(
                    originator_id=sid, originator_version=number, timestamp=now,
                    run_id=run_id, name=event.name, data=event.fields(), actor=actor))
        return out
