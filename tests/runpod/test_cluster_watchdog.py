"""Every node of a cluster guards the whole cluster: with nobody following (the laptop
gone), a node's watchdog deletes the cluster - every member - at the deadline, at the cost
cap counted over every node, and once the results were retrieved; and each node's job
environment holds its cluster's variables. Fake clusters on the fake API, each member a
living fake pod running the real bootstrap and watchdog; real clock, real sockets."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from overbrainer.runpod.client import CreateCluster
from overbrainer.runpod.pod_scripts import JOB_ENV, RETRIEVED, WATCHDOG, WATCHDOG_LOG, script_text
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from tests.fakes.pod_world import A40, PodWorld, pod_world

RUN = "20260101-120000-ef56"
RUN_DIR = f"overbrainer/{RUN}"
GPUS_PER_NODE = 2
SHELLS = [("sh",), ("dash",), ("busybox", "sh")]
SHELL_IDS = ["sh", "dash", "busybox"]
# What a cluster's node writes to the job's environment, and a single pod does not.
CLUSTER_NAMES = (
    "PRIMARY_ADDR",
    "PRIMARY_PORT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_ADDR",
    "NODE_RANK",
    "NUM_NODES",
    "NUM_TRAINERS",
    "HOST_NODE_ADDR",
    "WORLD_SIZE",
    "NCCL_SOCKET_IFNAME",
)


class World(PodWorld):
    """The shared world with what these tests ask of a cluster's members."""

    async def guarded(self, pod_id: str) -> None:
        """Until the pod shows its SSH endpoint (the fake brings a pod to life as its API is
        asked about it) and its watchdog has proved its key (``ready``)."""
        await self.wait_for_ssh(pod_id, timeout=15)
        assert await self.verdict(pod_id) == "ready\n"

    async def members_guarded(self, cluster_id: str) -> list[str]:
        """The members' ids by rank, once every member is guarded (:meth:`guarded`)."""
        members = [pod.id for pod in self.fake.cluster_members(cluster_id)]
        for pod_id in members:
            await self.guarded(pod_id)
        # Ranks are assigned during provisioning: by rank now.
        return [pod.id for pod in self.fake.cluster_members(cluster_id)]

    async def ends_whole(self, cluster_id: str, members: list[str], timeout: float) -> None:
        """Until every member's container is gone; then nothing of the cluster is listed."""
        with trio.fail_after(timeout):
            for pod_id in members:
                await self.pods.current(pod_id).gone.wait()
        async with self.client() as client:
            assert (await client.get(f"/clusters/{cluster_id}")).status_code == 404
            listed = await client.get("/pods", params={"includeClusterPods": "true"})
            assert [p["id"] for p in listed.json()["pods"] if p["id"] in members] == []
            assert (await client.get("/clusters")).json()["clusters"] == []
        assert [self.fake.status(pod_id) for pod_id in members] == ["TERMINATED"] * len(members)

    def cluster_deletes(self, cluster_id: str) -> list[tuple[str | None, int]]:
        """Who asked to delete the cluster (the key: ``pod:<id>``), and Runpod's answer."""
        return [
            (r.auth, r.status)
            for r in self.fake.requests
            if r.method == "DELETE" and r.path == f"/clusters/{cluster_id}"
        ]

    def first_delete_at(self, cluster_id: str) -> float:
        return min(
            r.time
            for r in self.fake.requests
            if r.method == "DELETE" and r.path == f"/clusters/{cluster_id}"
        )

    def members_pod_changes(self, members: list[str]) -> list[str]:
        """A member's pod endpoints asked to delete or act on it (Runpod refuses: 409)."""
        return [
            f"{r.method} {r.path}"
            for r in self.fake.requests
            if r.method in ("DELETE", "POST") and any(f"/pods/{m}" in r.path for m in members)
        ]

    def watchdog_log(self, pod_id: str) -> str:
        path = self.pods.path(pod_id, f"{RUN_DIR}/{WATCHDOG_LOG}")
        return path.read_text() if path.exists() else ""

    async def ssh_to(self, pod_id: str, command: str) -> Any:
        async with self.client() as client:
            pod = (await client.get(f"/pods/{pod_id}")).json()
        return await self.ssh(pod["ssh"]["direct"], command)


