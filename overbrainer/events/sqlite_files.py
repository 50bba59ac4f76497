"""SQLite files under I/O failure: which errors mean a damaged file and which a disk or
permission problem, the message for each, and how to read the log without writing.

A damaged cache (the runs view) may be thrown away and rebuilt; a read-only or full disk
is no damage, and deleting a file because of it would lose what cannot be rewritten.
"""

import errno
import shlex
import sqlite3
from pathlib import Path
from urllib.parse import quote

# SQLite's primary result codes (sqlite3.h); extended codes carry them in their low byte.
_PERM, _BUSY, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 3, 5, 8, 10, 11, 13, 14, 26

_TABLE = "stored_events"  # eventsourcing's table of the log


def sqlite_error(error: BaseException) -> sqlite3.Error | None:
    """The ``sqlite3`` error behind ``error`` (eventsourcing wraps them), if any."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        found = pending.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, sqlite3.Error):
            return found
        for inner in (found.__cause__, found.__context__, *found.args):
            if isinstance(inner, BaseException):
                pending.append(inner)
    return None


def _code(error: BaseException) -> int | None:
    found = sqlite_error(error)
    code = getattr(found, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def is_damage(error: BaseException) -> bool:
    """Whether SQLite found the file itself damaged (not a database, or malformed)."""
    return _code(error) in (_CORRUPT, _NOTADB)


def is_busy(error: BaseException) -> bool:
    """Whether SQLite said another connection was in the way ("database is locked")."""
    return _code(error) == _BUSY


def is_io_failure(error: BaseException) -> bool:
    """Whether ``error`` is the disk's or the permissions' (read-only, full, cannot open,
    I/O error), so the file may be fine and must be kept."""
    if isinstance(error, OSError):
        return True
    return _code(error) in (_PERM, _READONLY, _IOERR, _FULL, _CANTOPEN)


def io_problem(path: Path, error: BaseException) -> str | None:
    """What a failure on the SQLite file ``path`` means and how to fix it, in one
    sentence; None when ``error`` is none of the disk, permission or damage failures."""
    parent = path.parent
    if isinstance(error, OSError) and sqlite_error(error) is None:
        number = error.errno
        if number in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return _full(path)
        if number in (errno.EACCES, errno.EPERM, errno.EROFS):
            return _read_only(path)
        return (
            f"cannot use {parent} for {path.name} ({error.strerror or error}); make it a "
            "directory you can write to, then run the command again"
        )
    code = _code(error)
    if code in (_CORRUPT, _NOTADB):
        aside = shlex.quote(str(path))
        return (
            f"{path} is damaged (not a valid SQLite database); restore it from a backup, or "
            f"move it aside (`mv {aside} {aside}.damaged`) to start a new, empty log"
        )
    if code == _FULL:
        return _full(path)
    if code in (_READONLY, _PERM):
        return _read_only(path)
    if code == _CANTOPEN:
        return (
            f"cannot open {path}: {parent} is missing, read-only or not a directory, or "
            f"{path.name} is not a file; fix that, then run the command again"
        )
    if code == _IOERR:
        return (
            f"cannot read or write {path}: disk I/O error (the disk may be full, read-only "
            "or failing); free some space or fix the disk, then run the command again"
        )
    return None


def _full(path: Path) -> str:
    return (
        f"the disk holding {path} is full (or a file-size limit is set); free some space, "
        "then run the command again"
    )


def _read_only(path: Path) -> str:
    where = shlex.quote(str(path.parent))
    return (
        f"{path} cannot be written: it or {path.parent} is read-only (permissions or a "
        f"read-only file system); make them writable (`chmod -R u+w {where}`), then run the "
        "command again"
    )


class Unreadable(Exception):
    """The log exists but cannot be read without writing; the message says why and what
    to do."""


def read_only_env(path: Path) -> dict[str, str]:
    """eventsourcing's settings to read the SQLite log at ``path`` without writing it, or
    creating anything, even on a read-only or full disk.

    No file, or a file without the log's table (emptied): an empty log in memory. Else the
    file opened with ``mode=ro``. A log in write-ahead mode needs its ``-shm`` index, which
    ``mode=ro`` must create when no other process holds it open: where it cannot (a
    read-only directory, a full disk), the file is read as ``immutable``, which skips that
    index and every lock — sound only when the write-ahead journal is empty (all of the log
    is in the main file), which is checked first; a journal that still holds events cannot
    be read that way and raises :class:`Unreadable`.
    """
    if not path.exists():
        return _empty()
    base = f"file:{quote(str(path.absolute()))}"
    read_only = f"{base}?mode=ro"
    try:
        found = _log_mode(read_only)
    except sqlite3.Error as error:
        if not is_io_failure(error):
            raise
        journal = path.with_name(path.name + "-wal")
        try:
            pending = journal.stat().st_size > 0
        except FileNotFoundError:
            pending = False
        except OSError as stat_error:
            raise Unreadable(io_problem(journal, stat_error) or str(stat_error)) from None
        if pending:
            raise Unreadable(
                f"cannot read {path} without writing: its write-ahead journal {journal.name} "
                f"holds events SQLite can only read with an index it cannot create "
                f"({io_problem(path, error) or error})"
            ) from None
        read_only = f"{base}?mode=ro&immutable=1"
        found = _log_mode(read_only)
    if found is None:
        return _empty()
    if found != "wal" and "immutable=1" not in read_only:
        # eventsourcing switches a log to write-ahead mode on opening, which a read-only
        # connection cannot do (every log it wrote is in that mode already): such a file is
        # opened as any command opens it.
        return writable_env(path)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": read_only,
        "CREATE_TABLE": "false",
        "SQLITE_LOCK_TIMEOUT": "30",
    }


def writable_env(path: Path) -> dict[str, str]:
    """eventsourcing's settings to read and append to the SQLite log at ``path``."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        # Another process may hold the write lock for a moment; wait rather than fail.
        "SQLITE_LOCK_TIMEOUT": "30",
    }


def _log_mode(uri: str) -> str | None:
    """The journal mode of the database at ``uri`` when it holds the log's table, else
    None (raises sqlite3 errors)."""
    db = sqlite3.connect(uri, uri=True, timeout=30)
    try:
        row = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (_TABLE,)
        ).fetchone()
        if row is None:
            return None
        mode = db.execute("PRAGMA journal_mode").fetchone()
        return str(mode[0]).lower() if mode else ""
    finally:
        db.close()


def _empty() -> dict[str, str]:
    # eventsourcing's in-memory store: no file is touched.
    return {"PERSISTENCE_MODULE": "eventsourcing.popo"}
