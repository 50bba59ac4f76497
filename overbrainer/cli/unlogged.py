"""Runs whose directories are in ``runs/`` but whose history the log does not hold: a log
emptied (a 0-byte ``events.sqlite``), replaced by another project's, or a ``[store] url``
that now names another store.

Such a log must never read as "no runs yet": that hides the runs and invites a new run to be
appended to the wrong log. The check here reads only directory names and costs a directory
listing, and read commands make it only once the log has said "no runs" or "no such run",
so the listing of a healthy project pays nothing for it. Nothing is written: the message
says what is wrong and what to do.
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from overbrainer.cli.context import Invocation
from overbrainer.errors import OverbrainerError
from overbrainer.events.errors import UnknownRun

_NAMED = 3  # run directories named in a message; the rest are counted


class UnloggedRuns(OverbrainerError):
    """The log holds no runs while ``runs/`` holds run directories."""


def run_dirs(project_dir: Path) -> list[str]:
    """The names in the project's ``runs/`` that are run directories, oldest first."""
    from overbrainer.events.ids import looks_like_run_id

    try:
        with os.scandir(project_dir / "runs") as entries:
            found = [e.name for e in entries if looks_like_run_id(e.name) and e.is_dir()]
    except OSError:
        return []
    return sorted(found)


def _log_name(invocation: Invocation, where: str) -> str:
    """The log as a message names it: its file (relative to the project when inside it),
    else the store's description."""
    from overbrainer.cli.common import project_path

    path = _sqlite_log(invocation)
    if path is None:
        return f"the event store {where}"
    return f"the event log {project_path(invocation, path)}"


def _dirs_text(dirs: Sequence[str]) -> str:
    shown = ", ".join(dirs[:_NAMED])
    more = len(dirs) - _NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def _fix(invocation: Invocation, where: str) -> str:
    """What to do about a log that lacks runs whose directories are here (no comma or
    semicolon ends it, so a caller may go on)."""
    from overbrainer.cli.common import project_path

    path = _sqlite_log(invocation)
    restore = (
        f"restore {project_path(invocation, path)} from a backup"
        if path is not None
        else f"restore {where} from its backup"
    )
    return (
        f"{restore}, or point [store] url (overbrainer.toml or OVERBRAINER_STORE__URL) at "
        "the store that holds them"
    )


_UNTOUCHED = "; nothing was written to the log"


def _empty_log_text(subject: str, dirs: Sequence[str]) -> str:
    count = len(dirs)
    directories = f"{count} run director{'y' if count == 1 else 'ies'}"
    return (
        f"{subject} holds no runs, yet runs/ holds {directories} ({_dirs_text(dirs)}): the "
        "log was emptied or replaced since they were made"
    )


def no_runs(invocation: Invocation, store: Any) -> UnloggedRuns | None:
    """The error for a log (``store``) that holds no runs while ``runs/`` holds run
    directories; None when ``runs/`` holds none (a project with no runs yet)."""
    dirs = run_dirs(invocation.project_dir)
    if not dirs or store.max_position() != 0:
        return None
    return UnloggedRuns(
        f"{_empty_log_text(_log_name(invocation, store.where), dirs)}; "
        f"{_fix(invocation, store.where)} (or, to start afresh, move runs/ aside)" + _UNTOUCHED
    )


def check_listing(invocation: Invocation) -> None:
    """Refuse to list no runs when the log is empty but ``runs/`` is not."""
    if not run_dirs(invocation.project_dir):
        return
    from overbrainer.cli.common import open_store

    store = open_store(invocation, read_only=True)
    try:
        found = no_runs(invocation, store)
    finally:
        store.close()
    if found is not None:
        raise found


def explained(invocation: Invocation, error: UnknownRun) -> UnknownRun:
    """``error`` with what the project's files tell: the run's directory is here though the
    log lacks it (the log emptied, replaced or pointed elsewhere); ``error`` itself when
    nothing tells more."""
    run_id, where = error.run_id, error.where
    if run_id is None or where is None:
        return error
    dirs = run_dirs(invocation.project_dir)
    if run_id not in dirs:
        return error
    from overbrainer.cli.common import open_store

    try:
        store = open_store(invocation, read_only=True)
        try:
            empty = store.max_position() == 0
        finally:
            store.close()
    except OverbrainerError:
        return error
    if empty:
        why = _empty_log_text("the log", dirs)
    else:
        why = (
            f"the log holds other runs, yet runs/{run_id}/ is here: the log was replaced since "
            "the run was made, or the directory came from another checkout"
        )
    return UnknownRun.of(run_id, where, f"{why}; {_fix(invocation, where)}{_UNTOUCHED}")


def _sqlite_log(invocation: Invocation) -> Path | None:
    """The project's SQLite log file, None for a team store (or a url not read here)."""
    from overbrainer.cli.common import store_url
    from overbrainer.events.locations import sqlite_path

    try:
        return sqlite_path(store_url(invocation), invocation.project_dir)
    except OverbrainerError:
        return None


def bare_log(invocation: Invocation) -> bool | None:
    """Whether the SQLite log is missing or 0 bytes (so it holds no runs, and a command
    opening it to write would make it a new log); None for a team store."""
    path = _sqlite_log(invocation)
    if path is None:
        return None
    try:
        return path.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


def require_logged(invocation: Invocation, run_id: str) -> None:
    """Refuse, read-only, a run the log does not hold, before a command opens the log for
    writing (which would make an emptied file a new, empty log). Only a log file missing or
    emptied is read first: reading a log in write-ahead mode leaves SQLite's -wal and -shm
    files beside it, which the command's own opening would not."""
    if bare_log(invocation) is not True:
        return
    from overbrainer.cli.common import open_store

    store = open_store(invocation, read_only=True)
    try:
        store.get(run_id)
    except UnknownRun as error:
        raise explained(invocation, error) from None
    finally:
        store.close()


def before_train(invocation: Invocation) -> str | None:
    """The warning for ``train`` about to append to a log that holds no runs while
    ``runs/`` holds run directories; None otherwise (or when the log cannot be read here:
    the command's own opening of it says why)."""
    dirs = run_dirs(invocation.project_dir)
    if not dirs:
        return None
    bare = bare_log(invocation)
    if bare is False:
        # A SQLite log with content is not opened here (reading it would leave SQLite's
        # -wal and -shm files, and `train --check` creates nothing); read commands tell
        # of one that holds no runs.
        return None
    from overbrainer.cli.common import open_store

    try:
        store = open_store(invocation, read_only=True)
        try:
            if store.max_position() != 0:
                return None
            where = store.where
        finally:
            store.close()
    except OverbrainerError:
        return None
    return (
        f"{_empty_log_text(_log_name(invocation, where), dirs)}; a new run is recorded in it "
        "all the same "
        f"(to have their history back: {_fix(invocation, where)})"
    )
