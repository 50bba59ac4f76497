"""A Runpod network volume through Runpod's S3-compatible API: no pod needed.

Runpod serves each volume as an S3 bucket at its data center's endpoint
(``https://s3api-<data center, lower case>.runpod.io/``): the region is the data center
id, the bucket the volume id, an object's key its path under ``/workspace``. Requests are
signed with AWS Signature V4 (:mod:`~overbrainer.runpod.sigv4`) by the S3 API key (an
access key ``user_…`` and a secret ``rps_…``, separate from the API key).

:class:`VolumeS3` is the client of one volume (PUT, HEAD, ListObjectsV2 paginated,
DELETE), on trio over httpx; ``transport`` replaces the network, as for
:class:`~overbrainer.runpod.client.RunpodClient`. :func:`upload_directory` fills
``prefix/…`` of a volume from a local directory, content-addressed: each object carries
its SHA-256 in ``x-amz-meta-sha256``, one whose SHA-256 already matches is not sent again,
and every object is verified afterwards (HEAD: size and SHA-256); :func:`upload_blobs` puts
files where :mod:`~overbrainer.runpod.volume_layout` keeps them by content (the data from
home), the same way. :func:`volume_s3` builds
the client from the settings (None without an S3 API key: then data goes through the pod).

A file goes up in one PUT up to ``multipart_threshold`` (256 MiB), above it in a multipart
upload of ``part_size`` parts (64 MiB, each read into memory and signed by its own
SHA-256), aborted on any failure; S3's limit for one object (5 TiB) is checked before
anything is sent (:class:`S3FileTooLarge`).

Errors are :class:`S3Error` (an :class:`~overbrainer.errors.OverbrainerError`) naming the
volume, the data center and the key; no message holds the access key or the secret, nor a
long enough piece of either (:class:`~overbrainer.runpod.redact.Redactor`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self
from xml.sax.saxutils import escape

import httpx
import trio

from overbrainer.errors import OverbrainerError
from overbrainer.plurals import plural
from overbrainer.runpod.reachability import unreachable_reason
from overbrainer.runpod.redact import Redactor, one_line
from overbrainer.runpod.sigv4 import EMPTY_SHA256, Credentials, canonical_query, encode_path, sign
from overbrainer.runpod.volume_layout import blob_key
from overbrainer.utc import parse_utc
from overbrainer.version import installed

if TYPE_CHECKING:
    from overbrainer.config.model import RunpodSettings

__all__ = [
    "MAX_OBJECT",
    "MAX_SINGLE_PUT",
    "S3_DATA_CENTERS",
    "S3AuthError",
    "S3Error",
    "S3FileChanged",
    "S3FileTooLarge",
    "S3Unreachable",
    "S3VerifyFailed",
    "StoredObject",
    "UploadReport",
    "VolumeS3",
    "endpoint_of",
    "upload_blobs",
    "upload_directory",
    "volume_s3",
]

# The data centers where Runpod serves the S3 API (its documentation, 2026).
S3_DATA_CENTERS = frozenset(
    {
        "EU-CZ-1",
        "EU-RO-1",
        "EUR-IS-1",
        "EUR-NO-1",
        "US-CA-2",
        "US-GA-2",
        "US-IL-1",
        "US-KS-2",
        "US-MD-1",
        "US-MO-1",
        "US-MO-2",
        "US-NC-1",
        "US-NC-2",
        "US-NE-1",
        "US-WA-1",
    }
)

MAX_SINGLE_PUT = 5 * 1024**3  # S3's limit for one PUT, and for one part
MAX_OBJECT = 5 * 1024**4  # S3's limit for one object (a multipart upload)
_MIN_PART = 5 * 1024**2
_MAX_PARTS = 10_000
_MAX_KEY_BYTES = 1024  # S3's limit for a key
_MAX_BODY = 8 * 1024 * 1024  # a listing page of 1000 keys fits; a runaway answer does not
_MAX_PAGES = 100_000
_CHUNK = 1024 * 1024
_META_SHA256 = "x-amz-meta-sha256"
_TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


# --- errors -------------------------------------------------------------------------------


class S3Error(OverbrainerError):
    """A call to a volume's S3 API failed. ``volume``, ``data_center`` and ``key`` (None
    for a listing) say where; ``status`` is the HTTP status (None: no answer), ``code``
    S3's error code (``NoSuchBucket``…, empty if none). The message never holds the S3 API
    key."""

    def __init__(
        self,
        message: str,
        *,
        volume: str,
        data_center: str,
        key: str | None = None,
        status: int | None = None,
        code: str = "",
    ) -> None:
        super().__init__(message)
        self.volume = volume
        self.data_center = data_center
        self.key = key
        self.status = status
        self.code = code


class S3AuthError(S3Error):
    """The S3 API refused the key or its signature (HTTP 403): the key is wrong, revoked,
    or this machine's clock is far off."""