def world(
    tmp_path: Path,
    *,
    shell: tuple[str, ...] = ("sh",),
    gpu_price: float | None = None,
    overrides: dict[str, str] | None = None,
) -> AbstractAsyncContextManager[World]:
    return pod_world(tmp_path, RUN, World, shell=shell, gpu_price=gpu_price, overrides=overrides)


def _touch(w: World, pod_id: str, name: str) -> None:
    """Create a marker in the run's directory on the pod, as the job or overbrainer does."""
    w.pods.path(pod_id, f"{RUN_DIR}/{name}").write_text("1\n")


def _deleting(cluster_id: str, pod_id: str, reason: str) -> str:
    return f"deleting cluster {cluster_id} (every node, pod {pod_id} among them): {reason}"


# --- laptop gone: the bounds end the whole cluster -------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_with_nobody_following_a_nodes_watchdog_deletes_the_whole_cluster_at_its_deadline(
    tmp_path, shell
):
    async with world(tmp_path, shell=shell) as w:
        cluster_id = await w.create_cluster(w.env(max_hours=4 / 3600), nodes=2)
        created = trio.current_time()
        members = await w.members_guarded(cluster_id)
        for pod_id in members:
            # A job running on every node does not hold the cluster past its deadline.
            _touch(w, pod_id, "job.pid")
        assert [w.fake.status(pod_id) for pod_id in members] == ["RUNNING", "RUNNING"]
        await w.ends_whole(cluster_id, members, timeout=10)
        # 4 s after the members' creation by Runpod's clock (whole seconds: to within one).
        deleted = w.first_delete_at(cluster_id) - created
        assert 2.9 < deleted < 5.6, deleted
        # A member's own key deleted the cluster, never one pod alone (Runpod refuses).
        first = w.cluster_deletes(cluster_id)[0]
        assert first[1] == 204 and first[0] in {f"pod:{pod_id}" for pod_id in members}
        assert w.members_pod_changes(members) == []
        deleter = first[0].removeprefix("pod:")
        log = w.watchdog_log(deleter)
        assert f"is node {members.index(deleter)} of cluster {cluster_id}" in log
        deadline = "past the deadline, 4s after the pod's creation"
        assert _deleting(cluster_id, deleter, deadline) in log


async def test_the_results_retrieved_on_one_node_end_the_whole_cluster(tmp_path):
    async with world(tmp_path) as w:
        cluster_id = await w.create_cluster(w.env(), nodes=2)
        members = await w.members_guarded(cluster_id)
        await trio.sleep(0.5)  # a few checks go by: nothing is deleted
        assert w.cluster_deletes(cluster_id) == []
        _touch(w, members[1], RETRIEVED)
        await w.ends_whole(cluster_id, members, timeout=10)
        assert w.cluster_deletes(cluster_id)[0] == (f"pod:{members[1]}", 204)
        assert w.members_pod_changes(members) == []
        reason = "the results were retrieved"
        assert _deleting(cluster_id, members[1], reason) in w.watchdog_log(members[1])


