"""Moving run directories: what is uploaded, tar streams out, checked extraction in.

Upload: everything in the run directory except ``ssh/`` (the run's keys), the projections
``run.json`` / ``pod.json`` and overbrainer's own staging directory. Download: only regular
files under the requested result paths, never below a ``checkpoint-*`` directory; anything
else in the stream is refused. A download replaces each requested path as a whole, so a
file left from an earlier attempt never survives as an "extra".
"""

import io
import os
import shutil
import stat
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

from overbrainer.exec.base import ExecError
from overbrainer.exec.manifest import is_checkpoint_dir, list_files
from overbrainer.exec.shell import check_rel_path

NEVER_UPLOADED = frozenset({"ssh", "run.json", "pod.json"})
STAGING_DIR = ".overbrainer-download"
_CHUNK = 1 << 16
_STREAM_BUFFER = 1 << 20
_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE


@dataclass(frozen=True)
class Entry:
    """One member of an outgoing tar stream: a directory, a file on disk, or bytes."""

    name: str
    source: Path | bytes | None  # None: a directory
    mode: int = 0o644


def upload_entries(local_dir: Path) -> list[Entry]:
    """What `upload` sends from ``local_dir``: directories and files, links followed."""
    entries: list[Entry] = []
    seen: set[tuple[int, int]] = set()

    def visit(directory: Path, prefix: str) -> None:
        info = directory.stat()
        key = (info.st_dev, info.st_ino)
        if key in seen:  # a symlink loop
            return
        seen.add(key)
        for child in sorted(directory.iterdir()):
            if not prefix and (child.name in NEVER_UPLOADED or child.name == STAGING_DIR):
                continue
            name = f"{prefix}{child.name}"
            try:
                mode = child.stat().st_mode
            except FileNotFoundError:  # a dangling link
                continue
            if stat.S_ISDIR(mode):
                entries.append(Entry(name, None, 0o755))
                visit(child, f"{name}/")
            elif stat.S_ISREG(mode):
                entries.append(Entry(name, child, 0o755 if mode & 0o111 else 0o644))

    visit(local_dir, "")
    return entries


def tar_chunks(entries: Sequence[Entry]) -> Iterator[bytes]:
    """A POSIX (pax) tar stream of ``entries`` in chunks, reading files as it goes.

    Owners are written as 0 with no names, so nothing about this machine's users leaves it.
    A file that shrinks while being read is padded to its announced size.
    """
    total = 0
    now = int(time.time())
    for entry in entries:
        info = tarfile.TarInfo(entry.name)
        info.mode = entry.mode
        info.mtime = now
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if entry.source is None:
            info.type = tarfile.DIRTYPE
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            total += len(header)
            yield header
            continue
        if isinstance(entry.source, bytes):
            info.size = len(entry.source)
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            padding = -info.size % _BLOCK
            total += len(header) + info.size + padding
            yield header + entry.source + b"\0" * padding
            continue
        with entry.source.open("rb") as handle:
            info.size = os.fstat(handle.fileno()).st_size
            info.mtime = int(os.fstat(handle.fileno()).st_mtime)
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            total += len(header)
            yield header
            left = info.size
            while left > 0:
                chunk = handle.read(min(_CHUNK, left)) or b"\0" * min(_CHUNK, left)
                left -= len(chunk)
                total += len(chunk)
                yield chunk
        padding = -info.size % _BLOCK
        total += padding
        yield b"\0" * padding
    end = b"\0" * (2 * _BLOCK)
    total += len(end)
    yield end + b"\0" * (-total % _RECORD)


