"""A pod's own log, ``GET /pods/{id}/logs``: Server-Sent Events read as they come, the fake
API's endpoint (its parameters checked against Runpod's published description) on trio's
MockClock and on loopback, and what the system log says of an image pull."""

from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from overbrainer.runpod.client import PodNotFound, RunpodApiError, RunpodClient
from overbrainer.runpod.pod_logs import LogLine, Pull, SseReader, log_line, log_lines
from overbrainer.testing.fake_executor import CANARY_KEY, PINNED_IMAGE
from overbrainer.testing.runpod_api import FAKE_URL, FakeRunpod, serve_loopback
from overbrainer.testing.runpod_schema import document

A40 = "NVIDIA A40"


# --- pure ------------------------------------------------------------------------------


def test_events_are_read_whole_across_any_split_of_the_stream() -> None:
    stream = (
        b": keep-alive\n\n"
        b'id: 2026-06-01T12:02:03Z/000000000001\ndata: {"ts":"2026-06-01T12:02:03Z",'
        b'"source":"container","line":"Model loaded."}\n\n'
        b'id: c2\r\ndata: {"ts":"2026-06-01T12:02:04Z","source":"system","line":"x\\u001b[31mred"}'
        b"\r\n\r\n"
    )
    for cut in range(len(stream) + 1):
        reader = SseReader()
        events = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert [event_id for event_id, _ in events] == ["2026-06-01T12:02:03Z/000000000001", "c2"]
    lines = list(log_lines(events))
    assert lines[0] == LogLine(
        datetime(2026, 6, 1, 12, 2, 3, tzinfo=UTC),
        "container",
        "Model loaded.",
        "2026-06-01T12:02:03Z/000000000001",
    )
    assert "\x1b" not in lines[1].line  # nothing of a pod's making reaches the terminal raw
    assert lines[1].text(with_source=True).startswith("2026-06-01 12:02:04Z [system] x")


@pytest.mark.parametrize("data", ["not json", "[1]", '{"line": 3}', '{"ts": "x"}', "{}"])
def test_an_event_that_is_not_a_log_line_is_left_out(data: str) -> None:
    assert log_line("i", data) is None


def test_a_runaway_event_is_dropped_not_buffered_for_ever() -> None:
    reader = SseReader()
    assert reader.feed(b"data: " + b"x" * (2 << 20)) == []
    assert reader.feed(b'\n\ndata: {"line": "after"}\n\n') == [("", '{"line": "after"}')]


def test_an_image_pull_is_told_from_its_lines() -> None:
    pull = Pull()
    assert (
        pull.seen("Pulling image repo/img@sha256:ab").text() == "Pulling image repo/img@sha256:ab"
    )
    for line in (
        "a1b2c3d4e5f6: Pulling fs layer",
        "0f0f0f0f0f0f: Pulling fs layer",
        "a1b2c3d4e5f6: Downloading  120.5MB/500MB",
        "0f0f0f0f0f0f: Downloading [==>   ] 1.5GB/3GB",
    ):
        pull = pull.seen(line)
    assert pull.text() == "pulling the image: 0 of 2 layers, 1.6 GB of 3.5 GB seen so far"
    pull = pull.seen("a1b2c3d4e5f6: Pull complete")
    assert pull.text() == "pulling the image: 1 of 2 layers, 2.0 GB of 3.5 GB seen so far"
    pull = pull.seen("Status: Downloaded newer image for repo/img")
    assert pull.text() == "image pulled; starting the container"
    assert pull.seen("start container overbrainer-x").text() == "the container started"
    # Lines it does not know: the latest one, as it is.
    assert Pull().seen("unpacking rootfs").text() == "unpacking rootfs"


# --- the fake's endpoint, in-process ---------------------------------------------------


async def _pod(fake: FakeRunpod) -> str:
    from overbrainer.runpod.client import CreatePod

    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:
        pod = await client.create_pod(
            CreatePod(name="overbrainer-x-1", image=PINNED_IMAGE, gpu_type=A40, gpu_count=1,
                      disk_gb=20, env={})
        )  # fmt: skip
    return pod.id


async def _read(client: RunpodClient, pod_id: str, **kw: object) -> list[LogLine]:
    found: list[LogLine] = []
    async with client.pod_logs(pod_id, **kw) as stream:  # type: ignore[arg-type]
        while (batch := await stream.next_lines()) is not None:
            found += batch
    return found