class S3Unreachable(S3Error):
    """The S3 endpoint could not be reached at all (no name, refused, no route)."""


class S3VerifyFailed(S3Error):
    """An object on the volume is not what was uploaded (size or SHA-256 differ)."""


class S3FileChanged(S3Error):
    """A local file changed while it was being uploaded; its object was removed."""


class S3FileTooLarge(S3Error):
    """A file larger than one S3 object may be (:data:`MAX_OBJECT`); nothing was sent."""


# --- what the volume holds ----------------------------------------------------------------


@dataclass(frozen=True)
class StoredObject:
    """An object of the volume: its key, size in bytes and SHA-256 (hex; None when the
    object carries none, as one a listing names or one written through a pod), and when it
    was last written (a listing's ``LastModified``; None when not said)."""

    key: str
    size: int
    sha256: str | None = None
    modified: datetime | None = None


@dataclass(frozen=True)
class UploadReport:
    """What :func:`upload_directory` did: the objects it sent and the ones already there
    with the same content, each verified on the volume afterwards."""

    sent: tuple[StoredObject, ...]
    skipped: tuple[StoredObject, ...]

    @property
    def bytes_sent(self) -> int:
        return sum(item.size for item in self.sent)


def endpoint_of(data_center: str) -> str:
    """Runpod's S3 endpoint for ``data_center`` (``EU-RO-1`` →
    ``https://s3api-eu-ro-1.runpod.io``)."""
    return f"https://s3api-{data_center.lower()}.runpod.io"


def _check_key(key: str) -> str:
    """``key`` if it is a usable path under ``/workspace``; ValueError otherwise."""
    if not key or key.startswith("/") or not key.isprintable():
        raise ValueError("an object key is a relative path of printable characters")
    if len(key.encode("utf-8")) > _MAX_KEY_BYTES:
        raise ValueError(f"an object key is at most {_MAX_KEY_BYTES} bytes")
    parts = key.split("/")
    # An empty, "." or ".." segment names another path on the volume's file system, and
    # HTTP clients may rewrite it: refused, not sent.
    if any(part in ("", ".", "..") for part in parts[:-1]) or parts[-1] in (".", ".."):
        raise ValueError("an object key has no empty, '.' or '..' segments")
    return key


# --- the client ---------------------------------------------------------------------------


