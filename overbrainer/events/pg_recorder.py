"""eventsourcing's PostgreSQL recorder, made fit for a command line — through its public API.

eventsourcing retries a failed database call ten times, each waiting up to the connect
timeout for the pool: a stopped server would hang a command for close to a minute, then
fail with a bare ``PoolTimeout``. It has no setting for that, so the team store brings its
own datastore (:class:`TeamDatastore`, a ``PostgresDatastore`` built with eventsourcing's
documented arguments, handed in through the application's ``construct_factory``). Every
call of the recorder takes its connection from the datastore's ``get_connection``; when a
call fails there, the datastore probes the server: when it is down the command fails now
(:class:`StoreUnavailable` is not an error eventsourcing retries), naming it; when it
answers (say it restarted and the pooled connection was stale) eventsourcing's own retry
tries the call once more, and a second failure ends it.

The store also connects once directly when it opens, so a refused connection, a wrong
password or a missing database is reported at once, with its fix.

eventsourcing loads :class:`TeamRecorder` through ``APPLICATION_RECORDER_TOPIC``.
"""

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.postgres import (
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
)
from eventsourcing.utils import Environment
from psycopg import Connection, sql

from overbrainer.events.pg import (
    CHANNEL,
    CONNECT_TIMEOUT,
    LOCK_TIMEOUT,
    MAX_OVERFLOW,
    POOL_SIZE,
    SCHEMA,
    PasswordSource,
    PgTarget,
    StoreUnavailable,
    diagnose,
    probe,
    quiet_driver_logs,
    sources,
)

quiet_driver_logs()

# eventsourcing's default (its factory reads POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT):
# a transaction left open by a killed command is ended by the server after 5 s.
_IDLE_IN_TRANSACTION = 5


