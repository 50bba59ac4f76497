"""A stand-in ``huggingface_hub`` for the fake world: ``snapshot_download`` downloads a
model into ``HF_HOME`` at a set rate, or finds it there.

Only what overbrainer's model step (``train/overbrainer_model.py``) and the stand-in
trainer use, with the library's signatures and its cache's layout
(``$HF_HOME/hub/models--ORG--NAME/{refs,snapshots}``):

- ``snapshot_download(repo_id, revision=None, local_files_only=False, allow_patterns=None)``:
  the snapshot's folder. With ``local_files_only``, the folder when the cache has it (its
  weights there or not, as the library does), else :class:`LocalEntryNotFoundError`.
  Otherwise the files the patterns allow that are missing are "downloaded": the config at
  once, then the weights after ``FAKE_HUB_MODEL_MB / FAKE_HUB_MB_PER_SECOND`` seconds
  (defaults 100 MB at 1000 MB/s); files already there are not fetched again.
- Each download is recorded as one JSON line (``repo``, ``files``, ``seconds``, ``time``) in
  ``$HF_HOME/fake_hub_downloads.jsonl``: what a test reads to tell a cold cache from a
  warm one.

The weights written are a few bytes, whatever the size said: only the time is simulated.
"""

import fnmatch
import hashlib
import json
import os
import time
from pathlib import Path

__all__ = ["LocalEntryNotFoundError", "snapshot_download"]

DOWNLOADS = "fake_hub_downloads.jsonl"
"""The record of downloads, in ``HF_HOME``."""

_FILES = ("config.json", "tokenizer.json", "model.safetensors")


class LocalEntryNotFoundError(FileNotFoundError):
    """The snapshot asked for with ``local_files_only`` is not in the cache."""


def _home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def _storage(repo_id: str) -> Path:
    return _home() / "hub" / ("models--" + repo_id.replace("/", "--"))


def _commit(repo_id: str, revision: str) -> str:
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()


def snapshot_download(
    repo_id: str,
    *,
    revision: str | None = None,
    local_files_only: bool = False,
    allow_patterns: list[str] | str | None = None,
    **_: object,
) -> str:
    """The snapshot of ``repo_id`` in the cache (downloaded first, unless
    ``local_files_only``); see the module's docstring."""
    revision = revision or "main"
    storage = _storage(repo_id)
    ref = storage / "refs" / revision
    if local_files_only:
        if ref.is_file():
            folder = storage / "snapshots" / ref.read_text().strip()
            if folder.is_dir():
                return str(folder)
        raise LocalEntryNotFoundError(f"{repo_id}@{revision} is not in the cache")
    commit = _commit(repo_id, revision)
    folder = storage / "snapshots" / commit
    patterns = [allow_patterns] if isinstance(allow_patterns, str) else allow_patterns
    wanted = [
        name
        for name in _FILES
        if patterns is None or any(fnmatch.fnmatch(name, p) for p in patterns)
    ]
    missing = [name for name in wanted if not (folder / name).is_file()]
    if not missing:
        return str(folder)
    start = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
    for name in missing:
        if name.endswith(".safetensors"):
            rate = _number("FAKE_HUB_MB_PER_SECOND", 1000.0)
            time.sleep(_number("FAKE_HUB_MODEL_MB", 100.0) / rate)
        aside = folder / f".{name}.incomplete"
        aside.write_text(json.dumps({"repo": repo_id, "file": name}) + "\n")
        aside.replace(folder / name)
    record = {
        "repo": repo_id,
        "files": missing,
        "seconds": round(time.monotonic() - start, 3),
        "time": time.time(),
    }
    with (_home() / DOWNLOADS).open("a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")
    return str(folder)