# A $1 cap on nodes of 2 GPUs at $300/h each ($600/h a node): one node alone would reach
# it 6 s after its creation, the two nodes together 3 s after it.
@pytest.mark.parametrize("nodes_from", ["NUM_NODES", "the cluster's podCount"])
async def test_the_cost_cap_counts_every_gpu_of_every_node(tmp_path, nodes_from):
    # Without Runpod's NUM_NODES, the node reads how many nodes its cluster has.
    overrides = {} if nodes_from == "NUM_NODES" else {"NUM_NODES": ""}
    async with world(tmp_path, gpu_price=300.0, overrides=overrides) as w:
        cluster_id = await w.create_cluster(w.env(max_cost_usd=1.0), nodes=2)
        created = trio.current_time()
        members = await w.members_guarded(cluster_id)
        await w.ends_whole(cluster_id, members, timeout=10)
        deleted = w.first_delete_at(cluster_id) - created
        assert 1.9 < deleted < 4.7, deleted
        first = w.cluster_deletes(cluster_id)[0]
        assert first[1] == 204
        deleter = first[0].removeprefix("pod:")
        log = w.watchdog_log(deleter)
        assert (
            f"cost cap $1.00 at $1200.00/h (the cluster's 2 nodes by {nodes_from} at $600.00/h "
            "each, the pod's rate by Runpod): near at 2.850s, deleted by 3s after the pod's "
            "creation, counted on the pod" in log
        ), log
        cost_cap = "cost_cap: the cluster has cost its cap of $1.00 at $1200.00/h, 3s after"
        assert _deleting(cluster_id, deleter, cost_cap) in log
        assert w.members_pod_changes(members) == []


# --- the job's environment on each node ----------------------------------------------------


async def test_each_nodes_job_environment_holds_its_rank_and_the_clusters_rendezvous(tmp_path):
    async with world(tmp_path) as w:
        cluster_id = await w.create_cluster(w.env(), nodes=2)
        single = await w.create_pod(w.env(), gpus=GPUS_PER_NODE)
        members = await w.members_guarded(cluster_id)
        await w.guarded(single)
        port = str(w.pods.cluster_ports[cluster_id])
        for rank, pod_id in enumerate(members):
            # An SSH session does not see the container's variables; the job's environment
            # file gives them to a job started over SSH.
            assert "NODE_RANK" not in await _session_env(w, pod_id, sourced=False)
            env = await _session_env(w, pod_id, sourced=True)
            assert {name: env.get(name) for name in CLUSTER_NAMES} == {
                "PRIMARY_ADDR": "127.0.0.1",
                "PRIMARY_PORT": port,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "NODE_ADDR": "127.0.0.1",
                "NODE_RANK": str(rank),
                "NUM_NODES": "2",
                "NUM_TRAINERS": str(GPUS_PER_NODE),
                "HOST_NODE_ADDR": f"127.0.0.1:{port}",
                "WORLD_SIZE": str(2 * GPUS_PER_NODE),
                "NCCL_SOCKET_IFNAME": "ens1",
            }
            assert env["HF_HOME"] == "/root/.cache/huggingface"
            assert "cluster node" in w.pods.container_log(pod_id)
        env = await _session_env(w, single, sourced=True)
        assert [name for name in CLUSTER_NAMES if name in env] == []
        assert env["HF_HOME"] == "/root/.cache/huggingface"
        text = w.pods.path(single, f"{RUN_DIR}/{JOB_ENV}").read_text()
        assert "NODE_RANK" not in text and "NCCL" not in text


async def _session_env(w: World, pod_id: str, *, sourced: bool) -> dict[str, str]:
    """The environment a command started over SSH in the run's directory sees."""
    source = ". ./.pod/job.env && " if sourced else ""
    done = await w.ssh_to(pod_id, f"cd {RUN_DIR} && {source}env")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


# --- the script alone: what a node's watchdog asks of Runpod ------------------------------
# Nothing ends the node's process here when its cluster is deleted (no fake pods): what it
# does next shows, as it would when Runpod is slow to end the members.


@asynccontextmanager
async def _api() -> AsyncIterator[tuple[FakeRunpod, str, str]]:
    fake = FakeRunpod(provisioning_seconds=0.0, starting_seconds=0.0)
    account = fake.add_account()
    async with serve_loopback(fake) as base:
        yield fake, base, account


