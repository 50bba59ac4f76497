"""Tar streams out and checked extraction in; the manifest's own rules."""

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from overbrainer.exec.base import Arrived, ExecError
from overbrainer.exec.manifest import (
    local_manifest,
    manifest_digest,
    parse_sha256sum,
    verify,
)
from overbrainer.exec.transfer import (
    Entry,
    extract_tar,
    replace_paths,
    tar_chunks,
    upload_entries,
)

PATHS = ["output", "metrics.jsonl", "job.log"]


def test_the_stream_extracts_with_the_real_tar(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "data/nested").mkdir(parents=True)
    (source / "data/nested/big.bin").write_bytes(bytes(range(256)) * 1000)
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "a name with spaces.txt").write_text("x")
    (source / "ssh").mkdir()
    (source / "ssh/id_ed25519").write_text("PRIVATE")
    (source / "pod.json").write_text("{}")
    (source / "linked").symlink_to(source / "run.sh")
    stream = b"".join(tar_chunks(upload_entries(source)))
    assert len(stream) % tarfile.RECORDSIZE == 0
    target = tmp_path / "dst"
    target.mkdir()
    subprocess.run(["tar", "-x", "-o", "-f", "-"], cwd=target, input=stream, check=True)
    names = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    assert names == [
        "a name with spaces.txt",
        "data",
        "data/nested",
        "data/nested/big.bin",
        "linked",
        "run.sh",
    ]
    assert (target / "data/nested/big.bin").read_bytes() == bytes(range(256)) * 1000
    assert (target / "linked").read_text() == "#!/bin/sh\n"
    assert (target / "run.sh").stat().st_mode & 0o111
    listing = subprocess.run(["tar", "-tvf", "-"], input=stream, capture_output=True, check=True)
    assert b"root" in listing.stdout or b" 0/0 " in listing.stdout


def _tar(*members: tarfile.TarInfo, data: bytes = b"x") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            if member.isreg():
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
            else:
                tar.addfile(member)
    return buffer.getvalue()


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "member",
    [
        tarfile.TarInfo("../escape"),
        tarfile.TarInfo("/etc/evil"),
        tarfile.TarInfo("output/../../x"),
        tarfile.TarInfo("ssh/id_ed25519"),
        tarfile.TarInfo("output/checkpoint-9/optimizer.pt"),
        tarfile.TarInfo("axolotl.yaml"),
        _link("output/link", "/etc/passwd"),
        _link("output/hard", "job.log", tarfile.LNKTYPE),
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "ssh", "checkpoint", "unrequested", "sym", "hard"],
)
def test_extraction_refuses_anything_unexpected(tmp_path: Path, member: tarfile.TarInfo) -> None:
    archive = tmp_path / "in.tar"
    archive.write_bytes(_tar(member))
    staging = tmp_path / "staging"
    staging.mkdir()
    with pytest.raises(ExecError, match="nothing was replaced"):
        extract_tar(archive, staging, PATHS)
    assert not (tmp_path / "escape").exists()


def test_concatenated_archives_are_read_whole(tmp_path: Path) -> None:
    # `find … -exec tar -cf - {} +` may run tar more than once.
    archive = tmp_path / "in.tar"
    archive.write_bytes(_tar(tarfile.TarInfo("output/a")) + _tar(tarfile.TarInfo("job.log")))
    staging = tmp_path / "staging"
    staging.mkdir()
    extract_tar(archive, staging, PATHS)
    assert (staging / "output/a").read_bytes() == b"x"
    assert (staging / "job.log").read_bytes() == b"x"


def test_bytes_entries_and_an_empty_archive(tmp_path: Path) -> None:
    stream = b"".join(tar_chunks([Entry("job.cmds", b"true\n")]))
    with tarfile.open(fileobj=io.BytesIO(stream)) as tar:
        member = tar.getmember("job.cmds")
        assert (member.uid, member.uname) == (0, "")
        extracted = tar.extractfile(member)
        assert extracted is not None and extracted.read() == b"true\n"
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    extract_tar(empty, tmp_path, PATHS)


