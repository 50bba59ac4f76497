"""The e2e suite's CPU Axolotl environment and tiny model: built once, reused while the pins
(and the model's script) are unchanged.

Both live under ``.e2e/`` in the repository (git ignores it), in directories named by the
hash of what they are built from: ``.e2e/axolotl-<hash of requirements.txt>`` (a venv with
every package pinned, torch being the CPU build that lies on this kind of machine) and
``.e2e/tiny-qwen3-<hash of make_model.py and the pins>`` (the tiny model and tokenizer). A
directory counts as built once its ``.complete`` marker exists; a half-built one (an
interrupted build) is removed and built again. Older environments are removed when a new
one is built (each is ~4 GiB).

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PINS = HERE / "requirements.txt"
MAKE_MODEL = HERE / "make_model.py"
CACHE = ROOT / ".e2e"
MARKER = ".complete"


@dataclass(frozen=True)
class Built:
    """Where the environment and the model are, and how long getting them took."""

    env: Path
    model: Path
    env_seconds: float
    model_seconds: float
    env_reused: bool
    model_reused: bool

    @property
    def python(self) -> Path:
        """The environment's Python."""
        return self.env / "bin" / "python"


def _digest(*paths: Path) -> str:
    h = hashlib.sha256()
    h.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    for path in paths:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def env_dir() -> Path:
    """The environment for the current pins."""
    return CACHE / f"axolotl-{_digest(PINS)}"


def model_dir() -> Path:
    """The tiny model for the current script and pins."""
    # "qwen3" in the name: the chat template is Qwen3-shaped and renders reasoning_content.
    return CACHE / f"tiny-qwen3-{_digest(MAKE_MODEL, PINS)}"


def is_built(path: Path) -> bool:
    """Whether ``path`` was built to the end."""
    return (path / MARKER).is_file()


def _run(argv: list[str], log: Path) -> None:
    with log.open("ab") as sink:
        sink.write(f"$ {' '.join(argv)}\n".encode())
        sink.flush()
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise SystemExit(
            f"e2e: `{' '.join(argv)}` failed (exit {done.returncode}); the last lines of "
            f"{log}:\n" + "\n".join(tail)
        )


def _build_env(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    log = CACHE / "build.log"
    log.write_bytes(b"")
    _run([sys.executable, "-m", "venv", str(path)], log)
    python = str(path / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], log)
    # Every package pinned, torch included (its CPU build): pip takes nothing unpinned, so
    # no multi-GB CUDA build of torch can slip in.
    _run([python, "-m", "pip", "install", "-q", "-r", str(PINS), "-c", str(PINS)], log)
    (path / MARKER).write_text("built\n")
    for old in CACHE.glob("axolotl-*"):
        if old != path:
            shutil.rmtree(old, ignore_errors=True)


def _build_model(path: Path, python: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    log = CACHE / "model.log"
    log.write_bytes(b"")
    _run([str(python), str(MAKE_MODEL), str(path)], log)
    (path / MARKER).write_text("built\n")
    for old in CACHE.glob("tiny-qwen3-*"):
        if old != path:
            shutil.rmtree(old, ignore_errors=True)


def build() -> Built:
    """Build what is missing (one builder at a time), reuse the rest."""
    CACHE.mkdir(exist_ok=True)
    env, model = env_dir(), model_dir()
    fd = os.open(CACHE / "build.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        env_reused = is_built(env)
        if not env_reused:
            print(f"e2e: building the CPU Axolotl environment in {env} (a few minutes)", flush=True)
            _build_env(env)
        env_seconds = time.monotonic() - started
        started = time.monotonic()
        model_reused = is_built(model)
        if not model_reused:
            _build_model(model, env / "bin" / "python")
        model_seconds = time.monotonic() - started
    finally:
        os.close(fd)
    return Built(env, model, env_seconds, model_seconds, env_reused, model_reused)


def main() -> int:
    """Build, and say what was built or reused and how long it took."""
    built = build()
    for what, path, seconds, reused in (
        ("environment", built.env, built.env_seconds, built.env_reused),
        ("tiny model", built.model, built.model_seconds, built.model_reused),
    ):
        how = "reused" if reused else "built"
        print(f"e2e: {what} {how} in {seconds:.1f} s: {path.relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