class TeamDatastore(PostgresDatastore):
    """The team store's connections: a failed call fails the command at once when the
    server is down, and is tried at most once more when it answers."""

    def __init__(self, target: PgTarget) -> None:
        super().__init__(
            dbname=target.dbname,
            host=target.host,
            port=target.port,
            user=target.user,
            password="",
            connect_timeout=CONNECT_TIMEOUT,
            idle_in_transaction_session_timeout=_IDLE_IN_TRANSACTION,
            pool_size=POOL_SIZE,
            max_overflow=MAX_OVERFLOW,
            lock_timeout=LOCK_TIMEOUT,
            schema=SCHEMA,
            get_password_func=PasswordSource(target),
        )
        self.target = target
        # libpq's own connect timeout (eventsourcing only bounds the wait for the pool), the
        # SSL options of the URL, and a name that shows in pg_stat_activity: psycopg_pool
        # passes its ``kwargs`` to every new connection (the password comes from the source).
        kwargs = self.pool.kwargs
        assert isinstance(kwargs, dict)  # eventsourcing passes a dict
        kwargs.update({k: v for k, v in target.connect_kwargs().items() if k != "password"})
        self.calls = threading.local()

    @contextmanager
    def call(self) -> Iterator[None]:
        """One call of the recorder: what counts its failed attempts."""
        self.calls.failures = 0
        yield

    def failures(self) -> int:
        """How many attempts of the current call failed."""
        found: int = getattr(self.calls, "failures", 0)
        return found

    @contextmanager
    def get_connection(self) -> Iterator[Connection[Any]]:
        """A pooled connection (the held one inside :meth:`locked`); a failure on it ends
        the command when the server is down or when it is the call's second."""
        held: Connection[Any] | None = getattr(self.calls, "held", None)
        if held is not None:
            # Inside the locked transaction: every statement belongs to it. Its errors reach
            # locked() as psycopg raised them, which eventsourcing's retry lets through: a
            # lost transaction cannot be retried statement by statement.
            yield held
            return
        try:
            with super().get_connection() as conn:
                yield conn
        except (OperationalError, InterfaceError) as error:
            self.calls.failures = self.failures() + 1
            reason = probe(self.target)
            if reason is not None:
                raise StoreUnavailable(reason) from None
            if self.failures() > 1:
                raise StoreUnavailable(diagnose(self.target, error)) from None
            # The server answers, so the pooled connection was stale (a restart): the pool
            # tests each connection and replaces the dead, then eventsourcing retries.
            self.pool.check()
            raise

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One transaction holding the log's write lock; every call of the recorder in
        this thread runs in it until it commits."""
        name = sql.SQL("{}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(CHANNEL))
        with super().get_connection() as conn, conn.transaction():
            # Our own statements on the table we name. PostgreSQL's EXCLUSIVE mode conflicts
            # with the ROW EXCLUSIVE lock every INSERT takes, so nobody appends until this
            # commits, while reads go on. The rows are then written by eventsourcing's public
            # insert_events inside this transaction, not by an INSERT of ours: the table's
            # columns are eventsourcing's to define.
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(f"{LOCK_TIMEOUT}s"))
            conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(name))
            self.calls.held = conn
            try:
                yield
            finally:
                self.calls.held = None


class TeamRecorder(PostgresApplicationRecorder):
    """The application recorder of the team store."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str) -> None:
        if not isinstance(datastore, TeamDatastore):  # pragma: no cover - wiring error
            raise TypeError("TeamRecorder needs the TeamApplication's TeamDatastore")
        if events_table_name != CHANNEL:  # pragma: no cover - wiring error
            raise TypeError(f"the team's log is the table {CHANNEL}, not {events_table_name}")
        self.team = datastore
        self.target: PgTarget = datastore.target
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
        name = f"{SCHEMA}.{CHANNEL}"
        with self.team.call(), self.team.get_connection() as conn:
            row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", [name]).fetchone()
        if row is not None and row["present"]:
            # Creating again would replace the insert function, which two commands starting
            # at once can trip over ("tuple concurrently updated"). Like eventsourcing's
            # create_table, end with the row type registered (a no-op when already found).
            with self.team.call():
                self.datastore.register_type_adapters()
            return
        # The first command on a fresh database; another may be doing the same right now.
        lock = sql.SQL("SELECT pg_advisory_lock(hashtext({}))").format(sql.Literal(name))
        unlock = sql.SQL("SELECT pg_advisory_unlock(hashtext({}))").format(sql.Literal(name))
        for attempt in range(3):
            try:
                with self.team.call(), self.team.get_connection() as conn:
                    conn.execute(lock)
                    try:
                        super().create_table()
                    finally:
                        conn.execute(unlock)
                return
            except (IntegrityError, InternalError):
                if attempt == 2:
                    raise

    # -- every call ----------------------------------------------------------------------

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Insert in one transaction: all of an append or none of it."""
        with self.team.call():
            try:
                found: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
                return found
            except IntegrityError:
                # A first attempt's commit may have landed with its answer lost: if the rows
                # in the way are exactly ours, the append is done (not a conflict to
                # re-decide).
                if self.team.failures() and self._already_stored(stored_events):
                    return None
                raise

    def _already_stored(self, stored_events: Sequence[StoredEvent]) -> bool:
        for event in stored_events:
            found = self.select_events(
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
        try:
            with self.team.locked():
                found = list(self.select_events(originator_id, gt=after))
                stored = build(found)
                if stored:
                    super().insert_events(stored)
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
        with self.team.call():
            found: Sequence[StoredEvent] = super().select_events(
                originator_id, gt=gt, lte=lte, desc=desc, limit=limit
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
        with self.team.call():
            found: Sequence[Notification] = super().select_notifications(
                start, limit, stop, topics, inclusive_of_start=inclusive_of_start
            )
            return found

    def max_notification_id(self) -> int | None:
        """The newest position in the log."""
        with self.team.call():
            found: int | None = super().max_notification_id()
            return found


def latest_position(target: PgTarget) -> int | None:
    """The position of the newest event in the team's log (0 when it is empty), or None when
    this cannot tell (the log's table is missing, or not one eventsourcing reads: opening the
    store creates it or says why). A server that cannot be reached raises
    :class:`StoreUnavailable` with the sentence opening the store gives.

    ``runs ls`` asks this before trusting its view: when the answer is the view's position,
    nothing is new and the store is not opened. It is eventsourcing's answer, through its
    public recorder API (``max_notification_id``) over the store's own datastore, without the
    application, its aggregates or the table's creation.
    """
    datastore = TeamDatastore(target)
    try:
        recorder = TeamRecorder(datastore, events_table_name=CHANNEL)
        try:
            latest = recorder.max_notification_id()
        except ProgrammingError:  # no such table, or not of the layout eventsourcing reads
            return None
        return latest or 0
    finally:
        datastore.close()


class TeamApplication(Application[Any]):
    """The team store's eventsourcing application: its events live in the table
    ``overbrainer_events`` (also the channel it notifies on), and its settings come only
    from ``[store] url``, never from stray ``POSTGRES_*`` variables of the environment."""

    name = "Overbrainer"

    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        """Only the settings overbrainer computed."""
        return Environment(name, dict(env or {}))

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """eventsourcing's PostgreSQL factory, with the team's datastore in it."""
        factory = PostgresFactory(env)
        # The password source registered by eventsourcing_env knows the target.
        source = getattr(sources, env["POSTGRES_GET_PASSWORD_TOPIC"].rpartition(".")[2])
        factory.datastore.close()  # never opened: it made no connection
        factory.datastore = TeamDatastore(source.target)
        return factory
