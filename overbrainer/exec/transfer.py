"""Moving run directories: what is uploaded, tar streams out, checked extraction in.

Upload: everything in the run directory except ``ssh/`` (the run's keys), the projections
``run.json`` / ``pod.json`` and overbrainer's own staging directory. Download: only regular
files under the requested result paths, never below a ``checkpoint-*`` directory (unless a
path names that checkpoint itself); anything else in the stream is refused. A download
replaces each requested path as a whole, so a file left from an earlier attempt never
survives as an "extra" — except the checkpoint folders already home under it that the
download does not bring, which stay.
"""

import os
import shutil
import stat
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from overbrainer.exec.base import Arrived
from overbrainer.exec.manifest import is_checkpoint_dir, list_files
from overbrainer.exec.shell import check_rel_path
from overbrainer.exec.untar import Unpacker

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
    A file that shrinks while being read is padded to its announced size. No chunk is
    empty.
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
        if padding:  # never an empty chunk: a reader may take one for the stream's end
            yield b"\0" * padding
    end = b"\0" * (2 * _BLOCK)
    total += len(end)
    yield end + b"\0" * (-total % _RECORD)


def extract_tar(archive: Path, staging: Path, paths: Sequence[str]) -> dict[str, Arrived]:
    """Extract the (possibly concatenated) tar ``archive`` into ``staging``, checking each entry
    (`Unpacker`); what arrived of each file, hashed on the way.

    Only directories and regular files under ``paths`` are accepted; a link, a device or a
    name outside ``paths`` (or inside a checkpoint) fails the whole download.
    """
    with archive.open("rb") as stream:
        return extract_stream(stream, staging, paths)


class Readable(Protocol):
    """A binary stream: a file, a pipe, a raw stream."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Up to ``size`` bytes; ``b""`` at the end."""
        ...


def extract_stream(stream: Readable, staging: Path, paths: Sequence[str]) -> dict[str, Arrived]:
    """Like `extract_tar`, from a stream read once from start to end (a pipe, say), so the
    archive never has to be stored first. An empty stream is an empty download."""
    unpacker = Unpacker(staging, paths)
    try:
        while chunk := stream.read(_STREAM_BUFFER):
            unpacker.feed(chunk)
        return unpacker.finish()
    finally:
        unpacker.close()


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

    A path the target did not have is removed here too, so the local copy mirrors it. A
    path inside another of ``paths`` (a checkpoint asked for inside ``output``) came with
    that one.
    """
    for rel in paths:
        check_rel_path(rel, name="a result path")
        if any(rel.startswith(f"{other}/") for other in paths):
            continue
        target = local_dir / rel
        new = staging / rel
        if _merge_around_checkpoints(target, new):
            continue
        remove(target)
        if new.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            new.rename(target)
    remove(staging)


def _merge_around_checkpoints(target: Path, new: Path) -> bool:
    """Replace the directory ``target`` by ``new`` while the ``checkpoint-*`` folders in it
    stay where they are: they came home verified on their own while the job ran, and a
    result download (which leaves checkpoints out) must not take them away. Everything
    else of ``target`` is replaced, a checkpoint ``new`` brings too (asked for by its path,
    it is what the download hashed and the verification checks). False (nothing done)
    when ``target`` holds no checkpoint folder to keep."""
    if not new.is_dir() or target.is_symlink() or not target.is_dir():
        return False
    brought = {child.name for child in new.iterdir()}
    kept = {
        c.name
        for c in target.iterdir()
        if is_checkpoint_dir(c.name) and _real_dir(c) and c.name not in brought
    }
    if not kept:
        return False
    for child in target.iterdir():
        if child.name not in kept:
            remove(child)
    for child in new.iterdir():
        child.rename(target / child.name)
    remove(new)
    return True


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


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
