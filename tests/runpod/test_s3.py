"""A network volume through its S3 API (overbrainer.runpod.s3) against moto's real
S3-compatible server on loopback: ``strict_s3`` checks every signature, ``open_s3``
takes any key (the canary test's)."""

import hashlib
import itertools
import logging
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from overbrainer.config.model import RunpodSettings
from overbrainer.errors import OverbrainerError
from overbrainer.runpod.s3 import (
    MAX_OBJECT,
    S3AuthError,
    S3Error,
    S3FileChanged,
    S3FileTooLarge,
    S3Unreachable,
    S3VerifyFailed,
    StoredObject,
    VolumeS3,
    endpoint_of,
    upload_directory,
    volume_s3,
)
from overbrainer.runpod.sigv4 import Credentials, canonical_query, sign
from tests.runpod.conftest import S3Server

DC = "EU-RO-1"
_names = itertools.count()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def volume(strict_s3: S3Server) -> str:
    """A new, empty volume (bucket) of the strict server, in EU-RO-1."""
    name = f"vol{next(_names)}x{id(strict_s3) % 1000}"
    strict_s3.make_bucket(name, DC)
    return name


def _client(
    server: S3Server,
    volume: str,
    transport: httpx.AsyncBaseTransport | None = None,
    multipart_threshold: int = 256 * 1024**2,
) -> VolumeS3:
    creds = server.credentials
    return VolumeS3(
        creds.access_key,
        creds.secret,
        volume,
        DC,
        base_url=server.url,
        transport=transport,
        multipart_threshold=multipart_threshold,
        part_size=5 * 1024**2,
    )


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


# --- the client ---------------------------------------------------------------------------


async def test_put_head_list_delete_round_trip_with_checked_signatures(
    strict_s3: S3Server, volume: str
) -> None:
    async with _client(strict_s3, volume) as s3:
        key = "data/a b/ünï~(1).jsonl"
        digest = await s3.put_bytes(key, b"hello volume")
        assert digest == _sha(b"hello volume")
        assert await s3.head_object(key) == StoredObject(key, 12, digest)
        (listed,) = await s3.list_objects("data/")
        # A listing carries no SHA-256, but when each object was last written.
        assert (listed.key, listed.size, listed.sha256) == (key, 12, None)
        assert listed.modified is not None
        assert abs(listed.modified - datetime.now(UTC)) < timedelta(minutes=5)
        await s3.delete_object(key)
        assert await s3.head_object(key) is None
        assert await s3.list_objects("data/") == []


async def test_listing_follows_continuation_tokens_across_pages(
    strict_s3: S3Server, volume: str
) -> None:
    async with _client(strict_s3, volume) as s3:
        keys = [f"cache/f{i:02d}" for i in range(7)]
        for key in keys:
            await s3.put_bytes(key, key.encode())
        await s3.put_bytes("other/x", b"x")
        listed = await s3.list_objects("cache/", page_size=2)
        assert [item.key for item in listed] == keys
        assert len(await s3.list_objects("", page_size=3)) == 8


async def test_a_wrong_secret_is_refused_by_the_server_and_reported_without_it(
    strict_s3: S3Server, volume: str
) -> None:
    wrong = "rps_Wr0ngS3cretVa1ue"
    client = VolumeS3(strict_s3.credentials.access_key, wrong, volume, DC, base_url=strict_s3.url)
    async with client as s3:
        with pytest.raises(S3AuthError) as caught:
            await s3.put_bytes("data/x", b"1")
    text = str(caught.value)
    assert "HTTP 403: SignatureDoesNotMatch" in text
    assert f"network volume {volume} in {DC}, key data/x" in text
    assert "OVERBRAINER_RUNPOD__S3_SECRET" in text
    assert wrong not in text and strict_s3.credentials.access_key not in text
    assert isinstance(caught.value, OverbrainerError)
    assert (caught.value.volume, caught.value.data_center, caught.value.key) == (
        volume,
        DC,
        "data/x",
    )


