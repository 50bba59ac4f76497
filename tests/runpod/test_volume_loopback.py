"""Two runs on the project's network volume through the REAL ``overbrainer`` command (the
fake Runpod API on loopback, fake pods running the real bootstrap and watchdog, the real
clock): the first creates the volume, the second reuses it, both pods in its data center
with it mounted at /runpod-volume, and what was left there through the first pod (the first
job's output among it) is on the second."""

from __future__ import annotations

from pathlib import Path

from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.test_train_loopback import world

VOLUME = {
    "OVERBRAINER_TARGETS__GPU__VOLUME": "cache",
    "OVERBRAINER_TARGETS__GPU__VOLUME_DATA_CENTER": "US-KS-2",
    "OVERBRAINER_TARGETS__GPU__VOLUME_SIZE_GB": "20",
}


async def test_two_runs_share_the_volume_the_first_created(tmp_path: Path) -> None:
    async with world(tmp_path, steps=4) as w:
        first = await w.run("train", env=VOLUME)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        # Something left on the volume through the first pod's mount.
        left = w.pods.path(str(w.pod_json(run_a)["pod_id"]), "/runpod-volume/overbrainer/left-by-a")
        left.parent.mkdir(parents=True, exist_ok=True)
        left.write_text("from the first pod")
        second = await w.run("train", env=VOLUME)
        assert second.returncode == 0, second.stderr
        run_b = next(r for r in w.runs() if r != run_a)
        story = await w.run("events", run_a)
        story_b = await w.run("events", run_b)
        names = await w.events(run_b)

    # One volume, created once: by the first run, before its pod.
    (volume,) = w.fake.live_volumes(CANARY_KEY)
    assert (volume.name, volume.size, volume.data_center) == ("cache", 20, "US-KS-2")
    (made,) = w.fake.volume_create_requests()
    assert made.schema_errors == []
    creates = w.fake.create_requests()
    assert len(creates) == 2
    assert made.time < creates[0].time
    # Both pods only in its data center, with it mounted at /runpod-volume.
    pod_a, pod_b = (str(w.pod_json(run)["pod_id"]) for run in (run_a, run_b))
    for request, pod_id in zip(creates, (pod_a, pod_b), strict=True):
        assert request.schema_errors == []
        assert request.json["dataCenterIds"] == ["US-KS-2"]
        assert request.json["mounts"] == {
            "network": [{"volumeId": volume.id, "path": "/runpod-volume"}]
        }
        assert w.fake.pod(pod_id).data_center_id == "US-KS-2"
    # The log says which volume, and that the second run found it.
    assert f"created network volume cache ({volume.id}, 20 GB) in US-KS-2" in story.stdout
    assert f"using network volume cache ({volume.id}, 20 GB) in US-KS-2" in story_b.stdout
    assert names[:3] == ["run.Created", "pod.KeysGenerated", "pod.VolumeAttached"]
    assert "train: created network volume cache" in first.stderr
    assert "train: using network volume cache" in second.stderr
    # What was left on the volume through the first pod, the second pod reads; the image's own
    # /workspace (its venv) is not hidden by the mount.
    on_a = w.pods.path(pod_a, "/runpod-volume/overbrainer/left-by-a")
    on_b = w.pods.path(pod_b, "/runpod-volume/overbrainer/left-by-a")
    assert on_b.is_file() and on_b.read_bytes() == on_a.read_bytes()
    assert on_b.resolve().is_relative_to(w.pods.volume_dir(volume.id))
    assert (
        not w.pods.path(pod_b, "/workspace").resolve().is_relative_to(w.pods.volume_dir(volume.id))
    )
    # What the first run's job saved (its output) is on the volume, not the pod's disk, and
    # the second pod reads it there; the copy at home is the same, verified.
    output_a = w.pod_run_dir(pod_a, run_a) / "output"
    assert output_a.is_symlink()
    assert output_a.resolve() == w.pods.volume_dir(volume.id) / f"overbrainer/runs/{run_a}/output"
    saved = w.pods.path(
        pod_b, f"/runpod-volume/overbrainer/runs/{run_a}/output/adapter_model.safetensors"
    )
    home = w.project / "runs" / run_a / "output" / "adapter_model.safetensors"
    assert saved.is_file() and saved.read_bytes() == home.read_bytes()
    assert "saves its checkpoints and output on network volume cache" in first.stderr
    # The pods are gone; the volume, and what is on it, stays.
    assert w.fake.status(pod_a) == w.fake.status(pod_b) == "TERMINATED"
    assert w.fake.live_volumes(CANARY_KEY) == [volume]
    assert made.json == {"name": "cache", "size": 20, "dataCenter": "US-KS-2"}
