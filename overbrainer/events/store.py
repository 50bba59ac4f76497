"""The event store: every run's stream in eventsourcing, SQLite by default.

A synchronous driver (eventsourcing is a sync library); trio code reaches it through
``overbrainer.session.journal.Journal`` only, which runs each call through its runner (a
worker thread unless a test says otherwise).

Appends take a *decision*: a function from the run's current state to the events to
append. When another process appended first (optimistic concurrency), the store reloads
the new events, decides again on the fresh state, and retries — so two processes acting on
one run never lose or duplicate a transition.

With ``[store] url = "postgresql://…"`` the same streams live on a PostgreSQL server that a
team shares (``pg.py`` says where it is and how to log in; ``pg_recorder.py`` makes its
failures plain). Every append is one transaction: all of it is stored, or none.
"""

import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from overbrainer.errors import OverbrainerError
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.errors import UnknownRun as UnknownRun
from overbrainer.events.ids import check_run_id
from overbrainer.events.locations import default_sqlite_path as default_sqlite_path
from overbrainer.events.locations import describe_store as describe_store
from overbrainer.events.locations import sqlite_path as sqlite_path
from overbrainer.events.recorded import Recorded as Recorded
from overbrainer.events.types import Event, RunCreated, UnknownEvent, event_from

if TYPE_CHECKING:
    from collections.abc import Mapping

    from overbrainer.events.pg import PgTarget

Decision = Callable[[RunLog], Sequence[Event]]
Others = Callable[[Sequence["Recorded"]], None]

_RETRIES = 50
_T = TypeVar("_T")
_OPTIMISTIC = 4  # PostgreSQL: conflicts before an append takes the log's write lock


def store_environment(
    url: str | None,
    project_dir: Path,
    environ: "Mapping[str, str] | None" = None,
    *,
    read_only: bool = False,
) -> dict[str, str]:
    """eventsourcing's settings for the store at ``url`` (None: the project's SQLite file).

    ``read_only``: a SQLite log is read without writing or creating anything (a missing
    file is an empty log), so reading works on a read-only or full disk.

    For PostgreSQL the settings hold no password: eventsourcing fetches it at each new
    connection through ``POSTGRES_GET_PASSWORD_TOPIC`` (see ``pg.py``).
    """
    path = sqlite_path(url, project_dir)
    if path is not None:
        from overbrainer.events import sqlite_files

        if read_only:
            try:
                return sqlite_files.read_only_env(path)
            except sqlite_files.Unreadable as error:
                raise StoreError(str(error)) from None
            except (OSError, sqlite3.Error) as error:
                raise StoreError(_cannot_open(path, error)) from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(_cannot_open(path, error)) from None
        return sqlite_files.writable_env(path)
    if url is not None and url.startswith(("postgresql://", "postgres://")):
        from overbrainer.events.pg import eventsourcing_env, parse_url

        return eventsourcing_env(parse_url(url, environ))
    raise StoreError(
        "[store] url must be sqlite:///PATH or postgresql://USER@HOST[:PORT]/DB; "
        "fix it in overbrainer.toml or OVERBRAINER_STORE__URL"
    )


def _cannot_open(path: Path, error: BaseException) -> str:
    from overbrainer.events.sqlite_files import io_problem

    reason = io_problem(path, error) or (
        f"{type(error).__name__}: {error}; check [store] url and the file's permissions"
    )
    return f"cannot open the event store: {reason}"


_OPEN_ATTEMPTS = 10
# A busy answer sooner than this is SQLite refusing at once (no use waiting), not its lock
# timeout spent.
_AT_ONCE_SECONDS = 1.0


def open_sqlite(open_log: Callable[[], _T], clock: Callable[[], float] = time.monotonic) -> _T:
    """``open_log()``, tried again when SQLite refuses it at once as busy. Opening a log
    creates its table in a transaction that first reads the schema, then writes: when
    another command opens the same new log at that moment (``runs ls`` while ``train``
    starts a project's first run) and commits first, SQLite answers "database is locked"
    without waiting, since waiting could not help that transaction. A new one can."""
    from overbrainer.events.sqlite_files import is_busy

    for attempt in range(_OPEN_ATTEMPTS):
        started = clock()
        try:
            return open_log()
        except Exception as error:
            quick = clock() - started < _AT_ONCE_SECONDS
            if not (is_busy(error) and quick) or attempt == _OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


class Changes(Protocol):
    """Wakes a follower when the log may have grown (see :meth:`RunStore.changes`)."""

    def wait(self, timeout: float) -> bool:
        """Return when another process appended (True) or after ``timeout`` (False)."""
        ...

    def close(self) -> None:
        """Stop watching."""
        ...


