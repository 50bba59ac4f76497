"""The loopback model hub (overbrainer/testing/model_hub.py) against the real
``huggingface_hub`` client, in the e2e environment that has it (the version Axolotl runs
with): the client downloads the tiny model from it into a cache, lists it and reads its
info, records a missing file as missing, and then, offline, finds it all in the cache
while the hub hears nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from e2e.build import Built
from e2e.harness import base_env
from overbrainer.testing.model_hub import ModelHub

REPO = "overbrainer-test/tiny-qwen3"

ONLINE = """
import json, sys
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import RemoteEntryNotFoundError

repo = sys.argv[1]
api = HfApi()
out = {"snapshot": snapshot_download(repo), "sha": api.model_info(repo).sha}
out["files"] = sorted(api.list_repo_files(repo))
try:
    hf_hub_download(repo, "adapter_config.json")
    out["missing"] = "downloaded"
except RemoteEntryNotFoundError:
    out["missing"] = "not found"
print(json.dumps(out))
"""

OFFLINE = """
import json, sys
from huggingface_hub import hf_hub_download, snapshot_download

repo = sys.argv[1]
out = {"snapshot": snapshot_download(repo), "config": hf_hub_download(repo, "config.json")}
print(json.dumps(out))
"""


def _client(built: Built, script: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(built.python), "-c", script, REPO],
        env={**base_env(), "HF_HUB_DISABLE_TELEMETRY": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_huggingface_hub_downloads_from_the_hub_then_reads_its_cache_offline(
    built: Built, tmp_path: Path
) -> None:
    hf_home = tmp_path / "hf"
    files = sorted(p.name for p in built.model.iterdir() if not p.name.startswith("."))
    with ModelHub(built.model, REPO) as hub:
        online = _client(built, ONLINE, {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.url})
        assert online["sha"] == hub.commit
        assert online["files"] == files
        assert online["missing"] == "not found"
        snapshot = Path(online["snapshot"])
        assert snapshot == hf_home / "hub" / "models--overbrainer-test--tiny-qwen3" / (
            f"snapshots/{hub.commit}"
        )
        for name in files:
            assert (snapshot / name).read_bytes() == (built.model / name).read_bytes(), name
        # Each file crossed once; the missing one is remembered as missing, by commit.
        assert sorted(hub.downloads()) == files
        assert (snapshot.parents[1] / ".no_exist" / hub.commit / "adapter_config.json").exists()

        heard = len(hub.requests)
        offline = _client(
            built,
            OFFLINE,
            {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "1"},
        )
        assert offline == {"snapshot": str(snapshot), "config": str(snapshot / "config.json")}
        assert len(hub.requests) == heard