async def test_a_missing_volume_is_named_with_its_data_center(strict_s3: S3Server) -> None:
    async with _client(strict_s3, "no-such-volume") as s3:
        with pytest.raises(S3Error) as caught:
            await s3.list_objects("data/")
    assert caught.value.code == "NoSuchBucket"
    assert "network volume no-such-volume in EU-RO-1" in str(caught.value)
    assert "does not exist in this data center" in str(caught.value)


async def test_an_unreachable_endpoint_fails_at_once_naming_the_volume() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    s3 = VolumeS3("user_a", "rps_b", "vol1", DC, base_url=f"http://127.0.0.1:{port}", sleep=sleep)
    async with s3:
        with pytest.raises(S3Unreachable) as caught:
            await s3.head_object("data/x")
    assert "refused the connection" in str(caught.value)
    assert "network volume vol1 in EU-RO-1, key data/x" in str(caught.value)
    assert slept == []


class _BusyFirst(httpx.AsyncBaseTransport):
    """The network, where the first request meets S3's "slow down" (HTTP 503)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.busy = 1

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.busy:
            self.busy -= 1
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce</Message></Error>"
            return httpx.Response(503, content=body)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_busy_answer_is_retried_after_a_pause(strict_s3: S3Server, volume: str) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    creds = strict_s3.credentials
    client = VolumeS3(
        creds.access_key,
        creds.secret,
        volume,
        DC,
        base_url=strict_s3.url,
        transport=_BusyFirst(),
        sleep=sleep,
    )
    async with client as s3:
        await s3.put_bytes("data/x", b"x")
        assert await s3.head_object("data/x") == StoredObject("data/x", 1, _sha(b"x"))
    assert len(slept) == 1 and 0.5 <= slept[0] <= 1.0


async def test_keys_that_name_another_path_are_refused_before_sending(
    strict_s3: S3Server, volume: str
) -> None:
    async with _client(strict_s3, volume) as s3:
        for bad in ("", "/abs", "a/../b", "a//b", "./a", "a/\nb"):
            with pytest.raises(S3Error, match="refusing the object key"):
                await s3.head_object(bad)


async def test_a_file_over_one_object_is_refused_before_anything_is_sent(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x")
    async with _client(strict_s3, volume) as s3:
        with pytest.raises(S3FileTooLarge, match="more than one S3 object holds"):
            await s3.put_file("big", path, sha256=_sha(b"x"), size=MAX_OBJECT + 1)
        assert await s3.head_object("big") is None


class _Parts(httpx.AsyncBaseTransport):
    """The network, noting each part sent; ``after_part`` runs after a part's answer."""

    def __init__(self, after_part: Callable[[int], None] = lambda number: None) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.parts: list[int] = []
        self.after_part = after_part

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        number = request.url.params.get("partNumber")
        if request.method == "PUT" and number is not None:
            self.parts.append(int(number))
            self.after_part(int(number))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _uploads_in_progress(server: S3Server, volume: str) -> str:
    query = canonical_query([("uploads", "")])
    signed = sign(
        server.credentials,
        method="GET",
        host=server.netloc,
        encoded_path=f"/{volume}",
        query=query,
        region=DC,
    )
    answer = httpx.get(f"{server.url}/{volume}?{query}", headers=signed.headers)
    assert answer.status_code == 200
    return answer.text


