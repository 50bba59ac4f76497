"""A run's files from home on the project's network volume (``volume = "NAME"``): its data
by content (:func:`~overbrainer.runpod.volume_layout.blob_key` of each file's SHA-256),
so an unchanged file goes up once per volume, whatever the run.

Before the pod is created (provisioning's step once the volume is attached,
:meth:`VolumeData.before_create`): with an S3 API key (``OVERBRAINER_RUNPOD__S3_ACCESS_KEY``
and ``__S3_SECRET``) the blobs the volume lacks, and a resume checkpoint from home (at
``run_output_key(<its run>)/checkpoint-N``, unless its run recorded it there), are uploaded
through Runpod's S3-compatible API and verified there; no GPU bills meanwhile, and the job
reads the checkpoint there. The pod's create then tells its bootstrap
to link the run directory's ``data/<file>`` to its blob, and ``.pod/blobs`` to the blobs'
folder (:class:`~overbrainer.runpod.pod_scripts.VolumeLink`).

Without an S3 API key, once the pod is ready (:meth:`VolumeData.through_pod`): the
blobs the volume lacks go up through the pod (into ``.pod/blobs``), each checked by its
SHA-256 computed on the pod, before and after. Either way the run's directory is then
uploaded without its data (:class:`LinkedUpload`): the links stand for it.

What was sent and what was already there is said on the command's output and recorded
(``pod.DataOnVolume``); never a key.
"""

import hashlib
import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from overbrainer.config.model import RunpodSettings
from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.exec.base import Arrived, Executor, JobHandle, JobState
from overbrainer.exec.manifest import manifest_digest
from overbrainer.exec.transfer import NEVER_UPLOADED
from overbrainer.runpod.pod_scripts import POD_DIR, VolumeLink
from overbrainer.runpod.s3 import (
    S3Error,
    StoredObject,
    upload_blobs,
    upload_directory,
    volume_s3,
)
from overbrainer.runpod.volume_layout import blob_key, blobs_key, on_pod, run_output_key
from overbrainer.train.axolotl import RESUME_DIR
from overbrainer.train.data import EVAL_FILE, TRAIN_FILE
from overbrainer.train.layout import OUTPUT_DIR

__all__ = ["BLOBS_LINK", "DataFile", "LinkedUpload", "VolumeData", "VolumeDataError"]

BLOBS_LINK = f"{POD_DIR}/blobs"
"""In the run's directory on the pod: a link to the volume's folder of blobs."""

_CHUNK = 1 << 20
_STAGING_PREFIX = ".volume-upload-"


class VolumeDataError(OverbrainerError):
    """The run's files could not be put on the network volume; no job was started."""


@dataclass(frozen=True)
class DataFile:
    """One file of the run's directory kept on the volume: ``path`` (relative to the run's
    directory), its copy at home, its SHA-256 (hex) and size."""

    path: str
    local: Path
    sha256: str
    size: int

    @property
    def key(self) -> str:
        """Its blob's key on the volume."""
        return blob_key(self.sha256)


def _hashed(path: str, local: Path) -> DataFile:
    digest = hashlib.sha256()
    size = 0
    with local.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return DataFile(path, local, digest.hexdigest(), size)


def data_files(run_dir: Path) -> list[DataFile]:
    """The run directory's data (``data/train.jsonl``, and ``data/eval.jsonl`` when it was
    copied), hashed."""
    found = []
    for rel in (TRAIN_FILE, EVAL_FILE):
        local = run_dir / rel
        if local.is_file():
            found.append(_hashed(rel.as_posix(), local))
    return found


def _short(sha256: str) -> str:
    return sha256[:12]


