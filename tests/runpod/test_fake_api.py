"""The fake Runpod v2 server itself: lifecycle, capacity, balance, schema, actions, keys,
hooks and faults (in-process on MockClock), then over real loopback HTTP and its CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from overbrainer.runpod.client import AmbiguousCreate, CreatePod, RunpodClient
from overbrainer.runpod.clocks import parse_http_date
from overbrainer.runpod.models import PodStatus
from overbrainer.testing import runpod_schema
from overbrainer.testing.runpod_api import (
    FAKE_URL,
    NO_CAPACITY,
    FakeGpuType,
    FakePod,
    FakeRunpod,
    serve_loopback,
)

GPU = "NVIDIA GeForce RTX 4090"
ROOT = Path(__file__).resolve().parents[2]


def body(**overrides: Any) -> dict[str, Any]:
    created: dict[str, Any] = {
        "name": "overbrainer-r-1",
        "image": "img:1",
        "cloud": "SECURE",
        "gpu": {"id": GPU, "count": 1},
        "disk": 20,
        "ports": ["22/tcp"],
        "env": {"RUN": "r"},
        "args": "bash -c true",
    }
    created.update(overrides)
    return {k: v for k, v in created.items() if v is not None}


@pytest.fixture
def fake() -> FakeRunpod:
    return FakeRunpod(provisioning_seconds=5, starting_seconds=10)


@pytest.fixture
def key(fake: FakeRunpod) -> str:
    return fake.add_account(balance=10.0)


@pytest.fixture
async def http(fake: FakeRunpod, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=fake.transport(),
        base_url=FAKE_URL,
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        yield client


def problem_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/problem+json"
    data: dict[str, Any] = response.json()
    assert runpod_schema.errors("ErrorResponse", data) == []
    assert data["status"] == response.status_code
    return data


async def create(http: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    response = await http.post("/pods", json=body(**overrides))
    assert response.status_code == 201, response.text
    pod: dict[str, Any] = response.json()
    return pod


async def test_a_pod_goes_provisioning_starting_running_valid_at_every_step(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await create(http)
    seen = []
    for _ in range(4):
        got = (await http.get(f"/pods/{pod['id']}")).json()
        assert runpod_schema.errors("Pod", got) == []
        seen.append((got["status"], got["ssh"]["direct"] is not None, got["startedAt"] is not None))
        assert got["cost"] == 0.69
        await trio.sleep(6)
    assert seen == [
        ("PROVISIONING", False, False),
        ("STARTING", False, False),
        ("STARTING", False, False),
        ("RUNNING", True, True),
    ]
    listing = (await http.get("/pods")).json()
    assert runpod_schema.errors("ListPodsResponse", listing) == []
    assert [p["id"] for p in listing["pods"]] == [pod["id"]]


async def test_capacity_is_per_gpu_type_and_data_center(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.set_capacity(GPU, 0)
    fake.set_capacity(GPU, 2, "US-TX-3")
    first = await create(http, dataCenterIds=["EU-RO-1", "US-TX-3"], gpu={"id": GPU, "count": 2})
    assert first["dataCenterId"] == "US-TX-3"
    full = await http.post("/pods", json=body())
    assert full.status_code == 400 and problem_of(full)["detail"] == NO_CAPACITY
    assert (await http.delete(f"/pods/{first['id']}")).status_code == 204
    assert (await create(http))["dataCenterId"] == "US-TX-3"  # the delete freed it
    other = await create(http, gpu={"id": "NVIDIA A40", "count": 1})
    assert other["dataCenterId"] == "EU-RO-1"


async def test_capacity_can_come_back_at_a_set_time(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    fake.set_capacity(GPU, 0)
    fake.set_capacity_at(start + 600, GPU, 1, "US-TX-3")
    full = await http.post("/pods", json=body())
    assert full.status_code == 400 and problem_of(full)["detail"] == NO_CAPACITY
    await trio.sleep(599)
    assert (await http.post("/pods", json=body())).status_code == 400
    await trio.sleep(1)
    assert (await create(http))["dataCenterId"] == "US-TX-3"
    assert (await http.post("/pods", json=body())).status_code == 400  # only one came back


async def test_balance_unknown_gpu_and_rules_are_refused(
    fake: FakeRunpod, key: str, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    broke = await http.post("/pods", json=body(gpu={"id": "NVIDIA H100 80GB HBM3", "count": 4}))
    assert broke.status_code == 402 and "balance" in problem_of(broke)["detail"]
    unknown = await http.post("/pods", json=body(gpu={"id": "NVIDIA Nope", "count": 1}))
    assert unknown.status_code == 400 and "NVIDIA Nope" in problem_of(unknown)["detail"]
    cuda = body(gpu={"id": GPU, "minCudaVersion": "12.1", "allowedCudaVersions": ["12.8"]})
    assert (await http.post("/pods", json=cuda)).status_code == 400
    volume = body(mounts={"network": [{"volumeId": "vol9", "path": "/workspace"}]})
    assert (await http.post("/pods", json=volume)).status_code == 404
    fake.add_network_volume(key, volume_id="vol9")
    assert (await http.post("/pods", json=volume)).status_code == 201
    assert (await http.post("/pods", content=b"{nope")).status_code == 400


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ({"stopAfter": "1h"}, "'stopAfter' was unexpected"),
        ({"containerDiskInGb": 20}, "'containerDiskInGb' was unexpected"),
        ({"gpu": {"id": GPU, "count": 1, "type": "x"}}, "'type' was unexpected"),
        ({"image": None}, "'image' is a required property"),
        ({"name": None}, "'name' is a required property"),
        ({"disk": 0}, "0 is less than the minimum of 1"),
        ({"cloud": "CHEAP"}, "'CHEAP' is not one of"),
    ],
)
async def test_bodies_outside_the_published_schema_get_422(
    fake: FakeRunpod,
    http: httpx.AsyncClient,
    changed: dict[str, Any],
    expected: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    response = await http.post("/pods", json=body(**changed))
    assert response.status_code == 422
    problem = problem_of(response)
    assert any(expected in error for error in problem["errors"])
    (recorded,) = fake.create_requests()
    assert recorded.schema_errors == problem["errors"]
    assert fake.pods == {}


async def test_unauthorized_requests_get_401(
    fake: FakeRunpod, key: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with httpx.AsyncClient(transport=fake.transport(), base_url=FAKE_URL) as anonymous:
        missing = await anonymous.get("/pods")
        wrong = await anonymous.get("/pods", headers={"Authorization": "Bearer rpa_wrong"})
        basic = await anonymous.get("/pods", headers={"Authorization": f"Basic {key}"})
    assert [r.status_code for r in (missing, wrong, basic)] == [401, 401, 401]
    assert problem_of(missing)["detail"] == "missing bearer token"
    assert [r.auth for r in fake.requests] == ["none", "invalid", "none"]
    assert all(r.headers.get("authorization") in (None, "<present>") for r in fake.requests)


@pytest.mark.parametrize(
    ("status", "allowed"),
    [
        ("PROVISIONING", {"stop", "terminate"}),
        ("STARTING", {"stop", "terminate"}),
        ("RUNNING", {"stop", "restart", "terminate"}),
        ("EXITED", {"start", "terminate"}),
        ("ERROR", {"start", "terminate"}),
    ],
)
async def test_actions_follow_runpods_status_table(
    fake: FakeRunpod,
    http: httpx.AsyncClient,
    status: str,
    allowed: set[str],
    autojump_clock: trio.testing.MockClock,
) -> None:
    for action in ("start", "stop", "restart", "terminate"):
        if status == "ERROR":
            fake.script_next_pod(error_after=1)
        pod = await create(http)
        wait = {"PROVISIONING": 0, "STARTING": 6, "RUNNING": 16, "EXITED": 16, "ERROR": 2}
        await trio.sleep(wait[status])
        if status == "EXITED":
            assert (
                await http.post(f"/pods/{pod['id']}/action", json={"action": "stop"})
            ).is_success
        shown = (await http.get(f"/pods/{pod['id']}")).json()
        assert shown["status"] == status and set(shown["actions"]) == allowed
        response = await http.post(f"/pods/{pod['id']}/action", json={"action": action})
        if action not in allowed:
            assert response.status_code == 409 and status in problem_of(response)["detail"]
        elif action == "terminate":
            assert response.status_code == 204 and fake.status(pod["id"]) == "TERMINATED"
        else:
            assert response.status_code == 200
            after = response.json()
            assert after["status"] == {"stop": "EXITED"}.get(action, "STARTING")
            assert (after["cost"] == 0) == (action == "stop")
        await http.delete(f"/pods/{pod['id']}")


async def test_a_bad_action_body_gets_422(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await create(http)
    response = await http.post(f"/pods/{pod['id']}/action", json={"action": "explode"})
    assert response.status_code == 422
    assert fake.requests[-1].schema_errors == problem_of(response)["errors"]


async def test_a_pod_scoped_key_reaches_only_its_own_pod(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    mine, other = await create(http), await create(http)
    scoped = fake.pod_scoped_key(mine["id"])
    assert fake.pod_scoped_key(mine["id"]) == scoped
    assert fake.pod_runtime_env(mine["id"])["RUNPOD_API_KEY"] == scoped
    async with httpx.AsyncClient(
        transport=fake.transport(), base_url=FAKE_URL, headers={"Authorization": f"Bearer {scoped}"}
    ) as pod_client:
        assert (await pod_client.get(f"/pods/{mine['id']}")).status_code == 200
        assert (await pod_client.get(f"/pods/{other['id']}")).status_code == 403
        assert (await pod_client.get("/pods")).status_code == 403
        assert (await pod_client.post("/pods", json=body())).status_code == 403
        assert (await pod_client.delete(f"/pods/{other['id']}")).status_code == 403
        fake.scoped_keys_can_delete = False
        assert (await pod_client.delete(f"/pods/{mine['id']}")).status_code == 403
        terminate = {"action": "terminate"}
        refused = await pod_client.post(f"/pods/{mine['id']}/action", json=terminate)
        assert refused.status_code == 403
        fake.scoped_keys_can_delete = True
        assert (await pod_client.delete(f"/pods/{mine['id']}")).status_code == 204
        assert (await pod_client.get(f"/pods/{mine['id']}")).status_code == 404
    assert fake.requests[-1].auth == f"pod:{mine['id']}"
    assert fake.status(other["id"]) == "PROVISIONING"


async def test_hooks_run_when_a_pod_is_first_seen_running_and_when_it_goes(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[tuple[str, str, str]] = []
    during_hook: list[dict[str, Any]] = []

    async def running(pod: FakePod) -> None:
        events.append(("running", pod.id, pod.env["RUN"]))
        during_hook.append((await http.get(f"/pods/{pod.id}")).json())
        fake.set_ssh_endpoint(pod.id, "127.0.0.1", 2222, "root")

    async def stopped(pod: FakePod) -> None:
        events.append(("stopped", pod.id, ""))

    async def deleted(pod: FakePod) -> None:
        events.append(("deleted", pod.id, ""))

    fake.on_running, fake.on_stopped, fake.on_deleted = running, stopped, deleted
    pod = await create(http)
    await trio.sleep(15)
    shown = (await http.get(f"/pods/{pod['id']}")).json()
    assert during_hook[0]["status"] == "RUNNING" and during_hook[0]["ssh"]["direct"] is None
    assert shown["ssh"]["direct"]["host"] == "127.0.0.1" and shown["ssh"]["direct"]["port"] == 2222
    await http.get("/pods")
    assert events == [("running", pod["id"], "r")]
    await http.post(f"/pods/{pod['id']}/action", json={"action": "restart"})
    await trio.sleep(10)
    await http.get("/pods")
    await http.delete(f"/pods/{pod['id']}")
    assert [e[0] for e in events] == ["running", "stopped", "running", "deleted"]


async def test_scripted_pods_vanish_or_end_in_error(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    gone: list[str] = []

    async def deleted(pod: FakePod) -> None:
        gone.append(pod.id)

    fake.on_deleted = deleted
    fake.script_next_pod(vanish_after=7)
    fake.script_next_pod(error_after=7)
    vanishing, failing = await create(http), await create(http)
    await trio.sleep(8)
    assert (await http.get(f"/pods/{vanishing['id']}")).status_code == 404
    errored = (await http.get(f"/pods/{failing['id']}")).json()
    assert errored["status"] == "ERROR" and errored["ssh"]["direct"] is None
    assert [p["id"] for p in (await http.get("/pods")).json()["pods"]] == [failing["id"]]
    assert gone == [vanishing["id"]]
    assert (await http.delete(f"/pods/{vanishing['id']}")).status_code == 404


async def test_a_delete_can_be_accepted_yet_listed_for_some_reads(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await create(http)
    fake.linger_next_delete(2)
    assert (await http.delete(f"/pods/{pod['id']}")).status_code == 204
    listed = [len((await http.get("/pods")).json()["pods"]) for _ in range(3)]
    assert listed == [1, 1, 0]
    assert (await http.delete(f"/pods/{pod['id']}")).status_code == 404
    assert fake.live_pods() == []


async def test_scripted_faults_are_consumed_in_order(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 429, retry_after=12)
    fake.fail_next("GET /pods", 200, raw_body=b"{broken")
    fake.fail_next("*", 503)
    limited = await http.get("/pods")
    assert limited.status_code == 429 and limited.headers["retry-after"] == "12"
    assert (await http.get("/pods")).content == b"{broken"
    assert (await http.get("/pods/whatever")).status_code == 503
    assert (await http.get("/pods")).status_code == 200
    fake.fail_next("POST /pods", timeout=True, succeed=True, status=None)
    with pytest.raises(httpx.ReadTimeout):
        await http.post("/pods", json=body())
    assert len(fake.live_pods()) == 1
    assert [r.fault for r in fake.requests] == [True, True, True, False, True]


# --- real loopback HTTP (real clock) --------------------------------------------------


async def test_the_client_works_over_real_loopback_http() -> None:
    fake = FakeRunpod(provisioning_seconds=0, starting_seconds=0)
    key = fake.add_account()
    async with serve_loopback(fake) as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v2")
        async with RunpodClient(key, base_url, timeout=0.5) as client:
            spec = CreatePod(name="overbrainer-l-1", image="img:1", gpu_type=GPU,
                             gpu_count=1, disk_gb=10, env={"RUN": "l"})  # fmt: skip
            pod = await client.create_pod(spec)
            found = await client.get_pod(pod.id)
            assert found is not None and found.status is PodStatus.RUNNING
            assert found.ssh_endpoint() is not None
            assert [p.id for p in await client.list_pods()] == [pod.id]
            fake.fail_next("POST /pods", timeout=True, succeed=True, status=None, stall_seconds=5)
            with pytest.raises(AmbiguousCreate):
                await client.create_pod(spec)
            assert await client.delete_pod(pod.id) is True
            assert await client.delete_pod(pod.id) is False
            # The catalog too, a GPU type id with spaces (and one with a "/") in the path.
            assert GPU in [gpu.id for gpu in await client.list_gpu_types()]
            rtx = await client.get_gpu_type(GPU, availability=True)
            assert rtx is not None and rtx.id == GPU and rtx.availability is not None
            assert await client.get_gpu_type("a/../../pods") is None
    assert all(r.schema_errors == [] for r in fake.create_requests())
    assert len(fake.live_pods()) == 1  # the stalled create made one


async def test_every_answer_carries_runpods_date_and_pods_its_times_on_loopback() -> None:
    # Runpod's clock is the fake's own (here a year off this machine's): one Date header
    # per answer (hypercorn's own is off), and createdAt on the same clock.
    start = datetime(2031, 1, 1, 12, 0, 0, tzinfo=UTC)
    fake = FakeRunpod(provisioning_seconds=0, starting_seconds=0, wall_start=start)
    key = fake.add_account()
    async with serve_loopback(fake) as base_url, httpx.AsyncClient() as http:
        auth = {"Authorization": f"Bearer {key}"}
        created = await http.post(f"{base_url}/pods", json=body(), headers=auth)
        missing = await http.get(f"{base_url}/pods/nosuchpod", headers=auth)
        for answer in (created, missing):
            (date,) = answer.headers.get_list("date")
            moment = parse_http_date(date)
            assert moment is not None and timedelta(0) <= moment - start < timedelta(seconds=5)
        made = datetime.fromisoformat(created.json()["createdAt"].replace("Z", "+00:00"))
        assert timedelta(0) <= made - start < timedelta(seconds=5)
        fake.send_date = False
        assert "date" not in (await http.get(f"{base_url}/pods", headers=auth)).headers


def test_the_fake_runs_from_the_command_line() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "overbrainer.testing.runpod_api", "--port", "0", "--print-url"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        key = process.stdout.readline().strip()
        answer = httpx.get(f"{url}/pods", headers={"Authorization": f"Bearer {key}"}, timeout=5)
        assert answer.status_code == 200 and json.loads(answer.text) == {"pods": []}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# --- the GPU catalog ------------------------------------------------------------------


async def test_the_catalog_lists_what_can_be_created_shaped_as_published(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    listing = await http.get("/catalog/gpus")
    assert listing.status_code == 200
    data = listing.json()
    assert runpod_schema.errors("ListGpuTypesResponse", data) == []
    ids = [gpu["id"] for gpu in data["gpus"]]
    assert ids == list(fake.gpu_types)
    assert {GPU, "NVIDIA A40"} <= set(ids)  # what the tests and the demo train on
    (rtx,) = [gpu for gpu in data["gpus"] if gpu["id"] == GPU]
    assert rtx["price"]["secure"] == fake.gpu_prices[GPU] == 0.69
    assert rtx["memory"] == 24 and rtx["secure"] is True
    # Without include=AVAILABILITY there is no stock in the answer.
    assert not {"availability", "dataCenters", "cudaVersions"} & set(rtx)
    one = await http.get(f"/catalog/gpus/{GPU}")
    assert one.status_code == 200 and one.json() == rtx
    assert runpod_schema.errors("GpuType", one.json()) == []
    missing = await http.get("/catalog/gpus/NVIDIA RTX 9999")
    assert missing.status_code == 404 and problem_of(missing)["detail"] == "resource not found"


async def test_the_tests_control_the_catalog_and_creates_follow_it(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.remove_gpu_type(GPU)
    fake.add_gpu_type(FakeGpuType("NVIDIA L40S", "L40S", 48, 0.86, secure=False))
    listed = [gpu["id"] for gpu in (await http.get("/catalog/gpus")).json()["gpus"]]
    assert GPU not in listed and "NVIDIA L40S" in listed
    gone = await http.post("/pods", json=body())
    assert gone.status_code == 400 and "not available" in problem_of(gone)["detail"]
    # Only on the community cloud: a secure create of it is refused.
    community = await http.post("/pods", json=body(gpu={"id": "NVIDIA L40S", "count": 1}))
    assert community.status_code == 400 and "SECURE" in problem_of(community)["detail"]
    too_many = await http.post("/pods", json=body(gpu={"id": "NVIDIA A40", "count": 11}))
    assert too_many.status_code == 400 and "at most 10" in problem_of(too_many)["detail"]


async def test_catalog_availability_follows_capacity_per_data_center(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.set_capacity(GPU, 0)
    fake.set_capacity(GPU, 2, "US-TX-3")
    query = {"include": "AVAILABILITY", "product": "POD", "count": "1"}
    data = (await http.get("/catalog/gpus", params=query)).json()
    assert runpod_schema.errors("ListGpuTypesResponse", data) == []
    rtx = next(gpu for gpu in data["gpus"] if gpu["id"] == GPU)
    assert rtx["availability"] == "MEDIUM"
    centers = {c["id"]: c["availability"] for c in rtx["dataCenters"]}
    assert centers == {"EU-RO-1": "NONE", "US-TX-3": "MEDIUM", "US-KS-2": "NONE"}
    assert rtx["cudaVersions"] == [{"version": "12.8", "available": True}]
    # A pod of two GPUs fits once; then none is left and the data centers are omitted.
    two = {**query, "count": "2"}
    assert (await http.get(f"/catalog/gpus/{GPU}", params=two)).json()["availability"] == "LOW"
    await create(http, gpu={"id": GPU, "count": 2})
    after = (await http.get(f"/catalog/gpus/{GPU}", params=query)).json()
    assert after["availability"] == "NONE" and "dataCenters" not in after
    assert runpod_schema.errors("GpuType", after) == []
    # Country and CUDA filters narrow it the way the description says.
    romania = {**query, "countryCodes": "RO"}
    listed = (await http.get("/catalog/gpus", params=romania)).json()["gpus"]
    assert GPU not in [g["id"] for g in listed if g.get("dataCenters")]
    newer = {**query, "minCudaVersion": "13"}
    a40 = (await http.get("/catalog/gpus/NVIDIA A40", params=newer)).json()
    assert a40["availability"] == "NONE" and a40["cudaVersions"] == []


@pytest.mark.parametrize(
    ("query", "status", "words"),
    [
        ({"include": "AVAILABILITY"}, 400, "product is required"),
        ({"product": "POD"}, 400, "valid only with include"),
        ({"count": "2"}, 400, "valid only with include"),
        ({"include": "STOCK", "product": "POD"}, 422, "query include[0]"),
        ({"include": "AVAILABILITY", "product": "POD", "count": "0"}, 422, "query count"),
        ({"include": "AVAILABILITY", "product": "POD", "count": "two"}, 422, "query count"),
        ({"include": "AVAILABILITY", "product": "POD", "cloud": "MOON"}, 422, "query cloud"),
        ({"include": "AVAILABILITY", "product": "POD", "countryCodes": "ro"}, 422, "countryCodes"),
        (
            {"include": "AVAILABILITY", "product": "POD", "cudaVersions": "12.8",
             "minCudaVersion": "12"},
            400,
            "mutually exclusive",
        ),
    ],
)  # fmt: skip
async def test_catalog_queries_are_checked_against_the_published_parameters(
    http: httpx.AsyncClient,
    query: dict[str, str],
    status: int,
    words: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    for path in ("/catalog/gpus", f"/catalog/gpus/{GPU}"):
        answer = await http.get(path, params=query)
        assert answer.status_code == status, answer.text
        problem = problem_of(answer)
        assert words in problem["detail"] + " ".join(problem.get("errors", []))


async def test_the_catalog_needs_an_account_key(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    async with httpx.AsyncClient(transport=fake.transport(), base_url=FAKE_URL) as anonymous:
        assert (await anonymous.get("/catalog/gpus")).status_code == 401
    pod = await create(http)
    scoped = fake.pod_scoped_key(pod["id"])
    headers = {"Authorization": f"Bearer {scoped}"}
    assert (await http.get("/catalog/gpus", headers=headers)).status_code == 403
    assert (await http.post("/catalog/gpus", json={})).status_code == 405
    fake.fail_next("GET /catalog/gpus", 503)
    assert (await http.get("/catalog/gpus")).status_code == 503
    assert (await http.get("/catalog/gpus")).status_code == 200


# --- the data centers -------------------------------------------------------------------


async def test_the_data_centers_are_listed_shaped_as_published(
    fake: FakeRunpod, http: httpx.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    listing = await http.get("/catalog/datacenters")
    assert listing.status_code == 200
    data = listing.json()
    assert runpod_schema.errors("ListDataCentersResponse", data) == []
    assert [dc["id"] for dc in data["dataCenters"]] == list(fake.data_centers)
    romania = data["dataCenters"][0]
    assert (romania["name"], romania["region"]) == ("Europe Romania 1", "EUROPE")
    assert "gpuAvailability" not in romania
    # Stock per data center, as the tests set it, only when asked for.
    fake.set_capacity(GPU, 0, "EU-RO-1")
    stocked = await http.get("/catalog/datacenters", params={"include": "GPU_AVAILABILITY"})
    data = stocked.json()
    assert runpod_schema.errors("ListDataCentersResponse", data) == []
    levels = {g["id"]: g["availability"] for g in data["dataCenters"][0]["gpuAvailability"]}
    assert levels[GPU] == "NONE" and levels["NVIDIA A40"] == "HIGH"
    america = await http.get("/catalog/datacenters", params={"regions": "NORTH_AMERICA"})
    assert [dc["id"] for dc in america.json()["dataCenters"]] == ["US-TX-3", "US-KS-2"]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"include": "GPU_STOCK"}, "query include[0]"),
        ({"regions": "MARS"}, "query regions[0]"),
        ({"globalNetwork": "maybe"}, "query globalNetwork"),
        ({"count": "1"}, "not a parameter of GET /catalog/datacenters"),
    ],
)
async def test_data_center_queries_are_checked_against_the_published_parameters(
    fake: FakeRunpod,
    http: httpx.AsyncClient,
    query: dict[str, str],
    words: str,
    autojump_clock: trio.testing.MockClock,
) -> None:
    answer = await http.get("/catalog/datacenters", params=query)
    assert answer.status_code == 422
    assert words in " ".join(problem_of(answer)["errors"])
    async with httpx.AsyncClient(transport=fake.transport(), base_url=FAKE_URL) as anonymous:
        assert (await anonymous.get("/catalog/datacenters")).status_code == 401
    assert (await http.post("/catalog/datacenters", json={})).status_code == 405
