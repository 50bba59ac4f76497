"""The job's model step (``train/overbrainer_model.py``), run as a job runs it: the job's
Python in the run directory, ``huggingface_hub`` being the fake world's stand-in (a
download at a set rate into ``HF_HOME``, recorded)."""

import json
import os
import subprocess
import sys
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace

import pytest

from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.lifecycle.model_ready import ModelWatch, parse_ready
from overbrainer.testing import hub
from overbrainer.train import overbrainer_model
from overbrainer.train.axolotl import MODEL_READY_FILE, MODEL_STEP_FILE, model_step_source
from overbrainer.train.metrics import MetricsEvent

MODEL = "org/tiny"


def _step(
    run_dir: Path, hf_home: Path, *args: str, rate: str = "20", python: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / MODEL_STEP_FILE).write_bytes(model_step_source())
    env = {
        "PATH": os.environ["PATH"],
        "HF_HOME": str(hf_home),
        "PYTHONPATH": str(hub.PATH),
        "FAKE_HUB_MODEL_MB": "5",
        "FAKE_HUB_MB_PER_SECOND": rate,
    }
    return subprocess.run(
        [*(python or (sys.executable,)), MODEL_STEP_FILE, *args],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _downloads(hf_home: Path) -> list[dict[str, object]]:
    """The fake hub's downloads of the model's weights (its configs come apart)."""
    record = hf_home / "fake_hub_downloads.jsonl"
    if not record.exists():
        return []
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return [line for line in lines if "model.safetensors" in line["files"]]


def _ready(run_dir: Path) -> dict[str, object]:
    data = json.loads((run_dir / MODEL_READY_FILE).read_text())
    assert isinstance(data, dict)
    return data


def test_a_cold_cache_downloads_the_model_and_a_warm_one_finds_it(tmp_path: Path) -> None:
    cache = tmp_path / "volume" / "hf"
    cold = _step(tmp_path / "a", cache, MODEL)
    assert cold.returncode == 0, cold.stderr
    first = _ready(tmp_path / "a")
    assert first["cached"] is False
    assert isinstance(first["seconds"], float) and first["seconds"] >= 0.25  # 5 MB at 20 MB/s
    assert "base model org/tiny: downloaded" in cold.stdout
    assert len(_downloads(cache)) == 1

    warm = _step(tmp_path / "b", cache, MODEL)
    assert warm.returncode == 0, warm.stderr
    second = _ready(tmp_path / "b")
    assert second["cached"] is True
    assert isinstance(second["seconds"], float) and second["seconds"] < 0.25
    assert "base model org/tiny: from the cache" in warm.stdout
    assert len(_downloads(cache)) == 1  # nothing downloaded the second time


def test_a_snapshot_without_its_weights_is_not_counted_as_cached(tmp_path: Path) -> None:
    # An earlier trainer stopped after the config: the snapshot's folder is there, its
    # weights are not.
    cache = tmp_path / "hf"
    _step(tmp_path / "a", cache, MODEL)
    (snapshot,) = (cache / "hub" / "models--org--tiny" / "snapshots").iterdir()
    (snapshot / "model.safetensors").unlink()
    done = _step(tmp_path / "b", cache, MODEL)
    assert done.returncode == 0, done.stderr
    assert _ready(tmp_path / "b")["cached"] is False
    assert len(_downloads(cache)) == 2
    assert (snapshot / "model.safetensors").is_file()


def test_a_base_model_that_is_a_local_path_records_nothing(tmp_path: Path) -> None:
    local = tmp_path / "my-model"
    local.mkdir()
    done = _step(tmp_path / "run", tmp_path / "hf", str(local))
    assert done.returncode == 0, done.stderr
    assert "is a local path: nothing to download" in done.stdout
    assert not (tmp_path / "run" / MODEL_READY_FILE).exists()
    assert _downloads(tmp_path / "hf") == []


@pytest.mark.parametrize("why", ["no huggingface_hub", "a failed download"])
def test_the_step_never_fails_the_job_and_then_records_nothing(tmp_path: Path, why: str) -> None:
    if why == "no huggingface_hub":
        # Python without its site-packages, and no stand-in on the path: nothing to import.
        done = _step(tmp_path / "run", tmp_path / "hf", MODEL, python=(sys.executable, "-S", "-E"))
        said = "huggingface_hub is not importable here"
    else:
        done = _step(tmp_path / "run", tmp_path / "hf", MODEL, rate="0")  # the hub fails
        said = "could not download base model org/tiny"
    assert done.returncode == 0, done.stderr
    assert said in done.stdout
    assert not (tmp_path / "run" / MODEL_READY_FILE).exists()


def test_the_record_becomes_one_event_per_job() -> None:
    ready = parse_ready(b'{"cached": true, "seconds": 1.5, "time": 1767225600.0}\n')
    assert ready == ev.ModelReady(cached=True, seconds=1.5, at="2026-01-01T00:00:00Z")
    for bad in (b"{", b"[]", b'{"cached": 1, "seconds": 1, "time": 1}', b'{"cached": true}'):
        assert parse_ready(bad) is None
    assert parse_ready(b'{"cached": false, "seconds": -1, "time": 1767225600}') is None
    state = fold(
        [
            (
                ev.RunCreated(
                    run_id="20260101-000000-abcd",
                    target="gpu",
                    kind="runpod",
                    remote_dir="r",
                    settings_digest="d",
                ),
                "2026-01-01T00:00:00Z",
            ),
            (ev.JobStarted(job_dir="r", pid=5), "2026-01-01T00:00:01Z"),
        ]
    )
    assert decisions.model_ready(state, ready) == [ready]
    state.apply(ready, "2026-01-01T00:00:02Z")
    # The same job's record, read again (by an attach): not recorded twice.
    assert decisions.model_ready(state, ready) == []
    later = ev.ModelReady(cached=True, seconds=0.2, at="2026-01-01T01:00:00Z")
    assert decisions.model_ready(state, later) == [later]


class _Repo:
    """A hub holding one repository's files, fetched by ``snapshot_download``'s patterns
    into ``folder`` (the test's own stand-in: which files a step asks for is the point)."""

    def __init__(self, folder: Path, files: dict[str, str]) -> None:
        self.folder = folder
        self.files = files
        self.fetched: list[str] = []

    def snapshot_download(
        self,
        repo_id: str,
        *,
        revision: str | None = None,
        local_files_only: bool = False,
        allow_patterns: list[str] | None = None,
    ) -> str:
        if local_files_only:
            raise FileNotFoundError(repo_id)
        for name, text in self.files.items():
            allowed = allow_patterns is None or any(fnmatch(name, p) for p in allow_patterns)
            if allowed and not (self.folder / name).exists():
                (self.folder / name).parent.mkdir(parents=True, exist_ok=True)
                (self.folder / name).write_text(text)
                self.fetched.append(name)
        return str(self.folder)


def test_only_the_weights_the_trainer_loads_are_downloaded(tmp_path: Path) -> None:
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002"}}
    index["weight_map"]["b"] += ".safetensors"
    repo = _Repo(
        tmp_path / "snapshot",
        {
            "config.json": "{}",
            "tokenizer.json": "{}",
            "model.safetensors.index.json": json.dumps(index),
            "model-00001-of-00002.safetensors": "w1",
            "model-00002-of-00002.safetensors": "w2",
            # Other copies of the same weights, which the trainer never reads.
            "consolidated.safetensors": "all",
            "original/consolidated.00.pth": "all",
            "pytorch_model.bin": "all",
        },
    )
    assert overbrainer_model.ready(repo, MODEL, None) is False
    assert sorted(repo.fetched) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
    ]
    assert overbrainer_model.has_weights(repo.folder)


