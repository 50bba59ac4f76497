"""The run's data on the project's network volume, by content, through the REAL
``overbrainer`` command in the fake world (fake Runpod API and pods on loopback, the real
bootstrap): without an S3 API key it goes up through the pod, with one through the S3 API
(moto's server on loopback) before the pod is created; either way an unchanged file goes
up once, and the pod's run directory links to it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from overbrainer.runpod.volume_layout import blob_key
from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.conftest import S3Server
from tests.runpod.s3_world import S3Volumes
from tests.runpod.test_train_loopback import HF_CANARY, World, world

VOLUME = {
    "OVERBRAINER_TARGETS__GPU__VOLUME": "cache",
    "OVERBRAINER_TARGETS__GPU__VOLUME_DATA_CENTER": "US-KS-2",
    "OVERBRAINER_TARGETS__GPU__VOLUME_SIZE_GB": "20",
}
ACCESS_CANARY = "user_CANARYs3access0123456789abcdef"
SECRET_CANARY = "rps_CANARYs3secret0123456789abcdefghijkl"
DATA = ("data/train.jsonl", "data/eval.jsonl")


def _with_eval(w: World) -> None:
    """An eval set (the project's is empty), so both data files are the run's."""
    first = (w.project / "data" / "train.jsonl").read_text().splitlines()[0]
    (w.project / "data" / "eval.jsonl").write_text(first + "\n")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _data_on_pod(w: World, run_id: str) -> dict[str, Path]:
    """Each data file of the run's directory on its pod: the link there, resolved."""
    pod_id = str(w.pod_json(run_id)["pod_id"])
    found = {}
    for rel in DATA:
        link = w.pod_run_dir(pod_id, run_id) / rel
        assert link.is_symlink(), f"{rel} on the pod is not a link to the volume"
        found[rel] = link.resolve()
    return found


async def test_without_an_s3_key_the_data_goes_through_the_pod_once_per_volume(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=3) as w:
        _with_eval(w)
        first = await w.run("train", env=VOLUME)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        blobs = {rel: w.pods.volume_dir(volume.id) / blob_key(_sha256(w.project / rel)) for rel in DATA}
        before = {rel: blob.stat() for rel, blob in blobs.items()}
        second = await w.run("train", env=VOLUME)
        assert second.returncode == 0, second.stderr
        run_b = next(r for r in w.runs() if r != run_a)
        on_a, on_b = _data_on_pod(w, run_a), _data_on_pod(w, run_b)

    for rel in DATA:
        local = w.project / rel
        sha = _sha256(local)
        size = local.stat().st_size
        # Both pods' run directories link to the one blob, which holds the file.
        assert on_a[rel] == on_b[rel] == blobs[rel].resolve()
        assert blobs[rel].read_bytes() == local.read_bytes()
        said = f"train: {rel} on the network volume as blob {sha[:12]} through the pod, verified"
        assert f"{said}: sent ({size} bytes)" in first.stderr
        assert f"{said}: already there" in second.stderr
        # The second run wrote nothing there: the very same file, untouched.
        after = blobs[rel].stat()
        assert (after.st_ino, after.st_mtime_ns) == (before[rel].st_ino, before[rel].st_mtime_ns)
    assert "through the S3 API" not in first.stderr + second.stderr