async def _bare_cluster(fake: FakeRunpod, base: str, account: str) -> tuple[str, str]:
    """A 2-node cluster made on the fake (no pod comes to life): its id and rank 1's."""
    spec = CreateCluster(
        name=f"overbrainer-{RUN}-1",
        image="example/axolotl@sha256:" + "0" * 64,
        gpu_type=A40,
        gpus_per_pod=GPUS_PER_NODE,
        pod_count=2,
        disk_gb=50,
        env={"OVERBRAINER_RUN": RUN},
    )
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {account}"}
    ) as client:
        answer = await client.post("/clusters", json=spec.to_json())
        assert answer.status_code == 201, answer.text
        cluster_id = str(answer.json()["id"])
        # Provisioning goes on as Runpod is asked.
        assert (await client.get(f"/clusters/{cluster_id}/pods")).status_code == 200
    return cluster_id, fake.member(cluster_id, 1).id


async def _run_watchdog(
    tmp_path: Path,
    shell: tuple[str, ...],
    fake: FakeRunpod,
    base: str,
    pod_id: str,
    **settings: str,
) -> tuple[int, str]:
    """The packaged watchdog for ``pod_id``, its results retrieved: until it ends (its exit
    status and log); ``settings`` add to its environment."""
    script = tmp_path / WATCHDOG
    script.write_text(script_text(WATCHDOG))
    run_dir = tmp_path / "run"
    (run_dir / ".pod").mkdir(parents=True)
    (run_dir / RETRIEVED).write_text("1\n")
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "RUNPOD_POD_ID": pod_id,
        "RUNPOD_API_KEY": fake.pod_scoped_key(pod_id),
        "NUM_NODES": "2",
        "OVERBRAINER_API_BASE": base,
        "OVERBRAINER_RUN_DIR": str(run_dir),
        "OVERBRAINER_RUN": RUN,
        "OVERBRAINER_MAX_SECONDS": "3600",
        "OVERBRAINER_INTERVAL": "0.1",
        "OVERBRAINER_HTTP_TIMEOUT": "5",
        **settings,
    }
    with trio.fail_after(10):
        done = await trio.run_process(
            [*shell, str(script)], env=env, capture_stdout=True, capture_stderr=True, check=False
        )
    return done.returncode, (run_dir / WATCHDOG_LOG).read_text()


def _calls(fake: FakeRunpod, *ids: str) -> list[str]:
    """The watchdog's requests about ``ids`` (a faulted one is answered unauthenticated)."""
    return [
        f"{r.method} {r.path} {r.status}"
        for r in fake.requests
        if r.auth != "account" and any(f"/{i}" in r.path for i in ids)
    ]


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_failed_cluster_delete_is_retried_and_the_watchdog_ends_on_its_404(tmp_path, shell):
    async with _api() as (fake, base, account):
        cluster_id, pod_id = await _bare_cluster(fake, base, account)
        fake.fail_next("DELETE /clusters/{id}", 503)
        status, log = await _run_watchdog(tmp_path, shell, fake, base, pod_id)
    assert status == 0
    # Deleted on the second try; the third, at the next check, finds it gone.
    assert _calls(fake, pod_id, cluster_id) == [
        f"GET /pods/{pod_id} 200",
        f"DELETE /clusters/{cluster_id} 503",
        f"DELETE /clusters/{cluster_id} 204",
        f"DELETE /clusters/{cluster_id} 404",
    ]
    assert f"deleting cluster {cluster_id} failed (HTTP 503); trying again" in log
    assert f"cluster {cluster_id} deleted (HTTP 204)" in log
    assert f"cluster {cluster_id} is gone (HTTP 404)" in log
    assert fake.live_clusters() == []
    assert {fake.status(pod.id) for pod in fake.cluster_members(cluster_id)} == {"TERMINATED"}


