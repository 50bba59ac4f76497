"""The Runpod REST API v2 client (async, trio, httpx).

Creates are sent once and never retried: a failed create raises :class:`CreateFailed`
with a fixed text per status, :class:`CreateNotSent` when it could not leave this machine,
or :class:`AmbiguousCreate` when a pod may exist anyway.
Reads (pods, the GPU catalog, pod billing), deletes and ``terminate`` are retried on
transport errors, 408, 429 (honouring ``Retry-After``) and 5xx with jittered exponential
backoff, bounded in attempts and time. A host that does not resolve, refuses the
connection or has no route is not retried: :class:`RunpodUnreachable` at once
(``reachability``). A wait of more than a second is told to ``on_wait``, when given.
Redirects are never followed. No message or exception this module raises holds the API
key, nor any piece of it of :data:`~overbrainer.runpod.redact.MIN_FRAGMENT` characters.
"""

from __future__ import annotations

import json
import math
import random
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Literal, Self, TypeVar

import httpx
import trio

from overbrainer.errors import OverbrainerError
from overbrainer.plurals import plural
from overbrainer.runpod.clocks import ServerClock, parse_http_date
from overbrainer.runpod.models import (
    BadBillingData,
    BadClusterData,
    BadGpuData,
    BadPodData,
    BadVolumeData,
    BucketSize,
    Cluster,
    ClusterBilling,
    DataCenter,
    GpuType,
    NetworkVolume,
    Pod,
    PodBilling,
    Problem,
    VolumeBilling,
    check_cluster_id,
    check_pod_id,
    check_volume_id,
    parse_cluster,
    parse_cluster_billing,
    parse_data_center,
    parse_gpu_type,
    parse_network_volume,
    parse_pod,
    parse_pod_billing,
    parse_problem,
    parse_volume_billing,
)
from overbrainer.runpod.pod_logs import TAIL_MAX, LogLine, LogSource, SseReader, log_lines
from overbrainer.runpod.reachability import unreachable_reason, unreachable_text
from overbrainer.runpod.redact import Redactor, one_line
from overbrainer.version import installed

__all__ = [
    "DEFAULT_BASE_URL",
    "ActionRefused",
    "AmbiguousCreate",
    "CatalogProduct",
    "CreateCluster",
    "CreateFailed",
    "CreateNotSent",
    "CreatePod",
    "InvalidPodSpec",
    "PodActionName",
    "PodLogStream",
    "PodNotFound",
    "RunpodApiError",
    "RunpodClient",
    "RunpodError",
    "RunpodUnreachable",
    "VolumeInUse",
    "create_body",
    "data_centers_of",
]

DEFAULT_BASE_URL = "https://api.runpod.io/v2"

PodActionName = Literal["start", "stop", "restart", "terminate"]
CatalogProduct = Literal["POD", "CLUSTER"]
"""Whose stock the catalog tells: a pod's, or a cluster node's."""
_ACTIONS: frozenset[str] = frozenset({"start", "stop", "restart", "terminate"})

_MAX_BODY = 16 * 1024 * 1024  # a listing of many pods fits; a runaway answer does not
_MAX_PAGES = 200
_DEFAULT_RETRY_AFTER = 10.0  # when a 429 names no wait
_MAX_RETRY_AFTER = 3600.0
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Transport errors raised before the request left this machine: safe to resend anything.
_UNSENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)

_Retry = Literal["always", "unsent", "never"]
_T = TypeVar("_T")
_NOTICE_AFTER = 1.0  # seconds: a wait longer than this is told to ``on_wait``


# --- errors -------------------------------------------------------------------------


class RunpodError(OverbrainerError):
    """A call to Runpod failed. The message never holds the API key.

    ``status`` is the HTTP status (None when no answer came), ``detail`` what Runpod said
    (one printable line, redacted; empty if nothing), ``retry_after`` the wait a 429 asked
    for, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        detail: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class RunpodApiError(RunpodError):
    """A read, delete or action failed (after its retries, when it has any)."""


class RunpodUnreachable(RunpodApiError):
    """Runpod's API could not be reached at all (its name does not resolve, the connection
    was refused, no route): not retried, and nothing reached Runpod. ``reason`` names the
    host (``api.runpod.io does not resolve``)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class PodNotFound(RunpodApiError):
    """Runpod, in its own error shape, says the pod does not exist (an action's 404)."""


class ActionRefused(RunpodApiError):
    """Runpod refused a pod action for the pod's current status (409)."""


class VolumeInUse(RunpodApiError):
    """Runpod refused to delete a network volume that a pod still mounts (409)."""


class CreateFailed(RunpodError):
    """A create failed. ``str()`` is a fixed text per status; Runpod's words are in
    ``detail``.

    ``ambiguous`` is False: Runpod definitely did not create the pod. 400 and 403 mean
    "try the next candidate", 402 and 422 "stop", 429 "wait ``retry_after`` and resend".
    """

    ambiguous = False

    @property
    def text(self) -> str:
        """The fixed user-facing text."""
        return str(self)


class AmbiguousCreate(CreateFailed):
    """A create whose outcome is unknown: a pod may have been created and may be billing.

    Raised for transport errors and timeouts, 408, 5xx, and a success answer that cannot be
    read. Never resend blindly: look for the pod by its run marker first.
    """

    ambiguous = True


class CreateNotSent(CreateFailed):
    """A create that never reached Runpod (see :class:`RunpodUnreachable`): definitely no
    pod, and sending it again would fail the same way until the network is back. Its
    ``status`` is None, and it is not ``ambiguous``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidPodSpec(OverbrainerError):
    """A create request overbrainer was about to send is not valid; names the field only."""


# --- the create body -------------------------------------------------------------------


@dataclass(frozen=True)
class CreatePod:
    """What ``POST /pods`` is asked for, checked before it is sent.

    :meth:`to_json` builds a body of only the fields Runpod's published v2 schema
    (``CreatePodRequest``) allows: ``name``, ``image``, ``cloud``, ``gpu {id, count}``,
    ``disk`` (container disk, GB), ``ports``, ``dataCenterIds`` (only when non-empty),
    ``env``, ``args`` and ``mounts.network`` (only with a network volume). ``env`` may hold
    the pod's host key, so it is kept out of ``repr`` and out of every error message.
    """

    name: str
    image: str
    gpu_type: str
    gpu_count: int
    disk_gb: int
    data_center_ids: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    args: str = ""
    network_volume_id: str | None = None
    volume_mount_path: str = "/workspace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_center_ids", tuple(self.data_center_ids))
        object.__setattr__(self, "env", dict(self.env))
        _check_word("name", self.name, spaces=True)
        _check_word("gpu type", self.gpu_type, spaces=True)
        _check_count("GPU count", self.gpu_count)
        _check_container(self)

    def to_json(self) -> dict[str, object]:
        """The request body, as Runpod's published schema spells it."""
        body: dict[str, object] = {
            "name": self.name,
            "image": self.image,
            "cloud": "SECURE",
            "gpu": {"id": self.gpu_type, "count": self.gpu_count},
        }
        body.update(_container_json(self))
        return body


