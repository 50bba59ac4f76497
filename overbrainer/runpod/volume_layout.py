"""Where overbrainer keeps things on a project's network volume: one layout, said once, for
the pods (paths under the mount), Runpod's S3-compatible API (object keys: the path under
the mount) and the ``volume`` commands (what a key is for).

The volume is mounted at :data:`VOLUME_MOUNT`, not at Runpod's default ``/workspace``: a
network volume hides what the image keeps at its mount path, and the Axolotl cloud image
keeps its venv in ``/workspace``. Everything overbrainer writes sits under
``<mount>/overbrainer/``, so a user's own files beside it are never counted, pruned or
touched:

- ``overbrainer/hf``: ``HF_HOME`` (the base model and tokenizer, downloaded once);
- ``overbrainer/prepared``: Axolotl's ``dataset_prepared_path`` (its subfolders are named
  by a hash of the dataset and tokenizer, so runs share what they can);
- ``overbrainer/blobs/sha256/<hex>``: files from home (the data), content-addressed: an
  unchanged file is never sent twice;
- ``overbrainer/runs/<run>/output``: a run's ``output_dir`` (its checkpoints and final
  output), which the run directory's ``output`` on the pod links to.
"""

import re
from dataclasses import dataclass
from typing import Literal

from overbrainer.events.ids import check_run_id

__all__ = [
    "ROOT",
    "VOLUME_MOUNT",
    "VolumePart",
    "blob_key",
    "blobs_key",
    "checkpoint_of",
    "hf_home_key",
    "on_pod",
    "part_of",
    "prepared_key",
    "run_output_key",
]

VOLUME_MOUNT = "/runpod-volume"
"""Where a pod mounts the project's network volume."""

ROOT = "overbrainer"
"""The folder of the volume that holds everything overbrainer writes there."""

_HEX = re.compile(r"^[0-9a-f]{64}$")

PartKind = Literal["cache", "prepared", "data", "checkpoints", "other"]


def hf_home_key() -> str:
    """The volume's ``HF_HOME`` (an S3 key prefix; :func:`on_pod` for the pod's path)."""
    return f"{ROOT}/hf"


def prepared_key() -> str:
    """Axolotl's ``dataset_prepared_path`` on the volume."""
    return f"{ROOT}/prepared"


def blobs_key() -> str:
    """The folder of the files from home (:func:`blob_key` names one of them)."""
    return f"{ROOT}/blobs/sha256"


def blob_key(sha256: str) -> str:
    """Where a file from home whose SHA-256 is ``sha256`` (64 lower-case hex digits) lies."""
    if not _HEX.fullmatch(sha256):
        raise ValueError(f"not a SHA-256 in hex: {sha256!r}")
    return f"{blobs_key()}/{sha256}"


def run_output_key(run_id: str) -> str:
    """Run ``run_id``'s ``output_dir`` on the volume (its checkpoints, its final output)."""
    return f"{ROOT}/runs/{check_run_id(run_id)}/output"


def on_pod(key: str) -> str:
    """The path on a pod of the volume's ``key`` (``overbrainer/hf`` ->
    ``/runpod-volume/overbrainer/hf``)."""
    return f"{VOLUME_MOUNT}/{key.strip('/')}"


@dataclass(frozen=True)
class VolumePart:
    """What an object of the volume is for: ``kind``, and the run it belongs to (a
    checkpoint or a run's output; None for the shared parts)."""

    kind: PartKind
    run_id: str | None = None


def part_of(key: str) -> VolumePart:
    """What the object at ``key`` (a path under the mount) is for: ``cache`` (``HF_HOME``),
    ``prepared`` (tokenised data), ``data`` (files from home), ``checkpoints`` (a run's
    output, with its run), or ``other`` (not overbrainer's)."""
    parts = key.strip("/").split("/")
    if len(parts) < 2 or parts[0] != ROOT:
        return VolumePart("other")
    section = parts[1]
    if section == "hf":
        return VolumePart("cache")
    if section == "prepared":
        return VolumePart("prepared")
    if section == "blobs":
        return VolumePart("data")
    if section == "runs" and len(parts) >= 3:
        return VolumePart("checkpoints", parts[2])
    return VolumePart("other")


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_of(key: str) -> tuple[str, int, str] | None:
    """The run, step and key prefix (``overbrainer/runs/<run>/output/checkpoint-N``) of the
    checkpoint an object at ``key`` belongs to; None for any other object."""
    parts = key.strip("/").split("/")
    if len(parts) < 6 or parts[:2] != [ROOT, "runs"] or parts[3] != "output":
        return None
    found = _CHECKPOINT.fullmatch(parts[4])
    if found is None:
        return None
    return parts[2], int(found.group(1)), "/".join(parts[:5])