def test_a_model_without_safetensors_gets_its_pytorch_weights(tmp_path: Path) -> None:
    repo = _Repo(tmp_path / "snapshot", {"config.json": "{}", "pytorch_model.bin": "w"})
    assert overbrainer_model.ready(repo, MODEL, None) is False
    assert sorted(repo.fetched) == ["config.json", "pytorch_model.bin"]


class _Target:
    """A job's directory on a target, read as the follower reads it; counts its reads."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.reads = 0

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        self.reads += 1
        return self.files.get(path, b"")[offset : offset + limit]


class _Journal:
    def __init__(self, state: RunLog) -> None:
        self.state = state
        self.appended: list[ev.Event] = []

    async def append(self, run_id: str, decide: Callable[[RunLog], list[ev.Event]]) -> RunLog:
        for event in decide(self.state):
            self.state.apply(event, "2026-01-01T00:00:03Z")
            self.appended.append(event)
        return self.state


def _watch(kind: str, files: dict[str, bytes]) -> tuple[ModelWatch, _Target, _Journal]:
    state = fold(
        [
            (
                ev.RunCreated(
                    run_id="20260101-000000-abcd",
                    target="gpu",
                    kind=kind,
                    remote_dir="r",
                    settings_digest="d",
                ),
                "2026-01-01T00:00:00Z",
            ),
            (ev.JobStarted(job_dir="r", pid=5), "2026-01-01T00:00:01Z"),
        ]
    )
    target, journal = _Target(files), _Journal(state)
    session = SimpleNamespace(journal=journal, front=SimpleNamespace(warn=print))
    job = SimpleNamespace(run_id="20260101-000000-abcd", executor=target, remote_dir="r")
    return ModelWatch(session, job, state), target, journal  # type: ignore[arg-type]


async def test_the_follower_records_the_step_once_and_stops_looking() -> None:
    record = b'{"cached": false, "seconds": 4.0, "time": 1767225600.0}\n'
    watch, target, journal = _watch("runpod", {})
    await watch()
    await watch()  # the step is still downloading: nothing yet, looked twice
    assert (target.reads, journal.appended) == (2, [])
    target.files["r/model_ready.json"] = record
    await watch()
    await watch()
    assert target.reads == 3  # found: no more looks
    assert journal.appended == [ev.ModelReady(cached=False, seconds=4.0, at="2026-01-01T00:00:00Z")]


async def test_the_follower_gives_up_after_the_trainers_first_line_or_the_jobs_end() -> None:
    watch, target, journal = _watch("runpod", {})
    watch.saw([MetricsEvent(event="begin")])
    await watch()  # the last look: the trainer started, the step wrote nothing
    await watch()
    await watch.finish()
    assert (target.reads, journal.appended) == (1, [])
    # A job that ended between two polls: one look at its end finds the record.
    record = b'{"cached": true, "seconds": 0.5, "time": 1767225600.0}\n'
    watch, target, journal = _watch("runpod", {"r/model_ready.json": record})
    await watch.finish()
    assert [type(e) for e in journal.appended] == [ev.ModelReady]


async def test_a_job_off_a_pod_is_not_looked_at() -> None:
    watch, target, _ = _watch("local", {})
    await watch()
    await watch.finish()
    assert target.reads == 0