@dataclass(frozen=True)
class CreateCluster:
    """What ``POST /clusters`` is asked for, checked before it is sent: a TRAINING
    cluster of ``pod_count`` identical pods (2..250) of ``gpus_per_pod`` GPUs of type
    ``gpu_type`` each, in one data center (Runpod picks one of ``data_center_ids``, or
    any when empty), every member with the same container settings.

    :meth:`to_json` builds a body of only the fields Runpod's published v2 schema
    (``CreateClusterRequest``) allows: ``name``, ``type``, ``compute {gpuTypeId,
    gpuCountPerPod, podCount}`` and the container settings a pod's create has (``image``,
    ``disk``, ``ports``, ``env``, ``args``, ``dataCenterIds`` only when non-empty,
    ``mounts.network`` only with a network volume). ``env`` is kept out of ``repr``.
    """

    name: str
    image: str
    gpu_type: str
    gpus_per_pod: int
    pod_count: int
    disk_gb: int
    data_center_ids: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    args: str = ""
    network_volume_id: str | None = None
    volume_mount_path: str = "/workspace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_center_ids", tuple(self.data_center_ids))
        object.__setattr__(self, "env", dict(self.env))
        _check_word("name", self.name, spaces=True, owner="cluster")
        _check_word("gpu type", self.gpu_type, spaces=True, owner="cluster")
        _check_count("GPU count per pod", self.gpus_per_pod, owner="cluster")
        count = self.pod_count
        if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= 250:
            raise InvalidPodSpec("the cluster's pod count must be a whole number, 2..250")
        _check_container(self, owner="cluster")

    def to_json(self) -> dict[str, object]:
        """The request body, as Runpod's published schema spells it."""
        body: dict[str, object] = {
            "name": self.name,
            "type": "TRAINING",
            "image": self.image,
            "compute": {
                "gpuTypeId": self.gpu_type,
                "gpuCountPerPod": self.gpus_per_pod,
                "podCount": self.pod_count,
            },
        }
        body.update(_container_json(self))
        return body


def _check_container(spec: CreatePod | CreateCluster, *, owner: str = "pod") -> None:
    """Check the container settings a pod's and a cluster's create share."""
    _check_word("image", spec.image, owner=owner)
    _check_count("disk size", spec.disk_gb, owner=owner)
    for data_center in spec.data_center_ids:
        _check_word("data center id", data_center, owner=owner)
    for key, value in spec.env.items():
        if not isinstance(key, str) or not _ENV_KEY.fullmatch(key):
            raise InvalidPodSpec("a pod environment variable has an unusable name")
        if not isinstance(value, str) or "\0" in value:
            raise InvalidPodSpec(f"pod environment variable {key} holds a NUL or no text")
    if not isinstance(spec.args, str) or "\0" in spec.args:
        raise InvalidPodSpec("the pod's container command holds a NUL or no text")
    if spec.network_volume_id is not None:
        _check_word("network volume id", spec.network_volume_id, owner=owner)
        path = spec.volume_mount_path
        if not path.startswith("/") or not path.isprintable():
            raise InvalidPodSpec("the network volume mount path is not an absolute path")


def _container_json(spec: CreatePod | CreateCluster) -> dict[str, object]:
    """The container settings of a create body, as the published schema spells them."""
    body: dict[str, object] = {
        "disk": spec.disk_gb,
        "ports": ["22/tcp"],
        "env": dict(spec.env),
        "args": spec.args,
    }
    if spec.data_center_ids:
        body["dataCenterIds"] = list(spec.data_center_ids)
    if spec.network_volume_id is not None:
        body["mounts"] = {
            "network": [{"volumeId": spec.network_volume_id, "path": spec.volume_mount_path}]
        }
    return body


def create_body(
    name: str,
    image: str,
    gpu_type: str,
    gpu_count: int,
    disk_gb: int,
    data_center_ids: Sequence[str],
    env: Mapping[str, str],
    args: str,
    network_volume_id: str | None = None,
) -> dict[str, object]:
    """Build and check a ``POST /pods`` body (see :class:`CreatePod`)."""
    return CreatePod(
        name=name,
        image=image,
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        disk_gb=disk_gb,
        data_center_ids=data_center_ids,
        env=env,
        args=args,
        network_volume_id=network_volume_id,
    ).to_json()


def _check_word(what: str, value: object, *, spaces: bool = False, owner: str = "pod") -> None:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise InvalidPodSpec(f"the {owner}'s {what} is empty or holds control characters")
    if not spaces and any(ch.isspace() for ch in value):
        raise InvalidPodSpec(f"the {owner}'s {what} holds spaces")


def _check_count(what: str, value: object, *, owner: str = "pod") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidPodSpec(f"the {owner}'s {what} must be a whole number of at least 1")


# --- answers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    status: int
    content_type: str | None
    body: bytes | None  # None: too large or undecodable
    retry_after: float | None

    def json(self) -> object:
        if self.body is None:
            raise ValueError("unreadable answer")
        return json.loads(self.body)

    def problem(self) -> Problem | None:
        try:
            data = self.json()
        except ValueError:
            return None
        return parse_problem(self.status, self.content_type, data)


