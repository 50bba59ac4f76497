"""SHA-256 manifests of a job's results and their verification.

A manifest maps each regular file's path (relative to the run directory, ``/``-separated)
to its SHA-256 in hex. It covers the given paths — by default ``output/`` (every directory
named ``checkpoint-*`` left out), ``metrics.jsonl`` and ``job.log`` — and skips symbolic
links and special files, exactly like ``find -H PATH… -type f`` with ``checkpoint-*``
directories pruned, which is what ``ctl.sh manifest`` runs on a remote target: a given path
that is a link (a run's ``output`` on a network volume) is followed, no link below it. A checkpoint
directory given itself as a path (the one a stopped job saved) is covered.
"""

import hashlib
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from overbrainer.exec.base import Arrived, ExecError
from overbrainer.exec.shell import check_rel_path

RESULT_PATHS = ("output", "metrics.jsonl", "job.log")
CHECKPOINT_PREFIX = "checkpoint-"
_MAX_HASHERS = 8
_SUM_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


def is_checkpoint_dir(name: str) -> bool:
    """Whether a directory called ``name`` is a training checkpoint (retrieved only when
    asked for by its own path)."""
    return name.startswith(CHECKPOINT_PREFIX)


def checkpoint_path(step: int) -> str:
    """The run-relative directory of the checkpoint the trainer saved at ``step``."""
    return f"output/{CHECKPOINT_PREFIX}{step}"


def list_files(root: Path, paths: Sequence[str]) -> list[str]:
    """The regular files under ``paths`` of ``root``, sorted, as ``/``-separated paths."""
    found: list[str] = []
    for rel in paths:
        check_rel_path(rel, name="a result path")
        start = root / rel
        try:
            mode = start.lstat().st_mode
            if stat.S_ISLNK(mode) and not is_checkpoint_dir(start.name):
                # A path given that is a link is followed (``find -H``): a run's output on
                # a network volume; a checkpoint named itself never is.
                mode = start.stat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISREG(mode):
            found.append(rel)
        elif stat.S_ISDIR(mode):
            # A checkpoint directory named in ``paths`` is walked; those below it are not.
            found.extend(_walk(start, rel))
    return sorted(set(found))


def _walk(start: Path, rel: str) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames[:] = [name for name in dirnames if not is_checkpoint_dir(name)]
        base = Path(dirpath).relative_to(start).as_posix()
        prefix = rel if base == "." else f"{rel}/{base}"
        for name in filenames:
            try:
                if stat.S_ISREG((Path(dirpath) / name).lstat().st_mode):
                    found.append(f"{prefix}/{name}")
            except FileNotFoundError:
                continue
    return found


def sha256_file(path: Path) -> str:
    """The SHA-256 of the file at ``path`` in hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def local_manifest(root: Path, paths: Sequence[str] = RESULT_PATHS) -> dict[str, str]:
    """The manifest of ``paths`` under the local directory ``root``.

    Files are hashed on several threads (hashlib lets go of the GIL while it hashes): a
    model's shards are checked in a fraction of the time one core would take.
    """
    from concurrent.futures import ThreadPoolExecutor

    names = list_files(root, paths)
    workers = min(_MAX_HASHERS, os.cpu_count() or 1, len(names))
    if workers <= 1:
        return {name: sha256_file(root / name) for name in names}
    with ThreadPoolExecutor(workers, thread_name_prefix="sha256") as pool:
        digests = pool.map(sha256_file, [root / name for name in names])
        return dict(zip(names, digests, strict=True))


def parse_sha256sum(text: str, *, where: str) -> dict[str, str]:
    """A manifest from ``sha256sum`` (or ``shasum -a 256``) output lines."""
    manifest: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            continue
        match = _SUM_LINE.match(line)
        if match is None or line.startswith("\\"):
            raise ExecError(
                f"cannot check the results on {where}: a file name there holds a line break "
                "or a backslash (or the checksum tool answered oddly); rename it and retry"
            )
        manifest[match.group(2)] = match.group(1)
    return manifest


def verify(
    expected: Mapping[str, str],
    local_dir: Path,
    paths: Sequence[str],
    arrived: Mapping[str, Arrived] | None = None,
) -> list[str]:
    """Compare the local copy of ``paths`` in ``local_dir`` with the target's manifest.

    ``arrived``: what a download hashed as it wrote each file. A file it covers is not read
    again (the bytes that arrived are the bytes written), only checked to be on disk with
    their size; any other local file is hashed here. Every file under ``paths`` is listed
    either way, so nothing extra or missing goes unseen.

    Returns one problem per file, sorted by path — ``missing`` (on the target, not here),
    ``different`` (checksums or sizes differ) or ``extra`` (here, not on the target) — or
    an empty list when every file matches.
    """
    if arrived is None:
        actual = local_manifest(local_dir, paths)
    else:
        actual = _arrived_manifest(local_dir, paths, arrived)
    problems: list[str] = []
    for name in sorted(expected.keys() | actual.keys()):
        mine, theirs = actual.get(name), expected.get(name)
        if mine is None:
            problems.append(f"{name}: missing here (the target has it)")
        elif theirs is None:
            problems.append(f"{name}: extra here (the target does not have it)")
        elif mine == _RESIZED:
            problems.append(f"{name}: different (its size here is not what arrived)")
        elif mine != theirs:
            problems.append(
                f"{name}: different (sha256 {mine[:12]}… here, {theirs[:12]}… on the target)"
            )
    return problems


# Stands for the digest of a file whose size on disk is not what the download wrote.
_RESIZED = "resized"


def _arrived_manifest(
    root: Path, paths: Sequence[str], arrived: Mapping[str, Arrived]
) -> dict[str, str]:
    """The manifest of ``paths`` under ``root``, taking each digest from ``arrived`` when
    the file on disk has the size that arrived, hashing a file the download did not write."""
    actual: dict[str, str] = {}
    for name in list_files(root, paths):
        came = arrived.get(name)
        if came is None:
            actual[name] = sha256_file(root / name)
        elif (root / name).stat().st_size != came.size:
            actual[name] = _RESIZED
        else:
            actual[name] = came.sha256
    return actual


def manifest_digest(manifest: Mapping[str, str]) -> str:
    """One SHA-256 over a whole manifest (sorted ``hash  path`` lines), for the event log."""
    lines = "".join(f"{manifest[name]}  {name}\n" for name in sorted(manifest))
    return hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()