@dataclass
class VolumeData:
    """What of run ``run_id``'s directory (``run_dir`` at home) lives on the volume, for
    one provisioning. ``settings``: ``[runpod]`` (its S3 API key, if any); ``resume``: the
    run and step of the checkpoint the run resumes from (in ``resume/`` of its
    directory), None for none; ``resume_recorded``: its run recorded it whole on the
    volume, where the pod checks it (never sent again from home); ``say``: where lines
    for the user go.

    ``resume_placed``, once :meth:`before_create` put the resume checkpoint on the volume
    through the S3 API: the digest of its manifest as its run's job names it
    (``output/checkpoint-N/...``), which the pod checks it against before the job reads
    it there."""

    run_id: str
    run_dir: Path
    settings: RunpodSettings
    say: Callable[[str], None]
    resume: tuple[str, int] | None = None
    resume_recorded: bool = False
    files: list[DataFile] = field(default_factory=list)
    through_s3: bool = False
    resume_placed: str | None = None

    @property
    def linked(self) -> frozenset[str]:
        """The run directory's paths the pod links to the volume (not uploaded with it)."""
        return frozenset(f.path for f in self.files)

    def links(self) -> list[VolumeLink]:
        """The links the pod's bootstrap makes: the blobs' folder, then each data file."""
        folder = VolumeLink(BLOBS_LINK, on_pod(blobs_key()), directory=True)
        return [folder, *(VolumeLink(f.path, on_pod(f.key)) for f in self.files)]

    def allowance(self) -> float:
        """Seconds the uploads before the create may add to provisioning: a minute, and
        the files at 1 MiB/s (a bound against a runaway, not an estimate)."""
        total = 0
        for path in (self.run_dir / TRAIN_FILE, self.run_dir / EVAL_FILE):
            total += path.stat().st_size if path.is_file() else 0
        checkpoint = self._resume_dir()
        if checkpoint is not None:
            total += sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
        return 60.0 + total / (1 << 20)

    def _resume_dir(self) -> Path | None:
        """The checkpoint the run resumes from, as placed in its directory (None: none)."""
        if self.resume is None:
            return None
        local = self.run_dir / RESUME_DIR / f"checkpoint-{self.resume[1]}"
        return local if local.is_dir() else None

    async def before_create(
        self, volume_id: str, data_center: str
    ) -> tuple[list[VolumeLink], ev.DataOnVolume | None]:
        """Hash the data; with an S3 API key, put it (and a resume checkpoint) on volume
        ``volume_id`` in ``data_center`` and verify it there. The pod's links, and what
        to record of the uploads (None without an S3 API key)."""
        self.files = await trio.to_thread.run_sync(data_files, self.run_dir)
        checkpoint: dict[str, Any] | None = None
        try:
            s3 = volume_s3(self.settings, volume_id, data_center)
            if s3 is None:
                return self.links(), None
            async with s3:
                report = await upload_blobs(s3, [f.local for f in self.files])
                local = self._resume_dir()
                if self.resume is not None and local is not None and not self.resume_recorded:
                    run, step = self.resume
                    prefix = f"{run_output_key(run)}/checkpoint-{step}"
                    done = await upload_directory(s3, local, prefix)
                    self.resume_placed = _placed_digest(run, (*done.sent, *done.skipped))
                    checkpoint = {
                        "run": run,
                        "step": step,
                        "prefix": prefix,
                        "files": len(done.sent) + len(done.skipped),
                        "sent": len(done.sent),
                        "bytes_sent": done.bytes_sent,
                    }
        except S3Error as error:
            raise VolumeDataError(
                f"cannot put run {self.run_id}'s files on the network volume: {error}"
            ) from error
        self.through_s3 = True
        placed = self._placed("s3", {item.sha256 for item in report.sent}, checkpoint)
        if checkpoint is not None:
            self.say(
                f"train: resume checkpoint-{checkpoint['step']} of run {checkpoint['run']} on "
                f"the network volume ({checkpoint['prefix']}) through the S3 API, verified: "
                f"{checkpoint['sent']} files sent ({checkpoint['bytes_sent']} bytes), "
                f"{checkpoint['files'] - checkpoint['sent']} already there"
            )
        return self.links(), placed

    def _placed(
        self, via: str, sent: set[str | None], checkpoint: dict[str, Any] | None = None
    ) -> ev.DataOnVolume:
        """Say, then record, where each data file is and whether it was sent."""
        how = "through the S3 API" if via == "s3" else "through the pod"
        files = []
        for f in self.files:
            was_sent = f.sha256 in sent
            done = f"sent ({f.size} bytes)" if was_sent else "already there"
            self.say(
                f"train: {f.path} on the network volume as blob {_short(f.sha256)} {how}, "
                f"verified: {done}"
            )
            files.append({"path": f.path, "sha256": f.sha256, "size": f.size, "sent": was_sent})
        return ev.DataOnVolume(
            via=via,
            files=files,
            # Once per content: two files alike are one blob.
            bytes_sent=sum(
                dict((f.sha256, f.size) for f in self.files if f.sha256 in sent).values()
            ),
            checkpoint=checkpoint,
        )

    async def through_pod(
        self, executor: Executor, root: str, remote_dir: str
    ) -> ev.DataOnVolume | None:
        """Without an S3 API key: the blobs the volume lacks, through the pod (its run
        directory at ``remote_dir`` under the executor's ``root``), checked by their SHA-256
        on the pod; what to record (None: nothing done here).

        Each goes up into a folder of this run's own beside the blobs, is checked there,
        and only then renamed into place: another run sending the same blob at the same
        moment never reads a half-written one, nor makes this run's check fail."""
        if self.through_s3 or not self.files:
            return None
        blobs = f"{remote_dir}/{BLOBS_LINK}"
        wanted = {f.sha256: f for f in self.files}
        there = await executor.manifest(blobs, sorted(wanted))
        missing = [f for sha, f in wanted.items() if _held(there, sha) != sha]
        if missing:
            incoming = f"{blobs}/{_INCOMING_PREFIX}{self.run_id}"
            staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.run_dir))
            try:
                await trio.to_thread.run_sync(_stage, staging, missing)
                await executor.upload(staging, incoming)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            there = await executor.manifest(incoming, [f.sha256 for f in missing])
            wrong = [f for f in missing if _held(there, f.sha256) != f.sha256]
            if wrong:
                raise VolumeDataError(
                    f"the upload of {wrong[0].path} to the network volume through the pod did "
                    f"not verify (blob {wrong[0].sha256} does not hold it); run "
                    "`overbrainer train` again"
                )
            try:
                await executor.run_script(
                    _ADOPT_SCRIPT,
                    [posixpath.join(root, incoming), *(f.sha256 for f in missing)],
                    what="placing the run's data among the volume's blobs",
                )
            except OverbrainerError as error:
                raise VolumeDataError(
                    f"cannot place run {self.run_id}'s data on the network volume: {error}"
                ) from error
        return self._placed("pod", {f.sha256 for f in missing})


