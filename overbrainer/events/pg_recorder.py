"""eventsourcing's PostgreSQL recorder, made fit for a command line.

eventsourcing retries a failed database call ten times, each waiting up to the connect
timeout for the pool: a stopped server would hang a command for close to a minute, then
fail with a bare ``PoolTimeout``. This recorder instead connects once directly when the
store opens (so a refused connection, a wrong password or a missing database is reported
at once, with its fix), and after a failed call probes the server: when it is down the
command fails now, naming it; when it answers (say it restarted and the pooled connection
was stale) the call is tried once more.

eventsourcing loads this class through ``APPLICATION_RECORDER_TOPIC``.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from eventsourcing.application import Application
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import Environment
from psycopg import sql

from overbrainer.events.pg import (
    PasswordSource,
    PgTarget,
    StoreUnavailable,
    diagnose,
    probe,
    quiet_driver_logs,
)

quiet_driver_logs()

_T = TypeVar("_T")
_BASE = PostgresApplicationRecorder


def _unretried(method: Any) -> Callable[..., Any]:
    # eventsourcing's methods are wrapped by its retry decorator (functools.wraps).
    return getattr(method, "__wrapped__", method)  # type: ignore[no-any-return]


class TeamRecorder(PostgresApplicationRecorder):
    """The application recorder of the team store."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str) -> None:
        source = datastore.pool.get_password_func
        if not isinstance(source, PasswordSource):  # pragma: no cover - wiring error
            raise TypeError("TeamRecorder needs an overbrainer.events.pg password source")
        self.target: PgTarget = source.target
        # libpq's own connect timeout (eventsourcing only bounds the wait for the pool), the
        # SSL options of the URL, and a name that shows in pg_stat_activity.
        kwargs = datastore.pool.kwargs
        assert isinstance(kwargs, dict)  # eventsourcing passes a dict
        kwargs.update({k: v for k, v in self.target.connect_kwargs().items() if k != "password"})
        # The base class connects at once (to look up its row type); a direct connection
        # first reports a refusal, a wrong password or a missing database now, plainly,
        # instead of a pool timeout after several seconds.
        reason = probe(self.target)
        if reason is not None:
            raise StoreUnavailable(reason)
        super().__init__(datastore, events_table_name=events_table_name)

    # -- opening -------------------------------------------------------------------------

    def create_table(self) -> None:
        """Create the log's table if it is missing."""
        self._guarded(self._create_if_missing)

    def _create_if_missing(self) -> None:
        name = f"{self.datastore.schema}.{self.events_table_name}"
        with self.datastore.get_connection() as conn:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", [name]).fetchone()
        if row is not None and row["present"]:
            # Creating again would replace the insert function, which two commands starting
            # at once can trip over ("tuple concurrently updated").
            self.datastore.register_type_adapters()
            return
        # The first command on a fresh database; another may be doing the same right now.
        for attempt in range(3):
            try:
                with self.datastore.get_connection() as conn:
                    conn.execute(
                        sql.SQL("SELECT pg_advisory_lock(hashtext({}))").format(sql.Literal(name))
                    )
                    try:
                        super().create_table()
                    finally:
                        conn.execute(
                            sql.SQL("SELECT pg_advisory_unlock(hashtext({}))").format(
                                sql.Literal(name)
                            )
                        )
                return
            except (IntegrityError, InternalError):
                if attempt == 2:
                    raise

    # -- every call ----------------------------------------------------------------------

    def _guarded(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``call``, failing at once with a plain error when the server is gone."""
        try:
            return call(*args, **kwargs)
        except (OperationalError, InterfaceError):
            self._retry_or_fail()
            try:
                return call(*args, **kwargs)
            except (OperationalError, InterfaceError) as second:
                raise StoreUnavailable(diagnose(self.target, second)) from None
        except psycopg.Error as error:  # pragma: no cover - eventsourcing wraps these
            raise StoreUnavailable(diagnose(self.target, error)) from None

    def _retry_or_fail(self) -> None:
        """After a failed call: fail now when the server is down; else allow one retry (the
        server answers, so the pooled connection was stale, say after a restart)."""
        reason = probe(self.target)
        if reason is not None:
            raise StoreUnavailable(reason) from None
        # Every pooled connection may predate the restart, not just the one that failed:
        # the pool tests each and replaces the dead, so the retry gets a live one.
        self.datastore.pool.check()

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert in one transaction: all of an append or none of it."""
        call = _unretried(_BASE.insert_events)
        try:
            found: Sequence[int] | None = call(self, stored_events, **kwargs)
            return found
        except (OperationalError, InterfaceError):
            self._retry_or_fail()
        try:
            found = call(self, stored_events, **kwargs)
            return found
        except IntegrityError:
            # The first attempt's commit may have landed with its answer lost: if the rows
            # in the way are exactly ours, the append is done (not a conflict to re-decide).
            if self._already_stored(stored_events):
                return None
            raise
        except (OperationalError, InterfaceError) as second:
            raise StoreUnavailable(diagnose(self.target, second)) from None

    def _already_stored(self, stored_events: Sequence[StoredEvent]) -> bool:
        select = _unretried(_BASE.select_events)
        for event in stored_events:
            found = select(
                self,
                event.originator_id,
                gt=event.originator_version - 1,
                lte=event.originator_version,
            )
            if not found or (found[0].topic, bytes(found[0].state)) != (
                event.topic,
                bytes(event.state),
            ):
                return False
        return True

    def insert_locked(
        self,
        originator_id: UUID,
        after: int,
        build: Callable[[list[StoredEvent]], Sequence[StoredEvent]],
    ) -> None:
        """Read a stream's events after version ``after`` and insert what ``build`` makes of
        them, in one transaction holding the log's write lock: this append cannot conflict.

        For a writer that keeps losing the optimistic race to a busy one (which reads and
        writes one step ahead). ``build`` runs under the lock, so it must be quick.
        """
        statement = self.select_events_statement + sql.SQL(
            " AND originator_version > %s ORDER BY originator_version ASC"
        )
        try:
            with self.datastore.transaction(commit=True) as curs:
                self._lock_table(curs)
                curs.execute(statement, [originator_id, after], prepare=True)
                found = [
                    StoredEvent(
                        originator_id=row["originator_id"],
                        originator_version=row["originator_version"],
                        topic=row["topic"],
                        state=bytes(row["state"]),
                    )
                    for row in curs.fetchall()
                ]
                stored = build(found)
                if stored:
                    self._insert_stored_events(curs, stored)
        except (OperationalError, InterfaceError) as error:
            # Not retried: the commit may have been sent.
            raise StoreUnavailable(probe(self.target) or diagnose(self.target, error)) from None

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """A run's stored events."""
        found: Sequence[StoredEvent] = self._guarded(
            _unretried(_BASE.select_events),
            self,
            originator_id,
            gt=gt,
            lte=lte,
            desc=desc,
            limit=limit,
        )
        return found

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """Stored events of all runs in append order."""
        found: Sequence[Notification] = self._guarded(
            _unretried(_BASE.select_notifications),
            self,
            start,
            limit,
            stop,
            topics,
            inclusive_of_start=inclusive_of_start,
        )
        return found

    def max_notification_id(self) -> int | None:
        """The newest position in the log."""
        found: int | None = self._guarded(_unretried(_BASE.max_notification_id), self)
        return found


class TeamApplication(Application[Any]):
    """The team store's eventsourcing application: its events live in the table
    ``overbrainer_events`` (also the channel it notifies on), and its settings come only
    from ``[store] url``, never from stray ``POSTGRES_*`` variables of the environment."""

    name = "Overbrainer"

    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        """Only the settings overbrainer computed."""
        return Environment(name, dict(env or {}))