def _retry_after(value: str | None, date: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or HTTP-date), capped.

    An HTTP-date is counted from the same answer's ``date`` (Runpod's clock), so this
    machine's clock being off changes nothing; only an answer without a ``Date`` falls back
    on this machine's clock.
    """
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        when = parse_http_date(value)
        if when is None:
            return None
        seconds = (when - (date or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)


def _clock_hint(error: Exception) -> str:
    """What to check when a certificate was refused as expired or not yet valid: this
    machine's clock decides that, and a clock far off refuses Runpod's good certificate."""
    text = str(error).lower()
    if "certificate" in text and ("expired" in text or "not yet valid" in text):
        return (
            "; the TLS certificate check depends on this machine's clock: check that it is "
            "right (turn on NTP time sync)"
        )
    return ""


_CREATE_TEXTS: dict[int, str] = {
    400: "Runpod could not place this GPU type in the allowed data centers, or the request "
    "breaks one of its rules (HTTP 400)",
    401: "Runpod refused the API key (HTTP 401); check OVERBRAINER_RUNPOD__API_KEY",
    402: "Runpod refused to create the {what}: the account balance is too low (HTTP 402); "
    "add funds, then run the command again",
    403: "the API key has no access to this GPU pool (HTTP 403)",
    404: "Runpod did not find something the create request names, such as its network "
    "volume (HTTP 404); check the target's network_volume_id",
    408: "Runpod timed out on the create (HTTP 408); a {what} may or may not have been created",
    409: "Runpod refused the create as conflicting with the account's state (HTTP 409)",
    422: "Runpod rejected the create request as malformed (HTTP 422); this is a bug in "
    "overbrainer, please report it",
}


_FOREIGN_404 = (
    "the create was answered with an HTTP 404 that is not in Runpod's error format (a "
    "proxy in between, or a wrong OVERBRAINER_RUNPOD__BASE_URL?); no {what} was created"
)


def _create_text(status: int, what: str = "pod") -> str:
    """The fixed text of a refused create of a ``what`` (a pod, a cluster)."""
    if status in _CREATE_TEXTS:
        return _CREATE_TEXTS[status].format(what=what)
    if status >= 500:
        return (
            f"Runpod failed on the create (HTTP {status}); a {what} may or may not have been "
            "created"
        )
    if 300 <= status < 400:
        return (
            f"Runpod answered the create with a redirect (HTTP {status}), which is not "
            "followed; check OVERBRAINER_RUNPOD__BASE_URL"
        )
    return f"Runpod refused the create (HTTP {status})"


def _catalog_query(
    availability: bool, gpu_count: int, product: CatalogProduct = "POD"
) -> dict[str, str] | None:
    """The catalog's query: nothing, or availability for pods (or cluster nodes, with
    ``product`` CLUSTER) of ``gpu_count`` GPUs on the secure cloud (``product`` is required
    with ``include``, and the rest valid only then)."""
    if not availability:
        return None
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 1:
        raise RunpodError("a GPU count for the catalog must be a whole number of at least 1")
    if product not in ("POD", "CLUSTER"):
        raise RunpodError(f"unknown catalog product {one_line(repr(product), 40)}")
    return {
        "include": "AVAILABILITY",
        "product": product,
        "cloud": "SECURE",
        "count": str(gpu_count),
    }


def data_centers_of(entries: list[object]) -> list[DataCenter]:
    """The data centers of catalog entries (the first of each id; one without a usable id
    is left out)."""
    found: dict[str, DataCenter] = {}
    for item in entries:
        center = parse_data_center(item)
        if center is not None:
            found.setdefault(center.id, center)
    return list(found.values())


def _rfc3339(moment: datetime) -> str:
    """A time as the billing endpoint takes it: UTC, whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- a pod's log stream ------------------------------------------------------------------


class PodLogStream:
    """The lines of an open pod log stream, batch by batch.

    ``opened_at`` is Runpod's time when it answered (its ``Date``): the lines it backfilled
    are stamped no later, the live ones later. ``cursor`` is the last event's id (to resume
    with ``Last-Event-ID``).
    """

    def __init__(
        self,
        response: httpx.Response,
        op: str,
        host: str,
        redact: Callable[[str], str],
        opened_at: datetime | None,
    ) -> None:
        self._chunks = response.aiter_raw()
        self._reader = SseReader()
        self._op = op
        self._host = host
        self._redact = redact
        self.opened_at = opened_at
        self.cursor = ""

    async def next_lines(self) -> list[LogLine] | None:
        """The lines of the next bytes that complete some (maybe none); None once the stream
        has ended. Raises :class:`RunpodApiError` when the connection fails or goes quiet
        past the read timeout."""
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        except httpx.TransportError as error:
            kind = type(error).__name__
            raise RunpodApiError(
                self._redact(
                    f"cannot {self._op}: {kind} talking to {self._host} "
                    f"({one_line(self._redact(str(error)), 200)})"
                )
            ) from None
        found = list(log_lines(self._reader.feed(chunk)))
        for line in found:
            if line.cursor:
                self.cursor = line.cursor
        return [
            LogLine(line.ts, line.source, self._redact(line.line), line.cursor) for line in found
        ]


# --- the client ------------------------------------------------------------------------