class VolumeS3:
    """The S3 API of one network volume (``volume_id``, in ``data_center``).

    ``base_url`` replaces Runpod's endpoint for the data center (tests); ``transport``
    replaces the network. Every call is retried on transport errors, 408, 429 and 5xx with
    jittered backoff, ``max_attempts`` in all (PUT, HEAD, GET and DELETE are idempotent; a
    retried multipart initiate leaves at most an unused upload, and a retried complete
    whose first answer was lost fails, and is reported, rather than doing anything twice);
    an unreachable endpoint is not retried. ``now`` is the signing clock. Use ``async
    with`` or call :meth:`aclose`.
    """

    def __init__(
        self,
        access_key: str,
        secret: str,
        volume_id: str,
        data_center: str,
        *,
        base_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 60.0,
        max_attempts: int = 4,
        backoff_initial: float = 1.0,
        multipart_threshold: int = 256 * 1024**2,
        part_size: int = 64 * 1024**2,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.volume = volume_id
        self.data_center = data_center
        self._redact = Redactor([access_key, secret])
        for what, value in (("volume id", volume_id), ("data center", data_center)):
            if not value or not all("!" <= c <= "~" for c in value) or "/" in value:
                raise S3Error(
                    f"the network volume's {what} is empty or holds spaces, slashes or "
                    "characters outside printable ASCII",
                    volume=one_line(volume_id, 80),
                    data_center=one_line(data_center, 40),
                )
        for variable, value in (("S3_ACCESS_KEY", access_key), ("S3_SECRET", secret)):
            if not value or not all("!" <= c <= "~" for c in value):
                raise self._error(
                    "the S3 API key is empty or holds spaces or characters outside printable "
                    f"ASCII; check OVERBRAINER_RUNPOD__{variable}",
                    None,
                )
        self._credentials = Credentials(access_key, secret)
        url = httpx.URL((base_url or endpoint_of(data_center)).rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise self._error(
                "the S3 endpoint is not an http(s) URL; check OVERBRAINER_RUNPOD__S3_BASE_URL",
                None,
            )
        self._base = url
        self._host = url.host
        self._port = url.port
        self._netloc = url.netloc.decode("ascii")
        self._max_attempts = max(1, max_attempts)
        self._backoff_initial = backoff_initial
        # S3's rules: parts of 5 MiB at least (but the last), 10,000 parts at most.
        self._multipart_threshold = max(_MIN_PART, multipart_threshold)
        self._part_size = max(_MIN_PART, part_size)
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        self._now = now
        self._http = httpx.AsyncClient(
            headers={"User-Agent": f"overbrainer/{installed()}"},
            follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"VolumeS3(volume={self.volume!r}, data_center={self.data_center!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    # --- operations ---

    async def put_file(self, key: str, path: Path, *, sha256: str, size: int) -> None:
        """Upload the file at ``path`` as ``key``, carrying ``sha256`` (its content's,
        hex) in ``x-amz-meta-sha256``. The body is signed by that hash, so the server
        refuses a body that does not match it; a file found changed while it was read is
        removed again and reported (:class:`S3FileChanged`). A file over the multipart
        threshold goes up in parts (:meth:`_put_parts`)."""
        key = self._key(key)
        if size > MAX_OBJECT:
            raise S3FileTooLarge(
                self._where(
                    f"cannot upload {key}: it is {size} bytes, more than one S3 object holds "
                    f"({MAX_OBJECT} bytes)",
                    key,
                ),
                volume=self.volume,
                data_center=self.data_center,
                key=key,
            )
        if size > self._multipart_threshold:
            await self._put_parts(key, path, sha256=sha256, size=size)
            return
        seen: list[str] = []

        async def body() -> AsyncIterator[bytes]:
            digest = hashlib.sha256()
            async with await trio.open_file(path, "rb") as handle:
                while chunk := await handle.read(_CHUNK):
                    digest.update(chunk)
                    yield chunk
            seen.append(digest.hexdigest())

        headers = {"content-type": "application/octet-stream", _META_SHA256: sha256}
        response = await self._request(
            "PUT",
            key,
            f"upload {key}",
            headers=headers,
            payload_sha256=sha256,
            content=body,
            length=size,
        )
        if response.status_code != 200:
            raise self._refused(f"upload {key}", key, response)
        if seen and seen[-1] != sha256:
            await self.delete_object(key)
            raise S3FileChanged(
                self._where(f"cannot upload {key}: the file changed while it was sent", key),
                volume=self.volume,
                data_center=self.data_center,
                key=key,
            )

    async def _put_parts(self, key: str, path: Path, *, sha256: str, size: int) -> None:
        """A multipart upload: initiate (carrying the metadata), each part signed by its
        own SHA-256, complete; aborted on any failure, so no half object is left."""
        part_size = max(self._part_size, -(-size // _MAX_PARTS))
        op = f"upload {key}"
        answer = await self._request(
            "POST",
            key,
            op,
            params=[("uploads", "")],
            headers={"content-type": "application/octet-stream", _META_SHA256: sha256},
            body=b"",
        )
        if answer.status_code != 200:
            raise self._refused(op, key, answer)
        upload_id = _text(self._xml(answer.content, op, key), "UploadId")
        if not upload_id:
            raise self._error(f"cannot {op}: the answer names no upload id", key, 200)
        try:
            etags: list[str] = []
            digest = hashlib.sha256()
            async with await trio.open_file(path, "rb") as handle:
                while chunk := await handle.read(part_size):
                    digest.update(chunk)
                    number = str(len(etags) + 1)
                    part = await self._request(
                        "PUT",
                        key,
                        f"{op} (part {number})",
                        params=[("partNumber", number), ("uploadId", upload_id)],
                        body=chunk,
                    )
                    etag = part.headers.get("etag")
                    if part.status_code != 200:
                        raise self._refused(f"{op} (part {number})", key, part)
                    if not etag:
                        raise self._error(f"cannot {op}: part {number} has no ETag", key, 200)
                    etags.append(etag)
            if digest.hexdigest() != sha256:
                raise S3FileChanged(
                    self._where(f"cannot upload {key}: the file changed while it was sent", key),
                    volume=self.volume,
                    data_center=self.data_center,
                    key=key,
                )
            parts = "".join(
                f"<Part><PartNumber>{number}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
                for number, etag in enumerate(etags, 1)
            )
            body = f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode()
            done = await self._request("POST", key, op, params=[("uploadId", upload_id)], body=body)
            # S3 may answer 200 and still fail: the error is then the body.
            if done.status_code != 200 or _local(self._xml(done.content, op, key).tag) == "Error":
                raise self._refused(op, key, done)
        except BaseException:
            # Even when cancelled: an unfinished upload keeps its parts (and bills them).
            # Bounded, and the first failure is the one to report.
            with trio.move_on_after(30, shield=True), contextlib.suppress(S3Error):
                await self._request("DELETE", key, f"abort {op}", params=[("uploadId", upload_id)])
            raise

    def _xml(self, body: bytes, op: str, key: str | None) -> ET.Element:
        try:
            # The endpoint is Runpod's (or the configured one), the body bounded; expat
            # refuses entity expansion attacks since 2.4.1.
            return ET.fromstring(body)  # noqa: S314
        except ET.ParseError:
            raise self._error(f"cannot {op}: the answer is not XML", key, 200) from None

    async def put_bytes(self, key: str, data: bytes) -> str:
        """Upload ``data`` as ``key`` with its SHA-256 in ``x-amz-meta-sha256``; returns
        that SHA-256."""
        key = self._key(key)
        digest = hashlib.sha256(data).hexdigest()
        headers = {"content-type": "application/octet-stream", _META_SHA256: digest}
        response = await self._request(
            "PUT",
            key,
            f"upload {key}",
            headers=headers,
            payload_sha256=digest,
            content=lambda: _once(data),
            length=len(data),
        )
        if response.status_code != 200:
            raise self._refused(f"upload {key}", key, response)
        return digest

    async def head_object(self, key: str) -> StoredObject | None:
        """The object ``key`` (size, and the SHA-256 it carries), or None when absent."""
        key = self._key(key)
        response = await self._request("HEAD", key, f"read {key}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise self._refused(f"read {key}", key, response)
        try:
            size = int(response.headers.get("content-length", ""))
        except ValueError:
            raise self._error(
                f"cannot read {key}: the answer has no usable Content-Length", key, 200
            ) from None
        sha = response.headers.get(_META_SHA256)
        return StoredObject(key, size, sha.strip().lower() if sha else None)

    async def delete_object(self, key: str) -> None:
        """Delete ``key`` (S3 answers the same whether or not it was there)."""
        key = self._key(key)
        response = await self._request("DELETE", key, f"delete {key}")
        if response.status_code not in (200, 204):
            raise self._refused(f"delete {key}", key, response)

    async def list_objects(self, prefix: str = "", *, page_size: int = 1000) -> list[StoredObject]:
        """Every object whose key starts with ``prefix`` (ListObjectsV2, ``page_size`` keys
        a page, following continuation tokens); sizes only (a listing carries no
        metadata)."""
        op = f"list {prefix or 'the volume'}"
        found: list[StoredObject] = []
        token: str | None = None
        tokens: set[str] = set()
        for _ in range(_MAX_PAGES):
            params = [("list-type", "2"), ("max-keys", str(page_size)), ("prefix", prefix)]
            if token is not None:
                params.append(("continuation-token", token))
            response = await self._request("GET", None, op, params=params)
            if response.status_code != 200:
                raise self._refused(op, None, response)
            page, token = self._listing(response.content, op)
            found.extend(page)
            if token is None:
                return found
            if token in tokens:
                raise self._error(f"cannot {op}: the listing repeated a page", None, 200)
            tokens.add(token)
        raise self._error(f"cannot {op}: more than {_MAX_PAGES} pages", None, 200)

    # --- plumbing ---

    def _key(self, key: str) -> str:
        try:
            return _check_key(key)
        except ValueError as error:
            raise self._error(
                f"refusing the object key {one_line(repr(key), 120)}: {error}", None
            ) from None

    def _where(self, text: str, key: str | None) -> str:
        where = f" (network volume {self.volume} in {self.data_center}"
        where += f", key {one_line(key, 200)})" if key is not None else ")"
        return self._redact(one_line(text, 600) + where)

    def _error(
        self, text: str, key: str | None, status: int | None = None, code: str = ""
    ) -> S3Error:
        return S3Error(
            self._where(text, key),
            volume=self.volume,
            data_center=self.data_center,
            key=key,
            status=status,
            code=code,
        )

    def _refused(self, op: str, key: str | None, response: httpx.Response) -> S3Error:
        status = response.status_code
        code, message = _s3_error(response.content)
        said = f": {code}" if code else ""
        if message:
            said += f" ({one_line(self._redact(message), 200)})"
        text = f"cannot {op}: HTTP {status}{said}"
        error_type: type[S3Error] = S3Error
        if status == 403:
            error_type = S3AuthError
            text += "; check OVERBRAINER_RUNPOD__S3_ACCESS_KEY and OVERBRAINER_RUNPOD__S3_SECRET"
            if code == "RequestTimeTooSkewed":
                text += ", and this machine's clock (turn on NTP time sync)"
        elif status == 404 and code == "NoSuchBucket":
            text += "; the network volume does not exist in this data center"
        elif 300 <= status < 400:
            text += " (redirects are not followed; check OVERBRAINER_RUNPOD__S3_BASE_URL)"
        return error_type(
            self._where(text, key),
            volume=self.volume,
            data_center=self.data_center,
            key=key,
            status=status,
            code=code,
        )

    def _listing(self, body: bytes, op: str) -> tuple[list[StoredObject], str | None]:
        root = self._xml(body, op, None)
        page: list[StoredObject] = []
        for item in _children(root, "Contents"):
            key = _text(item, "Key")
            try:
                size = int(_text(item, "Size") or "")
            except ValueError:
                raise self._error(
                    f"cannot {op}: the listing has an object without a size", None, 200
                ) from None
            if key:
                page.append(
                    StoredObject(key, size, modified=parse_utc(_text(item, "LastModified")))
                )
        truncated = (_text(root, "IsTruncated") or "").strip().lower() == "true"
        token = _text(root, "NextContinuationToken")
        if truncated and not token:
            raise self._error(
                f"cannot {op}: the listing is cut short without a continuation token", None, 200
            )
        return page, (token if truncated else None)

    async def _request(
        self,
        method: str,
        key: str | None,
        op: str,
        *,
        params: list[tuple[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        payload_sha256: str | None = None,
        content: Callable[[], AsyncIterator[bytes]] | None = None,
        length: int = 0,
        body: bytes | None = None,
    ) -> httpx.Response:
        """Send a signed request (again, after a transient failure) and read its answer:
        a streamed ``content`` of ``length`` bytes signed as ``payload_sha256``, or a
        ``body`` in memory (signed by its own hash)."""
        if body is not None:
            data = body
            payload_sha256 = hashlib.sha256(data).hexdigest()
            length = len(data)

            def content() -> AsyncIterator[bytes]:
                return _once(data)

        base_path = self._base.raw_path.decode("ascii").rstrip("/")
        path = base_path + encode_path(f"/{self.volume}" + (f"/{key}" if key else ""))
        query = canonical_query(params or [])
        attempt = 0
        while True:
            attempt += 1
            signed = sign(
                self._credentials,
                method=method,
                host=self._netloc,
                encoded_path=path,
                query=query,
                headers=headers,
                payload_sha256=payload_sha256 or EMPTY_SHA256,
                region=self.data_center,
                now=self._now(),
            )
            send_headers = dict(signed.headers)
            if content is not None:
                # A fixed length, never chunked: S3 wants Content-Length on a PUT.
                send_headers["content-length"] = str(length)
            raw_path = (path + ("?" + query if query else "")).encode("ascii")
            request = self._http.build_request(
                method,
                self._base.copy_with(raw_path=raw_path),
                headers=send_headers,
                content=content() if content is not None else None,
            )
            try:
                response = await self._http.send(request)
            except httpx.TransportError as error:
                reason = unreachable_reason(error, self._host, self._port)
                if reason is not None:
                    raise S3Unreachable(
                        self._where(
                            f"cannot {op}: cannot reach the S3 API ({reason}): check the "
                            "network and OVERBRAINER_RUNPOD__S3_BASE_URL",
                            key,
                        ),
                        volume=self.volume,
                        data_center=self.data_center,
                        key=key,
                    ) from None
                if await self._wait(attempt):
                    continue
                kind = type(error).__name__
                tries = f" after {plural(attempt, 'attempt')}" if attempt > 1 else ""
                raise self._error(
                    f"cannot {op}: {kind} talking to {self._host}{tries} "
                    f"({one_line(self._redact(str(error)), 200)})",
                    key,
                ) from None
            if len(response.content) > _MAX_BODY:
                raise self._error(f"cannot {op}: the answer is too large", key, 200)
            if response.status_code in _TRANSIENT and await self._wait(attempt):
                continue
            return response

    async def _wait(self, attempt: int) -> bool:
        if attempt >= self._max_attempts:
            return False
        base = self._backoff_initial * 2 ** (attempt - 1)
        await self._sleep(base / 2 + self._rng.random() * base / 2)
        return True


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _children(node: ET.Element, name: str) -> list[ET.Element]:
    return [child for child in node if _local(child.tag) == name]


def _text(node: ET.Element, name: str) -> str | None:
    for child in _children(node, name):
        return child.text or ""
    return None


def _s3_error(body: bytes) -> tuple[str, str]:
    """S3's error ``Code`` and ``Message`` from an error answer ('' when none)."""
    if not body:
        return "", ""
    try:
        root = ET.fromstring(body[:65536])  # noqa: S314 - bounded; see _listing
    except ET.ParseError:
        return "", ""
    code = one_line(_text(root, "Code") or "", 60)
    return (code if code.isidentifier() else ""), _text(root, "Message") or ""


# --- content-addressed upload -------------------------------------------------------------


def _local_files(root: Path) -> list[tuple[str, Path]]:
    """Every regular file under ``root`` as (relative POSIX path, path), sorted; a file
    reached through a symbolic link counts as its target, a linked directory is not
    entered."""
    found: list[tuple[str, Path]] = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            path = Path(directory) / name
            if path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def _sha256_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


async def upload_directory(
    s3: VolumeS3,
    local_dir: Path,
    prefix: str,
    *,
    parallel: int = 4,
    on_progress: Callable[[str], None] | None = None,
) -> UploadReport:
    """Fill ``prefix/…`` of the volume with the files under ``local_dir``, content-addressed.

    Each file becomes the object ``prefix/<its path under local_dir>`` carrying its
    SHA-256 in ``x-amz-meta-sha256``. An object already there with the same size and
    SHA-256 is not sent again (skipped); any other is sent (``parallel`` at once). Then
    every object, sent or skipped, is read back (HEAD) and must have the file's size and
    SHA-256, else :class:`S3VerifyFailed`. Objects under the prefix that no file names are
    left alone. ``on_progress`` hears one line per file sent or skipped.

    Meant for provisioning to call before any pod exists (the data and a resume
    checkpoint from home), when :func:`volume_s3` gives a client.
    """
    prefix = prefix.strip("/")
    if not await trio.Path(local_dir).is_dir():
        raise S3Error(
            f"cannot upload {local_dir}: not a directory",
            volume=s3.volume,
            data_center=s3.data_center,
        )
    files = await trio.to_thread.run_sync(_local_files, local_dir)
    plan: list[tuple[StoredObject, Path]] = []
    for relative, path in files:
        sha, size = await trio.to_thread.run_sync(_sha256_of, path)
        key = f"{prefix}/{relative}" if prefix else relative
        plan.append((StoredObject(s3._key(key), size, sha), path))

    listed = {item.key: item.size for item in await s3.list_objects(f"{prefix}/" if prefix else "")}
    # Only an object the listing shows with the file's size may already hold it.
    return await _fill(
        s3, plan, lambda wanted: listed.get(wanted.key) == wanted.size, on_progress, parallel
    )


async def upload_blobs(
    s3: VolumeS3,
    files: Sequence[Path],
    *,
    parallel: int = 4,
    on_progress: Callable[[str], None] | None = None,
) -> UploadReport:
    """Put each of ``files`` on the volume as the blob of its content
    (:func:`~overbrainer.runpod.volume_layout.blob_key` of its SHA-256), verified.

    A blob already there with the file's size and SHA-256 is not sent again (skipped): an
    unchanged file is sent once per volume, whatever its name or run. Then every blob is
    read back (HEAD) and must have the file's size and SHA-256, else
    :class:`S3VerifyFailed`. The report's objects are in the order of ``files`` (one per
    distinct content).
    """
    plan: list[tuple[StoredObject, Path]] = []
    seen: set[str] = set()
    for path in files:
        sha, size = await trio.to_thread.run_sync(_sha256_of, path)
        if sha not in seen:
            seen.add(sha)
            plan.append((StoredObject(blob_key(sha), size, sha), path))
    # No listing of every blob: each one is asked for by its key.
    return await _fill(s3, plan, lambda _wanted: True, on_progress, parallel)


async def _fill(
    s3: VolumeS3,
    plan: Sequence[tuple[StoredObject, Path]],
    maybe_there: Callable[[StoredObject], bool],
    on_progress: Callable[[str], None] | None,
    parallel: int,
) -> UploadReport:
    """Send each planned object the volume does not hold yet (one ``maybe_there`` says may
    be there is read first, and skipped when its size and SHA-256 match), then verify
    every one; what was sent and skipped, in the plan's order."""
    sent: list[StoredObject] = []
    skipped: list[StoredObject] = []
    failures: list[S3Error] = []
    limiter = trio.CapacityLimiter(max(1, parallel))

    async def one(wanted: StoredObject, path: Path) -> None:
        async with limiter:
            if failures:
                return
            try:
                if maybe_there(wanted):
                    there = await s3.head_object(wanted.key)
                    if there is not None and there == wanted:
                        skipped.append(wanted)
                        if on_progress is not None:
                            on_progress(f"{wanted.key}: already on the volume")
                        return
                assert wanted.sha256 is not None
                await s3.put_file(wanted.key, path, sha256=wanted.sha256, size=wanted.size)
                sent.append(wanted)
                if on_progress is not None:
                    on_progress(f"{wanted.key}: sent ({wanted.size} bytes)")
            except S3Error as error:
                failures.append(error)

    async with trio.open_nursery() as nursery:
        for wanted, path in plan:
            nursery.start_soon(one, wanted, path)
    if failures:
        raise failures[0]

    for wanted, _path in plan:
        there = await s3.head_object(wanted.key)
        if there != wanted:
            found = (
                "absent"
                if there is None
                else f"{there.size} bytes, SHA-256 {there.sha256 or 'not recorded'}"
            )
            raise S3VerifyFailed(
                s3._where(
                    f"the upload of {wanted.key} did not verify: expected {wanted.size} bytes, "
                    f"SHA-256 {wanted.sha256}; the volume has {found}",
                    wanted.key,
                ),
                volume=s3.volume,
                data_center=s3.data_center,
                key=wanted.key,
            )
    order = {wanted.key: index for index, (wanted, _path) in enumerate(plan)}
    return UploadReport(
        sent=tuple(sorted(sent, key=lambda item: order[item.key])),
        skipped=tuple(sorted(skipped, key=lambda item: order[item.key])),
    )


def volume_s3(
    settings: RunpodSettings,
    volume_id: str,
    data_center: str,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
) -> VolumeS3 | None:
    """The S3 client of a volume from ``[runpod]``'s S3 API key and endpoint; None when no
    S3 API key is configured (data then goes through the pod). Raises :class:`S3Error`
    for a data center where Runpod serves no S3 API (unless ``s3_base_url`` is set)."""
    if settings.s3_access_key is None or settings.s3_secret is None:
        return None
    if settings.s3_base_url is None and data_center not in S3_DATA_CENTERS:
        raise S3Error(
            f"Runpod serves no S3 API in data center {one_line(data_center, 40)}; put the "
            "volume in one of " + ", ".join(sorted(S3_DATA_CENTERS)),
            volume=volume_id,
            data_center=data_center,
        )
    return VolumeS3(
        settings.s3_access_key.get_secret_value(),
        settings.s3_secret.get_secret_value(),
        volume_id,
        data_center,
        base_url=settings.s3_base_url,
        transport=transport,
    )
