"""The model cache on the project's network volume, through the REAL ``overbrainer``
command (the fake Runpod API on loopback, fake pods running the real bootstrap and
watchdog, the real clock): the job's ``HF_HOME`` is the volume's, so the first run
downloads the base model (the stand-in hub takes its simulated seconds) and the second
finds it there, and reaches its first training step sooner by about that download."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from overbrainer.testing.fake_executor import CANARY_KEY
from tests.runpod.test_train_loopback import World, world
from tests.runpod.test_volume_loopback import VOLUME

DOWNLOAD_SECONDS = 6.0
# 60 MB at 10 MB/s: the simulated download of the base model on a cold cache.
HUB = "FAKE_HUB_MODEL_MB=60 FAKE_HUB_MB_PER_SECOND=10"
MODEL = "Qwen/Qwen3-0.6B"


def _to_first_step(w: World, run_id: str) -> float:
    """Seconds from the pod's creation (Runpod's createdAt) to the job's first training
    step (its metrics line), both on this machine's clock in the fake world."""
    created = datetime.fromisoformat(str(w.pod_json(run_id)["created_at"]).replace("Z", "+00:00"))
    lines = (w.project / "runs" / run_id / "metrics.jsonl").read_text().splitlines()
    first = next(json.loads(line) for line in lines if '"step"' in line)
    return float(first["time"]) - created.timestamp()


async def test_the_second_run_on_a_volume_finds_the_model_and_starts_sooner(
    tmp_path: Path,
) -> None:
    # The image's own HF_HOME, for a pod without the volume: never used here.
    image_hf = tmp_path / "image-hf"
    async with world(tmp_path, steps=3, hub=HUB, overrides={"HF_HOME": str(image_hf)}) as w:
        first = await w.run("train", env=VOLUME, timeout=120)
        assert first.returncode == 0, first.stderr
        (run_a,) = w.runs()
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        record = w.pods.volume_dir(volume.id) / "overbrainer" / "hf" / "fake_hub_downloads.jsonl"
        after_first = record.read_text()
        second = await w.run("train", env=VOLUME, timeout=120)
        assert second.returncode == 0, second.stderr
        run_b = next(r for r in w.runs() if r != run_a)
        shown_a = await w.run("runs", "show", run_a, "--no-plot")
        shown_b = await w.run("runs", "show", run_b, "--no-plot")
        story_b = await w.run("events", run_b)

    # The fake hub's record: the model downloaded into the volume's HF_HOME by the first
    # run (its configs, then its weights), nothing by the second.
    assert record.read_text() == after_first
    downloads = [json.loads(line) for line in after_first.splitlines()]
    assert [(line["repo"], line["files"]) for line in downloads] == [
        (MODEL, ["config.json", "tokenizer.json"]),
        (MODEL, ["model.safetensors"]),
    ]
    assert downloads[1]["seconds"] >= DOWNLOAD_SECONDS * 0.9
    assert not image_hf.exists()
    # The runs' records say so.
    ready_a, ready_b = (w.run_json(run)["model"] for run in (run_a, run_b))
    assert isinstance(ready_a, dict) and isinstance(ready_b, dict)
    assert ready_a["cached"] is False and ready_a["seconds"] >= DOWNLOAD_SECONDS * 0.9
    assert ready_b["cached"] is True and ready_b["seconds"] < 2.0
    assert f"  model      lora of {MODEL}; downloaded in " in shown_a.stdout
    assert f"  model      lora of {MODEL}; from the cache, ready in " in shown_b.stdout
    assert "run.ModelReady" in story_b.stdout and "base model from the cache" in story_b.stdout
    assert "base model from the cache, ready in" in second.stderr
    # Axolotl's tokenised data goes to the volume too.
    for run in (run_a, run_b):
        config = (w.project / "runs" / run / "axolotl.yaml").read_text()
        assert "dataset_prepared_path: /runpod-volume/overbrainer/prepared/data-" in config
    # From the pod's creation to the first step: shorter by about the download (margins
    # for a busy machine: pods boot in a second or two here, the download takes 6).
    saved = _to_first_step(w, run_a) - _to_first_step(w, run_b)
    assert DOWNLOAD_SECONDS - 2.5 < saved < DOWNLOAD_SECONDS + 5, saved
