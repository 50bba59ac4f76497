"""The loopback model hub (overbrainer/testing/model_hub.py), over real HTTP: the routes,
headers and error marks huggingface_hub's download path reads, what it records, and its
program. (The real huggingface_hub client against it: e2e/test_model_hub.py, in the
environment that has it.)"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from overbrainer.testing.model_hub import ModelHub, read_log

REPO = "owner/tiny"
ROOT = Path(__file__).resolve().parents[2]


def _model(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"hidden_size": 8}')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (root / "sub" / "template.jinja").write_text("{{ messages }}")
    (root / ".complete").write_text("built\n")  # a dotfile: not part of the repository
    return root


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[ModelHub]:
    with ModelHub(_model(tmp_path / "model"), REPO) as hub:
        yield hub


def test_head_of_a_file_gives_commit_etag_and_size_without_sending_it(hub: ModelHub) -> None:
    data = (hub.root / "model.safetensors").read_bytes()
    response = httpx.head(f"{hub.url}/{REPO}/resolve/main/model.safetensors")
    assert response.status_code == 200
    assert response.headers["X-Repo-Commit"] == hub.commit
    assert response.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'
    assert int(response.headers["Content-Length"]) == len(data)
    assert hub.downloads() == []
    assert [(r.method, r.file, r.sent) for r in hub.requests] == [("HEAD", "model.safetensors", 0)]


def test_get_of_a_file_sends_it_and_counts_it_once_per_get(hub: ModelHub) -> None:
    for revision in ("main", hub.commit):
        response = httpx.get(f"{hub.url}/{REPO}/resolve/{revision}/sub/template.jinja")
        assert response.status_code == 200
        assert response.content == b"{{ messages }}"
        assert response.headers["X-Repo-Commit"] == hub.commit
    assert hub.downloads() == ["sub/template.jinja", "sub/template.jinja"]


def test_missing_file_is_an_entry_not_found_that_names_the_commit(hub: ModelHub) -> None:
    for name in ("adapter_config.json", ".complete"):
        response = httpx.head(f"{hub.url}/{REPO}/resolve/main/{name}")
        assert response.status_code == 404
        assert response.headers["X-Error-Code"] == "EntryNotFound"
        # The client caches the absence under this commit: offline, it looks no further.
        assert response.headers["X-Repo-Commit"] == hub.commit
    assert hub.downloads() == []


def test_other_revisions_and_repositories_are_not_found(hub: ModelHub) -> None:
    cases = {
        f"/{REPO}/resolve/v2/config.json": "RevisionNotFound",
        f"/api/models/{REPO}/revision/v2": "RevisionNotFound",
        f"/api/models/{REPO}/tree/v2": "RevisionNotFound",
        "/other/repo/resolve/main/config.json": "RepoNotFound",
        "/api/models/other/repo": "RepoNotFound",
        "/api/datasets/other/data/revision/main": "RepoNotFound",
    }
    for path, code in cases.items():
        response = httpx.get(hub.url + path)
        assert (response.status_code, response.headers["X-Error-Code"]) == (404, code), path
    assert [r.status for r in hub.requests] == [404] * len(cases)


def test_model_info_lists_the_files_at_the_commit(hub: ModelHub) -> None:
    for path in (f"/api/models/{REPO}", f"/api/models/{REPO}/revision/main"):
        info = httpx.get(hub.url + path).json()
        assert info["id"] == REPO and info["sha"] == hub.commit
        assert len(hub.commit) == 40 and int(hub.commit, 16) >= 0
        files = {s["rfilename"]: s["size"] for s in info["siblings"]}
        assert files == {"config.json": 18, "model.safetensors": 10240, "sub/template.jinja": 14}


def test_tree_lists_a_folder_or_everything_below_it(hub: ModelHub) -> None:
    def listing(path: str, recursive: bool) -> list[tuple[str, str]]:
        response = httpx.get(
            f"{hub.url}/api/models/{REPO}/tree/main{path}",
            params={"recursive": recursive, "expand": False},
        )
        assert response.status_code == 200, response.text
        return [(e["type"], e["path"]) for e in response.json()]

    top = [("file", "config.json"), ("file", "model.safetensors"), ("directory", "sub")]
    assert listing("", recursive=False) == top
    assert listing("", recursive=True) == [*top, ("file", "sub/template.jinja")]
    assert listing("/sub", recursive=False) == [("file", "sub/template.jinja")]
    missing = httpx.get(f"{hub.url}/api/models/{REPO}/tree/main/additional_chat_templates")
    assert missing.status_code == 404 and missing.headers["X-Error-Code"] == "EntryNotFound"
    # A file's oid is its git blob id, as the hub's tree gives it.
    data = (hub.root / "config.json").read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    entries = httpx.get(f"{hub.url}/api/models/{REPO}/tree/main").json()
    assert entries[0] == {"type": "file", "oid": blob, "size": len(data), "path": "config.json"}


def test_commit_follows_the_contents(tmp_path: Path) -> None:
    first = ModelHub(_model(tmp_path / "a"), REPO)
    same = ModelHub(_model(tmp_path / "b"), REPO)
    (tmp_path / "b" / "config.json").write_text('{"hidden_size": 16}')
    changed = ModelHub(tmp_path / "b", REPO)
    try:
        assert first.commit == same.commit != changed.commit
    finally:
        for hub in (first, same, changed):
            hub.stop()


def test_program_says_its_url_logs_each_request_and_stops_on_sigterm(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    ready, log = tmp_path / "hub.url", tmp_path / "hub.log"
    argv = [sys.executable, "-m", "overbrainer.testing.model_hub", str(model), "--repo", REPO]
    argv += ["--ready", str(ready), "--log", str(log)]
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        url = ready.read_text().strip()
        assert httpx.get(f"{url}/{REPO}/resolve/main/config.json").status_code == 200
        assert httpx.head(f"{url}/{REPO}/resolve/main/nope.json").status_code == 404
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    requests = list(read_log(log))
    assert [(r.method, r.file, r.status, r.sent) for r in requests] == [
        ("GET", "config.json", 200, 18),
        ("HEAD", "nope.json", 404, 0),
    ]
    first = json.loads(log.read_text().splitlines()[0])
    assert first["path"] == f"/{REPO}/resolve/main/config.json"