class RunpodClient:
    """An authenticated client of Runpod's REST API v2.

    ``transport`` replaces the network (tests pass the fake server's transport). Waits
    between retries use ``sleep`` (``trio.sleep``: a MockClock drives them) and ``rng`` for
    jitter. ``on_wait`` is told, in a line for the user, each wait longer than a second: a
    pause before a retry, or an answer that is slow to come. Use ``async with`` or call
    :meth:`aclose`.
    """

    def __init__(
        self,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        max_attempts: int = 5,
        max_retry_seconds: float = 120.0,
        backoff_initial: float = 1.0,
        backoff_max: float = 20.0,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = trio.sleep,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        if not api_key or not all("!" <= c <= "~" for c in api_key):
            # It becomes a header: printable ASCII without spaces, else httpx fails to send.
            raise RunpodError(
                "the Runpod API key is empty or holds spaces, control characters or "
                "characters outside printable ASCII; check OVERBRAINER_RUNPOD__API_KEY"
            )
        self._redact = Redactor([api_key])
        try:
            url = httpx.URL(base_url.rstrip("/"))
        except httpx.InvalidURL:
            url = httpx.URL("invalid:")
        if url.scheme not in ("http", "https") or not url.host:
            raise RunpodError(
                "the Runpod base URL is not an http(s) URL; check OVERBRAINER_RUNPOD__BASE_URL"
            )
        self._host = url.host
        self._port = url.port
        self._address_hint = ""
        if str(url) != DEFAULT_BASE_URL:
            # Not Runpod's own address: it may be the thing to fix.
            self._address_hint = (
                f"the Runpod API's address ({url}: [runpod] base_url, or "
                "OVERBRAINER_RUNPOD__BASE_URL)"
            )
        self._on_wait = on_wait
        self._max_attempts = max(1, max_attempts)
        self._max_retry_seconds = max_retry_seconds
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        self.server_clock = ServerClock()
        """Runpod's clock, from the ``Date`` of the latest answer (see ``clocks``)."""
        self._http = httpx.AsyncClient(
            base_url=url,
            headers={
                "Authorization": f"Bearer {api_key}",
                "User-Agent": f"overbrainer/{installed()}",
                "Accept": "application/json, application/problem+json",
            },
            follow_redirects=False,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"RunpodClient(host={self._host!r})"

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

    async def create_pod(self, spec: CreatePod) -> Pod:
        """Create a pod; sent exactly once, never retried.

        Raises CreateFailed (definite: no pod was created) or AmbiguousCreate (a pod may
        exist). The exception's text is fixed per status; Runpod's detail is in
        ``detail``. A create cancelled in flight is ambiguous too: shield it.
        """
        return await self._create("/pods", spec.to_json(), spec.env, "pod", parse_pod)

    async def create_cluster(self, spec: CreateCluster) -> Cluster:
        """Create a TRAINING cluster (``POST /clusters``); sent exactly once, never retried,
        failing as :meth:`create_pod` does (AmbiguousCreate: a cluster may exist, billing
        every member). Its members show in :meth:`cluster_pods`."""
        return await self._create("/clusters", spec.to_json(), spec.env, "cluster", parse_cluster)

    async def _create(
        self,
        path: str,
        body: dict[str, object],
        env: Mapping[str, str],
        what: str,
        parse: Callable[[object], _T],
    ) -> _T:
        """Send a create once and read its answer with ``parse`` (see :meth:`create_pod`)."""
        # Runpod may echo the body in an error, and the env can hold the pod's host key:
        # hide env values too, by longer pieces (they are long and hold ordinary words).
        hide_env = Redactor((v for v in env.values() if len(v) >= 16), min_fragment=16)

        def redact(text: str) -> str:
            return hide_env(self._redact(text))

        try:
            answer = await self._send("POST", path, body, None)
        except httpx.TransportError as error:
            reason = unreachable_reason(error, self._host, self._port)
            if reason is not None:
                # Nothing left this machine: nothing was created, for sure.
                raise CreateNotSent(
                    unreachable_text(reason, self._address_hint), reason=reason
                ) from None
            kind = type(error).__name__
            if isinstance(error, httpx.TimeoutException):
                text = "Runpod did not answer the create in time"
            else:
                text = f"the connection to Runpod failed during the create ({kind})"
            raise AmbiguousCreate(
                f"{text}; a {what} may or may not have been created{_clock_hint(error)}",
                detail=redact(one_line(str(error), 200)),
            ) from None
        status = answer.status
        if 200 <= status < 300:
            try:
                return parse(answer.json())
            except (ValueError, BadPodData, BadClusterData):
                raise AmbiguousCreate(
                    f"Runpod accepted the create (HTTP {status}) but its answer could not be "
                    f"read; a {what} may have been created",
                    status=status,
                ) from None
        detail = self._detail(answer, redact)
        if status == 429:
            wait = answer.retry_after if answer.retry_after is not None else _DEFAULT_RETRY_AFTER
            raise CreateFailed(
                f"Runpod is rate-limiting requests (HTTP 429) and asked to wait {wait:g} s "
                "before sending the create again",
                status=status,
                detail=detail,
                retry_after=wait,
            )
        if status == 404 and answer.problem() is None:
            # Not Runpod's own 404 (a proxy, a wrong base URL): nothing the request names
            # is missing, so the network volume is not the thing to check.
            raise CreateFailed(_FOREIGN_404.format(what=what), status=status, detail=detail)
        error_type = AmbiguousCreate if status == 408 or status >= 500 else CreateFailed
        raise error_type(_create_text(status, what), status=status, detail=detail)

    async def get_pod(self, pod_id: str) -> Pod | None:
        """The pod, or None when Runpod (in its own error shape) says it does not exist."""
        pid = self._pod_id(pod_id)
        op = f"read pod {pid}"
        answer, attempts = await self._call("GET", f"/pods/{pid}", op, "always")
        if answer.status == 200:
            pod = self._parse(answer, op)
            if pod.id != pid:
                raise RunpodApiError(f"cannot {op}: Runpod answered with another pod", status=200)
            return pod
        if answer.status == 404 and answer.problem() is not None:
            return None
        raise self._api_error(op, answer, attempts)

    async def list_pods(self, *, include_cluster_pods: bool = False) -> list[Pod]:
        """Every pod of the account, following a ``nextCursor`` if Runpod sends one.
        Runpod leaves clusters' members out unless ``include_cluster_pods``."""
        op = "list pods"
        pods: dict[str, Pod] = {}
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            params = {"cursor": cursor} if cursor is not None else {}
            if include_cluster_pods:
                params["includeClusterPods"] = "true"
            answer, attempts = await self._call("GET", "/pods", op, "always", params=params or None)
            if answer.status != 200:
                raise self._api_error(op, answer, attempts)
            try:
                data = answer.json()
            except ValueError:
                data = None
            items = data.get("pods") if isinstance(data, dict) else None
            if not isinstance(data, dict) or not isinstance(items, list):
                raise self._api_error(op, answer, attempts)
            for item in items:
                try:
                    pod = parse_pod(item)
                except BadPodData as error:
                    raise RunpodApiError(
                        self._redact(f"cannot {op}: Runpod listed {error}"), status=200
                    ) from None
                pods.setdefault(pod.id, pod)
            next_cursor = data.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return list(pods.values())
            if next_cursor in seen:
                raise RunpodApiError(f"cannot {op}: Runpod repeated a page cursor", status=200)
            seen.add(next_cursor)
            cursor = next_cursor
        raise RunpodApiError(f"cannot {op}: more than {_MAX_PAGES} pages", status=200)

    async def list_gpu_types(
        self, *, availability: bool = False, gpu_count: int = 1, product: CatalogProduct = "POD"
    ) -> list[GpuType]:
        """Runpod's GPU catalog: every GPU type, with its list prices per GPU.

        With ``availability`` the catalog also says how much of each type is free for a pod
        of ``gpu_count`` GPUs on the secure cloud (the cloud overbrainer creates pods on),
        overall and per data center; with ``product`` CLUSTER, how much is free for a
        cluster's nodes of ``gpu_count`` GPUs each instead. The catalog tells which
        ``gpu.id`` values exist; the rate a pod really bills is the pod's own ``cost``.
        """
        entries = await self.gpu_entries(
            availability=availability, gpu_count=gpu_count, product=product
        )
        return self.gpu_types_of(entries)

    async def gpu_entries(
        self, *, availability: bool = False, gpu_count: int = 1, product: CatalogProduct = "POD"
    ) -> list[object]:
        """The GPU catalog's entries as Runpod sent them (see :meth:`list_gpu_types`), to
        be parsed with :meth:`gpu_types_of` -- now or from a cached copy."""
        op = "read Runpod's GPU catalog"
        query = _catalog_query(availability, gpu_count, product)
        answer, attempts = await self._call("GET", "/catalog/gpus", op, "always", params=query)
        return self._entries(answer, attempts, op, "gpus")

    def gpu_types_of(self, entries: list[object]) -> list[GpuType]:
        """The GPU types of catalog entries (the first of each id); raises
        :class:`RunpodApiError` for an entry without a usable id."""
        op = "read Runpod's GPU catalog"
        found: dict[str, GpuType] = {}
        for item in entries:
            gpu = self._gpu_type(item, op)
            found.setdefault(gpu.id, gpu)
        return list(found.values())

    def _entries(self, answer: _Answer, attempts: int, op: str, key: str) -> list[object]:
        if answer.status != 200:
            raise self._api_error(op, answer, attempts)
        try:
            data = answer.json()
        except ValueError:
            data = None
        items = data.get(key) if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise self._api_error(op, answer, attempts)
        return items

    async def get_gpu_type(
        self,
        gpu_id: str,
        *,
        availability: bool = False,
        gpu_count: int = 1,
        product: CatalogProduct = "POD",
    ) -> GpuType | None:
        """One GPU type of the catalog (see :meth:`list_gpu_types`), or None when Runpod,
        in its own error shape, says no such type exists."""
        if not gpu_id or not gpu_id.isprintable() or len(gpu_id) > 200:
            raise RunpodError("refusing to look up a GPU type id that is empty or not printable")
        op = f"read GPU type {one_line(gpu_id, 100)!r} of Runpod's catalog"
        path = "/catalog/gpus/" + urllib.parse.quote(gpu_id, safe="")
        answer, attempts = await self._call(
            "GET", path, op, "always", params=_catalog_query(availability, gpu_count, product)
        )
        if answer.status == 404 and answer.problem() is not None:
            return None
        if answer.status != 200:
            raise self._api_error(op, answer, attempts)
        try:
            data = answer.json()
        except ValueError:
            raise self._api_error(op, answer, attempts) from None
        gpu = self._gpu_type(data, op)
        if gpu.id != gpu_id:
            raise RunpodApiError(f"cannot {op}: Runpod answered with another GPU type", status=200)
        return gpu

    async def list_data_centers(self) -> list[DataCenter]:
        """Runpod's data centers (``GET /catalog/datacenters``): id, name, region and what
        each supports. An entry without a usable id is left out."""
        return data_centers_of(await self.data_center_entries())

    async def data_center_entries(self) -> list[object]:
        """The data centers' entries as Runpod sent them, to be parsed with
        :func:`data_centers_of` -- now or from a cached copy."""
        op = "read Runpod's data centers"
        answer, attempts = await self._call("GET", "/catalog/datacenters", op, "always")
        return self._entries(answer, attempts, op, "dataCenters")

    def _gpu_type(self, data: object, op: str) -> GpuType:
        try:
            return parse_gpu_type(data)
        except BadGpuData as error:
            raise RunpodApiError(
                self._redact(f"cannot {op}: Runpod listed {error}"), status=200
            ) from None

    async def pod_billing(
        self, pod_id: str, start: datetime, end: datetime, *, bucket: BucketSize = "hour"
    ) -> PodBilling:
        """What Runpod billed for pod ``pod_id`` from ``start`` to ``end``
        (``GET /billing/pods``), in records of ``bucket``; Runpod snaps the window out to
        whole buckets and says so in the answer. Times must carry their zone."""
        pid = self._pod_id(pod_id)
        op = f"read what Runpod billed for pod {pid}"
        return await self._billing(
            "/billing/pods", op, start, end, bucket, {"podId": pid}, parse_pod_billing
        )

    @asynccontextmanager
    async def pod_logs(
        self,
        pod_id: str,
        *,
        source: LogSource | None = None,
        tail: int | None = None,
        last_event_id: str | None = None,
        read_timeout: float | None = 60.0,
    ) -> AsyncIterator[PodLogStream]:
        """The pod's log stream (``GET /pods/{id}/logs``): ``tail`` backfilled lines (Runpod's
        default is 100, its maximum :data:`TAIL_MAX`), then lines as they come, of one
        ``source`` or both; ``last_event_id`` resumes after a cursor. Opened once (no
        retry: the caller reconnects). Raises :class:`PodNotFound` for a pod Runpod does
        not know, :class:`RunpodApiError` for any other refusal or no answer."""
        pid = self._pod_id(pod_id)
        op = f"read the log of pod {pid}"
        params: dict[str, str] = {}
        if source is not None:
            params["source"] = source
        if tail is not None:
            params["tail"] = str(max(0, min(tail, TAIL_MAX)))
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout)
        request = self._http.build_request(
            "GET", f"/pods/{pid}/logs", params=params, headers=headers, timeout=timeout
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as error:
            self._raise_unreachable(error)
            kind = type(error).__name__
            raise RunpodApiError(
                self._redact(
                    f"cannot {op}: {kind} talking to {self._host} "
                    f"({one_line(self._redact(str(error)), 200)}){_clock_hint(error)}"
                )
            ) from None
        try:
            date = parse_http_date(response.headers.get("date"))
            self.server_clock.saw(date, trio.current_time())
            if response.status_code != 200:
                body = await response.aread()
                answer = _Answer(
                    status=response.status_code,
                    content_type=response.headers.get("content-type"),
                    body=body[:_MAX_BODY],
                    retry_after=_retry_after(response.headers.get("retry-after"), date),
                )
                if answer.status == 404 and answer.problem() is not None:
                    raise PodNotFound(
                        f"cannot {op}: Runpod does not know the pod",
                        status=404,
                        detail=self._detail(answer),
                    )
                raise self._api_error(op, answer, 1)
            yield PodLogStream(response, op, self._host, self._redact, date)
        finally:
            await response.aclose()

    # --- clusters ---

    async def get_cluster(self, cluster_id: str) -> Cluster | None:
        """The cluster (``GET /clusters/{id}``), or None when Runpod (in its own error
        shape) says it does not exist."""
        cid = self._cluster_id(cluster_id)
        op = f"read cluster {cid}"
        answer, attempts = await self._call("GET", f"/clusters/{cid}", op, "always")
        if answer.status == 404 and answer.problem() is not None:
            return None
        if answer.status != 200:
            raise self._api_error(op, answer, attempts)
        cluster = self._cluster(self._json_or_error(answer, attempts, op), op)
        if cluster.id != cid:
            raise RunpodApiError(f"cannot {op}: Runpod answered with another cluster", status=200)
        return cluster

    async def list_clusters(self) -> list[Cluster]:
        """Every cluster of the account (``GET /clusters``)."""
        op = "list clusters"
        answer, attempts = await self._call("GET", "/clusters", op, "always")
        found: dict[str, Cluster] = {}
        for item in self._entries(answer, attempts, op, "clusters"):
            cluster = self._cluster(item, op)
            found.setdefault(cluster.id, cluster)
        return list(found.values())

    async def cluster_pods(self, cluster_id: str) -> list[Pod] | None:
        """The cluster's member pods (``GET /clusters/{id}/pods``) by rank, the ones not
        ranked yet last; None when Runpod (in its own error shape) says the cluster does
        not exist. A listed pod that names another cluster is an error."""
        cid = self._cluster_id(cluster_id)
        op = f"list the pods of cluster {cid}"
        answer, attempts = await self._call("GET", f"/clusters/{cid}/pods", op, "always")
        if answer.status == 404 and answer.problem() is not None:
            return None
        pods: dict[str, Pod] = {}
        for item in self._entries(answer, attempts, op, "pods"):
            try:
                pod = parse_pod(item)
            except BadPodData as error:
                raise RunpodApiError(
                    self._redact(f"cannot {op}: Runpod listed {error}"), status=200
                ) from None
            if pod.cluster is not None and pod.cluster.cluster_id != cid:
                raise RunpodApiError(
                    f"cannot {op}: Runpod listed pod {pod.id} of another cluster", status=200
                )
            pods.setdefault(pod.id, pod)

        def rank(pod: Pod) -> tuple[bool, int]:
            known = pod.cluster.rank if pod.cluster is not None else None
            return known is None, known or 0

        return sorted(pods.values(), key=rank)

    async def delete_cluster(self, cluster_id: str) -> bool:
        """Delete a cluster and with it every member (``DELETE /clusters/{id}``): True when
        Runpod accepted, False when it was already gone."""
        cid = self._cluster_id(cluster_id)
        op = f"delete cluster {cid}"
        answer, attempts = await self._call("DELETE", f"/clusters/{cid}", op, "always")
        if 200 <= answer.status < 300:
            return True
        if answer.status == 404 and answer.problem() is not None:
            return False
        raise self._api_error(op, answer, attempts)

    async def cluster_billing(
        self,
        start: datetime,
        end: datetime,
        *,
        bucket: BucketSize = "hour",
        cluster_id: str | None = None,
    ) -> ClusterBilling:
        """What Runpod billed for clusters from ``start`` to ``end``
        (``GET /billing/clusters``), of one cluster or all, in records of ``bucket``;
        Runpod snaps the window out to whole buckets. Times must carry their zone."""
        op = "read what Runpod billed for clusters"
        extra: dict[str, str] = {}
        if cluster_id is not None:
            extra["clusterId"] = self._cluster_id(cluster_id)
            op += f" ({cluster_id})"
        return await self._billing(
            "/billing/clusters", op, start, end, bucket, extra, parse_cluster_billing
        )

    async def _billing(
        self,
        path: str,
        op: str,
        start: datetime,
        end: datetime,
        bucket: BucketSize,
        extra: Mapping[str, str],
        parse: Callable[[object], _T],
    ) -> _T:
        """Read a billing endpoint over ``[start, end)`` in buckets of ``bucket``, with
        ``extra`` query parameters, its answer read by ``parse``."""
        if start.tzinfo is None or end.tzinfo is None or end <= start:
            raise RunpodError("a billing window needs zoned times, its end after its start")
        params = {
            **extra,
            "startTime": _rfc3339(start),
            "endTime": _rfc3339(end),
            "bucketSize": bucket,
        }
        answer, attempts = await self._call("GET", path, op, "always", params=params)
        if answer.status != 200:
            raise self._api_error(op, answer, attempts)
        try:
            return parse(answer.json())
        except (ValueError, BadBillingData) as error:
            reason = str(error) if isinstance(error, BadBillingData) else "not JSON"
            raise RunpodApiError(
                self._redact(f"cannot {op}: Runpod's answer could not be read ({reason})"),
                status=200,
            ) from None

    def _cluster_id(self, cluster_id: str) -> str:
        try:
            return check_cluster_id(cluster_id)
        except BadClusterData as error:
            raise RunpodError(self._redact(f"refusing to call Runpod with an {error}")) from None

    def _cluster(self, data: object, op: str) -> Cluster:
        try:
            return parse_cluster(data)
        except BadClusterData as error:
            raise RunpodApiError(
                self._redact(f"cannot {op}: Runpod's answer could not be read ({error})"),
                status=200,
            ) from None

    # --- network volumes ---

    async def list_network_volumes(self) -> list[NetworkVolume]:
        """Every network volume of the account (``GET /network-volumes``)."""
        op = "list network volumes"
        answer, attempts = await self._call("GET", "/network-volumes", op, "always")
        found: dict[str, NetworkVolume] = {}
        for item in self._entries(answer, attempts, op, "networkVolumes"):
            volume = self._volume(item, op, 200)
            found.setdefault(volume.id, volume)
        return list(found.values())

    async def get_network_volume(self, volume_id: str) -> NetworkVolume | None:
        """The volume, or None when Runpod (in its own error shape) says it does not
        exist."""
        vid = self._volume_id(volume_id)
        op = f"read network volume {vid}"
        answer, attempts = await self._call("GET", f"/network-volumes/{vid}", op, "always")
        if answer.status == 404 and answer.problem() is not None:
            return None
        if answer.status != 200:
            raise self._api_error(op, answer, attempts)
        volume = self._volume(self._json_or_error(answer, attempts, op), op, 200)
        if volume.id != vid:
            raise RunpodApiError(f"cannot {op}: Runpod answered with another volume", status=200)
        return volume

    async def create_network_volume(
        self, name: str, size_gb: int, data_center: str, *, volume_type: str | None = None
    ) -> NetworkVolume:
        """Create a network volume (``POST /network-volumes``): billed storage until it is
        deleted. Sent again only when it certainly did not arrive (no connection, 429);
        after any other failure a volume may exist anyway: look for it by name."""
        for what, value in (("name", name), ("data center", data_center)):
            if not value or not value.isprintable() or len(value) > 200:
                raise RunpodError(f"a network volume's {what} is empty or not printable")
        if isinstance(size_gb, bool) or not isinstance(size_gb, int) or not 10 <= size_gb <= 4096:
            raise RunpodError("a network volume's size must be a whole number of GB, 10..4096")
        body: dict[str, object] = {"name": name, "size": size_gb, "dataCenter": data_center}
        if volume_type is not None:
            body["type"] = volume_type
        op = f"create network volume {one_line(name, 60)!r} in {one_line(data_center, 40)}"
        answer, attempts = await self._call(
            "POST", "/network-volumes", op, "unsent", json_body=body
        )
        if answer.status not in (200, 201):
            raise self._api_error(op, answer, attempts)
        return self._volume(self._json_or_error(answer, attempts, op), op, answer.status)

    async def delete_network_volume(self, volume_id: str) -> bool:
        """Delete a network volume: True when Runpod accepted, False when it was already
        gone. Raises :class:`VolumeInUse` while a pod mounts it."""
        vid = self._volume_id(volume_id)
        op = f"delete network volume {vid}"
        answer, attempts = await self._call("DELETE", f"/network-volumes/{vid}", op, "always")
        if 200 <= answer.status < 300:
            return True
        problem = answer.problem()
        if answer.status == 404 and problem is not None:
            return False
        if answer.status == 409 and problem is not None:
            detail = self._detail(answer)
            raise VolumeInUse(
                self._redact(f"cannot {op}: Runpod refused it while it is in use ({detail})"),
                status=409,
                detail=detail,
            )
        raise self._api_error(op, answer, attempts)

    async def volume_billing(
        self,
        start: datetime,
        end: datetime,
        *,
        bucket: BucketSize = "day",
        volume_id: str | None = None,
    ) -> VolumeBilling:
        """What Runpod billed for network volumes from ``start`` to ``end``
        (``GET /billing/network-volumes``), of one volume or all, in records of
        ``bucket``. Times must carry their zone."""
        op = "read what Runpod billed for network volumes"
        extra: dict[str, str] = {}
        if volume_id is not None:
            extra["networkVolumeId"] = self._volume_id(volume_id)
            op += f" ({volume_id})"
        return await self._billing(
            "/billing/network-volumes", op, start, end, bucket, extra, parse_volume_billing
        )

    def _volume_id(self, volume_id: str) -> str:
        try:
            return check_volume_id(volume_id)
        except BadVolumeData as error:
            raise RunpodError(self._redact(f"refusing to call Runpod with an {error}")) from None

    def _volume(self, data: object, op: str, status: int) -> NetworkVolume:
        try:
            return parse_network_volume(data)
        except BadVolumeData as error:
            raise RunpodApiError(
                self._redact(f"cannot {op}: Runpod's answer could not be read ({error})"),
                status=status,
            ) from None

    def _json_or_error(self, answer: _Answer, attempts: int, op: str) -> object:
        try:
            return answer.json()
        except ValueError:
            raise self._api_error(op, answer, attempts) from None

    async def delete_pod(self, pod_id: str) -> bool:
        """Delete a pod: True when Runpod accepted, False when it was already gone."""
        pid = self._pod_id(pod_id)
        op = f"delete pod {pid}"
        answer, attempts = await self._call("DELETE", f"/pods/{pid}", op, "always")
        if 200 <= answer.status < 300:
            return True
        if answer.status == 404 and answer.problem() is not None:
            return False
        raise self._api_error(op, answer, attempts)

    async def pod_action(self, pod_id: str, action: PodActionName) -> Pod | None:
        """Ask for ``start``, ``stop``, ``restart`` or ``terminate``.

        Returns the updated pod, or None for ``terminate`` (no body; also when the pod was
        already gone). ``terminate`` is retried like a delete; the others only when the
        request certainly was not processed (429, no connection), as a repeated ``stop``
        would be refused. Raises ActionRefused (409) or PodNotFound.
        """
        pid = self._pod_id(pod_id)
        if action not in _ACTIONS:
            raise RunpodError(f"unknown pod action {one_line(repr(action), 40)}")
        op = f"{action} pod {pid}"
        retry: _Retry = "always" if action == "terminate" else "unsent"
        answer, attempts = await self._call(
            "POST", f"/pods/{pid}/action", op, retry, json_body={"action": action}
        )
        if answer.status == 204:
            return None
        if answer.status == 200:
            return self._parse(answer, op)
        problem = answer.problem()
        if answer.status == 404 and problem is not None:
            if action == "terminate":
                return None
            raise PodNotFound(
                f"cannot {op}: Runpod does not know the pod",
                status=404,
                detail=self._detail(answer),
            )
        if answer.status == 409 and problem is not None:
            detail = self._detail(answer)
            raise ActionRefused(
                self._redact(f"cannot {op}: Runpod refused it for the pod's status ({detail})"),
                status=409,
                detail=detail,
            )
        raise self._api_error(op, answer, attempts)

    # --- plumbing ---

    def _pod_id(self, pod_id: str) -> str:
        try:
            return check_pod_id(pod_id)
        except BadPodData as error:
            raise RunpodError(self._redact(f"refusing to call Runpod with an {error}")) from None

    def _parse(self, answer: _Answer, op: str) -> Pod:
        try:
            return parse_pod(answer.json())
        except (ValueError, BadPodData) as error:
            reason = str(error) if isinstance(error, BadPodData) else "not JSON"
            raise RunpodApiError(
                self._redact(f"cannot {op}: Runpod's answer could not be read ({reason})"),
                status=answer.status,
            ) from None

    def _detail(self, answer: _Answer, redact: Callable[[str], str] | None = None) -> str:
        """What Runpod said, as one redacted printable line ('' if nothing)."""
        redact = redact or self._redact
        problem = answer.problem()
        if problem is not None:
            text = problem.detail
            if problem.errors:
                text += " [" + "; ".join(problem.errors) + "]"
        elif answer.body:
            text = answer.body[:400].decode("utf-8", "replace")
        else:
            return ""
        # Redact before and after flattening: a key may be split by a line break.
        return redact(one_line(redact(text), 300))

    def _api_error(self, op: str, answer: _Answer, attempts: int) -> RunpodApiError:
        status = answer.status
        problem = answer.problem()
        if 300 <= status < 400:
            reason = (
                f"Runpod answered with a redirect (HTTP {status}), which is not followed; "
                "check OVERBRAINER_RUNPOD__BASE_URL"
            )
        elif status == 401:
            reason = "Runpod refused the API key (HTTP 401); check OVERBRAINER_RUNPOD__API_KEY"
        elif status == 403:
            reason = "the API key has no access to it (HTTP 403)"
        elif status == 404 and problem is None:
            reason = (
                "HTTP 404 not in Runpod's error format (a proxy in between, or a wrong "
                "OVERBRAINER_RUNPOD__BASE_URL?)"
            )
        elif status == 429:
            reason = "Runpod is rate-limiting requests (HTTP 429)"
        elif 200 <= status < 300:
            reason = f"Runpod's answer could not be read (HTTP {status})"
        else:
            reason = f"HTTP {status}"
        if attempts > 1:
            reason += f" after {plural(attempts, 'attempt')}"
        detail = self._detail(answer)
        if detail:
            reason += f" (Runpod said: {detail})" if problem else f" (answer: {detail})"
        return RunpodApiError(
            self._redact(f"cannot {op}: {reason}"),
            status=status,
            detail=detail,
            retry_after=answer.retry_after if status == 429 else None,
        )

    async def _call(
        self,
        method: str,
        path: str,
        op: str,
        retry: _Retry,
        *,
        json_body: object = None,
        params: Mapping[str, str] | None = None,
    ) -> tuple[_Answer, int]:
        """Send with retries; return the last answer and how many attempts it took."""
        start = trio.current_time()
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = await self._send_telling(op, method, path, json_body, params)
            except httpx.TransportError as error:
                self._raise_unreachable(error)
                kind = type(error).__name__
                may_retry = retry == "always" or (retry == "unsent" and isinstance(error, _UNSENT))
                why = f"{kind} talking to {self._host}"
                if may_retry and await self._wait(attempt, start, None, op, why):
                    continue
                tries = f" after {plural(attempt, 'attempt')}" if attempt > 1 else ""
                raise RunpodApiError(
                    self._redact(
                        f"cannot {op}: {kind} talking to {self._host}{tries} "
                        f"({one_line(self._redact(str(error)), 200)}){_clock_hint(error)}"
                    )
                ) from None
            status = answer.status
            transient = status == 429 or (retry == "always" and (status == 408 or status >= 500))
            why = "rate limited, HTTP 429" if status == 429 else f"HTTP {status}"
            if (
                retry != "never"
                and transient
                and await self._wait(attempt, start, answer.retry_after, op, why)
            ):
                continue
            return answer, attempt

    def _raise_unreachable(self, error: httpx.TransportError) -> None:
        """Raise :class:`RunpodUnreachable` when ``error`` says the API cannot be reached
        at all (retrying would only make the user wait to learn it)."""
        reason = unreachable_reason(error, self._host, self._port)
        if reason is not None:
            raise RunpodUnreachable(
                self._redact(unreachable_text(reason, self._address_hint)), reason=reason
            ) from None

    async def _send_telling(
        self,
        op: str,
        method: str,
        path: str,
        json_body: object,
        params: Mapping[str, str] | None,
    ) -> _Answer:
        """:meth:`_send`, telling ``on_wait`` once when the answer takes over a second."""
        if self._on_wait is None:
            return await self._send(method, path, json_body, params)
        tell = self._on_wait
        answers: list[_Answer] = []
        failures: list[Exception] = []

        async def notice() -> None:
            await trio.sleep(_NOTICE_AFTER)
            tell(f"waiting for {self._host} to answer (to {op})")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(notice)
            try:
                answers.append(await self._send(method, path, json_body, params))
            except Exception as error:  # re-raised as it is, outside the nursery's group
                failures.append(error)
            finally:
                nursery.cancel_scope.cancel()
        if failures:
            raise failures[0]
        return answers[0]

    async def _wait(
        self, attempt: int, start: float, retry_after: float | None, op: str, why: str
    ) -> bool:
        """Sleep before the next attempt (told to ``on_wait`` when over a second); False
        when attempts or time are used up."""
        if attempt >= self._max_attempts:
            return False
        if retry_after is not None:
            delay = retry_after + self._rng.random() * min(1.0, 0.1 * retry_after)
        else:
            base = min(self._backoff_max, self._backoff_initial * 2 ** (attempt - 1))
            delay = base / 2 + self._rng.random() * base / 2
        if trio.current_time() + delay - start > self._max_retry_seconds:
            return False
        if self._on_wait is not None and delay > _NOTICE_AFTER:
            self._on_wait(
                f"waiting for Runpod ({why}): trying again in {delay:.0f} s to {op} "
                f"(attempt {attempt + 1} of {self._max_attempts})"
            )
        await self._sleep(delay)
        return True

    async def _send(
        self,
        method: str,
        path: str,
        json_body: object,
        params: Mapping[str, str] | None,
    ) -> _Answer:
        request = self._http.build_request(method, path, json=json_body, params=params)
        response = await self._http.send(request, stream=True)
        buffer = bytearray()
        readable = True
        try:
            async for chunk in response.aiter_bytes():
                buffer += chunk
                if len(buffer) > _MAX_BODY:
                    readable = False
                    break
        except httpx.DecodingError:
            readable = False
        finally:
            await response.aclose()
        date = parse_http_date(response.headers.get("date"))
        self.server_clock.saw(date, trio.current_time())
        return _Answer(
            status=response.status_code,
            content_type=response.headers.get("content-type"),
            body=bytes(buffer) if readable else None,
            retry_after=_retry_after(response.headers.get("retry-after"), date),
        )