def check_member_name(name: str, paths: Sequence[str]) -> str:
    """``name`` (a tar member) if it lies under one of ``paths`` and outside checkpoints."""
    clean = name.removeprefix("./").rstrip("/")
    parts = clean.split("/")
    inside = any(clean == rel or clean.startswith(rel + "/") for rel in paths)
    if (
        not clean
        or clean.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or any(is_checkpoint_dir(part) for part in parts[:-1])
        or any(char in clean for char in "\n\r\0\\")
        or not inside
    ):
        shown = clean[:200].encode("unicode_escape").decode("ascii")
        raise ExecError(f"the download held an unexpected entry {shown!r}; nothing was replaced")
    return clean


def extract_tar(archive: Path, staging: Path, paths: Sequence[str]) -> None:
    """Extract the (possibly concatenated) tar ``archive`` into ``staging``, checking each entry.

    Only directories and regular files under ``paths`` are accepted; a link, a device or a
    name outside ``paths`` (or inside a checkpoint) fails the whole download.
    """
    with archive.open("rb") as stream:
        extract_stream(stream, staging, paths)


class Readable(Protocol):
    """A binary stream: a file, a pipe, a raw stream."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Up to ``size`` bytes; ``b""`` at the end."""
        ...


class _Counting(io.RawIOBase):
    """A readable stream that counts what was read from ``inner``."""

    def __init__(self, inner: Readable) -> None:
        self.inner = inner
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "WriteableBuffer") -> int:
        target = memoryview(buffer).cast("B")
        data = self.inner.read(len(target)) or b""
        target[: len(data)] = data
        self.count += len(data)
        return len(data)


def extract_stream(stream: Readable, staging: Path, paths: Sequence[str]) -> None:
    """Like `extract_tar`, from a stream read once from start to end (a pipe, say), so the
    archive never has to be stored first. An empty stream is an empty download."""
    counted = _Counting(stream)
    reader = io.BufferedReader(counted, _STREAM_BUFFER)
    try:
        # Streaming mode ("r|") reads forward only; ignore_zeros reads on past the end
        # marker of one archive into the next (`find … -exec tar … {} +` may write several).
        with tarfile.open(
            fileobj=reader, mode="r|", ignore_zeros=True, bufsize=_STREAM_BUFFER
        ) as tar:
            for member in tar:
                name = check_member_name(member.name, paths)
                target = staging / name
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isreg():
                    source = tar.extractfile(member)
                    assert source is not None
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with source, target.open("wb") as out:
                        shutil.copyfileobj(source, out, _STREAM_BUFFER)
                else:
                    raise ExecError(
                        f"the download held {name!r}, which is not a regular file; "
                        "nothing was replaced"
                    )
    except tarfile.ReadError as exc:
        if counted.count == 0:
            return  # nothing at all: no result file exists on the target
        raise ExecError(f"the download was not a readable tar stream ({exc})") from None
    except tarfile.TarError as exc:
        raise ExecError(f"the download was not a readable tar stream ({exc})") from None


def fresh_staging(local_dir: Path) -> Path:
    """An empty staging directory inside ``local_dir`` (any earlier one removed)."""
    staging = local_dir / STAGING_DIR
    remove(staging)
    staging.mkdir(parents=True)
    return staging


def copy_results(source: Path, staging: Path, paths: Sequence[str]) -> None:
    """Copy the result files under ``paths`` of a local ``source`` into ``staging``."""
    for name in list_files(source, paths):
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)


def replace_paths(staging: Path, local_dir: Path, paths: Sequence[str]) -> None:
    """Move each of ``paths`` from ``staging`` into ``local_dir``, replacing what was there.

    A path the target did not have is removed here too, so the local copy mirrors it.
    """
    for rel in paths:
        check_rel_path(rel, name="a result path")
        target = local_dir / rel
        remove(target)
        new = staging / rel
        if new.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            new.rename(target)
    remove(staging)


def remove(path: Path) -> None:
    """Remove ``path`` whatever it is (a directory tree, a file, a link); absent is fine."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def same_directory(first: Path, second: Path) -> bool:
    """Whether both paths name one existing directory."""
    try:
        return first.samefile(second)
    except FileNotFoundError:
        return False
