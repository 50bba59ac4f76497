"""Network volumes: the client's calls, and the fake's endpoints behind them (validated
against Runpod's published schema), on trio's MockClock."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from overbrainer.runpod.client import CreatePod, RunpodClient, RunpodError, VolumeInUse
from overbrainer.runpod.models import (
    BadVolumeData,
    parse_network_volume,
    parse_volume_billing,
)
from overbrainer.testing import runpod_schema
from overbrainer.testing.runpod_api import FAKE_URL, VOLUME_PRICE, FakeRunpod

KEY = "rpa_Q7x2Lm9Pz4Kd8Wn3Rt6Yb1Vc5Hj0Fs"
OTHER = "rpa_A3k9Tq6Zm1Xw8Ep4Ls7Dn2Gh5Ub0Cy"
GPU = "NVIDIA A40"


@pytest.fixture
def fake() -> FakeRunpod:
    fake = FakeRunpod(provisioning_seconds=5, starting_seconds=10)
    fake.add_account(KEY, balance=50.0)
    fake.add_account(OTHER, balance=50.0)
    return fake


@pytest.fixture
async def client(fake: FakeRunpod) -> AsyncIterator[RunpodClient]:
    async with RunpodClient(
        KEY, FAKE_URL, transport=fake.transport(), rng=random.Random(3)
    ) as client:
        yield client


@pytest.fixture
async def other(fake: FakeRunpod) -> AsyncIterator[RunpodClient]:
    async with RunpodClient(OTHER, FAKE_URL, transport=fake.transport()) as client:
        yield client


def pod(volume_id: str, centers: tuple[str, ...] = ()) -> CreatePod:
    return CreatePod(
        name="overbrainer-run1-1",
        image="img:1",
        gpu_type=GPU,
        gpu_count=1,
        disk_gb=20,
        data_center_ids=centers,
        network_volume_id=volume_id,
    )


def rendered(fake: FakeRunpod, method: str, path: str) -> Any:
    """The JSON body of the last request ``method path`` the fake received."""
    return [r.json for r in fake.requests if r.method == method and r.path == path][-1]


async def test_a_volume_is_created_listed_read_and_deleted_through_the_published_schema(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    created = await client.create_network_volume("cache", 50, "US-KS-2")
    assert (created.name, created.size_gb, created.data_center) == ("cache", 50, "US-KS-2")
    assert created.type == "STANDARD"
    (sent,) = fake.volume_create_requests()
    assert sent.schema_errors == []
    assert sent.json == {"name": "cache", "size": 50, "dataCenter": "US-KS-2"}
    # What the fake answers is a published NetworkVolume too.
    assert runpod_schema.errors("NetworkVolume", fake.network_volumes[created.id].render()) == []
    assert await client.list_network_volumes() == [created]
    assert await client.get_network_volume(created.id) == created
    assert await client.delete_network_volume(created.id) is True
    assert await client.get_network_volume(created.id) is None
    assert await client.list_network_volumes() == []
    assert await client.delete_network_volume(created.id) is False


async def test_volumes_are_kept_per_account(
    fake: FakeRunpod,
    client: RunpodClient,
    other: RunpodClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    mine = await client.create_network_volume("cache", 20, "EU-RO-1")
    assert await other.list_network_volumes() == []
    assert await other.get_network_volume(mine.id) is None
    assert await other.delete_network_volume(mine.id) is False
    assert fake.live_volumes(KEY) == [fake.network_volumes[mine.id]]
    # Another account's volume cannot be mounted either.
    with pytest.raises(RunpodError, match="HTTP 404"):
        await other.create_pod(pod(mine.id))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"name": "c", "size": 5, "dataCenter": "EU-RO-1"}, "5 is less than the minimum of 10"),
        ({"name": "c", "size": 50}, "'dataCenter' is a required property"),
        ({"name": "c", "size": 50, "dataCenter": "EU-RO-1", "x": 1}, "'x' was unexpected"),
        ({"name": "c", "size": 50, "dataCenter": "EU-RO-1", "type": "FAST"}, "'FAST' is not"),
    ],
)
async def test_a_create_that_breaks_the_schema_is_refused_with_its_errors(
    fake: FakeRunpod, body: dict[str, Any], expected: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with httpx.AsyncClient(
        transport=fake.transport(), base_url=FAKE_URL, headers={"Authorization": f"Bearer {KEY}"}
    ) as http:
        answer = await http.post("/network-volumes", json=body)
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    assert any(expected in error for error in answer.json()["errors"])
    assert fake.live_volumes() == []


async def test_the_client_refuses_a_size_runpod_would_refuse_before_sending(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    for size in (9, 4097):
        with pytest.raises(RunpodError, match=r"10\.\.4096"):
            await client.create_network_volume("cache", size, "EU-RO-1")
    with pytest.raises(RunpodError, match="unusable network volume id"):
        await client.get_network_volume("../pods")
    assert fake.requests == []


async def test_a_volume_in_use_is_not_deleted_and_its_pod_is_placed_where_it_lives(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    volume = await client.create_network_volume("cache", 50, "US-KS-2")
    # The pod is created in the volume's data center, whatever else is allowed.
    created = await client.create_pod(pod(volume.id, ("EU-RO-1", "US-KS-2")))
    assert created.data_center_id == "US-KS-2"
    assert rendered(fake, "POST", "/pods")["mounts"] == {
        "network": [{"volumeId": volume.id, "path": "/workspace"}]
    }
    with pytest.raises(RunpodError, match="HTTP 400"):
        await client.create_pod(pod(volume.id, ("EU-RO-1",)))
    with pytest.raises(VolumeInUse) as refused:
        await client.delete_network_volume(volume.id)
    assert refused.value.status == 409
    assert created.id in refused.value.detail
    problem = [r for r in fake.requests if r.method == "DELETE"][-1]
    assert problem.status == 409
    assert await client.delete_pod(created.id) is True
    assert await client.delete_network_volume(volume.id) is True


async def test_volumes_bill_seven_cents_per_gb_and_month_while_they_exist(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    start = fake.wall(trio.current_time())
    volume = await client.create_network_volume("cache", 100, "EU-RO-1")
    small = await client.create_network_volume("data", 10, "EU-RO-1")
    await trio.sleep(15 * 86400)
    assert await client.delete_network_volume(small.id) is True
    await trio.sleep(15 * 86400)
    end = start + timedelta(days=31)
    billing = await client.volume_billing(start, end, bucket="day")
    month = 100 * VOLUME_PRICE
    assert billing.amount(volume.id) == pytest.approx(month, abs=1e-3)
    assert billing.amount(small.id) == pytest.approx(10 * VOLUME_PRICE / 2, abs=1e-3)
    assert billing.amount() == pytest.approx(month + 10 * VOLUME_PRICE / 2, abs=1e-3)
    one = await client.volume_billing(start, end, volume_id=small.id)
    assert {r.volume_id for r in one.records} == {small.id}
    for request in [r for r in fake.requests if r.path == "/billing/network-volumes"]:
        assert request.schema_errors == []


async def test_a_billing_query_that_breaks_the_published_parameters_is_refused(
    fake: FakeRunpod, autojump_clock: trio.testing.MockClock
) -> None:
    async with httpx.AsyncClient(
        transport=fake.transport(), base_url=FAKE_URL, headers={"Authorization": f"Bearer {KEY}"}
    ) as http:
        answer = await http.get("/billing/network-volumes", params={"bucketSize": "decade"})
        assert answer.status_code == 422
        assert any("bucketSize" in error for error in answer.json()["errors"])
        good = await http.get("/billing/network-volumes", params={"bucketSize": "day"})
        assert good.status_code == 200
        assert runpod_schema.errors("ListNetworkVolumeBillingResponse", good.json()) == []


def test_a_volume_is_parsed_tolerantly() -> None:
    bare = parse_network_volume({"id": "v1", "dataCenterId": "EU-RO-1", "size": "big"})
    assert (bare.name, bare.size_gb, bare.data_center) == ("", None, "EU-RO-1")
    assert bare.type == "UNKNOWN"
    odd = parse_network_volume({"id": "v2", "name": "a\nb", "size": 10, "future": True})
    assert odd.name == "a b" and odd.size_gb == 10 and odd.data_center is None
    for data in ({"name": "x"}, {"id": "a/b"}, ["v1"]):
        with pytest.raises(BadVolumeData):
            parse_network_volume(data)


def test_a_volume_billing_answer_without_its_query_is_unreadable() -> None:
    from overbrainer.runpod.models import BadBillingData

    with pytest.raises(BadBillingData):
        parse_volume_billing({"records": []})
    with pytest.raises(BadBillingData):
        parse_volume_billing(
            {
                "records": [{"networkVolumeId": "v1", "totalAmount": -1}],
                "metadata": {"query": {"startTime": "2026-01-01T00:00:00Z"}},
            }
        )