async def test_a_large_file_goes_up_in_parts_carrying_its_sha256(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    data = bytes(range(256)) * (11 * 4096) + b"end"  # 11 MiB and 3 bytes: three parts
    root = _tree(tmp_path / "ckpt", {"optimizer.pt": data, "small.json": b"{}"})
    parts = _Parts()
    async with _client(strict_s3, volume, parts, multipart_threshold=5 * 1024**2) as s3:
        report = await upload_directory(s3, root, "checkpoints/run1")
        assert [item.key for item in report.sent] == [
            "checkpoints/run1/optimizer.pt",
            "checkpoints/run1/small.json",
        ]
        assert parts.parts == [1, 2, 3]
        stored = await s3.head_object("checkpoints/run1/optimizer.pt")
        assert stored == StoredObject("checkpoints/run1/optimizer.pt", len(data), _sha(data))
        again = await upload_directory(s3, root, "checkpoints/run1")
        assert again.sent == () and parts.parts == [1, 2, 3]


async def test_a_file_changed_during_a_multipart_upload_is_aborted_leaving_nothing(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    data = b"a" * (11 * 1024**2)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)

    def change(number: int) -> None:
        if number == 1:
            with path.open("r+b") as handle:
                handle.seek(8 * 1024**2)
                handle.write(b"changed")

    parts = _Parts(change)
    async with _client(strict_s3, volume, parts, multipart_threshold=5 * 1024**2) as s3:
        with pytest.raises(S3FileChanged, match="the file changed while it was sent"):
            await s3.put_file("w/weights.bin", path, sha256=_sha(data), size=len(data))
        assert await s3.head_object("w/weights.bin") is None
    assert "<UploadId>" not in _uploads_in_progress(strict_s3, volume)


def test_endpoints_and_settings_give_the_client() -> None:
    assert endpoint_of("EUR-IS-1") == "https://s3api-eur-is-1.runpod.io"
    assert volume_s3(RunpodSettings(), "vol1", DC) is None
    keyed = RunpodSettings.model_validate({"s3_access_key": "user_a", "s3_secret": "rps_b"})
    client = volume_s3(keyed, "vol1", DC)
    assert client is not None and repr(client) == "VolumeS3(volume='vol1', data_center='EU-RO-1')"
    with pytest.raises(S3Error, match="serves no S3 API in data center US-TX-3"):
        volume_s3(keyed, "vol1", "US-TX-3")


# --- content-addressed upload ---------------------------------------------------------------


class _Counting(httpx.AsyncBaseTransport):
    """The network, counting the object PUTs that go through it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.puts: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            self.puts.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_upload_sends_each_file_once_and_verifies_every_object(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    files = {
        "train.jsonl": b'{"text": "a"}\n' * 100,
        "eval/part 1.jsonl": b'{"text": "b"}\n',
        "eval/empty.txt": b"",
    }
    root = _tree(tmp_path / "data", files)
    counting = _Counting()
    async with _client(strict_s3, volume, transport=counting) as s3:
        first = await upload_directory(s3, root, "data/run1")
        assert [item.key for item in first.sent] == [
            "data/run1/eval/empty.txt",
            "data/run1/eval/part 1.jsonl",
            "data/run1/train.jsonl",
        ]
        assert first.skipped == ()
        assert first.bytes_sent == sum(len(data) for data in files.values())
        for item in first.sent:
            data = files[item.key.removeprefix("data/run1/")]
            assert await s3.head_object(item.key) == StoredObject(item.key, len(data), _sha(data))
        assert len(counting.puts) == 3

        again = await upload_directory(s3, root, "data/run1")
        assert again.sent == ()
        assert {item.key for item in again.skipped} == {item.key for item in first.sent}
        assert len(counting.puts) == 3  # nothing sent the second time

        (root / "train.jsonl").write_bytes(b'{"text": "changed"}\n')
        third = await upload_directory(s3, root, "data/run1")
        assert [item.key for item in third.sent] == ["data/run1/train.jsonl"]
        assert len(third.skipped) == 2
        assert counting.puts[3:] == [f"/{volume}/data/run1/train.jsonl"]


async def test_an_object_of_the_same_size_but_other_content_is_sent_again(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "data", {"a.bin": b"AAAA"})
    async with _client(strict_s3, volume) as s3:
        await s3.put_bytes("p/a.bin", b"BBBB")  # same size, other content
        report = await upload_directory(s3, root, "p")
        assert [item.key for item in report.sent] == ["p/a.bin"]
        assert await s3.head_object("p/a.bin") == StoredObject("p/a.bin", 4, _sha(b"AAAA"))


class _Overwriting(httpx.AsyncBaseTransport):
    """The network, where another writer replaces one object right after it is uploaded."""

    def __init__(self, server: S3Server, volume: str, key: str) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.server, self.volume, self.key = server, volume, key

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "PUT" and request.url.path.endswith(self.key):
            async with _client(self.server, self.volume) as other:
                await other.put_bytes(self.key, b"someone else's bytes")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_an_object_changed_after_its_upload_fails_verification(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "data", {"a.txt": b"mine", "b.txt": b"also mine"})
    transport = _Overwriting(strict_s3, volume, "p/b.txt")
    async with _client(strict_s3, volume, transport=transport) as s3:
        with pytest.raises(S3VerifyFailed) as caught:
            await upload_directory(s3, root, "p")
    text = str(caught.value)
    assert "the upload of p/b.txt did not verify: expected 9 bytes" in text
    assert f"network volume {volume} in {DC}, key p/b.txt" in text


async def test_uploading_a_missing_directory_is_an_error(
    strict_s3: S3Server, volume: str, tmp_path: Path
) -> None:
    async with _client(strict_s3, volume) as s3:
        with pytest.raises(S3Error, match="not a directory"):
            await upload_directory(s3, tmp_path / "absent", "p")


# --- the canary: the S3 API key is never shown ----------------------------------------------

ACCESS_CANARY = "user_CnRy7QxZ2mWp4Lk9"
SECRET_CANARY = "rps_SeKt3Vb8NhJ5dFq1Ug6"


def _files_under(root: Path) -> Iterator[bytes]:
    for path in root.rglob("*"):
        if path.is_file():
            yield path.read_bytes()


async def test_canary_keys_appear_in_no_output_log_exception_or_file(
    open_s3: S3Server,
    strict_s3: S3Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = Credentials(ACCESS_CANARY, SECRET_CANARY)
    open_s3.make_bucket("canaryvol", DC, keys)
    settings = RunpodSettings.model_validate(
        {"s3_access_key": ACCESS_CANARY, "s3_secret": SECRET_CANARY, "s3_base_url": open_s3.url}
    )
    root = _tree(tmp_path / "data", {"a.txt": b"a", "d/b.txt": b"bb"})
    seen: list[str] = [repr(settings), str(settings.model_dump())]
    lines: list[str] = []
    s3 = volume_s3(settings, "canaryvol", DC)
    assert s3 is not None
    async with s3:
        seen.append(repr(s3))
        report = await upload_directory(s3, root, "data", on_progress=lines.append)
        assert len(report.sent) == 2
        again = await upload_directory(s3, root, "data", on_progress=lines.append)
        assert len(again.skipped) == 2
        seen.append(repr(report) + repr(again))
        await s3.delete_object("data/a.txt")
    # The error paths: a missing volume, and the same keys refused by a checking server.
    failures: list[BaseException] = []
    async with VolumeS3(ACCESS_CANARY, SECRET_CANARY, "gone", DC, base_url=open_s3.url) as s3:
        with pytest.raises(S3Error) as missing:
            await s3.list_objects()
        failures.append(missing.value)
    refused = VolumeS3(ACCESS_CANARY, SECRET_CANARY, "canaryvol", DC, base_url=strict_s3.url)
    async with refused as s3:
        with pytest.raises(S3AuthError) as denied:
            await s3.list_objects()
        failures.append(denied.value)
        with pytest.raises(S3AuthError) as denied_put:
            await s3.put_bytes("data/x", b"x")
        failures.append(denied_put.value)
    for failure in failures:
        seen += [str(failure), repr(failure), repr(failure.args), str(vars(failure))]
    out, err = capsys.readouterr()
    seen += [out, err, caplog.text, *lines]
    seen += [data.decode("utf-8", "replace") for data in _files_under(tmp_path)]
    everything = "\n".join(seen)
    assert "InvalidAccessKeyId" in everything  # the refusal was reached and reported
    assert "HTTP Request: PUT" in caplog.text  # the HTTP client's own log was captured
    for secret in (ACCESS_CANARY, SECRET_CANARY):
        for fragment in (secret, secret[5:], secret[-8:]):
            assert fragment not in everything
