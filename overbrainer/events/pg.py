"""The team store's PostgreSQL side: where the server is, the password, and plain errors.

``[store] url = "postgresql://USER@HOST[:PORT]/DB"`` names the server. The password never
comes from ``overbrainer.toml``: it is taken, at each connection, from (in order) a URL set
in ``OVERBRAINER_STORE__URL``, ``PGPASSWORD``, the ``password`` of a libpq service
(``?service=NAME``, from ``PGSERVICEFILE`` or ``~/.pg_service.conf``), or libpq's password
file (``PGPASSFILE`` or ``~/.pgpass``). No message ever shows it.

eventsourcing asks for the password through ``POSTGRES_GET_PASSWORD_TOPIC``, a topic that
must resolve to a function without arguments: each store registers a :class:`PasswordSource`
in :data:`sources` and passes its topic.

psycopg is imported only inside functions: this module loads without the ``postgres`` extra.
"""

import getpass
import os
import stat
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from overbrainer.errors import OverbrainerError
from overbrainer.events.errors import StoreError

CONNECT_TIMEOUT = 5
"""Seconds a connection attempt may take before the store reports the server unreachable."""

LOCK_TIMEOUT = 15
"""Seconds an append waits for the log's table lock (held only while others append)."""

POOL_SIZE = 1
"""Pooled connections a command keeps: it makes one call at a time."""

MAX_OVERFLOW = 2
"""Connections beyond the pool (creating the log takes two at once)."""

SCHEMA = "public"
"""The schema of the log's table (eventsourcing's default: ``eventsourcing_env`` sets none; the
datastore names it)."""

CHANNEL = "overbrainer_events"
"""The table of the team's events, which is also the channel eventsourcing notifies on."""

# libpq parameters a URL may carry besides host, port, database and user; they reach
# psycopg unchanged (the SSL ones matter for a server across the internet).
_PASSTHROUGH = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslcrl",
        "application_name",
        "target_session_attrs",
        "gssencmode",
        "channel_binding",
    }
)
_INSTALL = "install it with `pip install 'overbrainer[postgres]'` (psycopg and psycopg-pool)"


class StoreUnavailable(OverbrainerError):
    """The team store's server cannot be reached or refuses us (message has the fix)."""


def is_postgres_url(url: str | None) -> bool:
    """Whether ``url`` names a PostgreSQL store."""
    return url is not None and url.startswith(("postgresql://", "postgres://"))