def test_verify_reports_each_kind_of_problem(tmp_path: Path) -> None:
    (tmp_path / "output").mkdir()
    (tmp_path / "output/same").write_text("same")
    (tmp_path / "output/changed").write_text("mine")
    (tmp_path / "output/mine-only").write_text("extra")
    expected = local_manifest(tmp_path, PATHS)
    expected["output/changed"] = "0" * 64
    expected["output/theirs-only"] = "1" * 64
    del expected["output/mine-only"]
    problems = verify(expected, tmp_path, PATHS)
    assert [p.split(":")[0] for p in problems] == [
        "output/changed",
        "output/mine-only",
        "output/theirs-only",
    ]
    assert "different" in problems[0]
    assert "extra" in problems[1]
    assert "missing" in problems[2]
    assert verify(local_manifest(tmp_path, PATHS), tmp_path, PATHS) == []


def test_sha256sum_output_is_parsed_strictly() -> None:
    line = "a" * 64 + "  output/x y\n" + "b" * 64 + " *job.log\n"
    assert parse_sha256sum(line, where="w") == {"output/x y": "a" * 64, "job.log": "b" * 64}
    with pytest.raises(ExecError, match="rename"):
        parse_sha256sum("\\" + "a" * 64 + "  output/odd\\nname\n", where="w")
    with pytest.raises(ExecError):
        parse_sha256sum("not a checksum\n", where="w")
    assert manifest_digest({"b": "2", "a": "1"}) == manifest_digest({"a": "1", "b": "2"})


def test_verify_takes_what_arrived_and_still_lists_every_file(tmp_path: Path) -> None:
    (tmp_path / "output").mkdir()
    for name, text in [("same", "same"), ("changed", "mine"), ("resized", "grown"), ("own", "x")]:
        (tmp_path / "output" / name).write_text(text)
    expected = local_manifest(tmp_path, PATHS)
    expected["output/theirs-only"] = "1" * 64
    arrived = {
        "output/same": Arrived(expected["output/same"], 4),
        # What arrived differs from the target's, whatever the disk now holds.
        "output/changed": Arrived("2" * 64, 4),
        # Changed on disk after it arrived: its size tells.
        "output/resized": Arrived(expected["output/resized"], 3),
    }
    # output/own was not written by the download: it is hashed from the disk.
    problems = verify(expected, tmp_path, PATHS, arrived)
    assert problems == [
        "output/changed: different (sha256 222222222222… here, "
        f"{expected['output/changed'][:12]}… on the target)",
        "output/resized: different (its size here is not what arrived)",
        "output/theirs-only: missing here (the target has it)",
    ]
    del expected["output/own"]
    assert "output/own: extra here (the target does not have it)" in verify(
        expected, tmp_path, PATHS, arrived
    )


def test_no_chunk_of_the_stream_is_empty(tmp_path: Path) -> None:
    # A file of a whole number of blocks needs no padding; an empty chunk in its place
    # once ended the SSH upload there, silently, losing every file after it.
    source = tmp_path / "run"
    (source / "resume").mkdir(parents=True)
    (source / "resume" / "a_weights").write_bytes(b"w" * 1024)
    (source / "resume" / "empty").write_bytes(b"")
    (source / "resume" / "z_state.json").write_text('{"global_step": 7}')
    chunks = list(tar_chunks(upload_entries(source)))
    assert all(chunks)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        assert archive.getnames()[-1] == "resume/z_state.json"


def test_a_download_keeps_the_checkpoints_home_it_does_not_bring(tmp_path: Path) -> None:
    local, staging = tmp_path / "run", tmp_path / "run" / ".staging"
    checkpoints = [f"output/checkpoint-{step}/o.pt" for step in (4, 8)]
    home = ["output/adapter.bin", "output/stale.txt", *checkpoints]
    brought = ["output/adapter.bin", "output/checkpoint-8/o.pt"]
    for root, names, text in [(local, home, "home"), (staging, brought, "new")]:
        for name in names:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
    replace_paths(staging, local, ["output", "output/checkpoint-8"])
    files = {f.relative_to(local).as_posix(): f.read_text() for f in local.rglob("*.*")}
    # checkpoint-4 (not in the download) stays; checkpoint-8, which it brought, is its.
    assert files == {
        "output/adapter.bin": "new",
        "output/checkpoint-4/o.pt": "home",
        "output/checkpoint-8/o.pt": "new",
    }
    assert not staging.exists()
