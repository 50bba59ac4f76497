"""The job's first step: the base model made ready in ``HF_HOME`` before the trainer starts,
and a record of how.

This file is copied into every run directory and run there by the job's own Python (the
venv's, which has Axolotl and so ``huggingface_hub``)::

    python overbrainer_model.py BASE_MODEL [REVISION]

It imports nothing from overbrainer and only the standard library at module level;
``huggingface_hub`` is looked up when it runs, through its public API only
(``snapshot_download``). A base model already in the cache (``local_files_only=True``
finds it, its weights there) is ``cached``; any other is downloaded, timed. Either way
``model_ready.json`` in the working directory says so, written whole (a temporary file
renamed), which the command following the run turns into ``run.ModelReady``::

    {"cached": false, "seconds": 41.2, "time": 1700000000.5}

Only what the trainer loads is fetched: the configs, the tokenizer's files and the
weights transformers loads (the shards the safetensors index names, or
``model.safetensors``; the PyTorch ones only without those), never a repository's other
copies of the weights (``consolidated.safetensors``, ``original/*.pth``, GGUF, ONNX).

It never fails the job: a base model that is a local path, a missing ``huggingface_hub``
or a download that fails are said in the job's log and leave the model to the trainer,
whose own error is then the one to read.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULT_FILE = "model_ready.json"
"""What the step writes in the working directory (the run directory)."""

# The files of a model the trainer reads besides its weights: configs (the weights' index
# among them), the tokenizer's, a remote code's.
_MODEL_FILES = ["*.json", "*.model", "*.txt", "*.py", "*.jinja", "*.tiktoken"]
# The weights as transformers looks for them: an index naming the shards, or one file;
# safetensors first.
_WEIGHTS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


def say(message: str) -> None:
    print(f"overbrainer: {message}", flush=True)


def _shards(index: Path) -> list[str]:
    weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    return sorted({str(name) for name in weight_map.values()})


def has_weights(folder: Path) -> bool:
    """Whether the snapshot ``folder`` holds the model's weights: every shard its index
    names, or the one weights file."""
    for index, single in _WEIGHTS:
        try:
            if (folder / index).is_file():
                return all((folder / shard).is_file() for shard in _shards(folder / index))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        if (folder / single).is_file():
            return True
    return False


def ready(hub: Any, base_model: str, revision: str | None) -> bool:
    """Make ``base_model`` ready in the cache; whether it was there already. Only what the
    trainer loads is fetched: a repository's other copies of the weights (Mistral's
    ``consolidated.safetensors``, ``original/*.pth``, GGUF, ONNX) never are."""
    try:
        found = hub.snapshot_download(base_model, revision=revision, local_files_only=True)
    except Exception:  # not in the cache, whatever the library says why
        found = None
    if found is not None and has_weights(Path(found)):
        return True
    folder = Path(hub.snapshot_download(base_model, revision=revision, allow_patterns=_MODEL_FILES))
    for index, single in _WEIGHTS:
        wanted = _shards(folder / index) if (folder / index).is_file() else [single]
        hub.snapshot_download(base_model, revision=revision, allow_patterns=wanted)
        if has_weights(folder):
            break
    return False


def write_result(cached: bool, seconds: float) -> None:
    record = {"cached": cached, "seconds": round(seconds, 3), "time": round(time.time(), 3)}
    aside = Path(f".{RESULT_FILE}.{os.getpid()}")
    aside.write_text(json.dumps(record) + "\n", encoding="utf-8")
    aside.replace(RESULT_FILE)


def main(argv: Sequence[str]) -> int:
    if not argv or not argv[0]:
        say("usage: python overbrainer_model.py BASE_MODEL [REVISION]")
        return 0
    base_model = argv[0]
    revision = argv[1] if len(argv) > 1 and argv[1] else None
    if Path(base_model).exists():
        say(f"base model {base_model} is a local path: nothing to download")
        return 0
    # One line in the job's log when done, not a progress bar redrawn ten times a second.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        hub = importlib.import_module("huggingface_hub")
    except ImportError:
        say("huggingface_hub is not importable here: the trainer downloads the base model")
        return 0
    start = time.monotonic()
    try:
        cached = ready(hub, base_model, revision)
    except Exception as error:  # the trainer then says what is wrong
        say(f"could not download base model {base_model} ({error}); left to the trainer")
        return 0
    seconds = time.monotonic() - start
    home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    how = "from the cache" if cached else "downloaded"
    say(f"base model {base_model}: {how} (HF_HOME {home}), ready in {seconds:.1f} s")
    try:
        write_result(cached, seconds)
    except OSError as error:
        say(f"could not write {RESULT_FILE}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