@dataclass(frozen=True)
class PgTarget:
    """One PostgreSQL database, with where its password comes from (never printed)."""

    host: str
    port: int
    dbname: str
    user: str
    options: tuple[tuple[str, str], ...] = ()
    password: str | None = field(default=None, repr=False)
    password_origin: str = "passfile"  # noqa: S105 - url, PGPASSWORD, service, passfile
    passfile: Path = field(default_factory=lambda: Path.home() / ".pgpass")

    @property
    def where(self) -> str:
        """``host:port/db`` for messages."""
        return f"{self.host}:{self.port}/{self.dbname}"

    @property
    def describe(self) -> str:
        """``PostgreSQL at host:port/db`` for messages."""
        return f"PostgreSQL at {self.where}"

    def current_password(self) -> str:
        """The password to send now (``""`` when none is known: trust or peer auth)."""
        if self.password is not None:
            return self.password
        found = read_passfile(self.passfile, self.host, self.port, self.dbname, self.user)
        return found or ""

    def connect_kwargs(self) -> dict[str, Any]:
        """psycopg connection arguments (with the password: never print them)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "user": self.user,
            "password": self.current_password(),
            "connect_timeout": CONNECT_TIMEOUT,
            "application_name": "overbrainer",
        }
        kwargs.update(dict(self.options))
        return kwargs

    def scrub(self, text: str) -> str:
        """``text`` with any password this target could send replaced by ``****``."""
        for secret in {self.password, self.current_password()}:
            if secret:
                text = text.replace(secret, "****")
        return text


def parse_url(url: str, environ: Mapping[str, str] | None = None) -> PgTarget:
    """The target named by a ``postgresql://`` URL, completed from libpq's environment
    (``PGHOST``, ``PGPORT``, ``PGDATABASE``, ``PGUSER``) and service file."""
    env = dict(os.environ if environ is None else environ)
    try:
        parts = urlsplit(url)
        port_in_url = parts.port
    except ValueError:
        raise _bad_url() from None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    service: dict[str, str] = {}
    if "service" in query:
        service = _read_service(query.pop("service"), env)
    unknown = sorted(set(query) - _PASSTHROUGH)
    if unknown:
        raise _store_error(
            f"[store] url has unknown parameter(s) {', '.join(unknown)}; it takes service, "
            f"{', '.join(sorted(_PASSTHROUGH))}"
        )
    options = {k: v for k, v in service.items() if k in _PASSTHROUGH}
    options.update(query)

    host = parts.hostname or service.get("host") or env.get("PGHOST") or "localhost"
    try:
        port = int(port_in_url or service.get("port") or env.get("PGPORT") or 5432)
    except ValueError:
        raise _bad_url() from None
    dbname = (
        unquote(parts.path.lstrip("/"))
        or service.get("dbname")
        or env.get("PGDATABASE")
        or "overbrainer"
    )
    user = (
        (unquote(parts.username) if parts.username else "")
        or service.get("user")
        or env.get("PGUSER")
        or _os_user()
    )
    password: str | None = None
    origin = "passfile"
    if parts.password is not None:
        password, origin = unquote(parts.password), "url"
    elif env.get("PGPASSWORD"):
        password, origin = env["PGPASSWORD"], "PGPASSWORD"
    elif service.get("password"):
        password, origin = service["password"], "service"
    passfile = Path(env["PGPASSFILE"]) if env.get("PGPASSFILE") else Path.home() / ".pgpass"
    return PgTarget(
        host=host,
        port=port,
        dbname=dbname,
        user=user,
        options=tuple(sorted(options.items())),
        password=password,
        password_origin=origin,
        passfile=passfile,
    )


def _store_error(message: str) -> OverbrainerError:
    return StoreError(message)


def _bad_url() -> OverbrainerError:
    return _store_error(
        "[store] url is not a valid postgresql://[user@]host[:port]/dbname URL; fix it in "
        "overbrainer.toml or OVERBRAINER_STORE__URL"
    )


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "postgres"


def _read_service(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """The section ``name`` of libpq's service files (the user's first)."""
    import configparser

    files = [
        Path(env["PGSERVICEFILE"]) if env.get("PGSERVICEFILE") else Path.home() / ".pg_service.conf"
    ]
    if env.get("PGSYSCONFDIR"):
        files.append(Path(env["PGSYSCONFDIR"]) / "pg_service.conf")
    files.append(Path("/etc/postgresql-common/pg_service.conf"))
    for path in files:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        except configparser.Error as error:
            raise _store_error(
                f"cannot read the PostgreSQL service file {path} (line "
                f"{getattr(error, 'lineno', '?')}); fix it or drop ?service= from [store] url"
            ) from None
        if parser.has_section(name):
            return {k.lower(): v for k, v in parser.items(name)}
    raise _store_error(
        f"no PostgreSQL service {name!r} in {' or '.join(str(f) for f in files)}; add a "
        f"[{name}] section (host, port, dbname, user) or give them in [store] url"
    )


def passfile_problem(path: Path) -> str | None:
    """Why libpq would ignore the password file at ``path`` (None: it is usable)."""
    try:
        info = path.stat()
    except OSError:
        return f"{path} does not exist"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"{path} is ignored because others may read it: run `chmod 600 {path}`"
    return None


def read_passfile(path: Path, host: str, port: int, dbname: str, user: str) -> str | None:
    """The password libpq's password file gives for this connection, or None.

    Lines are ``hostname:port:database:username:password``; ``*`` matches anything, ``\\:``
    and ``\\\\`` escape; the first matching line wins. Like libpq, a file that others may
    read is ignored.
    """
    if passfile_problem(path) is not None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    # libpq: a socket directory matches "localhost".
    hosts = {host, "localhost"} if host.startswith("/") else {host}
    wanted = (hosts, {str(port)}, {dbname}, {user})
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        fields = _split_passfile_line(raw)
        if len(fields) < 5:
            continue
        if all(f == "*" or f in w for f, w in zip(fields[:4], wanted, strict=True)):
            return fields[4]
    return None


def _split_passfile_line(line: str) -> list[str]:
    fields: list[str] = []
    current: list[str] = []
    chars = iter(line)
    for ch in chars:
        if ch == "\\":
            current.append(next(chars, ""))
        elif ch == ":" and len(fields) < 4:
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
    fields.append("".join(current))
    return fields


class PasswordSource:
    """The function eventsourcing calls for a password before each new connection."""

    def __init__(self, target: PgTarget) -> None:
        self.target = target

    def __call__(self) -> str:
        return self.target.current_password()


class _Sources:
    """Password sources by key, so that ``overbrainer.events.pg:sources.KEY`` resolves."""

    def __init__(self) -> None:
        self._by_key: dict[str, PasswordSource] = {}

    def register(self, target: PgTarget) -> str:
        """Keep a source for ``target``; returns its topic."""
        key = "t" + uuid.uuid4().hex
        self._by_key[key] = PasswordSource(target)
        return f"{__name__}:sources.{key}"

    def __getattr__(self, name: str) -> PasswordSource:
        try:
            return self.__dict__["_by_key"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(name) from None


sources = _Sources()


def eventsourcing_env(target: PgTarget) -> dict[str, str]:
    """eventsourcing's settings for ``target`` (no password in them: a topic fetches it)."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": target.dbname,
        "POSTGRES_HOST": target.host,
        "POSTGRES_PORT": str(target.port),
        "POSTGRES_USER": target.user,
        "POSTGRES_GET_PASSWORD_TOPIC": sources.register(target),
        "POSTGRES_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
        "POSTGRES_LOCK_TIMEOUT": str(LOCK_TIMEOUT),
        # A command makes one call at a time (a follower adds its own LISTEN connection).
        "POSTGRES_POOL_SIZE": str(POOL_SIZE),
        "POSTGRES_MAX_OVERFLOW": str(MAX_OVERFLOW),
        "APPLICATION_RECORDER_TOPIC": "overbrainer.events.pg_recorder:TeamRecorder",
    }