class _Poll:
    """SQLite has no notifications: a follower polls."""

    def __init__(self, interval: float) -> None:
        self._interval = interval

    def wait(self, timeout: float) -> bool:
        import time

        time.sleep(min(timeout, self._interval))
        return False

    def close(self) -> None:
        pass


class RunStore:
    """The runs of one project (or team), as eventsourcing streams."""

    def __init__(
        self,
        url: str | None,
        project_dir: Path,
        actor: Actor,
        environ: "Mapping[str, str] | None" = None,
        *,
        read_only: bool = False,
    ) -> None:
        """Open the store at ``url`` (None: the project's SQLite file). ``environ`` (default:
        the process environment) supplies libpq's ``PG*`` variables for a PostgreSQL url.

        ``read_only`` (commands that only read): a SQLite log is opened without writing or
        creating any file, so it reads on a read-only or full disk; appends are refused."""
        self.actor = actor
        self.url = url
        self.read_only = read_only
        self.target: PgTarget | None = None
        # The SQLite file, for messages about the disk under it.
        self._path = sqlite_path(url, project_dir)
        env = store_environment(
            url, project_dir, os.environ if environ is None else environ, read_only=read_only
        )
        if env["PERSISTENCE_MODULE"] == "eventsourcing.postgres":
            self._app: Any = self._open_postgres(env)
        else:
            from eventsourcing.application import Application

            self._where = describe_store(url)
            try:
                self._app = open_sqlite(lambda: Application(env=env))
            except Exception as error:
                if self._path is not None:
                    raise StoreError(_cannot_open(self._path, error)) from error
                raise StoreError(
                    f"cannot open the event store ({self._where}): {type(error).__name__}: "
                    f"{error}; check [store] url and the file's permissions"
                ) from error
        self.recorder = self._app.recorder
        # One command holds each run's state it touched: appends then cost O(new events).
        self._cache: dict[str, RunLog] = {}

    def _open_postgres(self, env: dict[str, str]) -> Any:
        from overbrainer.events.pg import is_driver_missing, missing_driver, sources

        # The password source registered by store_environment knows the target.
        source = getattr(sources, env["POSTGRES_GET_PASSWORD_TOPIC"].rpartition(".")[2])
        self.target = source.target
        self._where = source.target.describe
        try:
            from overbrainer.events.pg_recorder import TeamApplication
        except ImportError as error:
            # Only a missing driver is the user's to install; any other failure is ours.
            if not is_driver_missing(error):
                raise
            raise missing_driver() from None
        try:
            return TeamApplication(env=env)
        except OverbrainerError:
            raise
        except Exception as error:
            from overbrainer.events.pg import diagnose

            raise StoreError(diagnose(source.target, error)) from None

    @property
    def where(self) -> str:
        """The store's location for messages (never a password)."""
        return self._where

    @property
    def shared(self) -> bool:
        """Whether the store is a team's (PostgreSQL) rather than this checkout's file."""
        return self.target is not None

    def close(self) -> None:
        """Release the store's connections."""
        self._app.close()

    def changes(self, poll: float = 0.2) -> Changes:
        """Something to wait on for new events: the server's notifications on PostgreSQL
        (a wake-up within milliseconds of a commit), a ``poll``-second sleep on SQLite.

        Open it *before* reading what is already there, so no append falls between."""
        if self.target is None:
            return _Poll(poll)
        from overbrainer.events.pg import CHANNEL, Listener

        return Listener(self.target, CHANNEL)

    def _failure(self, what: str, error: Exception) -> OverbrainerError:
        """``error`` as a plain message: what failed, where, and what to do."""
        if isinstance(error, OverbrainerError):
            return StoreError(f"{what}: {error}")
        if self.target is not None:
            from overbrainer.events.pg import diagnose

            return StoreError(f"{what}: {diagnose(self.target, error)}")
        if self._path is not None:
            from overbrainer.events.sqlite_files import io_problem

            problem = io_problem(self._path, error)
            if problem is not None:
                return StoreError(f"{what}: {problem}")
        return StoreError(
            f"{what} ({self._where}): {type(error).__name__}: {error}; check that the file is "
            "readable and not damaged, then run the command again"
        )

    # -- reading ---------------------------------------------------------------------

    def _records(self, run_id: str, after: int = 0) -> Iterator[Recorded]:
        from overbrainer.events.stream import stream_id

        for stored in self.recorder.select_events(stream_id(run_id), gt=after or None):
            yield self.record_of(stored, run_id)

    def history(self, run_id: str, after: int = 0) -> list[Recorded]:
        """Every event of ``run_id`` after sequence number ``after``, in order."""
        check_run_id(run_id)
        try:
            return list(self._records(run_id, after))
        except Exception as error:
            raise self._failure(f"cannot read run {run_id}", error) from None

    def origin(self, run_id: str) -> Recorded | None:
        """The run's first event (``run.Created``): its actor says where the run lives."""
        from overbrainer.events.stream import stream_id

        check_run_id(run_id)
        try:
            for stored in self.recorder.select_events(stream_id(run_id), lte=1):
                return self.record_of(stored, run_id)
        except Exception as error:
            raise self._failure(f"cannot read run {run_id}", error) from None
        return None

    def state(self, run_id: str) -> RunLog:
        """The current state of ``run_id`` (new events since the last call are folded in)."""
        check_run_id(run_id)
        try:
            return self._fresh_state(run_id)
        except InvalidTransition:
            raise
        except Exception as error:
            raise self._failure(f"cannot read run {run_id}", error) from None

    def _fresh_state(self, run_id: str, news: list[Recorded] | None = None) -> RunLog:
        """The run's state; into ``news`` go the events others appended since this store
        last knew the run (none the first time it reads it)."""
        cached = self._cache.get(run_id)
        state = cached.copy() if cached is not None else RunLog()
        for record in self._records(run_id, state.run.version):
            state.apply(record.event, record.at)
            if news is not None and cached is not None:
                news.append(record)
        if state.exists:
            self._cache[run_id] = state
            return state.copy()
        return state

    def get(self, run_id: str) -> RunLog:
        """Like :meth:`state`, but an unknown run is an error naming the way out."""
        state = self.state(run_id)
        if not state.exists:
            raise UnknownRun.of(run_id, self._where)
        return state

    def max_position(self) -> int:
        """The position of the newest event in the store's notification log."""
        try:
            return int(self.recorder.max_notification_id() or 0)
        except Exception as error:
            raise self._failure("cannot read the event log", error) from None

    def notifications(self, after: int, limit: int = 1000) -> list[tuple[int, Recorded]]:
        """Events of all runs after position ``after``, in append order."""
        try:
            notes = self.recorder.select_notifications(start=after + 1, limit=limit)
            return [(note.id, self.record_of(note)) for note in notes]
        except Exception as error:
            raise self._failure("cannot read the event log", error) from None

    def mark_at(self, position: int) -> tuple[str, int, str] | None:
        """The run, sequence number and time of the event at ``position`` of the log (None
        when none is there): what tells this log's event there from another log's."""
        found = self.notifications(position - 1, 1)
        if not found or found[0][0] != position:
            return None
        record = found[0][1]
        return record.run_id, record.seq, record.at

    def record_of(self, stored: Any, run_id: str = "") -> Recorded:
        """A stored event (eventsourcing's ``StoredEvent`` or ``Notification``) decoded.

        An event this overbrainer does not know (one a newer version wrote) is refused with
        :func:`~overbrainer.events.newer.unreadable`, which names the version that wrote
        it. ``run_id`` names the run in that message when the event cannot be decoded."""
        from eventsourcing.utils import TopicError

        from overbrainer.events.newer import raw_fields, unreadable
        from overbrainer.events.stream import iso

        try:
            event: Any = self._app.mapper.to_domain_event(stored)
        except TopicError:
            raw = raw_fields(stored.state)
            actor = raw.get("actor")
            raise unreadable(
                str(raw.get("run_id") or run_id or "?"),
                stored.originator_version,
                f"stored as {stored.topic}",
                actor if isinstance(actor, dict) else None,
            ) from None
        try:
            typed = event_from(event.name, event.data)
        except UnknownEvent:
            raise unreadable(
                event.run_id, event.originator_version, event.name, dict(event.actor)
            ) from None
        return Recorded(
            run_id=event.run_id,
            seq=event.originator_version,
            at=iso(event.timestamp),
            actor=dict(event.actor),
            event=typed,
        )

    # -- writing ---------------------------------------------------------------------

    def append(
        self, run_id: str, decide: Decision, on_others: Others | None = None
    ) -> tuple[RunLog, list[Recorded]]:
        """Append what ``decide`` returns for the run's current state.

        ``decide`` may be called again on a fresher state when another process appended
        meanwhile; it must be pure. Returns the new state and what was appended (nothing
        when ``decide`` returns no event). ``on_others`` receives, before the return, the
        events other processes appended since this store last read the run — what the
        other side did, for telling the user (not called when there are none).

        On PostgreSQL a writer that lost the race a few times appends under the log's
        write lock, so a busy writer on another machine cannot starve it.
        """
        from eventsourcing.persistence import IntegrityError

        check_run_id(run_id)
        if self.read_only:
            raise StoreError(f"internal: run {run_id} not updated: the store was opened to read")
        news: list[Recorded] = []
        failed = f"run {run_id} not updated (nothing half-written: an append is one transaction)"
        for attempt in range(_RETRIES):
            if self.target is not None and attempt >= _OPTIMISTIC:
                result = self._append_locked(run_id, decide, news, failed)
                break
            try:
                state = self._fresh_state(run_id, news)
            except InvalidTransition:
                raise
            except Exception as error:
                raise self._failure(failed, error) from None
            trial, events, now, stored = self._decided(run_id, state, decide)
            if not events:
                result = state, []
                break
            try:
                self._app.save(*stored)
            except IntegrityError:
                # Somebody else appended first: decide again on what they wrote. A random
                # pause, growing with each loss, keeps a busy writer from starving this one.
                time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
                continue
            except Exception as error:
                raise self._failure(failed, error) from None
            result = self._appended(run_id, state, trial, events, now)
            break
        else:
            raise StoreError(f"run {run_id} changed {_RETRIES} times while appending; try again")
        if on_others is not None and news:
            on_others(list(news))
        return result

    def _decided(
        self, run_id: str, state: RunLog, decide: Decision
    ) -> tuple[RunLog, list[Event], datetime, list[Any]]:
        """What ``decide`` appends to ``state``: the new state, the events, their time and
        their envelopes. Raises ``InvalidTransition`` before anything is saved."""
        from overbrainer.events.stream import iso

        events = list(decide(state.copy()))
        trial = state.copy()
        now = datetime.now(UTC)
        for event in events:
            trial.apply(event, iso(now))
        stored = self._envelopes(run_id, state.run.version, events, now) if events else []
        return trial, events, now, stored

    def _appended(
        self, run_id: str, state: RunLog, trial: RunLog, events: list[Event], now: datetime
    ) -> tuple[RunLog, list[Recorded]]:
        from overbrainer.events.stream import iso

        self._cache[run_id] = trial.copy()
        actor = self.actor.to_json()
        return trial, [
            Recorded(
                run_id=run_id, seq=state.run.version + i + 1, at=iso(now), actor=actor, event=event
            )
            for i, event in enumerate(events)
        ]

    def _append_locked(
        self, run_id: str, decide: Decision, news: list[Recorded], failed: str
    ) -> tuple[RunLog, list[Recorded]]:
        """Read, decide and insert inside one transaction holding the log's write lock."""
        from overbrainer.events.stream import stream_id

        try:
            base = self._fresh_state(run_id, news)
        except InvalidTransition:
            raise
        except Exception as error:
            raise self._failure(failed, error) from None
        outcome: list[Any] = []
        raised: list[BaseException] = []

        def build(found: list[Any]) -> list[Any]:
            try:
                state = base.copy()
                for stored in found:
                    record = self.record_of(stored)
                    state.apply(record.event, record.at)
                    news.append(record)
                trial, events, now, envelopes = self._decided(run_id, state, decide)
            except BaseException as error:
                raised.append(error)  # the decision's own error, not the store's
                raise
            outcome[:] = [state, trial, events, now]
            return [self._app.mapper.to_stored_event(e) for e in envelopes]

        try:
            self.recorder.insert_locked(stream_id(run_id), base.run.version, build)
        except BaseException as error:
            if raised:
                raise raised[0] from None
            if not isinstance(error, Exception):
                raise
            raise self._failure(failed, error) from None
        state, trial, events, now = outcome
        if not events:
            self._cache[run_id] = state.copy()
            return state, []
        return self._appended(run_id, state, trial, events, now)

    def create(self, event: RunCreated) -> tuple[RunLog, list[Recorded]]:
        """Start the stream of a new run."""

        def decide(state: RunLog) -> Sequence[Event]:
            if state.exists:
                raise InvalidTransition(f"run {event.run_id} already exists")
            return [event]

        return self.append(event.run_id, decide)

    def _envelopes(
        self, run_id: str, version: int, events: Sequence[Event], now: datetime
    ) -> list[Any]:
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
                out.append(
                    opened(
                        originator_id=sid,
                        originator_version=1,
                        timestamp=now,
                        originator_topic=get_topic(RunStream),
                        run_id=run_id,
                        name=event.name,
                        data=event.fields(),
                        actor=actor,
                    )
                )
            else:
                out.append(
                    recorded(
                        originator_id=sid,
                        originator_version=number,
                        timestamp=now,
                        run_id=run_id,
                        name=event.name,
                        data=event.fields(),
                        actor=actor,
                    )
                )
        return out