async def test_a_member_first_unread_finds_its_cluster_when_its_delete_is_refused(tmp_path):
    async with _api() as (fake, base, account):
        cluster_id, pod_id = await _bare_cluster(fake, base, account)
        # Runpod unreachable at the start: the verdict fails, the rules still hold.
        fake.fail_next("GET /pods/{id}", 503, times=2)
        status, log = await _run_watchdog(
            tmp_path,
            ("dash",),
            fake,
            base,
            pod_id,
            OVERBRAINER_READ_ATTEMPTS="2",
            OVERBRAINER_RETRY_DELAY="0.1",
        )
    assert status == 0
    assert _calls(fake, pod_id, cluster_id) == [
        f"GET /pods/{pod_id} 503",
        f"GET /pods/{pod_id} 503",
        f"DELETE /pods/{pod_id} 409",
        f"GET /pods/{pod_id} 200",
        f"DELETE /clusters/{cluster_id} 204",
        f"DELETE /clusters/{cluster_id} 404",
    ]
    assert f"pod {pod_id} is node 1 of cluster {cluster_id}" in log
    assert fake.live_clusters() == []


async def test_a_cluster_without_a_usable_id_fails_the_verdict(tmp_path):
    async with _api() as (fake, base, account):
        cluster_id, pod_id = await _bare_cluster(fake, base, account)
        answer = {"id": pod_id, "cost": 0.5, "cluster": {"id": "no such/id", "rank": 1}}
        fake.fail_next("GET /pods/{id}", 200, raw_body=json.dumps(answer).encode())
        verdict, log = await _verdict(tmp_path, fake, base, pod_id)
    assert verdict == "failed unexpected answer: the pod's cluster has no usable id\n"
    assert "belongs to a cluster whose id cannot be used: no such/id" in log
    assert fake.live_clusters()[0].id == cluster_id


async def test_without_num_nodes_a_passing_failure_to_read_the_cluster_is_retried(tmp_path):
    # The cost cap needs the cluster's nodes; Runpod's NUM_NODES missing, the node reads
    # them from Runpod, whose first answer fails: read again, the cap kept, nothing deleted.
    async with _api() as (fake, base, account):
        cluster_id, pod_id = await _bare_cluster(fake, base, account)
        fake.fail_next("GET /clusters/{id}", 503)
        verdict, log = await _verdict(
            tmp_path, fake, base, pod_id,
            OVERBRAINER_MAX_COST_USD="100", OVERBRAINER_RETRY_DELAY="0.1",
        )  # fmt: skip
        assert verdict == "ready\n", log
        assert f"reading cluster {cluster_id}: HTTP 503; retrying in 0.1s (1 of 5)" in log
        assert "the cluster's 2 nodes by the cluster's podCount" in log
        assert [c.id for c in fake.live_clusters()] == [cluster_id]
        assert _calls(fake, cluster_id) == [
            f"GET /clusters/{cluster_id} 503",
            f"GET /clusters/{cluster_id} 200",
        ]


async def _verdict(
    tmp_path: Path, fake: FakeRunpod, base: str, pod_id: str, **settings: str
) -> tuple[str, str]:
    """The packaged watchdog for ``pod_id`` (no NUM_NODES), until its verdict: the verdict
    and its log; ``settings`` add to its environment."""
    script = tmp_path / WATCHDOG
    script.write_text(script_text(WATCHDOG))
    run_dir = tmp_path / "run"
    (run_dir / ".pod").mkdir(parents=True)
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "RUNPOD_POD_ID": pod_id,
        "RUNPOD_API_KEY": fake.pod_scoped_key(pod_id),
        "OVERBRAINER_API_BASE": base,
        "OVERBRAINER_RUN_DIR": str(run_dir),
        "OVERBRAINER_MAX_SECONDS": "3600",
        "OVERBRAINER_INTERVAL": "0.1",
        **settings,
    }
    process = await trio.lowlevel.open_process(["dash", str(script)], env=env)
    try:
        verdict = run_dir / ".pod" / "watchdog"
        with trio.fail_after(5):
            while not verdict.exists():
                await trio.sleep(0.02)
    finally:
        process.terminate()
        await process.wait()
    return verdict.read_text(), (run_dir / WATCHDOG_LOG).read_text()
