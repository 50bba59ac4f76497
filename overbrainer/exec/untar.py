"""A checked tar reader fed chunk by chunk, hashing each file as its bytes arrive.

A download is a tar stream (``tar -cf -``, run by ``find -exec … +``, so possibly several
archives back to back). `Unpacker` takes it in chunks of any size, as they come off the
wire, and writes each regular file into a staging directory while feeding the same bytes to
its SHA-256: by the end of the stream every file is on disk *and* hashed, with no second
pass over it and no whole file ever held in memory (a chunk, a header and at most one
bounded metadata record at a time).

Only directories and regular files whose names lie under the requested paths (and outside
``checkpoint-*`` directories) are accepted; anything else — a link, a device, a sparse
file, a name outside them, a damaged header, a stream cut short — raises `ExecError` and
stops the download. GNU long names and pax ``path`` / ``size`` records are honoured, as
written by GNU tar, busybox and bsdtar.

hashlib and file writes let go of the GIL for big buffers, so a worker thread running this
uses a second core while the transfer keeps the first.
"""

import hashlib
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path

from overbrainer.exec.base import Arrived, ExecError
from overbrainer.exec.manifest import is_checkpoint_dir

_BLOCK = tarfile.BLOCKSIZE
_ZERO_BLOCK = bytes(_BLOCK)
# A pax record or a GNU long name is metadata: one bigger than this is no honest stream.
_MAX_META = 1 << 20
_META_TYPES = frozenset(
    {tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}
)
_FILE_TYPES = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE})
_ENCODING = "utf-8"
_ERRORS = "surrogateescape"  # names that are not UTF-8 keep their bytes, as on the target
# Bytes handed to one write(2). A big write makes Linux back it with large page-cache folios,
# whose allocation costs several times the copy on a VM whose free memory goes back to the
# host (measured: 1 GiB in 4 MiB writes, 2-3 s of system time; in 128 KiB writes, 0.3 s).
_WRITE = 128 << 10


def check_member_name(name: str, paths: Sequence[str]) -> str:
    """``name`` (a tar member) if it lies under one of ``paths`` and outside the checkpoints
    below them."""
    clean = name.removeprefix("./").rstrip("/")
    parts = clean.split("/")
    if (
        not clean
        or clean.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or any(char in clean for char in "\n\r\0\\")
        or not any(_within(clean, rel) for rel in paths)
    ):
        shown = clean[:200].encode("unicode_escape").decode("ascii")
        raise ExecError(f"the download held an unexpected entry {shown!r}; nothing was replaced")
    return clean


def _within(clean: str, rel: str) -> bool:
    """Whether ``clean`` is ``rel`` or lies under it, outside any checkpoint directory
    below it (``rel`` itself may be one: a checkpoint asked for by name)."""
    if clean == rel:
        return True
    if not clean.startswith(rel + "/"):
        return False
    below = clean[len(rel) + 1 :].split("/")
    return not any(is_checkpoint_dir(part) for part in below[:-1])


def _unreadable(why: str) -> ExecError:
    return ExecError(f"the download was not a readable tar stream ({why}); nothing was replaced")


