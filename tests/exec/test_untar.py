"""The streaming tar reader: real tar's archives in every format, fed in chunks of any
size, come out byte for byte and hashed; anything damaged, cut short or unexpected is
refused."""

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from overbrainer.exec.base import Arrived, ExecError
from overbrainer.exec.manifest import local_manifest
from overbrainer.exec.untar import Unpacker, parse_pax

PATHS = ["output", "metrics.jsonl", "job.log"]
LONG = "a-directory-name-long-enough-to-need-an-extension-of-the-header-" * 3


def _tree(root: Path, big: int = 70_001) -> None:
    (root / "output/sub dir" / LONG).mkdir(parents=True)
    (root / "output/checkpoint-3").mkdir()
    (root / "output/checkpoint-3/optimizer.pt").write_bytes(b"never")
    (root / "output/adapter.bin").write_bytes(os.urandom(big))
    (root / "output/empty").write_bytes(b"")
    (root / "output/sub dir" / LONG / f"{LONG}.json").write_text("{}")
    (root / "output/block").write_bytes(b"b" * 512)  # exactly one block: no padding
    Path(os.fsdecode(os.fsencode(root / "output") + b"/caf\xe9")).write_text("latin-1 name")
    (root / "metrics.jsonl").write_text('{"event":"begin"}\n')
    (root / "job.log").write_text("trained\n")


def _pack(root: Path, *tar_args: str, tar: str = "tar") -> bytes:
    """What ``ctl.sh pack`` sends: the files under PATHS, checkpoints pruned."""
    names = " ".join(name for name in PATHS if (root / name).exists())
    script = (
        f"find {names} \\( -type d -name 'checkpoint-*' -prune \\)"
        f" -o -type f -exec {tar} -cf - {' '.join(tar_args)} {{}} +"
    )
    return subprocess.run(["sh", "-c", script], cwd=root, capture_output=True, check=True).stdout


def _feed(stream: bytes, staging: Path, size: int) -> dict[str, Arrived]:
    unpacker = Unpacker(staging, PATHS)
    try:
        for at in range(0, len(stream), size):
            unpacker.feed(stream[at : at + size])
        return unpacker.finish()
    finally:
        unpacker.close()


def _expected(root: Path) -> dict[str, Arrived]:
    manifest = local_manifest(root, PATHS)
    return {name: Arrived(sha, (root / name).stat().st_size) for name, sha in manifest.items()}


@pytest.mark.parametrize(
    ("tar", "args"),
    [
        ("tar", ("--format=gnu",)),
        ("tar", ("--format=pax",)),
        ("tar", ("--format=posix", "--pax-option=exthdr.name=%d/PaxHeaders/%f")),
        ("busybox tar", ()),
    ],
    ids=["gnu", "pax", "pax-named", "busybox"],
)
@pytest.mark.parametrize("size", [1, 100, 511, 512, 513, 65536, 1 << 22])
def test_real_archives_come_out_byte_for_byte_and_hashed(
    tmp_path: Path, tar: str, args: tuple[str, ...], size: int
) -> None:
    source = tmp_path / "source"
    _tree(source, big=3000 if size == 1 else 70_001)
    stream = _pack(source, *args, tar=tar)
    staging = tmp_path / "staging"
    staging.mkdir()
    arrived = _feed(stream, staging, size)
    assert arrived == _expected(source)
    assert local_manifest(staging, PATHS) == local_manifest(source, PATHS)
    assert not (staging / "output/checkpoint-3").exists()


