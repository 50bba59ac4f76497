"""The Runpod v2 client against the in-process fake server, on trio's MockClock."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from overbrainer import __version__
from overbrainer.runpod.client import (
    ActionRefused,
    AmbiguousCreate,
    CreateFailed,
    CreatePod,
    InvalidPodSpec,
    RunpodApiError,
    RunpodClient,
    RunpodError,
    create_body,
)
from overbrainer.runpod.models import (
    Availability,
    BadGpuData,
    PodStatus,
    UnsafeSshEndpoint,
    parse_gpu_type,
    parse_pod,
    parse_problem,
)
from overbrainer.runpod.redact import REDACTED, Redactor, one_line
from overbrainer.testing import runpod_schema
from overbrainer.testing.runpod_api import FAKE_URL, NO_CAPACITY, FakeRunpod

GPU = "NVIDIA A40"
# A canary API key: no piece of it of 6 characters may ever show in an error.
CANARY = "rpa_CANARY7q2w9e4r1t8y3u6i5o0pZxKvBnMlJhGfDsA"


def spec(**overrides: Any) -> CreatePod:
    values: dict[str, Any] = {
        "name": "overbrainer-run1-1",
        "image": "ghcr.io/example/trainer:1",
        "gpu_type": GPU,
        "gpu_count": 1,
        "disk_gb": 40,
        "data_center_ids": ["EU-RO-1", "US-TX-3"],
        "env": {"OVERBRAINER_RUN": "run1", "OVERBRAINER_BOOTSTRAP": "#!/bin/sh\necho hi\n"},
        "args": "bash -c 'sh /bootstrap'",
    }
    values.update(overrides)
    return CreatePod(**values)


@pytest.fixture
def fake() -> FakeRunpod:
    fake = FakeRunpod(provisioning_seconds=5, starting_seconds=10)
    fake.add_account(CANARY, balance=50.0)
    return fake


@pytest.fixture
async def client(fake: FakeRunpod) -> AsyncIterator[RunpodClient]:
    async with RunpodClient(
        CANARY, FAKE_URL, transport=fake.transport(), rng=random.Random(7)
    ) as client:
        yield client


def assert_no_key(*texts: str) -> None:
    for text in texts:
        for start in range(len(CANARY) - 5):
            assert CANARY[start : start + 6] not in text, text


def error_texts(error: BaseException) -> list[str]:
    texts = [str(error), repr(error), *(str(a) for a in error.args)]
    texts.append(getattr(error, "detail", ""))
    return texts


def gaps(fake: FakeRunpod, method: str, path: str) -> list[float]:
    times = [r.time for r in fake.requests if r.method == method and r.path == path]
    return [b - a for a, b in itertools.pairwise(times)]


# --- create ---------------------------------------------------------------------------


async def test_create_sends_only_schema_fields_and_parses_the_pod(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.add_network_volume(CANARY, volume_id="vol123")
    pod = await client.create_pod(spec(network_volume_id="vol123"))
    assert pod.status is PodStatus.PROVISIONING
    assert pod.cost == pytest.approx(0.40)
    assert pod.gpu_id == GPU and pod.gpu_count == 1
    assert pod.data_center_id == "EU-RO-1"
    assert pod.ssh_endpoint() is None
    assert pod.env["OVERBRAINER_RUN"] == "run1"
    (sent,) = fake.create_requests()
    assert sent.schema_errors == []
    assert set(sent.json) == {
        "name", "image", "cloud", "gpu", "disk", "ports", "dataCenterIds", "env", "args", "mounts",
    }  # fmt: skip
    assert sent.json["cloud"] == "SECURE"
    assert sent.json["gpu"] == {"id": GPU, "count": 1}
    assert sent.json["disk"] == 40
    assert sent.json["ports"] == ["22/tcp"]
    assert sent.json["mounts"] == {"network": [{"volumeId": "vol123", "path": "/workspace"}]}


def test_create_body_follows_the_published_schema() -> None:
    body = create_body(
        "overbrainer-r-1", "img:1", GPU, 2, 30, [], {"A": "b"}, "bash -c x", network_volume_id=None
    )
    assert runpod_schema.errors("CreatePodRequest", body) == []
    assert "dataCenterIds" not in body and "mounts" not in body
    assert body["gpu"] == {"id": GPU, "count": 2}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"name": ""}, "name"),
        ({"image": "img with space"}, "image"),
        ({"gpu_count": 0}, "GPU count"),
        ({"disk_gb": True}, "disk size"),
        ({"data_center_ids": ["EU\n1"]}, "data center id"),
        ({"env": {"HOST_KEY": "secret-" + CANARY + "\0"}}, "HOST_KEY"),
        ({"env": {"bad name": "x"}}, "environment variable"),
        ({"args": "a\0b"}, "container command"),
    ],
)
def test_a_bad_pod_spec_is_refused_naming_the_field_only(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidPodSpec) as caught:
        spec(**overrides)
    assert named in str(caught.value)
    assert_no_key(str(caught.value))


def test_the_pod_env_is_kept_out_of_repr() -> None:
    created = spec(env={"HOST_KEY": CANARY})
    assert_no_key(repr(created))
    assert_no_key(repr(parse_pod({"id": "abc123", "env": {"HOST_KEY": CANARY}})))


@pytest.mark.parametrize("status", [408, 500, 502, 503])
async def test_a_create_is_never_retried_and_5xx_or_408_is_ambiguous(
    fake: FakeRunpod, client: RunpodClient, status: int, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("POST /pods", status, times=3)
    with pytest.raises(AmbiguousCreate) as caught:
        await client.create_pod(spec())
    assert caught.value.ambiguous and caught.value.status == status
    assert len(fake.create_requests()) == 1


@pytest.mark.parametrize("kind", ["timeout", "connect"])
async def test_a_create_transport_failure_is_ambiguous_and_not_retried(
    fake: FakeRunpod, client: RunpodClient, kind: str, autojump_clock: trio.testing.MockClock
) -> None:
    fault = {"timeout": True} if kind == "timeout" else {"connect_error": True}
    fake.fail_next("POST /pods", times=3, **fault)
    with pytest.raises(AmbiguousCreate) as caught:
        await client.create_pod(spec())
    assert caught.value.status is None
    assert "may or may not have been created" in str(caught.value)
    assert len(fake.create_requests()) == 1


async def test_a_429_create_is_definite_and_carries_retry_after(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("POST /pods", 429, retry_after=12)
    with pytest.raises(CreateFailed) as caught:
        await client.create_pod(spec())
    error = caught.value
    assert not error.ambiguous and error.status == 429 and error.retry_after == 12.0
    assert len(fake.create_requests()) == 1 and fake.live_pods() == []


@pytest.mark.parametrize(
    ("fault", "ambiguous"),
    [
        ({"status": 500}, True),
        ({"timeout": True, "status": None}, True),
        ({"status": 201, "raw_body": b'{"id": "abc'}, True),
        ({"status": 201, "raw_body": b'{"id": "../etc"}'}, True),
    ],
)
async def test_a_create_that_succeeded_but_answered_badly_is_ambiguous(
    fake: FakeRunpod,
    client: RunpodClient,
    fault: dict[str, Any],
    ambiguous: bool,
    autojump_clock: trio.testing.MockClock,
) -> None:
    status = fault.pop("status")
    fake.fail_next("POST /pods", status, succeed=True, **fault)
    with pytest.raises(AmbiguousCreate):
        await client.create_pod(spec())
    assert len(fake.live_pods()) == 1  # the pod exists and bills
    assert len(fake.create_requests()) == 1


async def test_create_errors_show_a_fixed_text_per_status_and_keep_runpods_detail(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    async def failure(created: CreatePod) -> CreateFailed:
        with pytest.raises(CreateFailed) as caught:
            await client.create_pod(created)
        assert not caught.value.ambiguous
        return caught.value

    fake.set_capacity(GPU, 0)
    no_room = await failure(spec())
    assert no_room.status == 400 and no_room.detail == NO_CAPACITY
    assert NO_CAPACITY not in str(no_room) and "could not place this GPU type" in str(no_room)

    unknown = await failure(spec(gpu_type="NVIDIA Imaginary 9000"))
    assert unknown.status == 400 and "Imaginary" in unknown.detail
    assert "Imaginary" not in str(unknown)

    fake.accounts[CANARY].balance = 0.01
    broke = await failure(spec(gpu_type="NVIDIA H100 80GB HBM3"))
    assert broke.status == 402 and "balance is too low" in str(broke)

    class Malformed(CreatePod):
        def to_json(self) -> dict[str, object]:
            return {**super().to_json(), "stopAfter": "2h"}

    malformed = await failure(Malformed(name="n", image="i", gpu_type=GPU, gpu_count=1, disk_gb=10))
    assert malformed.status == 422 and "malformed" in str(malformed)
    assert "stopAfter" in malformed.detail  # the schema errors are kept for the report

    for status, words in [
        (403, "no access to this GPU pool"),
        (409, "conflicting"),
        (404, "network volume"),
        (418, "refused the create (HTTP 418)"),
        (307, "redirect (HTTP 307)"),
    ]:
        fake.fail_next("POST /pods", status)
        error = await failure(spec())
        assert error.status == status and words in str(error)
        assert "scripted failure" not in str(error)

    async with RunpodClient("rpa_wrong", FAKE_URL, transport=fake.transport()) as stranger:
        with pytest.raises(CreateFailed) as caught:
            await stranger.create_pod(spec())
    assert caught.value.status == 401 and "OVERBRAINER_RUNPOD__API_KEY" in str(caught.value)
    for request in fake.create_requests():
        assert request.schema_errors == [] or request.json.get("stopAfter") == "2h"


# --- reads, deletes and their retries ----------------------------------------------------


async def test_every_request_carries_the_user_agent_and_bearer_key(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    await client.get_pod(pod.id)
    await client.list_pods()
    await client.delete_pod(pod.id)
    assert len(fake.requests) == 4
    for request in fake.requests:
        assert request.headers["user-agent"] == f"overbrainer/{__version__}"
        assert request.headers["authorization"] == "<present>"
        assert request.auth == "account"


async def test_a_429_read_waits_exactly_retry_after_in_virtual_time(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    fake.fail_next("GET /pods/{id}", 429, retry_after=12)
    found = await client.get_pod(pod.id)
    assert found is not None and found.id == pod.id
    (gap,) = gaps(fake, "GET", f"/pods/{pod.id}")
    assert 12.0 <= gap <= 13.0


async def test_an_http_date_retry_after_is_counted_from_runpods_date_not_this_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Runpod's clock is 2 years ahead of this machine's: an HTTP-date Retry-After read on
    # this machine's clock would mean a wait of 2 years (capped at an hour).
    fake = FakeRunpod(wall_start=datetime.now(UTC) + timedelta(days=730))
    fake.add_account(CANARY)
    async with RunpodClient(CANARY, FAKE_URL, transport=fake.transport()) as client:
        pod = await client.create_pod(spec())
        when = fake.http_date(trio.current_time() + 7)
        fake.fail_next("GET /pods/{id}", 429, headers={"retry-after": when})
        assert await client.get_pod(pod.id) is not None
    (gap,) = gaps(fake, "GET", f"/pods/{pod.id}")
    assert 6.0 <= gap <= 8.0


@pytest.mark.parametrize(
    "said",
    [
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired "
        "(_ssl.c:1006)",
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate is not yet "
        "valid (_ssl.c:1006)",
    ],
)
async def test_a_certificate_refused_as_expired_or_not_yet_valid_points_to_the_clock(
    fake: FakeRunpod, client: RunpodClient, said: str, autojump_clock: trio.testing.MockClock
) -> None:
    # What OpenSSL says when this machine's clock is far off Runpod's certificate's dates.
    hint = "the TLS certificate check depends on this machine's clock: check that it is right"
    fake.fail_next("GET /pods", connect_error=True, error_message=said, times=5)
    with pytest.raises(RunpodApiError) as caught:
        await client.list_pods()
    assert said in str(caught.value) and hint in str(caught.value)
    fake.fail_next("POST /pods", connect_error=True, error_message=said)
    with pytest.raises(AmbiguousCreate) as created:
        await client.create_pod(spec())
    assert hint in str(created.value)
    fake.fail_next("GET /pods", connect_error=True, error_message="connection refused", times=5)
    with pytest.raises(RunpodApiError) as refused:
        await client.list_pods()
    assert "clock" not in str(refused.value)


async def test_the_client_keeps_runpods_clock_from_the_date_of_each_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ahead = datetime(2031, 5, 1, 12, 0, 0, tzinfo=UTC)
    fake = FakeRunpod(wall_start=ahead)
    fake.add_account(CANARY)
    async with RunpodClient(CANARY, FAKE_URL, transport=fake.transport()) as client:
        assert not client.server_clock.known
        await client.list_pods()
        start = trio.current_time()
        assert client.server_clock.now(start) == ahead
        await trio.sleep(90.5)
        # Carried forward on the monotonic clock between answers...
        assert client.server_clock.now(trio.current_time()) == ahead + timedelta(seconds=90.5)
        # ... and taken afresh from each (whole seconds, as HTTP dates go).
        await client.list_pods()
        assert client.server_clock.date == ahead + timedelta(seconds=90)
        # An answer without a usable Date changes nothing.
        fake.send_date = False
        await trio.sleep(10)
        await client.list_pods()
        assert client.server_clock.date == ahead + timedelta(seconds=90)
        fake.fail_next("GET /pods", 500, headers={"date": "not a date"})
        await client.list_pods()
        assert client.server_clock.date == ahead + timedelta(seconds=90)


async def test_reads_retry_5xx_408_and_transport_errors_with_bounded_jitter(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 503)
    fake.fail_next("GET /pods", 408)
    fake.fail_next("GET /pods", connect_error=True)
    fake.fail_next("GET /pods", timeout=True)
    assert await client.list_pods() == []
    waits = gaps(fake, "GET", "/pods")
    assert len(waits) == 4
    for attempt, wait in enumerate(waits):
        base = 2.0**attempt  # 1, 2, 4, 8 s, half of it jittered
        assert base / 2 <= wait <= base


async def test_jitter_differs_between_clients(
    fake: FakeRunpod, autojump_clock: trio.testing.MockClock
) -> None:
    seen = []
    for seed in (1, 2):
        async with RunpodClient(
            CANARY, FAKE_URL, transport=fake.transport(), rng=random.Random(seed)
        ) as client:
            start = len(fake.requests)
            fake.fail_next("GET /pods", 503)
            await client.list_pods()
            first, second = fake.requests[start:]
            seen.append(second.time - first.time)
    assert seen[0] != seen[1]


async def test_reads_give_up_after_five_attempts(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 503, times=9)
    with pytest.raises(RunpodApiError) as caught:
        await client.list_pods()
    assert caught.value.status == 503
    assert "cannot list pods: HTTP 503 after 5 attempts" in str(caught.value)
    assert "Runpod said: scripted failure" in str(caught.value)
    assert len(fake.requests) == 5


async def test_retries_stay_within_the_time_budget(
    fake: FakeRunpod, autojump_clock: trio.testing.MockClock
) -> None:
    async with RunpodClient(
        CANARY, FAKE_URL, transport=fake.transport(), max_retry_seconds=60
    ) as client:
        fake.fail_next("GET /pods", 429, retry_after=100)
        with pytest.raises(RunpodApiError) as caught:
            await client.list_pods()
    assert caught.value.status == 429 and caught.value.retry_after == 100.0
    assert "rate-limiting" in str(caught.value)
    assert len(fake.requests) == 1 and trio.current_time() < 1


async def test_no_read_error_is_retried_when_definite(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 403)
    with pytest.raises(RunpodApiError) as caught:
        await client.list_pods()
    assert caught.value.status == 403 and len(fake.requests) == 1


async def test_a_404_means_gone_only_in_runpods_own_shape(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert await client.get_pod("nosuchpod") is None
    assert await client.delete_pod("nosuchpod") is False
    pod = await client.create_pod(spec())
    for raw, content_type in [
        (b"<html><body>404 Not Found</body></html>", "text/html"),
        (json.dumps({"title": "Not Found", "status": 404, "detail": "x"}).encode(), "text/json"),
        (json.dumps({"error": "not found"}).encode(), "application/problem+json"),
        (
            json.dumps({"title": "N", "status": 400, "detail": "x"}).encode(),
            "application/problem+json",
        ),
    ]:
        for route in ("GET /pods/{id}", "DELETE /pods/{id}"):
            fake.fail_next(route, 404, raw_body=raw, content_type=content_type)
        with pytest.raises(RunpodApiError) as caught:
            await client.get_pod(pod.id)
        assert "404 not in Runpod's error format" in str(caught.value)
        with pytest.raises(RunpodApiError):
            await client.delete_pod(pod.id)
    assert fake.status(pod.id) == "PROVISIONING"


async def test_delete_answers_true_then_false(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    assert await client.delete_pod(pod.id) is True
    assert await client.delete_pod(pod.id) is False
    assert await client.get_pod(pod.id) is None
    assert fake.status(pod.id) == "TERMINATED"


async def test_a_retried_delete_whose_first_attempt_worked_reads_as_gone(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    fake.fail_next("DELETE /pods/{id}", 502, succeed=True)
    assert await client.delete_pod(pod.id) is False
    assert fake.live_pods() == []


async def test_list_follows_the_pagination_cursor(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    created = [await client.create_pod(spec(name=f"overbrainer-r-{n}")) for n in range(5)]
    fake.page_size = 2
    listed = await client.list_pods()
    assert [p.id for p in listed] == [p.id for p in created]
    cursors = [
        r.query.get("cursor") for r in fake.requests if r.path == "/pods" and r.method == "GET"
    ]
    assert cursors == [None, "page-2", "page-4"]


async def test_a_repeated_cursor_is_an_error_not_a_loop(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    page = json.dumps({"pods": [], "nextCursor": "again"}).encode()
    fake.fail_next("GET /pods", 200, raw_body=page, times=3)
    with pytest.raises(RunpodApiError, match="repeated a page cursor"):
        await client.list_pods()


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b'{"items": []}', b'{"pods": {}}', b'{"pods": [{"id": "a/b"}]}'],
)
async def test_an_unreadable_list_is_an_error(
    fake: FakeRunpod, client: RunpodClient, raw: bytes, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 200, raw_body=raw)
    with pytest.raises(RunpodApiError, match="cannot list pods"):
        await client.list_pods()


async def test_a_redirect_is_an_error_naming_its_status(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /pods", 302)
    with pytest.raises(RunpodApiError) as caught:
        await client.list_pods()
    assert "redirect (HTTP 302)" in str(caught.value) and caught.value.status == 302
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/pods")]


async def test_unsafe_pod_ids_never_reach_a_url(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    for bad in ["../pods", "a/b", "-x", "", "a b", "a?b=1"]:
        with pytest.raises(RunpodError, match="unusable pod id"):
            await client.get_pod(bad)
        with pytest.raises(RunpodError, match="unusable pod id"):
            await client.delete_pod(bad)
    assert fake.requests == []


# --- actions -------------------------------------------------------------------------------


async def test_actions_follow_the_status_table(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    await trio.sleep(20)
    stopped = await client.pod_action(pod.id, "stop")
    assert stopped is not None and stopped.status is PodStatus.EXITED and stopped.cost == 0
    with pytest.raises(ActionRefused) as caught:
        await client.pod_action(pod.id, "stop")
    assert caught.value.status == 409
    started = await client.pod_action(pod.id, "start")
    assert started is not None and started.status is PodStatus.STARTING
    assert await client.pod_action(pod.id, "terminate") is None
    assert await client.pod_action(pod.id, "terminate") is None  # already gone
    assert await client.get_pod(pod.id) is None


async def test_non_idempotent_actions_are_retried_only_when_unsent(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod = await client.create_pod(spec())
    fake.fail_next("POST /pods/{id}/action", 503, succeed=True)
    with pytest.raises(RunpodApiError) as caught:
        await client.pod_action(pod.id, "stop")
    assert caught.value.status == 503
    fake.fail_next("POST /pods/{id}/action", 429, retry_after=3)
    fake.fail_next("POST /pods/{id}/action", connect_error=True)
    started = await client.pod_action(pod.id, "start")
    assert started is not None and started.status is PodStatus.STARTING
    actions = [r for r in fake.requests if r.path.endswith("/action")]
    assert len(actions) == 4 and all(r.schema_errors == [] for r in actions)


# --- secrets ---------------------------------------------------------------------------


def echoes() -> list[str]:
    return [
        f"bad token {CANARY}",
        f"token {CANARY[:8]}… is unknown",
        f"token ending {CANARY[-7:]} is unknown",
        f"saw ...{CANARY[10:22]}...",
        f"split {CANARY[:20]}\n{CANARY[20:]} here",
        f"as url Bearer%20{CANARY}",
    ]


@pytest.mark.parametrize(
    "echo", echoes(), ids=["full", "prefix", "suffix", "middle", "split", "urlencoded"]
)
async def test_the_api_key_never_shows_in_an_error_even_partly(
    fake: FakeRunpod, client: RunpodClient, echo: str, autojump_clock: trio.testing.MockClock
) -> None:
    problem = json.dumps({"title": "Bad", "status": 503, "detail": echo, "errors": [echo]})
    html = f"<html>{echo}</html>"
    caught: list[BaseException] = []

    fake.fail_next("GET /pods", 503, times=5, raw_body=problem.encode(),
                   content_type="application/problem+json")  # fmt: skip
    fake.fail_next("GET /pods/{id}", 404, raw_body=html.encode(), content_type="text/html")
    fake.fail_next("DELETE /pods/{id}", connect_error=True, error_message=echo, times=5)
    fake.fail_next("POST /pods", 400, raw_body=problem.replace("503", "400").encode(),
                   content_type="application/problem+json")  # fmt: skip
    fake.fail_next("POST /pods", connect_error=True, error_message=echo)
    fake.fail_next("POST /pods", 500, raw_body=html.encode(), content_type="text/html")
    for call in (
        client.list_pods(),
        client.get_pod("abc123"),
        client.delete_pod("abc123"),
        client.create_pod(spec()),
        client.create_pod(spec()),
        client.create_pod(spec()),
    ):
        with pytest.raises(RunpodError) as raised:
            await call
        caught.append(raised.value)
    assert len(caught) == 6
    for error in caught:
        assert_no_key(*error_texts(error))
        assert error.__cause__ is None  # the transport error (with its text) is not chained
    assert any(REDACTED in text for error in caught for text in error_texts(error))


async def test_a_create_detail_never_echoes_the_pod_environment(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    host_key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
    detail = f"env value {host_key!r} rejected"
    problem = json.dumps({"title": "Bad Request", "status": 400, "detail": detail})
    fake.fail_next("POST /pods", 400, raw_body=problem.encode(),
                   content_type="application/problem+json")  # fmt: skip
    with pytest.raises(CreateFailed) as caught:
        await client.create_pod(spec(env={"OVERBRAINER_HOST_KEY": host_key}))
    assert "b3BlbnNz" not in caught.value.detail and REDACTED in caught.value.detail


def test_a_bad_api_key_is_refused_without_echoing_it() -> None:
    for bad in ["", f"{CANARY} ", f"{CANARY}\n", f"a\x00{CANARY}", f"{CANARY}\u2019"]:
        with pytest.raises(RunpodError) as caught:
            RunpodClient(bad, FAKE_URL)
        assert_no_key(str(caught.value))
    for url in ["ftp://runpod.example/v2", "http://[::1", "runpod.example/v2"]:
        with pytest.raises(RunpodError, match="BASE_URL"):
            RunpodClient(CANARY, url)


async def test_the_client_repr_holds_no_key(
    client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert_no_key(repr(client))


def test_the_redactor_hides_pieces_and_keeps_the_rest() -> None:
    redact = Redactor(["s3cr3t-TOKEN-value", "tiny"])
    assert redact("a s3cr3t-TOKEN-value b") == f"a {REDACTED} b"
    assert redact("x TOKEN-v y") == f"x {REDACTED} y"
    assert redact("x TOKEN y") == "x TOKEN y"  # 5 characters: noise, not a piece
    assert redact("tin tiny") == f"tin {REDACTED}"
    assert redact("s3cr3t-TOKEN-values") == f"{REDACTED}s"
    assert Redactor([])("anything") == "anything"
    assert "s3cr3t" not in repr(redact)


def test_one_line_flattens_hostile_text() -> None:
    assert one_line("a\nb\r\n\tc\x1b[31m\u202edz\u0000") == "a b c [31m dz"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


# --- parsing --------------------------------------------------------------------------


def raw_pod(**fields: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "id": "abc123",
        "name": "overbrainer-r-1",
        "status": "RUNNING",
        "gpu": {"id": GPU, "count": 1},
        "dataCenterId": "EU-RO-1",
        "cost": 0.4,
        "createdAt": "2026-06-01T12:00:00Z",
        "startedAt": None,
        "env": {"A": "b", "N": 1},
        "ssh": {"proxy": None, "direct": {"host": "195.26.233.3", "port": 34446,
                                          "username": "root", "command": "ssh root@x"}},
    }  # fmt: skip
    pod.update(fields)
    return pod


def test_a_pod_is_parsed_tolerantly() -> None:
    pod = parse_pod(raw_pod())
    assert pod.status is PodStatus.RUNNING and pod.cost == 0.4
    assert pod.created_at is not None and pod.created_at.isoformat() == "2026-06-01T12:00:00+00:00"
    assert pod.started_at is None and pod.env == {"A": "b"}
    endpoint = pod.ssh_endpoint()
    assert endpoint is not None and (endpoint.host, endpoint.port) == ("195.26.233.3", 34446)
    odd = parse_pod({"id": "x1", "status": "HIBERNATING", "cost": "free", "createdAt": "soon"})
    assert odd.status is PodStatus.UNKNOWN and odd.raw_status == "HIBERNATING"
    assert odd.cost == 0.0 and odd.created_at is None and odd.ssh_endpoint() is None
    assert odd.gpu_id is None and odd.name == ""
    assert parse_pod(raw_pod(cost=float("nan"), status=None)).status is PodStatus.UNKNOWN


@pytest.mark.parametrize(
    ("fields", "running", "without"),
    [
        ({}, None, False),  # no runtime shown: nothing known
        ({"runtime": {"uptime": 5, "gpus": [{"util": 90}]}}, 1, False),
        ({"runtime": {"uptime": 5, "gpus": []}}, 0, True),  # restarted with no GPU
        ({"runtime": {"uptime": 5}}, None, False),
        ({"runtime": {"gpus": "many"}}, None, False),
        ({"runtime": {"gpus": []}, "status": "EXITED"}, 0, False),  # not running: stopped
        ({"runtime": {"gpus": []}, "gpu": None}, 0, False),  # a CPU pod has none to lose
    ],
)
def test_a_running_pod_whose_runtime_lists_no_gpu_is_without_its_gpus(
    fields: dict[str, Any], running: int | None, without: bool
) -> None:
    pod = parse_pod(raw_pod(**fields))
    assert pod.gpus_running == running and pod.without_gpus is without


def test_account_provided_text_is_one_printable_line() -> None:
    pod = parse_pod(raw_pod(name="evil\n\x1b[2Jname\u202e", status="RUNNING\nX"))
    assert pod.name == "evil [2Jname" and pod.status is PodStatus.UNKNOWN


@pytest.mark.parametrize(
    "direct",
    [
        {"host": "-oProxyCommand=touch /tmp/x", "port": 22, "username": "root"},
        {"host": "host name", "port": 22, "username": "root"},
        {"host": "fe80::1%eth0", "port": 22, "username": "root"},
        {"host": "a..b", "port": 22, "username": "root"},
        {"host": "1.2.3.4", "port": 0, "username": "root"},
        {"host": "1.2.3.4", "port": 70000, "username": "root"},
        {"host": "1.2.3.4", "port": "22", "username": "root"},
        {"host": "1.2.3.4", "port": True, "username": "root"},
        {"host": "1.2.3.4", "port": 22, "username": "-lroot"},
        {"host": "1.2.3.4", "port": 22, "username": "Root"},
        {"host": "1.2.3.4", "port": 22, "username": "root\nx"},
        {"host": "1.2.3.4", "port": 22},
        "ssh root@1.2.3.4",
    ],
)
def test_a_hostile_ssh_endpoint_is_flagged_and_refused(direct: object) -> None:
    pod = parse_pod(raw_pod(ssh={"proxy": None, "direct": direct}))
    assert pod.ssh_problem is not None and pod.ssh_direct is None
    with pytest.raises(UnsafeSshEndpoint) as caught:
        pod.ssh_endpoint()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("host", ["pod-1.runpod.example", "195.26.233.3", "2001:db8::7", "h"])
def test_ordinary_ssh_hosts_are_accepted(host: str) -> None:
    direct = {"host": host, "port": 22, "username": "root", "command": "ssh"}
    endpoint = parse_pod(raw_pod(ssh={"direct": direct})).ssh_endpoint()
    assert endpoint is not None and endpoint.host == host


def test_a_problem_needs_runpods_own_shape() -> None:
    body = {"title": "Not Found", "status": 404, "detail": "pod not found", "errors": ["a", 1]}
    problem = parse_problem(404, "application/problem+json; charset=utf-8", body)
    assert problem is not None and problem.errors == ("a",)
    assert parse_problem(404, "application/json", body) is None
    assert parse_problem(404, "application/problem+json", {**body, "status": True}) is None
    assert parse_problem(404, "application/problem+json", ["x"]) is None


async def test_a_transport_seam_failure_names_the_host_not_the_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect with {request.headers['authorization']}")

    async with RunpodClient(
        CANARY, "https://api.runpod.example/v2", transport=httpx.MockTransport(refuse)
    ) as client:
        with pytest.raises(RunpodApiError) as caught:
            await client.list_pods()
    assert "ConnectError talking to api.runpod.example after 5 attempts" in str(caught.value)
    assert_no_key(*error_texts(caught.value))


# --- the GPU catalog ------------------------------------------------------------------


async def test_the_gpu_catalog_lists_every_type_with_its_prices(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    gpus = await client.list_gpu_types()
    assert [gpu.id for gpu in gpus] == list(fake.gpu_types)
    a40 = next(gpu for gpu in gpus if gpu.id == GPU)
    assert (a40.name, a40.memory_gb, a40.manufacturer) == ("A40", 48, "NVIDIA")
    assert a40.offered(secure=True) and a40.price_secure == pytest.approx(0.40)
    assert a40.max_count() == 10 and a40.availability is None and a40.data_centers == ()
    (request,) = [r for r in fake.requests if r.path == "/catalog/gpus"]
    assert request.query == {} and request.auth == "account"


async def test_catalog_availability_is_asked_for_pods_on_the_secure_cloud(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.set_capacity(GPU, 0)
    fake.set_capacity(GPU, 1, "US-KS-2")
    a40 = await client.get_gpu_type(GPU, availability=True, gpu_count=1)
    assert a40 is not None and a40.availability is Availability.LOW
    assert [(c.id, c.availability) for c in a40.data_centers] == [
        ("EU-RO-1", Availability.NONE),
        ("US-TX-3", Availability.NONE),
        ("US-KS-2", Availability.LOW),
    ]
    assert a40.cuda_versions == {"12.8": True}
    listed = await client.list_gpu_types(availability=True, gpu_count=2)
    assert next(g for g in listed if g.id == GPU).availability is Availability.NONE
    queries = [r.query for r in fake.requests if r.path.startswith("/catalog/gpus")]
    assert queries[-1] == {"include": "AVAILABILITY", "product": "POD", "cloud": "SECURE",
                           "count": "2"}  # fmt: skip
    assert all(r.status == 200 for r in fake.requests)
    with pytest.raises(RunpodError, match="at least 1"):
        await client.list_gpu_types(availability=True, gpu_count=0)


async def test_the_data_centers_are_read_with_a_request_the_published_schema_allows(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    centers = await client.list_data_centers()
    assert [(c.id, c.name, c.region) for c in centers] == [
        ("EU-RO-1", "Europe Romania 1", "EUROPE"),
        ("US-TX-3", "US Texas 3", "NORTH_AMERICA"),
        ("US-KS-2", "US Kansas 2", "NORTH_AMERICA"),
    ]
    assert centers[0].volume_types == ("STANDARD",) and centers[0].compliance == ("GDPR",)
    (request,) = [r for r in fake.requests if r.path == "/catalog/datacenters"]
    assert runpod_schema.query_errors("/catalog/datacenters", request.query) == []
    assert request.status == 200 and request.auth == "account"
    # Retried like every read; an answer of another shape is an error, and an entry
    # without a usable id is left out.
    fake.fail_next("GET /catalog/datacenters", 503)
    assert len(await client.list_data_centers()) == 3
    odd = {"dataCenters": [{"id": "EU RO 1"}, {"name": "no id"}, {"id": "EU-RO-1"}]}
    fake.fail_next("GET /catalog/datacenters", 200, raw_body=json.dumps(odd).encode())
    assert [c.id for c in await client.list_data_centers()] == ["EU-RO-1"]
    fake.fail_next("GET /catalog/datacenters", 200, raw_body=b'{"dataCenters": 3}')
    with pytest.raises(RunpodApiError, match="data centers"):
        await client.list_data_centers()


async def test_an_unknown_gpu_type_reads_as_none_and_odd_ids_stay_in_the_path(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert await client.get_gpu_type("NVIDIA RTX 9999") is None
    assert await client.get_gpu_type("a/../../pods") is None  # one path segment, encoded
    assert [r.path for r in fake.requests] == [
        "/catalog/gpus/NVIDIA RTX 9999",
        "/catalog/gpus/a/../../pods",
    ]
    with pytest.raises(RunpodError, match="not printable"):
        await client.get_gpu_type("bad\nid")
    fake.fail_next("GET /catalog/gpus/{id}", 404, raw_body=b"<html>nginx</html>",
                   content_type="text/html")  # fmt: skip
    with pytest.raises(RunpodApiError, match="not in Runpod's error format"):
        await client.get_gpu_type(GPU)


async def test_catalog_reads_are_retried_and_errors_hold_no_key(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.fail_next("GET /catalog/gpus", 503)
    fake.fail_next("GET /catalog/gpus", timeout=True)
    assert len(await client.list_gpu_types()) == len(fake.gpu_types)
    fake.fail_next("GET /catalog/gpus", 401, times=5)
    with pytest.raises(RunpodApiError) as refused:
        await client.list_gpu_types()
    assert refused.value.status == 401 and "refused the API key" in str(refused.value)
    fake.fail_next(
        "GET /catalog/gpus", 200, raw_body=json.dumps({"gpus": [{"id": CANARY}]}).encode()
    )
    fake.fail_next("GET /catalog/gpus", 200, raw_body=b'{"gpus": "none"}')
    for _ in range(2):
        with pytest.raises(RunpodApiError) as caught:
            await client.list_gpu_types()
        assert "GPU catalog" in str(caught.value)
        assert_no_key(*error_texts(caught.value))


def test_a_gpu_type_is_parsed_tolerantly() -> None:
    odd = parse_gpu_type(
        {"id": "NVIDIA X", "name": "X\n\x1b[2J", "memory": -3, "secure": "yes",
         "price": {"secure": float("inf"), "community": 0.2}, "maxCount": [],
         "availability": "PLENTY", "dataCenters": [{"id": "EU-1"}, 7],
         "cudaVersions": [{"version": "12.8", "available": True}, {"version": "x"}]}
    )  # fmt: skip
    assert odd.name == "X [2J" and odd.memory_gb is None and odd.secure is False
    assert odd.price_secure is None and odd.price_community == 0.2
    assert odd.max_count_secure is None and odd.availability is Availability.UNKNOWN
    assert [(c.id, c.availability) for c in odd.data_centers] == [("EU-1", Availability.UNKNOWN)]
    assert odd.cuda_versions == {"12.8": True}
    for bad in ({"id": ""}, {"id": 7}, {"name": "x"}, [], {"id": "a\nb"}, {"id": "x" * 201}):
        with pytest.raises(BadGpuData):
            parse_gpu_type(bad)