async def test_the_system_log_tells_the_pull_and_the_start_then_ends_with_the_pod(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeRunpod(provisioning_seconds=20.0, starting_seconds=10.0)
    fake.add_account(CANARY_KEY)
    pod_id = await _pod(fake)
    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:
        seen: list[LogLine] = []

        async def delete_later() -> None:
            await trio.sleep(60)
            await client.delete_pod(pod_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete_later)
            seen = await _read(client, pod_id, source="system")
        texts = [line.line for line in seen]
        assert texts[0] == f"Pulling image {PINNED_IMAGE}"
        assert any("Downloading" in text for text in texts)
        assert texts[-1].startswith("start container overbrainer-x-1")
        assert {line.source for line in seen} == {"system"}
        stamps = [line.ts for line in seen]
        assert all(ts is not None for ts in stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
        pull = Pull()
        for text in texts:
            pull = pull.seen(text)
        assert pull.started and len(pull.done) == len(pull.layers) == 4
    # A deleted pod's log is gone with it.
    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:
        with pytest.raises(PodNotFound):
            await _read(client, pod_id)


async def test_a_stream_resumes_after_its_cursor_and_backfills_its_tail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeRunpod(provisioning_seconds=20.0, starting_seconds=10.0)
    fake.add_account(CANARY_KEY)
    pod_id = await _pod(fake)
    await trio.sleep(40)  # the pull and the start are over: 24 lines in all
    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:
        async with client.pod_logs(pod_id, tail=3) as stream:
            first = await stream.next_lines()
            assert first is not None and len(first) == 1
            cursor = stream.cursor
            assert cursor.endswith("/000000000022")
        async with client.pod_logs(pod_id, last_event_id=cursor) as stream:
            rest: list[LogLine] = []
            while len(rest) < 2:
                batch = await stream.next_lines()
                assert batch is not None
                rest += batch
        assert [line.line.split()[0] for line in rest] == ["create", "start"]
        async with client.pod_logs(pod_id, tail=0) as stream:
            with trio.move_on_after(5):
                assert await stream.next_lines() == []  # nothing backfilled, nothing new
                pytest.fail("a line came")


@pytest.mark.parametrize(
    ("query", "headers", "problem"),
    [
        ("tail=5001", {}, "query tail: 5001 is greater than the maximum of 5000"),
        ("tail=-1", {}, "query tail: -1 is less than the minimum of 0"),
        ("tail=many", {}, "query tail: 'many' is not of type 'integer'"),
        ("source=stdout", {}, "query source: 'stdout' is not one of ['container', 'system']"),
        ("since=yesterday", {}, "query since: is not a 'date-time'"),
    ],
)
async def test_the_fake_checks_the_logs_parameters_against_the_published_description(
    autojump_clock: trio.testing.MockClock, query: str, headers: dict[str, str], problem: str
) -> None:
    fake = FakeRunpod()
    fake.add_account(CANARY_KEY)
    pod_id = await _pod(fake)
    async with httpx.AsyncClient(transport=fake.transport()) as http:
        answer = await http.get(
            f"{FAKE_URL}/pods/{pod_id}/logs?{query}",
            headers={"Authorization": f"Bearer {CANARY_KEY}", **headers},
        )
    assert answer.status_code == 422
    assert answer.json()["errors"] == [problem]


async def test_the_logs_need_the_account_key_and_a_known_pod(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeRunpod()
    fake.add_account(CANARY_KEY)
    pod_id = await _pod(fake)
    scoped = fake.pod_scoped_key(pod_id)
    async with RunpodClient(scoped, FAKE_URL, transport=fake.transport()) as client:
        with pytest.raises(RunpodApiError, match="HTTP 403"):
            await _read(client, pod_id)
    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:
        with pytest.raises(PodNotFound, match="Runpod does not know the pod"):
            await _read(client, "nosuchpod")


def test_the_published_description_has_the_logs_parameters_the_fake_checks() -> None:
    params = document()["components"]["parameters"]
    assert params["LogTail"]["schema"]["maximum"] == 5000
    assert params["LogSourceParam"]["name"] == "source"
    assert params["LogLastEventID"]["in"] == "header"


# --- on loopback: a real HTTP stream ----------------------------------------------------


async def test_a_log_streams_over_real_http_and_a_client_that_leaves_ends_it(
    tmp_path: Path,
) -> None:
    fake = FakeRunpod(provisioning_seconds=1.0, starting_seconds=0.5)
    fake.add_account(CANARY_KEY)
    async with serve_loopback(fake) as base_url, RunpodClient(CANARY_KEY, base_url) as client:
        from overbrainer.runpod.client import CreatePod

        pod = await client.create_pod(
            CreatePod(name="overbrainer-x-1", image=PINNED_IMAGE, gpu_type=A40,
                      gpu_count=1, disk_gb=20, env={})
        )  # fmt: skip
        lines: list[LogLine] = []
        with trio.fail_after(20):
            async with client.pod_logs(pod.id, source="system") as stream:
                while not any(line.line.startswith("start container") for line in lines):
                    batch = await stream.next_lines()
                    assert batch is not None
                    lines += batch
        assert lines[0].line.startswith("Pulling image")
        # The client left mid-stream; the server goes on answering.
        with trio.fail_after(10):
            assert (await client.get_pod(pod.id)) is not None
        request = next(r for r in fake.requests if r.path.endswith("/logs"))
        assert request.query == {"source": "system"}
        assert request.status == 200


async def test_following_a_pods_log_rides_out_a_refusal_and_ends_with_the_pod(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import io

    from overbrainer.targets.runpod.logs import print_pod_log

    fake = FakeRunpod(provisioning_seconds=20.0, starting_seconds=10.0)
    fake.add_account(CANARY_KEY)
    pod_id = await _pod(fake)
    fake.fail_next("GET /pods/{id}/logs", 503)
    out = io.StringIO()
    async with RunpodClient(CANARY_KEY, FAKE_URL, transport=fake.transport()) as client:

        async def gone() -> bool:
            return await client.get_pod(pod_id) is None

        async def delete_later() -> None:
            await trio.sleep(90)
            await client.delete_pod(pod_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete_later)
            with trio.fail_after(300):
                await print_pod_log(
                    client, pod_id, out, source="system", tail=None, follow=True, gone=gone
                )
    lines = [line.split("Z ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines[0] == f"Pulling image {PINNED_IMAGE}"
    assert lines[-1] == "start container overbrainer-x-1"
    assert len(lines) == len(set(lines)) == 24  # every line once
    statuses = [r.status for r in fake.requests if r.path.endswith("/logs")]
    assert statuses == [503, 200]
