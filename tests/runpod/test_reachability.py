"""Runpod out of reach: a name that does not resolve or a refused connection fails at once,
says why and is never retried like a 5xx; a create that never left is known to have made
no pod; a delete that cannot reach Runpod is unconfirmed and names ``pod rm``; and a wait
of more than a second is said as it starts."""

from __future__ import annotations

import errno
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.runpod import decide
from overbrainer.runpod.client import (
    DEFAULT_BASE_URL,
    AmbiguousCreate,
    CreateNotSent,
    CreatePod,
    RunpodApiError,
    RunpodClient,
    RunpodUnreachable,
)
from overbrainer.runpod.reachability import unreachable_reason
from overbrainer.targets.runpod.delete import DeleteUnconfirmed, delete_pod
from overbrainer.targets.runpod.provision import CreateStopped, provision
from overbrainer.testing.fake_executor import pod_rig, runpod_target
from overbrainer.testing.pod_training import training
from overbrainer.testing.runpod_api import FAKE_URL, FakeRunpod

KEY = "rpa_REACH7q2w9e4r1t8y3u6i5o0pZxKvBnMlJhGfDsA"
A40 = "NVIDIA A40"
NOWHERE = "nonexistent.invalid"  # RFC 6761: never resolves, on any network


class Counting(httpx.AsyncBaseTransport):
    """The real network transport, counting the requests the client hands it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Elsewhere(Counting):
    """The real network, every request sent to ``host`` instead: the client believes it
    talks to its own host (Runpod's, say) while the name that fails to resolve is real."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = request.url.copy_with(host=self.host)
        return await super().handle_async_request(request)


class Offline(httpx.AsyncBaseTransport):
    """No network at all, inside trio's MockClock: each request fails as httpx fails when
    the name does not resolve (a real resolver's failure, raised at once, so no virtual
    timeout can overtake it). ``inner`` answers again once ``offline`` is False."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.offline = True
        self.refused: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self.offline:
            return await self.inner.handle_async_request(request)
        self.refused.append(f"{request.method} {request.url.path}")
        try:
            socket.getaddrinfo(NOWHERE, 443)
        except socket.gaierror as error:
            raise httpx.ConnectError(str(error), request=request) from error
        raise AssertionError(f"{NOWHERE} resolved")  # pragma: no cover


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, then closed)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = int(closed.getsockname()[1])
    closed.close()
    yield port


def _spec() -> CreatePod:
    return CreatePod(
        name="overbrainer-run1-1", image="ghcr.io/example/trainer:1", gpu_type=A40,
        gpu_count=1, disk_gb=40,
    )  # fmt: skip


# --- the client, on the real network -----------------------------------------------------


async def test_a_name_that_does_not_resolve_fails_at_once_without_a_retry() -> None:
    transport = Counting()
    started = time.monotonic()
    async with RunpodClient(KEY, f"https://{NOWHERE}/v2", transport=transport) as client:
        with pytest.raises(RunpodUnreachable) as caught:
            await client.list_pods()
    took = time.monotonic() - started
    assert transport.sent == 1  # a 5xx would have been sent 5 times
    assert caught.value.reason == f"{NOWHERE} does not resolve"
    assert str(caught.value) == (
        f"cannot reach Runpod ({NOWHERE} does not resolve): check the network and the Runpod "
        f"API's address (https://{NOWHERE}/v2: [runpod] base_url, or "
        "OVERBRAINER_RUNPOD__BASE_URL)"
    )
    assert caught.value.status is None and KEY[4:16] not in str(caught.value)
    assert took < 5, took  # the first backoff alone would be 0.5 to 1 s, the rest 15 s


async def test_runpods_own_name_not_resolving_says_check_the_network_and_nothing_else() -> None:
    transport = Elsewhere(NOWHERE)
    async with RunpodClient(KEY, DEFAULT_BASE_URL, transport=transport) as client:
        with pytest.raises(RunpodUnreachable) as caught:
            await client.gpu_entries(availability=True)
        assert transport.sent == 1
        with pytest.raises(RunpodUnreachable):
            await client.delete_pod("abc123xyz")  # deletes too: nothing can reach Runpod
        assert transport.sent == 2
    # The words: the default address needs no mention of where it is set.
    assert str(caught.value) == (
        "cannot reach Runpod (api.runpod.io does not resolve): check the network"
    )


async def test_a_refused_connection_fails_at_once_naming_the_address(refused_port: int) -> None:
    transport = Counting()
    url = f"http://127.0.0.1:{refused_port}/v2"
    async with RunpodClient(KEY, url, transport=transport) as client:
        with pytest.raises(RunpodUnreachable) as caught:
            await client.get_pod("abc123xyz")
        assert transport.sent == 1
        with pytest.raises(RunpodUnreachable):
            await client.pod_action("abc123xyz", "terminate")
        assert transport.sent == 2
    assert caught.value.reason == f"127.0.0.1:{refused_port} refused the connection"
    assert str(caught.value).startswith(
        f"cannot reach Runpod (127.0.0.1:{refused_port} refused the connection): check the "
        f"network and the Runpod API's address ({url}: "
    )


async def test_a_create_that_never_left_is_known_to_have_made_no_pod(refused_port: int) -> None:
    for url in (f"https://{NOWHERE}/v2", f"http://127.0.0.1:{refused_port}/v2"):
        async with RunpodClient(KEY, url) as client:
            with pytest.raises(CreateNotSent) as caught:
                await client.create_pod(_spec())
        error = caught.value
        assert not error.ambiguous and error.status is None
        assert str(error).startswith("cannot reach Runpod (")
        assert "may or may not" not in str(error)
        # The walk stops there: no listing to look for a pod that cannot exist.
        choice = decide.after_create_error(error)
        assert choice.step is decide.Step.STOP and choice.result == "not_sent"


def test_only_a_host_out_of_reach_is_unreachable_not_a_timeout_or_a_reset() -> None:
    request = httpx.Request("GET", "https://api.runpod.io/v2/pods")

    def connect_error(cause: BaseException) -> httpx.ConnectError:
        try:
            raise httpx.ConnectError("failed", request=request) from cause
        except httpx.ConnectError as error:
            return error

    no_route = ExceptionGroup(
        "all attempts failed",
        [OSError(errno.ENETUNREACH, "Network is unreachable"),
         OSError(errno.EHOSTUNREACH, "No route to host")],
    )  # fmt: skip
    mixed = ExceptionGroup(
        "all attempts failed",
        [ConnectionRefusedError(errno.ECONNREFUSED, "refused"), TimeoutError(errno.ETIMEDOUT, "x")],
    )  # fmt: skip
    assert unreachable_reason(connect_error(no_route), "api.runpod.io", None) == (
        "no route to api.runpod.io: the network is down or unreachable"
    )
    # One address refused, another timed out: it may answer in a moment.
    assert unreachable_reason(connect_error(mixed), "api.runpod.io", None) is None
    assert unreachable_reason(httpx.ConnectError("reset", request=request), "h", None) is None
    assert unreachable_reason(httpx.ConnectTimeout("slow", request=request), "h", None) is None
    assert unreachable_reason(httpx.ReadError("cut", request=request), "h", None) is None


# --- what a wait says ---------------------------------------------------------------------


async def test_a_wait_over_a_second_is_said_with_what_it_waits_for(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeRunpod()
    fake.add_account(KEY)
    told: list[str] = []
    async with RunpodClient(
        KEY, FAKE_URL, transport=fake.transport(), rng=random.Random(1), on_wait=told.append
    ) as client:
        fake.fail_next("GET /pods", 503)  # the first backoff, 0.5 to 1 s: not said
        fake.fail_next("GET /pods", 429, retry_after=4)
        fake.fail_next("GET /pods", 502)  # the third backoff, 2 to 4 s
        assert await client.list_pods() == []
    assert len(told) == 2, told
    assert told[0] == (
        "waiting for Runpod (rate limited, HTTP 429): trying again in 4 s to list pods "
        "(attempt 3 of 5)"
    )
    assert told[1].startswith("waiting for Runpod (HTTP 502): trying again in ")
    assert told[1].endswith(" s to list pods (attempt 4 of 5)")


async def test_an_answer_slow_to_come_is_said_once_it_takes_over_a_second() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # takes the connection, never answers
    told: list[str] = []
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v2"
        async with RunpodClient(
            KEY, url, timeout=2.5, max_attempts=1, on_wait=told.append
        ) as client:
            with pytest.raises(RunpodApiError) as caught:
                await client.list_pods()
    finally:
        listener.close()
    assert not isinstance(caught.value, RunpodUnreachable)  # slow is not out of reach
    assert told == ["waiting for 127.0.0.1 to answer (to list pods)"]


# --- flows: provisioning and deleting with Runpod out of reach ----------------------------


async def test_provisioning_offline_stops_at_the_create_saying_no_pod_was_made(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        assert rig.spy is not None
        offline = Offline(rig.spy.inner)
        rig.spy.inner = offline
        with pytest.raises(CreateStopped) as caught:
            await provision(rig.context, run_id, runpod_target([A40]), keep=False)
        assert offline.refused == ["POST /v2/pods"]  # no reconcile listing after it
        (resolved,) = rig.events(run_id, ev.AttemptResolved)
        assert isinstance(resolved, ev.AttemptResolved) and resolved.result == "not_sent"
        # The host the client talks to is named (the fake's, here).
        assert "cannot reach Runpod (runpod.fake does not resolve)" in str(caught.value)
        assert "no pod was created" in str(caught.value)
        assert rig.fake.live_pods() == []
        assert trio.current_time() < 5  # no reconcile windows waited out


async def test_a_delete_offline_is_unconfirmed_at_once_and_names_pod_rm(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        assert await t.train(keep=True) == 0
        run_id = t.run_id()
        pod_id = t.rig.state(run_id).pod.pod_id
        assert pod_id is not None
        spy = t.rig.spy
        assert spy is not None
        offline = Offline(spy.inner)
        spy.inner = offline
        started = trio.current_time()
        with pytest.raises(DeleteUnconfirmed) as caught:
            await delete_pod(t.rig.context, run_id, pod_id, "requested", "pod_rm")
        assert offline.refused == [f"DELETE /v2/pods/{pod_id}"]  # sent once, not retried
        assert trio.current_time() - started < 1
        message = str(caught.value)
        assert message.startswith(f"cannot delete pod {pod_id} of run {run_id}")
        assert "cannot reach Runpod (runpod.fake does not resolve)" in message
        assert f"`overbrainer pod rm {run_id}`" in message
        # Unconfirmed: the pod still counts as one that may bill, and is still there.
        assert t.rig.state(run_id).pod.may_bill()
        assert [p.id for p in t.rig.fake.live_pods()] == [pod_id]
        offline.offline = False
        await delete_pod(t.rig.context, run_id, pod_id, "requested", "pod_rm")
        assert t.rig.fake.live_pods() == []


def test_an_unreachable_api_error_is_an_overbrainer_error() -> None:
    # Every caller that copes with a failed call (``except RunpodError``) copes with it.
    assert issubclass(RunpodUnreachable, RunpodApiError)
    assert issubclass(CreateNotSent, OverbrainerError)
    assert not issubclass(CreateNotSent, AmbiguousCreate)