def test_archives_back_to_back_are_read_whole(tmp_path: Path) -> None:
    # `find … -exec tar -cf - {} +` runs tar more than once on a long list of files.
    source = tmp_path / "source"
    (source / "output").mkdir(parents=True)
    (source / "output/a").write_bytes(b"first")
    (source / "job.log").write_bytes(b"second")
    stream = b"".join(
        subprocess.run(["tar", "-cf", "-", name], cwd=source, capture_output=True).stdout
        for name in ("output/a", "job.log")
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    assert _feed(stream, staging, 4096) == _expected(source)


def test_an_empty_stream_is_an_empty_download(tmp_path: Path) -> None:
    assert _feed(b"", tmp_path, 1) == {}
    assert list(tmp_path.iterdir()) == []


def _archive(tmp_path: Path) -> bytes:
    source = tmp_path / "source"
    (source / "output").mkdir(parents=True)
    (source / "output" / LONG).write_bytes(os.urandom(5000))
    return _pack(source, "--format=pax")


def test_a_stream_cut_anywhere_inside_a_member_is_refused(tmp_path: Path) -> None:
    stream = _archive(tmp_path)
    # The end of the data (before its padding and the end blocks): everything came.
    end = stream.index(b"\0" * 1024, 2048)
    cuts = [1, 100, 511, 512, 700, 1023, 1024, 1500, 1536, 2047, 3000, end - 1]
    for cut in cuts:
        staging = tmp_path / f"cut-{cut}"
        staging.mkdir()
        with pytest.raises(ExecError, match="it was cut short"):
            _feed(stream[:cut], staging, 333)
    whole = tmp_path / "whole"
    whole.mkdir()
    assert len(_feed(stream[:end], whole, 333)) == 1


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


def _member(name: str, data: bytes, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.type = kind
    return _header(info) + data + b"\0" * (-len(data) % 512)


def _refused(tmp_path: Path, stream: bytes, match: str) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(ExecError, match=match):
        _feed(stream, staging, 1000)


def test_a_damaged_header_is_refused(tmp_path: Path) -> None:
    stream = bytearray(_member("output/a", b"data"))
    stream[150] ^= 0xFF  # in the checksum field
    _refused(tmp_path, bytes(stream), "not a readable tar stream")


def test_metadata_too_big_to_be_honest_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("././@LongLink")
    info.type = tarfile.GNUTYPE_LONGNAME
    info.size = 1 << 30
    _refused(tmp_path, _header(info), "too big")


def test_a_pax_record_overrides_the_name_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    def pax(records: bytes) -> bytes:
        return _member("PaxHeader", records, tarfile.XHDTYPE)

    name = "output/" + "n" * 200
    good = pax(b"%d path=%s\n" % (len(name) + 10, name.encode()))
    staging = tmp_path / "good"
    staging.mkdir()
    arrived = _feed(good + _member("output/short", b"abc"), staging, 7)
    assert arrived == {name: Arrived(hashlib.sha256(b"abc").hexdigest(), 3)}
    assert (staging / name).read_bytes() == b"abc"
    # The name a pax record gives is checked like any other.
    _refused(tmp_path, pax(b"18 path=../escape\n") + _member("output/x", b""), "unexpected")
    assert not (tmp_path / "escape").exists()
    for bad in (b"99 path=x\n", b"x path=y\n", b"12 pathxyz\n", b"15 size=12a\n"):
        with pytest.raises(ExecError, match="damaged pax"):
            staging = tmp_path / f"bad-{bad.hex()}"
            staging.mkdir()
            _feed(pax(bad) + _member("output/x", b""), staging, 1000)


def test_parse_pax_reads_every_record() -> None:
    assert parse_pax(b"14 path=a/b c\n10 size=7\n" + b"\0" * 20) == {"path": "a/b c", "size": "7"}


@pytest.mark.parametrize(
    "kind",
    [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE, tarfile.CHRTYPE, tarfile.GNUTYPE_SPARSE],
    ids=["symlink", "hardlink", "fifo", "device", "sparse"],
)
def test_anything_but_a_file_or_a_directory_is_refused(tmp_path: Path, kind: bytes) -> None:
    info = tarfile.TarInfo("output/thing")
    info.type = kind
    info.linkname = "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
    stream = info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
    _refused(tmp_path, stream, "'output/thing', which is not a regular file")


def test_a_refused_member_leaves_no_open_file(tmp_path: Path) -> None:
    stream = _member("output/a", b"x" * 2000) + _member("../b", b"y")
    before = len(os.listdir("/proc/self/fd"))
    _refused(tmp_path, stream[:1000], "cut short")
    _refused(tmp_path / "staging", stream, "unexpected")
    assert len(os.listdir("/proc/self/fd")) == before


def test_the_reader_agrees_with_tarfile_on_what_it_wrote(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i, size in enumerate([0, 1, 511, 512, 513, 10_000]):
            data = bytes([i]) * size
            info = tarfile.TarInfo(f"output/f{i}-é")
            info.size = size
            tar.addfile(info, io.BytesIO(data))
    staging = tmp_path / "staging"
    staging.mkdir()
    arrived = _feed(buffer.getvalue(), staging, 777)
    assert sorted(arrived) == [f"output/f{i}-é" for i in range(6)]
    for i, size in enumerate([0, 1, 511, 512, 513, 10_000]):
        data = bytes([i]) * size
        assert arrived[f"output/f{i}-é"] == Arrived(hashlib.sha256(data).hexdigest(), size)
        assert (staging / f"output/f{i}-é").read_bytes() == data