# ---- diagnosis --------------------------------------------------------------------------


def diagnose(target: PgTarget, error: BaseException | str) -> str:
    """What went wrong with ``target``, and the fix, in one sentence (password scrubbed)."""
    text = target.scrub(str(error))
    low = text.lower()
    where = target.describe
    retry = "then run the command again"
    passfile = target.passfile
    line = f"{target.host}:{target.port}:{target.dbname}:{target.user}:PASSWORD"
    if "password authentication failed" in low:
        origin = {
            "url": "OVERBRAINER_STORE__URL",
            "PGPASSWORD": "PGPASSWORD",
            "service": "the service file",
        }.get(target.password_origin, str(passfile))
        return (
            f"{where} refused the password of user {target.user} (taken from {origin}); "
            f"correct it there, {retry}"
        )
    if "no password supplied" in low:
        problem = passfile_problem(passfile) or f"no line of {passfile} matches"
        return (
            f"{where} wants a password for user {target.user} and none was found ({problem}); "
            f"put `{line}` in {passfile} (mode 600) or set PGPASSWORD, {retry}"
        )
    if "does not exist" in low and "database" in low:
        return (
            f"{where}: database {target.dbname} does not exist; create it with `createdb -h "
            f"{target.host} -p {target.port} -U {target.user} {target.dbname}` (or fix "
            f"[store] url), {retry}"
        )
    if "does not exist" in low and "role" in low:
        return (
            f"{where} has no user {target.user}; ask its admin for one or fix the user in "
            f"[store] url, {retry}"
        )
    if "could not translate host name" in low or "name or service not known" in low:
        return f"cannot resolve host {target.host} of {where}; fix [store] url, {retry}"
    if "timeout expired" in low or "timed out" in low or "couldn't get a connection" in low:
        reason = f"did not answer within {CONNECT_TIMEOUT} s"
    elif "refused" in low:
        reason = "refused the connection (is the server running?)"
    elif "closed the connection" in low or "terminating connection" in low:
        reason = "closed the connection (did the server stop or restart?)"
    elif "shutting down" in low or "starting up" in low or "in recovery" in low:
        reason = "is shutting down or starting up"
    elif "lock timeout" in low or "canceling statement due to lock timeout" in low:
        return (
            f"{where}: another process held the event log's lock for over {LOCK_TIMEOUT} s; {retry}"
        )
    elif "permission denied" in low:
        return (
            f"{where}: user {target.user} may not use the event log "
            f"({_first_line(text)}); ask the database's admin for the grants, {retry}"
        )
    else:
        reason = f"failed: {_first_line(text)}"
    return (
        f"cannot reach the event store, {where}: it {reason}; check that the server is up "
        f"(`pg_isready -h {target.host} -p {target.port}`) and [store] url in overbrainer.toml "
        f"or OVERBRAINER_STORE__URL, {retry}"
    )


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"