def parse_pax(data: bytes) -> dict[str, str]:
    """The records of a pax extended header (``"LEN key=value\\n"`` each)."""
    records: dict[str, str] = {}
    at = 0
    while at < len(data):
        if data[at] == 0:  # the block's padding
            break
        space = data.find(b" ", at)
        if space < 0 or not data[at:space].isdigit():
            raise _unreadable("a damaged pax header")
        length = int(data[at:space])
        end = at + length
        if length <= space - at + 1 or end > len(data) or data[end - 1 : end] != b"\n":
            raise _unreadable("a damaged pax header")
        key, equals, value = data[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise _unreadable("a damaged pax header")
        records[key.decode(_ENCODING, _ERRORS)] = value.decode(_ENCODING, _ERRORS)
        at = end
    return records


class Unpacker:
    """Extract a tar stream into ``staging`` as it is fed; see the module's docstring.

    Call `feed` with each chunk, then `finish` at the end of the stream (it raises if the
    stream stopped inside a member); `close` releases an open file after an error.
    ``arrived`` maps each file written (``/``-separated, relative to ``staging``) to what
    arrived of it.
    """

    def __init__(self, staging: Path, paths: Sequence[str]) -> None:
        self.staging = staging
        self.paths = list(paths)
        self.arrived: dict[str, Arrived] = {}
        self.received = 0
        self._header = bytearray()  # a header block being gathered
        self._meta: bytearray | None = None  # a pax record or long name being gathered
        self._meta_type = b""
        self._left = 0  # bytes of the current member's data still to come
        self._padding = 0  # bytes of padding after it
        self._fd: int | None = None
        self._name = ""
        self._size = 0
        self._digest = hashlib.sha256()
        self._long_name: str | None = None
        self._pax: dict[str, str] = {}
        self._global: dict[str, str] = {}

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take the next chunk of the stream: write (and hash) what belongs to files."""
        view = memoryview(data).cast("B")
        self.received += len(view)
        while view:
            if self._left:
                take = view[: self._left]
                self._member_data(take)
                self._left -= len(take)
                view = view[len(take) :]
                if not self._left:
                    self._member_end()
            elif self._padding:
                skip = min(self._padding, len(view))
                self._padding -= skip
                view = view[skip:]
            else:
                take = view[: _BLOCK - len(self._header)]
                self._header += take
                view = view[len(take) :]
                if len(self._header) == _BLOCK:
                    block = bytes(self._header)
                    self._header.clear()
                    self._header_block(block)

    def finish(self) -> dict[str, Arrived]:
        """End of the stream: every member must be whole. Returns ``arrived``."""
        # A member's data, its header, or the metadata announcing it, still to come.
        pending = self._meta is not None or self._pax or self._long_name is not None
        if self._left or self._header or pending:
            self.close()
            raise _unreadable("it was cut short")
        return self.arrived

    def close(self) -> None:
        """Close the file being written, if any (after an error)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- members ----------------------------------------------------------------------

    def _header_block(self, block: bytes) -> None:
        if block == _ZERO_BLOCK:
            return  # an archive's end (another may follow) or its record's padding
        try:
            info = tarfile.TarInfo.frombuf(block, _ENCODING, _ERRORS)
        except tarfile.HeaderError as exc:
            raise _unreadable(str(exc) or "a damaged header") from None
        size = info.size
        if info.type in _META_TYPES:
            if size > _MAX_META:
                raise _unreadable("a metadata record too big to be one")
            self._meta = bytearray()
            self._meta_type = info.type
            self._begin(size)
            if not size:
                self._member_end()
            return
        records = {**self._global, **self._pax}
        self._pax = {}
        name = records.get("path", self._long_name if self._long_name is not None else info.name)
        self._long_name = None
        if "size" in records:
            if not records["size"].isdigit():
                raise _unreadable("a damaged pax size")
            size = int(records["size"])
        name = check_member_name(name, self.paths)
        target = self.staging / name
        if info.type == tarfile.DIRTYPE:
            target.mkdir(parents=True, exist_ok=True)
            self._begin(size)  # a directory has no data; any is skipped
            return
        if info.type not in _FILE_TYPES:
            raise ExecError(
                f"the download held {name!r}, which is not a regular file; nothing was replaced"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._name, self._size, self._digest = name, size, hashlib.sha256()
        self._begin(size)
        if not size:
            self._member_end()

    def _begin(self, size: int) -> None:
        self._left = size
        self._padding = -size % _BLOCK

    def _member_data(self, data: memoryview) -> None:
        if self._meta is not None:
            self._meta += data
            return
        if self._fd is None:
            return  # a directory's data (there is none in an honest stream)
        self._digest.update(data)
        while data:
            written = os.write(self._fd, data[:_WRITE])
            data = data[written:]

    def _member_end(self) -> None:
        if self._meta is not None:
            meta, self._meta = bytes(self._meta), None
            if self._meta_type == tarfile.XHDTYPE:
                self._pax.update(parse_pax(meta))
            elif self._meta_type == tarfile.XGLTYPE:
                self._global.update(parse_pax(meta))
            elif self._meta_type == tarfile.GNUTYPE_LONGNAME:
                self._long_name = meta.split(b"\0", 1)[0].decode(_ENCODING, _ERRORS)
            return  # a long link name: its member is a link, refused when it comes
        if self._fd is not None:
            self.close()
            self.arrived[self._name] = Arrived(self._digest.hexdigest(), self._size)
