"""A short-lived copy of one Runpod catalog answer under the project's ``.overbrainer/`` (or,
outside a project, the user's cache directory), so that ``pod gpus`` and ``pod
datacenters`` run again within a minute read Runpod once.

The file holds what Runpod listed (the raw entries: they are parsed and sanitized again on
every read, exactly as a fresh answer is), the API address and the query it answers, and
when it was written. It is used only when all of these match and it is younger than
:data:`MAX_AGE` by this machine's clock (a clock that went back makes it stale, never
fresh). A file that is not ours (a symlink, another owner, writable by others), too large,
unreadable or of another shape is ignored, and replaced at the next write. Writes are
atomic (a temporary file renamed over it) and best effort: a read-only project only
means no cache. The API key never goes in it.
"""

import contextlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["MAX_AGE", "cache_path", "read_cached", "user_cache_path", "write_cached"]

MAX_AGE = 60.0
"""Seconds a cached answer is used for (stock changes quickly)."""

_MAX_BYTES = 4 * 1024 * 1024
_VERSION = 1


def cache_path(project_dir: Path, kind: str) -> Path:
    """``.overbrainer/cache/catalog-<kind>.json`` of the project."""
    return project_dir / ".overbrainer" / "cache" / f"catalog-{kind}.json"


def user_cache_path(environ: Mapping[str, str], kind: str) -> Path:
    """``$XDG_CACHE_HOME/overbrainer/catalog-<kind>.json`` (``~/.cache`` when it is unset or
    not absolute, as the XDG spec says): the copy of a command run outside a project."""
    base = environ.get("XDG_CACHE_HOME", "")
    home = Path(environ.get("HOME") or Path.home())
    root = Path(base) if base and Path(base).is_absolute() else home / ".cache"
    return root / "overbrainer" / f"catalog-{kind}.json"


def read_cached(path: Path, base_url: str, query: dict[str, str]) -> list[object] | None:
    """The entries cached at ``path`` for ``base_url`` and ``query``, or None (no usable
    cache: missing, stale, foreign, corrupt)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.getuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or info.st_size > _MAX_BYTES
        ):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    written = data.get("written_at")
    if isinstance(written, bool) or not isinstance(written, int | float):
        return None
    age = time.time() - float(written)
    if not 0 <= age <= MAX_AGE:
        return None
    if (
        data.get("version") != _VERSION
        or data.get("base_url") != base_url
        or data.get("query") != query
    ):
        return None
    entries = data.get("entries")
    return entries if isinstance(entries, list) else None


def write_cached(path: Path, base_url: str, query: dict[str, str], entries: list[object]) -> None:
    """Keep ``entries`` (Runpod's answer for ``base_url`` and ``query``) at ``path``,
    atomically; nothing happens when the project cannot take it."""
    payload = json.dumps(
        {
            "version": _VERSION,
            "base_url": base_url,
            "query": query,
            "written_at": time.time(),
            "entries": entries,
        }
    ).encode()
    if len(payload) > _MAX_BYTES:
        return
    try:
        # Private from the start: the user's cache directory may be shared with others.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=".catalog-", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        Path(temp).replace(path)
    except OSError:
        with contextlib.suppress(OSError):
            Path(temp).unlink()
