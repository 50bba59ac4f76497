"""What overbrainer adds to a real training run on this machine.

The e2e suite's tiny real job (``e2e/``: the tiny Qwen3-shaped model, 64 conversations, one
epoch of LoRA on the CPU) trained through ``overbrainer train`` on a ``local`` target, and
the very same job run directly: the run's own ``axolotl.yaml``, data, plugin and
``job.cmds`` (its environment and its ``axolotl train`` line) copied to a fresh directory
and run with ``sh``. Both under ``unshare -n`` (no network, as the e2e suite runs them),
with the same Hugging Face cache, after one untimed run that fills it; the best of the
rounds of each, taken in turns. The figure is their ratio: preflight, run creation,
following, the verified retrieval and the log, against nothing at all.

It needs the e2e environment (``just e2e`` builds it once, ~4 GiB under ``.e2e/``): without
it the row says so.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from e2e import build
from e2e.harness import CASES, LocalWorld, Project

Row = tuple[str, str, str, str]
WHAT = "a real local run (e2e tiny LoRA), overbrainer train vs axolotl train"
# What the job reads and runs: copied for the direct run (its outputs are not).
INPUTS = ("axolotl.yaml", "data", "overbrainer_metrics.py", "job.cmds")


def _built() -> build.Built | None:
    env, model = build.env_dir(), build.model_dir()
    if not (build.is_built(env) and build.is_built(model)):
        return None
    return build.Built(env, model, 0.0, 0.0, env_reused=True, model_reused=True)


def _through_overbrainer(project: Project) -> tuple[float, Path]:
    started = time.perf_counter()
    done = project.run("train")
    spent = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"overbrainer train failed:\n{done.stderr[-2000:]}")
    runs = sorted((project.path / "runs").iterdir())
    return spent, runs[-1]


def _directly(project: Project, run_dir: Path, into: Path) -> float:
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir()
    for name in INPUTS:
        source = run_dir / name
        if source.is_dir():
            shutil.copytree(source, into / name)
        else:
            shutil.copy2(source, into / name)
    started = time.perf_counter()
    done = subprocess.run(
        [*project.prefix, "sh", "job.cmds"],
        cwd=into,
        env=project.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    spent = time.perf_counter() - started
    if done.returncode != 0 or not any((into / "output").glob("adapter_model.*")):
        raise RuntimeError(f"axolotl train failed:\n{done.stderr[-2000:]}")
    return spent


def run(progress: Callable[[str], None] | None = None, *, quick: bool = False) -> list[Row]:
    """Train the tiny job both ways, in turns; one row with the ratio."""
    say = progress or (lambda _text: None)
    built = _built()
    if built is None:
        return [(WHAT, "not measured", "", "the e2e environment is not built: `just e2e`")]
    rounds = 1 if quick else 2
    ours: list[float] = []
    direct: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        base = Path(name)
        case_dir = base / "lora"
        case_dir.mkdir()
        project = LocalWorld(built, base).project(CASES["lora"], case_dir)
        project.env.pop("PYTHONDONTWRITEBYTECODE", None)
        if not quick:
            say("train: one untimed run (fills the caches)")
            _through_overbrainer(project)
        for i in range(rounds):
            spent, run_dir = _through_overbrainer(project)
            ours.append(spent)
            direct.append(_directly(project, run_dir, base / f"direct-{i}"))
            say(f"train:   round: overbrainer {ours[-1]:.1f} s, axolotl {direct[-1]:.1f} s")
    best, floor = min(ours), min(direct)
    return [
        (
            WHAT,
            f"{best:.1f} s ({best / floor:.3f}x)",
            f"axolotl train {floor:.1f} s",
            "<= 1.05x",
        )
    ]


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for row in run(lambda text: print(text, file=sys.stderr)):
        print(" | ".join(row))