def missing_driver() -> StoreUnavailable:
    """The error for a PostgreSQL URL without psycopg installed."""
    return StoreUnavailable(
        f"the team store ([store] url = postgresql://…) needs psycopg: {_INSTALL}"
    )


def is_driver_missing(error: ImportError) -> bool:
    """Whether ``error``, raised importing the store's PostgreSQL side, is psycopg or its pool
    missing (the user's to install: :func:`missing_driver`); any other failure is ours."""
    name = str(error.name)
    return name in ("psycopg", "psycopg_pool") or name.startswith(("psycopg.", "psycopg_pool."))


def quiet_driver_logs() -> None:
    """Silence psycopg's loggers (call before using psycopg or its pool).

    psycopg_pool logs every failed reconnection at WARNING; without a handler Python prints
    them on stderr. The store reports failures itself, once and plainly. (Not done at import:
    ``logging`` is not worth loading for commands that never reach psycopg.)
    """
    import logging

    logger = logging.getLogger("psycopg")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def probe(target: PgTarget) -> str | None:
    """Connect once, directly: None when the server takes us, else the reason and fix."""
    try:
        import psycopg
    except ImportError:
        return str(missing_driver())
    quiet_driver_logs()
    try:
        with psycopg.connect(**target.connect_kwargs()):
            return None
    except psycopg.Error as error:
        return diagnose(target, error)


# ---- notifications ----------------------------------------------------------------------


class Listener:
    """A connection listening on the log's channel: :meth:`wait` returns when another
    process appended (to any run), or after ``timeout``."""

    def __init__(self, target: PgTarget, channel: str = CHANNEL) -> None:
        try:
            import psycopg
            from psycopg import sql
        except ImportError:
            raise missing_driver() from None
        quiet_driver_logs()
        self._target = target
        try:
            self._conn: Any = psycopg.connect(**target.connect_kwargs(), autocommit=True)
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except psycopg.Error as error:
            raise StoreUnavailable(diagnose(target, error)) from None

    def wait(self, timeout: float) -> bool:
        """Whether a notification came within ``timeout`` seconds (all pending are taken)."""
        import psycopg

        try:
            got = False
            for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                got = True
            if got:  # drain what else arrived, so one burst wakes us once
                for _ in self._conn.notifies(timeout=0.0):
                    pass
            return got
        except psycopg.Error as error:
            reason = probe(self._target) or diagnose(self._target, error)
            raise StoreUnavailable(reason) from None

    def close(self) -> None:
        """Stop listening."""
        self._conn.close()