_INCOMING_PREFIX = ".incoming-"
"""Beside the volume's blobs: a run's folder of blobs on their way (checked, then moved)."""

# $1: a run's folder of incoming blobs; then the names (SHA-256) checked there. Each is
# renamed into the blobs' folder, its parent: one rename on one file system, so a reader
# finds the whole blob or none. What else the folder holds (an earlier try's) goes.
_ADOPT_SCRIPT = """set -e
dir=$1
shift
for name do
    mv -f "$dir/$name" "$dir/../$name"
done
rm -rf "$dir"
"""


def _placed_digest(run: str, objects: Sequence[StoredObject]) -> str:
    """The manifest digest of a checkpoint of ``run`` put on the volume as ``objects``
    (each verified, with its SHA-256), named as its job's ``output`` names it."""
    folder = f"{run_output_key(run)}/"
    return manifest_digest(
        {f"{OUTPUT_DIR}/{item.key.removeprefix(folder)}": str(item.sha256) for item in objects}
    )


def _held(manifest: Mapping[str, str], name: str) -> str | None:
    """The SHA-256 the pod computed for the file ``name`` of the blobs' folder."""
    return manifest.get(name, manifest.get(f"./{name}"))


def _stage(staging: Path, files: Sequence[DataFile]) -> None:
    """Each file under its blob's name, linked (or copied where links cannot be made)."""
    for f in files:
        _link_or_copy(f.local, staging / f.sha256)


def _link_or_copy(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


class LinkedUpload:
    """An executor whose :meth:`upload` of the run's directory leaves out the files the
    pod links to the volume (``linked``, relative to it); everything else is ``inner``'s."""

    def __init__(self, inner: Executor, run_dir: Path, linked: frozenset[str]) -> None:
        self.inner = inner
        self.run_dir = run_dir
        self.linked = linked

    @property
    def location(self) -> str:
        return self.inner.location

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        if local_dir != self.run_dir or not self.linked:
            await self.inner.upload(local_dir, remote_dir)
            return
        staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=local_dir))
        try:
            await trio.to_thread.run_sync(self._stage_run_dir, local_dir, staging)
            await self.inner.upload(staging, remote_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _stage_run_dir(self, local_dir: Path, staging: Path) -> None:
        """``local_dir`` but its linked files (and the staging itself), linked or copied."""

        def ignore(directory: str, names: list[str]) -> set[str]:
            rel = Path(directory).relative_to(local_dir)
            top = rel == Path()
            return {
                name
                for name in names
                if (rel / name).as_posix() in self.linked
                # What never leaves (the run's keys among it) is not even linked here, nor
                # this staging or one a dead command left.
                or (top and (name in NEVER_UPLOADED or name.startswith(_STAGING_PREFIX)))
            }

        shutil.copytree(
            local_dir, staging, ignore=ignore, copy_function=_link_copy, dirs_exist_ok=True
        )

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        return await self.inner.spawn(
            remote_dir, commands, env=env, secrets=secrets, container=container
        )

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        return await self.inner.read_file(path, offset, limit)

    async def file_size(self, path: str) -> int:
        return await self.inner.file_size(path)

    async def status(self, remote_dir: str) -> JobState:
        return await self.inner.status(remote_dir)

    async def cancel(self, remote_dir: str) -> JobState:
        return await self.inner.cancel(remote_dir)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        return await self.inner.manifest(remote_dir, paths)

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived] | None:
        return await self.inner.download(remote_dir, paths, local_dir)

    async def touch(self, path: str) -> None:
        await self.inner.touch(path)

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        return await self.inner.run_script(text, args, what=what)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _link_copy(source: str, destination: str) -> None:
    _link_or_copy(Path(source), Path(destination))
