"""A model cache on a volume, for real: two local runs through the real ``overbrainer
train`` share one "volume" directory as their job's ``HF_HOME`` (where a network volume
keeps it, ``overbrainer/hf``), and name the model by a hub repository id, not a path.

The first run downloads the model from a Hugging Face hub on loopback
(``overbrainer/testing/model_hub.py``) that serves the tiny model; the hub and the run share
a network namespace of their own with loopback up and no route out, so the hub is all the
run can reach. The second run is offline for the model: the hub stopped, the job's
``HF_HUB_OFFLINE=1``, and no network at all (``unshare -n``, as every local case). It
succeeds from the volume's cache alone, and nothing more was fetched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.harness import ROOT, Case, World, base_env, check_run, train_through
from overbrainer.runpod.volume_layout import hf_home_key
from overbrainer.testing.model_hub import HubRequest, read_log

REPO = "overbrainer-test/tiny-qwen3"  # "qwen3": its chat template renders reasoning


@contextlib.contextmanager
def hub_alone(model: Path, where: Path) -> Iterator[tuple[list[str], Path]]:
    """The model hub serving ``model`` as :data:`REPO`, in a network namespace of its own
    (loopback up, nothing else). Yields the prefix that runs a command in that namespace
    (``HF_ENDPOINT`` is the URL it gives: see :func:`_endpoint`) and the hub's request log."""
    ready, log = where / "hub.url", where / "hub.log"
    # Root may make a network namespace; anyone else makes a user namespace first.
    alone = ["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]
    hub = [sys.executable, "-m", "overbrainer.testing.model_hub", str(model), "--repo", REPO]
    hub += ["--ready", str(ready), "--log", str(log)]
    with (where / "hub.err").open("wb") as err:
        process = subprocess.Popen(
            [*alone, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *hub],
            cwd=ROOT,
            env=base_env(),
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, (where / "hub.err").read_text()
            assert time.monotonic() < deadline, "the model hub did not start"
            time.sleep(0.1)
        # unshare and sh exec: the process is the hub, in its namespace (and, not as root,
        # in the user namespace that owns it).
        enter = ["nsenter", f"--target={process.pid}", "--net"]
        if os.geteuid() != 0:
            # Its user namespace too; keeping our ids: it maps us already (and setgroups,
            # which nsenter would call, is denied in a namespace unshare -r made).
            enter += ["--user", "--preserve-credentials"]
        yield [*enter, "--"], log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _endpoint(where: Path) -> str:
    return (where / "hub.url").read_text().strip()


def _repo_cache(hf_home: Path) -> Path:
    """The model's folder of the Hugging Face cache in ``hf_home``."""
    return hf_home / "hub" / f"models--{REPO.replace('/', '--')}"


def _cache_files(hf_home: Path) -> dict[str, int]:
    """Every file of the model's part of the cache (blobs, refs, absences), with its size."""
    repo = _repo_cache(hf_home)
    return {
        str(path.relative_to(repo)): path.stat().st_size
        for path in sorted(repo.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def _downloads(requests: list[HubRequest]) -> list[str]:
    return [r.file for r in requests if r.file and r.method == "GET" and r.sent]


@pytest.mark.parametrize("kind", ["local"])
def test_second_run_trains_offline_from_the_volume_cache(world: World, tmp_path: Path) -> None:
    built = world.built
    volume = tmp_path / "volume"
    hf_home = volume / hf_home_key()
    case = Case("lora", "lora")

    # The first run: the model from the hub, into the volume's HF_HOME.
    with hub_alone(built.model, tmp_path) as (enter, log):
        first = world.project(
            case,
            tmp_path / "first",
            base_model=REPO,
            job_env={"HF_HOME": str(hf_home), "HF_ENDPOINT": _endpoint(tmp_path)},
        )
        first.prefix = enter
        run_id, stderr = train_through(first)
        check_run(first, run_id, stderr)
        assert first.show(run_id)["run"]["base_model"] == REPO
    served = list(read_log(log))
    fetched = _downloads(served)
    model_files = sorted(p.name for p in built.model.iterdir() if not p.name.startswith("."))
    # Every file of the model and its tokenizer came from the hub, each once: within the
    # run, the cache answered for what it already held.
    assert sorted(fetched) == model_files, served
    commit = (_repo_cache(hf_home) / "refs" / "main").read_text()
    snapshot = _repo_cache(hf_home) / "snapshots" / commit
    for name in model_files:
        assert (snapshot / name).read_bytes() == (built.model / name).read_bytes(), name
    cached = _cache_files(hf_home)

    # The second run: the hub gone, no network at all, the job told it is offline.
    second = world.project(
        case,
        tmp_path / "second",
        base_model=REPO,
        job_env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
    )
    assert second.prefix[0] == "unshare", second.prefix
    run_id, stderr = train_through(second)
    check_run(second, run_id, stderr)
    assert second.show(run_id)["run"]["base_model"] == REPO
    # The hub served nothing more, and the model's cache is as the first run left it.
    assert list(read_log(log)) == served
    assert _cache_files(hf_home) == cached
