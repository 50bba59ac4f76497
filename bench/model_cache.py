"""What a network volume's model cache saves: the seconds billed before the first training
step, on a cold volume, a warm one and without a volume, beside the pod's boot alone.

The fake Runpod API on loopback with fake pods running the real bootstrap and watchdog,
the REAL ``overbrainer train`` in a process, the real clock; the image pull is simulated
by the fake's PROVISIONING seconds, the base model's download by the stand-in
``huggingface_hub`` (``overbrainer/testing/hub``) at a set rate on a cold cache. Three
runs: without a volume (the pod's own cache, cold), then two on one volume (the first
fills its cache, the second finds the model there). For each, from the pod's creation
(Runpod's ``createdAt``, where billing starts) to the job's first training step (its
metrics line); the floor, the pod's boot alone: creation to ``pod.Ready``. ``--quick``
simulates a shorter pull and download.
"""

import json
import os
import sys
import tempfile
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import trio

from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.fake_pod import fake_pods
from overbrainer.testing.hub import PATH as HUB_PATH
from overbrainer.testing.pod_training import write_project
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from overbrainer.testing.stand_in import AXOLOTL

ROOT = Path(__file__).resolve().parents[1]
VOLUME = {
    "OVERBRAINER_TARGETS__GPU__VOLUME": "cache",
    "OVERBRAINER_TARGETS__GPU__VOLUME_DATA_CENTER": "US-KS-2",
    "OVERBRAINER_TARGETS__GPU__VOLUME_SIZE_GB": "50",
}


@dataclass(frozen=True)
class Sizes:
    """The simulated image pull (seconds) and model download (MB at MB/s)."""

    pull: float
    model_mb: float
    rate: float

    @property
    def download(self) -> float:
        return self.model_mb / self.rate


@dataclass(frozen=True)
class Figures:
    """One run: creation to its first step, and to its pod's readiness (seconds)."""

    first_step: float
    boot: float


def _at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _venv(directory: Path, sizes: Sizes) -> Path:
    """A venv whose ``axolotl`` is the stand-in and whose ``python`` imports the stand-in
    hub, both with the download's knobs."""
    venv = directory / "venv"
    (venv / "bin").mkdir(parents=True)
    hub = f"FAKE_HUB_MODEL_MB={sizes.model_mb} FAKE_HUB_MB_PER_SECOND={sizes.rate}"
    axolotl = venv / "bin" / "axolotl"
    axolotl.write_text(
        f'#!/bin/sh\nFAKE_AXOLOTL_STEPS=2 {hub} exec {sys.executable} {AXOLOTL} "$@"\n'
    )
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={HUB_PATH} {hub} exec {sys.executable} "$@"\n')
    for script in (axolotl, python):
        script.chmod(0o755)
    return venv


async def _overbrainer(project: Path, env: dict[str, str], *args: str) -> str:
    done = await trio.run_process(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"overbrainer {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout.decode()


async def _train(project: Path, env: dict[str, str]) -> Figures:
    runs = project / "runs"
    before = set(os.listdir(runs)) if runs.exists() else set()
    with trio.fail_after(300):
        await _overbrainer(project, env, "train")
    (run_id,) = set(os.listdir(runs)) - before
    pod = json.loads((runs / run_id / "pod.json").read_text())
    created = _at(pod["created_at"])
    lines = (runs / run_id / "metrics.jsonl").read_text().splitlines()
    first = next(json.loads(line) for line in lines if '"step"' in line)
    story = await _overbrainer(project, env, "events", run_id, "--json")
    ready = next(json.loads(row)["time"] for row in story.splitlines() if '"pod.Ready"' in row)
    return Figures(first_step=float(first["time"]) - created, boot=_at(ready) - created)


async def _measure(directory: Path, sizes: Sizes) -> dict[str, Figures]:
    fake = FakeRunpod(provisioning_seconds=sizes.pull, starting_seconds=0.3)
    fake.add_account(CANARY_KEY)
    project = directory / "project"
    project.mkdir()
    write_project(project)
    venv = _venv(directory, sizes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    async with AsyncExitStack() as stack:
        base_url = await stack.enter_async_context(serve_loopback(fake))
        # The image's HF_HOME, for the pod without a volume: a fresh pod's empty cache.
        overrides = {"HF_HOME": str(directory / "image-hf")}
        await stack.enter_async_context(
            fake_pods(fake, base_url, directory / "pods", overrides=overrides)
        )
        env.update(
            OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
            OVERBRAINER_RUNPOD__BASE_URL=base_url,
            OVERBRAINER_TARGETS__GPU__VENV=str(venv),
            OVERBRAINER_TARGETS__GPU__MAX_HOURS="1",
            PYTHONPATH=str(ROOT),
        )
        return {
            "none": await _train(project, env),
            "cold": await _train(project, {**env, **VOLUME}),
            "warm": await _train(project, {**env, **VOLUME}),
        }


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """The row: billed seconds before the first step, each case beside the boot alone."""
    sizes = Sizes(pull=1.0, model_mb=200, rate=100) if quick else Sizes(5.0, 16_000, 800)
    if progress is not None:
        progress(
            f"cache: 3 runs on the fake Runpod API on loopback (image pull {sizes.pull:g} s, "
            f"model download {sizes.download:g} s on a cold cache)"
        )
    with tempfile.TemporaryDirectory() as directory:
        figures = trio.run(_measure, Path(directory), sizes)
    boot = min(f.boot for f in figures.values())
    cold, warm, none = figures["cold"], figures["warm"], figures["none"]
    return [
        (
            "pod: billed seconds before the first training step (fake Runpod, image pull "
            f"{sizes.pull:g} s, model download {sizes.download:g} s)",
            f"cold volume {cold.first_step:.1f} s, warm volume {warm.first_step:.1f} s, "
            f"no volume {none.first_step:.1f} s",
            f"boot {boot:.1f} s",
            f"warm <= boot + 5 s; cold - warm ~ {sizes.download:g} s",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(" | ".join(row))
