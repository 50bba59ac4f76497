"""Clusters: the Runpod v2 client's cluster calls against the in-process fake server, and
the fake's cluster endpoints themselves, on trio's MockClock. Every request and answer is
checked against Runpod's published schema."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from overbrainer.runpod.client import (
    AmbiguousCreate,
    CreateCluster,
    CreateFailed,
    InvalidPodSpec,
    RunpodClient,
    RunpodError,
)
from overbrainer.runpod.models import (
    Availability,
    PodStatus,
    parse_cluster,
    parse_pod,
)
from overbrainer.testing import runpod_schema
from overbrainer.testing.runpod_api import (
    CLUSTER_PRIMARY_PORT,
    FAKE_URL,
    NO_CAPACITY,
    FakeGpuType,
    FakeRunpod,
)

GPU = "NVIDIA A40"
KEY = "rpa_Qz8Wv3Xn5Rk2Lp7Hm4Jt9Bf6Gd1Sc0Ya"
HOST_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- secret host key material"


def spec(**overrides: Any) -> CreateCluster:
    values: dict[str, Any] = {
        "name": "overbrainer-run1-1",
        "image": "ghcr.io/example/trainer:1",
        "gpu_type": GPU,
        "gpus_per_pod": 2,
        "pod_count": 3,
        "disk_gb": 40,
        "data_center_ids": ["EU-RO-1", "US-TX-3"],
        "env": {"OVERBRAINER_RUN": "run1", "OVERBRAINER_HOST_KEY_B64": HOST_KEY},
        "args": "bash -c 'sh /bootstrap'",
    }
    values.update(overrides)
    return CreateCluster(**values)


@pytest.fixture
def fake() -> FakeRunpod:
    fake = FakeRunpod(provisioning_seconds=4, starting_seconds=10)
    fake.add_account(KEY, balance=50.0)
    return fake


@pytest.fixture
async def client(fake: FakeRunpod) -> AsyncIterator[RunpodClient]:
    async with RunpodClient(KEY, FAKE_URL, transport=fake.transport(), rng=random.Random(3)) as c:
        yield c


def raw(fake: FakeRunpod, key: str = KEY) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=FAKE_URL, transport=fake.transport(), headers={"Authorization": f"Bearer {key}"}
    )


def assert_answers_follow_the_schema(answers: list[tuple[str, object]]) -> None:
    for schema, answer in answers:
        assert runpod_schema.errors(schema, answer) == [], (schema, answer)


# --- the create body ------------------------------------------------------------------


def test_the_cluster_create_body_follows_the_published_schema() -> None:
    body = spec(network_volume_id="vol123").to_json()
    assert runpod_schema.errors("CreateClusterRequest", body) == []
    assert body["type"] == "TRAINING"
    assert body["compute"] == {"gpuTypeId": GPU, "gpuCountPerPod": 2, "podCount": 3}
    assert body["ports"] == ["22/tcp"]
    assert body["mounts"] == {"network": [{"volumeId": "vol123", "path": "/workspace"}]}
    # No data centers named: the field is left out, and Runpod picks one.
    assert "dataCenterIds" not in spec(data_center_ids=()).to_json()
    assert runpod_schema.errors("CreateClusterRequest", spec(data_center_ids=()).to_json()) == []


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("pod_count", 1, "pod count"),
        ("pod_count", 251, "pod count"),
        ("gpus_per_pod", 0, "GPU count per pod"),
        ("image", "two words", "image"),
        ("name", "", "name"),
    ],
)
def test_a_bad_cluster_spec_is_refused_naming_the_field(field: str, value: Any, named: str) -> None:
    with pytest.raises(InvalidPodSpec, match=f"the cluster's {named}"):
        spec(**{field: value})


def test_the_cluster_env_is_kept_out_of_repr() -> None:
    assert HOST_KEY not in repr(spec())


# --- create, read, members ------------------------------------------------------------


async def test_a_cluster_is_created_once_with_every_member_a_pod_in_one_data_center(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())
    (sent,) = fake.cluster_create_requests()
    assert sent.schema_errors == []
    assert cluster.type == "TRAINING"
    assert (cluster.gpu_id, cluster.gpus_per_pod, cluster.pod_count) == (GPU, 2, 3)
    assert cluster.gpu_count == 6
    assert cluster.data_center_id == "EU-RO-1"
    assert cluster.pods_total == 3 and cluster.pods_by_status == {"PROVISIONING": 3}
    # Nothing assigned yet: no network, no primary, no ranks.
    assert cluster.network_cidr is None and cluster.primary_pod_id is None
    members = await client.cluster_pods(cluster.id)
    assert members is not None and len(members) == 3
    assert all(m.cluster is not None and m.cluster.rank is None for m in members)
    assert {m.data_center_id for m in members} == {"EU-RO-1"}
    assert all((m.gpu_id, m.gpu_count) == (GPU, 2) for m in members)
    assert all(m.env["OVERBRAINER_RUN"] == "run1" for m in members)
    # Members bill like pods, and take the data center's GPUs like pods.
    assert all(m.cost == pytest.approx(0.80) for m in members)
    second = await client.create_cluster(spec(pod_count=2))
    assert second.data_center_id == "US-TX-3"  # 2 of EU-RO-1's 8 left


async def test_ranks_and_overlay_addresses_are_assigned_during_provisioning(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())
    await trio.sleep(3)  # past the assignment, still provisioning
    members = await client.cluster_pods(cluster.id)
    assert members is not None
    assert [m.status for m in members] == [PodStatus.PROVISIONING] * 3
    memberships = [m.cluster for m in members]
    assert [c.rank for c in memberships if c is not None] == [0, 1, 2]
    assert all(c is not None and c.cluster_id == cluster.id for c in memberships)
    ips = {c.ip for c in memberships if c is not None}
    assert len(ips) == 3 and all(ip is not None and ip.startswith("10.65.0.") for ip in ips)
    # Ranks are Runpod's to give: rank 0 is not simply the first pod made.
    made = [p.id for p in fake.pods.values()]
    assert [m.id for m in members] != made
    read = await client.get_cluster(cluster.id)
    assert read is not None
    assert read.network_cidr == "10.65.0.0/16"
    assert read.primary_pod_id == members[0].id
    assert read.primary_status is PodStatus.PROVISIONING
    assert read.primary_ssh is None


async def test_a_running_primary_shows_its_ssh_endpoint_and_every_status_is_counted(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())
    await trio.sleep(15)
    read = await client.get_cluster(cluster.id)
    assert read is not None
    assert read.pods_by_status == {"RUNNING": 3}
    assert read.primary_status is PodStatus.RUNNING
    shown = fake.pod_runtime_env(fake.member(cluster.id, 0).id)
    assert read.primary_ssh == (shown["RUNPOD_PUBLIC_IP"], int(shown["RUNPOD_TCP_PORT_22"]))
    members = await client.cluster_pods(cluster.id)
    assert members is not None
    assert all(m.ssh_endpoint() is not None for m in members)


async def test_members_are_left_out_of_the_pod_listing_unless_asked_for(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec(pod_count=2))
    assert await client.list_pods() == []
    listed = await client.list_pods(include_cluster_pods=True)
    assert {p.id for p in listed} == set(fake.cluster(cluster.id).members)
    (read,) = await client.list_clusters()
    assert read.id == cluster.id


async def test_a_member_cannot_be_deleted_or_stopped_through_the_pod_endpoints(
    fake: FakeRunpod, autojump_clock: trio.testing.MockClock
) -> None:
    async with raw(fake) as http:
        created = await http.post("/clusters", json=spec(pod_count=2).to_json())
        member = fake.cluster(created.json()["id"]).members[0]
        for method, path, body in (
            ("DELETE", f"/pods/{member}", None),
            ("POST", f"/pods/{member}/action", {"action": "stop"}),
        ):
            answer = await http.request(method, path, json=body)
            assert answer.status_code == 409, answer.text
            assert "delete the cluster" in answer.json()["detail"]
        pod = (await http.get(f"/pods/{member}")).json()
    assert pod["actions"] == []
    assert fake.status(member) == "PROVISIONING"


async def test_every_cluster_answer_follows_the_published_schema(
    fake: FakeRunpod, autojump_clock: trio.testing.MockClock
) -> None:
    answers: list[tuple[str, object]] = []
    async with raw(fake) as http:
        created = await http.post("/clusters", json=spec().to_json())
        assert created.status_code == 201
        cluster_id = created.json()["id"]
        answers.append(("Cluster", created.json()))
        for moment in (1.0, 3.0, 20.0):  # before the ranks, after, every member running
            await trio.sleep(moment)
            answers.append(("Cluster", (await http.get(f"/clusters/{cluster_id}")).json()))
            answers.append(("ListClustersResponse", (await http.get("/clusters")).json()))
            answers.append(
                ("ListPodsResponse", (await http.get(f"/clusters/{cluster_id}/pods")).json())
            )
        listed = await http.get("/pods", params={"includeClusterPods": "true"})
        answers.append(("ListPodsResponse", listed.json()))
        now = datetime.now(UTC)
        billing = await http.get(
            "/billing/clusters",
            params={"startTime": (now - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")},
        )
        assert billing.status_code == 200, billing.text
        answers.append(("ListClusterBillingResponse", billing.json()))
    assert_answers_follow_the_schema(answers)
    assert fake.cluster_billing_requests()[0].schema_errors == []


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"type": "SLURM"}, 400),
        ({"compute": {"gpuTypeId": GPU, "gpuCountPerPod": 1, "podCount": 1}}, 422),
        ({"registry": "mine"}, 422),
        ({"compute": {"gpuTypeId": "NVIDIA B999", "gpuCountPerPod": 1, "podCount": 2}}, 400),
        ({"dataCenterIds": ["XX-NO-1"]}, 400),
    ],
)
async def test_a_bad_cluster_create_is_refused_and_makes_no_pod(
    fake: FakeRunpod, change: dict[str, Any], status: int, autojump_clock: trio.testing.MockClock
) -> None:
    async with raw(fake) as http:
        answer = await http.post("/clusters", json={**spec().to_json(), **change})
    assert answer.status_code == status, answer.text
    assert fake.pods == {} and fake.clusters == {}
    if status == 422:
        assert fake.cluster_create_requests()[0].schema_errors


async def test_a_cluster_needs_room_for_every_node_in_one_data_center(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    # 4 free in each: two nodes of two fit nowhere with 3 nodes, though 8 are free overall.
    fake.set_capacity(GPU, 4)
    with pytest.raises(CreateFailed) as refused:
        await client.create_cluster(spec(pod_count=3, data_center_ids=["EU-RO-1", "US-TX-3"]))
    assert refused.value.status == 400 and NO_CAPACITY in refused.value.detail
    assert not refused.value.ambiguous
    fake.set_capacity(GPU, 6, "US-TX-3")
    cluster = await client.create_cluster(spec(pod_count=3))
    assert cluster.data_center_id == "US-TX-3"


async def test_a_cluster_over_the_balance_is_refused_naming_the_cluster(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.accounts[KEY].balance = 2.0  # one node's hour, not three
    with pytest.raises(CreateFailed) as refused:
        await client.create_cluster(spec())
    assert refused.value.status == 402
    assert "refused to create the cluster" in str(refused.value)


async def test_a_cluster_create_answered_with_5xx_is_ambiguous_and_not_resent(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("POST /clusters", 503)
    with pytest.raises(AmbiguousCreate, match="a cluster may or may not have been created"):
        await client.create_cluster(spec())
    assert len(fake.cluster_create_requests()) == 1


async def test_a_cluster_create_error_never_echoes_the_members_environment(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("POST /clusters", 400, raw_body=f"bad env {HOST_KEY}".encode())
    with pytest.raises(CreateFailed) as refused:
        await client.create_cluster(spec())
    assert HOST_KEY[16:40] not in refused.value.detail and HOST_KEY[16:40] not in str(refused.value)


# --- delete ---------------------------------------------------------------------------


async def test_deleting_a_cluster_deletes_every_member_then_reads_as_gone(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    deleted: list[str] = []

    async def on_deleted(pod: Any) -> None:
        deleted.append(pod.id)

    fake.on_deleted = on_deleted
    cluster = await client.create_cluster(spec())
    other = await client.create_cluster(spec(pod_count=2))
    await trio.sleep(20)
    members = set(fake.cluster(cluster.id).members)
    assert await client.delete_cluster(cluster.id) is True
    assert set(deleted) == members
    assert all(fake.status(pod_id) == "TERMINATED" for pod_id in members)
    assert await client.get_cluster(cluster.id) is None
    assert await client.cluster_pods(cluster.id) is None
    assert await client.delete_cluster(cluster.id) is False
    # The other cluster is untouched, and its members still listed.
    listed = {p.id for p in await client.list_pods(include_cluster_pods=True)}
    assert listed == set(fake.cluster(other.id).members)
    assert [c.id for c in await client.list_clusters()] == [other.id]
    # Deleted members free their GPUs.
    again = await client.create_cluster(spec(data_center_ids=["EU-RO-1"]))
    assert again.data_center_id == "EU-RO-1"


async def test_a_cluster_delete_is_retried_and_a_first_attempt_that_worked_reads_as_done(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec(pod_count=2))
    fake.fail_next("DELETE /clusters/{id}", 502, succeed=True)
    assert await client.delete_cluster(cluster.id) is False
    assert fake.live_clusters() == [] and fake.live_pods() == []


# --- the cues: a member fails, a member vanishes ----------------------------------------


async def test_a_failed_member_shows_exited_and_the_others_run_on(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    stopped: list[str] = []

    async def on_stopped(pod: Any) -> None:
        stopped.append(pod.id)

    fake.on_stopped = on_stopped
    cluster = await client.create_cluster(spec())
    await trio.sleep(20)
    await client.list_pods(include_cluster_pods=True)  # every member seen running
    await fake.fail_member(cluster.id, 1)
    members = await client.cluster_pods(cluster.id)
    assert members is not None
    assert [m.status for m in members] == [PodStatus.RUNNING, PodStatus.EXITED, PodStatus.RUNNING]
    assert stopped == [members[1].id]
    assert members[1].cost == 0.0 and not members[1].billing
    read = await client.get_cluster(cluster.id)
    assert read is not None and read.pods_by_status == {"RUNNING": 2, "EXITED": 1}


async def test_a_vanished_member_leaves_its_cluster_one_at_a_time(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())
    await trio.sleep(20)
    fake.vanish_member(cluster.id, 2)
    members = await client.cluster_pods(cluster.id)
    assert members is not None
    assert [m.cluster.rank for m in members if m.cluster] == [0, 1]
    read = await client.get_cluster(cluster.id)
    assert read is not None and read.pods_total == 2 and read.pod_count == 3
    fake.vanish_member(cluster.id, 0)
    read = await client.get_cluster(cluster.id)
    assert read is not None and read.pods_total == 1
    assert read.primary_pod_id is None  # the primary is gone
    assert await client.delete_cluster(cluster.id) is True
    assert fake.live_pods() == []


# --- the members' environment ---------------------------------------------------------


async def test_each_member_sees_runpods_cluster_variables(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())
    primary = fake.member(cluster.id, 0)
    for rank in range(3):
        pod = fake.member(cluster.id, rank)
        env = fake.pod_runtime_env(pod.id)
        assert env["OVERBRAINER_RUN"] == "run1"  # the create's own, as on any pod
        assert env["RUNPOD_POD_ID"] == pod.id
        assert env["NODE_RANK"] == str(rank)
        assert env["NUM_NODES"] == "3"
        assert env["NUM_TRAINERS"] == "2"
        assert env["WORLD_SIZE"] == "6"
        assert env["PRIMARY_ADDR"] == env["MASTER_ADDR"] == primary.ip
        assert env["PRIMARY_PORT"] == env["MASTER_PORT"] == str(CLUSTER_PRIMARY_PORT)
        assert env["HOST_NODE_ADDR"] == f"{primary.ip}:{CLUSTER_PRIMARY_PORT}"
        assert env["NODE_ADDR"] == pod.ip
    # A standalone pod gets none of them.
    async with raw(fake) as http:
        body = {
            "name": "solo", "image": "img:1", "gpu": {"id": GPU, "count": 1},
            "ports": ["22/tcp"], "env": {},
        }  # fmt: skip
        solo = (await http.post("/pods", json=body)).json()["id"]
    assert "NODE_RANK" not in fake.pod_runtime_env(solo)


# --- a member's own key -------------------------------------------------------------------


async def test_a_members_own_key_reaches_its_cluster_only(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    mine = await client.create_cluster(spec(pod_count=2))
    theirs = await client.create_cluster(spec(pod_count=2))
    member_key = fake.pod_scoped_key(fake.member(mine.id, 1).id)
    async with raw(fake, member_key) as http:
        assert (await http.get(f"/clusters/{mine.id}")).status_code == 200
        assert (await http.get(f"/clusters/{mine.id}/pods")).status_code == 200
        assert (await http.get(f"/clusters/{theirs.id}")).status_code == 403
        assert (await http.get("/clusters")).status_code == 403
        assert (await http.delete(f"/clusters/{theirs.id}")).status_code == 403
        assert (await http.get("/billing/clusters")).status_code == 403
        assert (await http.delete(f"/clusters/{mine.id}")).status_code == 204
    assert [c.id for c in fake.live_clusters()] == [theirs.id]


async def test_clusters_are_per_account(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec(pod_count=2))
    other = fake.add_account()
    async with RunpodClient(other, FAKE_URL, transport=fake.transport()) as stranger:
        assert await stranger.list_clusters() == []
        assert await stranger.get_cluster(cluster.id) is None
        assert await stranger.delete_cluster(cluster.id) is False
        assert await stranger.list_pods(include_cluster_pods=True) == []
    assert fake.live_clusters() != []


async def test_unsafe_cluster_ids_never_reach_a_url(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    for bad in ("../pods", "a b", "", "x" * 200):
        with pytest.raises(RunpodError, match="unusable cluster id"):
            await client.get_cluster(bad)
        with pytest.raises(RunpodError, match="unusable cluster id"):
            await client.delete_cluster(bad)
    assert fake.requests == []


# --- billing and stock -------------------------------------------------------------------


async def test_cluster_billing_counts_every_member_over_the_clusters_life(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = await client.create_cluster(spec())  # 3 nodes of 2 A40s: $2.40/h
    other = await client.create_cluster(spec(pod_count=2))
    await trio.sleep(1800)
    await fake.fail_member(cluster.id, 2)  # one node stops billing half-way
    await trio.sleep(1800)
    await client.delete_cluster(cluster.id)
    await trio.sleep(3600)
    now = fake.wall(trio.current_time())
    start = now - timedelta(days=1)
    billed = await client.cluster_billing(start, now, bucket="day", cluster_id=cluster.id)
    assert {r.cluster_id for r in billed.records} == {cluster.id}
    assert billed.amount(cluster.id) == pytest.approx(0.8 * 2 + 0.8 * 0.5, abs=1e-3)
    everything = await client.cluster_billing(start, now, bucket="day")
    assert everything.amount(other.id) == pytest.approx(0.8 * 2 * 2, abs=1e-3)
    assert everything.amount() == pytest.approx(2.0 + 3.2, abs=1e-3)
    assert all(r.schema_errors == [] for r in fake.cluster_billing_requests())
    assert fake.cluster_billing_requests()[0].query["clusterId"] == cluster.id
    # Pod billing is pod-only: the members bill under their cluster.
    assert (await client.pod_billing(fake.member(other.id, 0).id, start, now)).records == ()


async def test_cluster_stock_is_read_with_product_cluster(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.add_gpu_type(FakeGpuType("NVIDIA L4", "L4", 24, 0.4, cluster=False))
    gpus = await client.list_gpu_types(availability=True, gpu_count=2, product="CLUSTER")
    found = {g.id: g.availability for g in gpus}
    assert found["NVIDIA L4"] is Availability.NONE
    assert found[GPU] is not Availability.NONE
    pods = await client.list_gpu_types(availability=True, gpu_count=2)
    assert {g.id: g.availability for g in pods}["NVIDIA L4"] is not Availability.NONE
    asked = [r.query for r in fake.requests if r.path == "/catalog/gpus"]
    assert asked[0] == {
        "include": "AVAILABILITY", "product": "CLUSTER", "cloud": "SECURE", "count": "2",
    }  # fmt: skip
    assert asked[1]["product"] == "POD"
    one = await client.get_gpu_type(GPU, availability=True, gpu_count=2, product="CLUSTER")
    assert one is not None and one.availability is not Availability.NONE


# --- parsing --------------------------------------------------------------------------


def test_a_cluster_is_parsed_tolerantly() -> None:
    cluster = parse_cluster(
        {
            "id": "c1",
            "name": "run\x1b[31m",
            "compute": "nonsense",
            "pods": {"total": 2, "byStatus": {"RUNNING": 1, "NEW": "x"}},
            "primary": {"podId": "../x", "status": "WEIRD", "sshEndpoint": "-oProxy=x:22"},
        }
    )
    assert cluster.name.isprintable()
    assert (cluster.gpu_id, cluster.gpus_per_pod, cluster.gpu_count) == (None, None, None)
    assert cluster.pods_by_status == {"RUNNING": 1}
    assert cluster.primary_pod_id is None
    assert cluster.primary_status is PodStatus.UNKNOWN
    assert cluster.primary_ssh is None
    assert parse_cluster(
        {"id": "c2", "primary": {"sshEndpoint": "[2001:db8::7]:22001"}}
    ).primary_ssh == (
        "2001:db8::7",
        22001,
    )


def test_a_membership_with_an_odd_rank_or_address_reads_as_unassigned() -> None:
    base = {"id": "p1", "status": "RUNNING"}
    pod = parse_pod({**base, "cluster": {"id": "c1", "rank": -1, "ip": "10.65.0.300"}})
    assert pod.cluster is not None
    assert (pod.cluster.cluster_id, pod.cluster.rank, pod.cluster.ip) == ("c1", None, None)
    assert parse_pod({**base, "cluster": {"id": "../c", "rank": 0}}).cluster is None
    assert parse_pod(base).cluster is None
