"""A run across a cluster through the real ``overbrainer train``: ``nodes = 2`` on the
Runpod target of the fake world makes a TRAINING cluster of two living fake pods (one GPU
each, so one process each); the real torchrun on each joins the other by the static
rendezvous on loopback and the real Axolotl trains one model across them (DDP over gloo).
The run succeeds with its losses recorded, rank 0's adapter comes home verified, each
node's log holds its own rank's lines, and the whole cluster is deleted.

The harness's Runpod world gives a job of many processes ``ACCELERATE_USE_CPU=true`` in
``[training.env]``, as a CPU target does: without it, with no GPU, each rank trains a copy
of its own (see ``e2e/test_cluster_nodes.py``)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import Case, RunpodWorld, World, check_run, train_through

CLUSTER = Case("cluster-2", "lora", processes=2, nodes=2)


@pytest.fixture
def kind() -> str:
    """The suite's ``world`` fixture gives the Runpod world."""
    return "runpod"


def _fake_api(world: RunpodWorld, path: str) -> dict[str, Any]:
    """A GET of the fake Runpod API, with the account's key."""
    request = urllib.request.Request(
        world.url.rstrip("/") + path, headers={"Authorization": f"Bearer {world.key}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        data: dict[str, Any] = json.load(answer)
    return data


def test_two_nodes_of_a_cluster_train_one_model_through_the_real_command(
    world: World, tmp_path: Path
) -> None:
    assert isinstance(world, RunpodWorld)
    project = world.project(CLUSTER, tmp_path)
    run_id, stderr = train_through(project)
    # Succeeded, losses in the metrics and run.json, the adapter home and verified, the
    # primary deleted and no pod of the run listed.
    check_run(project, run_id, stderr)

    home = project.path / "runs" / run_id
    pod = json.loads((home / "pod.json").read_text())
    assert pod["status"] == "deleted", pod
    cluster = pod["cluster"]
    members = cluster["members"]
    assert [m["rank"] for m in members] == [0, 1], cluster
    assert members[0]["pod_id"] == pod["pod_id"]
    assert json.loads((home / "run.json").read_text())["metrics"]["loss"] > 0

    # The job ran on both nodes, as one DDP job: each node's log has its own rank's lines
    # only, and neither rank trained alone.
    remote = project.show(run_id)["run"]["remote_dir"]
    rel = remote.lstrip("/") if remote.startswith("/") else f"root/{remote}"
    node_dirs = [world.workspace / m["pod_id"] / rel for m in members]
    for member, node_dir in zip(members, node_dirs, strict=True):
        assert (node_dir / "exit_code").read_text().strip() == "0", member
        log = (node_dir / "job.log").read_text()
        prefixes = set(re.findall(r"^\[rank(\d+)\]:", log, re.MULTILINE))
        assert prefixes == {str(member["rank"])}, (member, prefixes, log[-3000:])
        assert "parallel_mode != ParallelMode.DISTRIBUTED" not in log
    # Node 1 saved only its rank's part of the last checkpoint: a rank training alone
    # would have saved a whole one of its own.
    held = {p.name for p in (node_dirs[1] / "output" / "checkpoint-16").iterdir()}
    assert "rng_state_1.pth" in held, held
    assert not held & {"trainer_state.json", "optimizer.pt", "adapter_model.safetensors"}, held

    # The whole cluster is gone: Runpod lists neither it nor any of its pods.
    clusters = _fake_api(world, "/clusters").get("clusters", [])
    assert cluster["id"] not in [c["id"] for c in clusters], clusters
    listed = _fake_api(world, "/pods?includeClusterPods=true")["pods"]
    ids = {m["pod_id"] for m in members}
    assert not [p for p in listed if p["id"] in ids], listed
