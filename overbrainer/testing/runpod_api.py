"""A fake Runpod REST API v2 server, in-process or on loopback.

:class:`FakeRunpod` holds accounts, pods and scripted faults and answers requests the way
Runpod's published v2 description says (``/v2/pods`` and friends, problem+json errors,
create bodies validated against the published schema with a Draft 2020-12 validator).
Time is ``trio.current_time()``: under a ``MockClock`` the lifecycle and every retry wait
run in virtual time.

Two ways to reach it:

- in-process: ``RunpodClient(key, FAKE_URL, transport=fake.transport())`` (any base URL
  ending in ``/v2`` works; ``FAKE_URL`` is a fine choice);
- on loopback: ``async with serve_loopback(fake) as base_url: ...`` (hypercorn, real
  clock), or from the command line::

      python -m overbrainer.testing.runpod_api --port 0 --print-url

  which prints the base URL and an account API key, one per line, and serves until
  SIGINT/SIGTERM.

Runpod's clock: every answer carries a ``Date`` header, and pods their ``createdAt`` and
``startedAt``, from the fake's own clock (trio's, mapped to the wall clock the first time
one is needed; ``wall_start`` sets that wall time instead), never from a client's.

Hooks (for the fake pod's SSH server and watchdog): ``fake.on_running(pod)`` is awaited
once per boot when a pod is first observed RUNNING -- until it returns, the pod shows
``ssh.direct: null``; call ``fake.set_ssh_endpoint(...)`` from it. ``fake.on_stopped`` and
``fake.on_deleted`` are awaited when a pod stops (stop, restart, ERROR) or goes (delete,
terminate, vanishing). Hooks must not wait for requests to this fake: start background
work in a nursery instead.

Billing (``GET /billing/pods``): a pod bills its ``cost`` per second while it exists and is
not stopped (from its create to its delete, stop or vanishing), in buckets of Runpod's
clock; usage shows in the billing only ``fake.billing_lag`` seconds after it happened.

Network volumes (``/network-volumes``, ``/network-volumes/{id}``): kept per account, each in
one data center; a pod that mounts one (``mounts.network``) is placed only there, and a
volume is not deleted (409) while a pod that is not deleted mounts it. They bill
:data:`VOLUME_PRICE` per GB per month (of 30 days) while they exist, in
``GET /billing/network-volumes`` (after ``fake.billing_lag`` too).

Clusters (``/clusters``, ``/clusters/{id}``, ``/clusters/{id}/pods``): kept per account,
TRAINING only, placed whole in one data center; each member is a pod of the fake (booting,
billing and hooked like any pod), left out of ``GET /pods`` unless
``includeClusterPods=true``, refused (409) by the pod endpoints' delete and actions, and
deleted with its cluster. Ranks (shuffled: rank 0 is not the first pod made), overlay
addresses and the network are assigned halfway through provisioning; until then a
member's ``cluster.rank`` is null. A member's container sees Runpod's cluster variables
(:meth:`FakeRunpod.cluster_env`). ``GET /billing/clusters`` bills what the members billed.
A member's own key may read its cluster and its members, and delete its cluster. Cues:
:meth:`FakeRunpod.fail_member` (its container exits: EXITED), :meth:`FakeRunpod.vanish_member`,
:meth:`FakeRunpod.linger_next_cluster_delete` (a delete whose members stay listed).
"""

from __future__ import annotations

import argparse
import email.utils
import json
import random
import re
import signal
import string
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, unquote

import httpx
import trio

from overbrainer.testing import runpod_schema

FAKE_URL = "http://runpod.fake/v2"
PREFIX = "/v2"

DEFAULT_DATA_CENTERS: tuple[str, ...] = ("EU-RO-1", "US-TX-3", "US-KS-2")
DATA_CENTER_NAMES: dict[str, tuple[str, str]] = {
    "EU-RO-1": ("Europe Romania 1", "RO"),
    "US-TX-3": ("US Texas 3", "US"),
    "US-KS-2": ("US Kansas 2", "US"),
}
"""Name and country of the fake's known data centers (another one is named by its id and
is in no country)."""
DATA_CENTER_REGIONS: dict[str, str] = {
    "EU-RO-1": "EUROPE",
    "US-TX-3": "NORTH_AMERICA",
    "US-KS-2": "NORTH_AMERICA",
}
"""The region ``GET /catalog/datacenters`` shows for each known data center (another one:
``UNKNOWN``)."""
CUDA_VERSION = "12.8"
"""The CUDA version of every fake machine (the pods report it as ``cudaVersion``)."""
NO_CAPACITY = (
    "There are no longer any instances available with the requested specifications. "
    "Please refresh and try again."
)
_TITLES = {
    301: "Moved Permanently",
    302: "Found",
    307: "Temporary Redirect",
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_ALLOWED_ACTIONS = {
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
}
_BILLING = frozenset({"PROVISIONING", "STARTING", "RUNNING", "ERROR"})
VOLUME_PRICE = 0.07
"""USD per GB per month a network volume bills (Runpod's price for the first TB)."""
_MONTH_SECONDS = 30 * 86400

Hook = Callable[["FakePod"], Awaitable[None]]


@dataclass
class FakeGpuType:
    """One GPU type the fake offers: its catalog entry (``GpuType`` in the published schema)
    and what a pod of it bills.

    ``price`` is the secure cloud's USD/h for one GPU, which is also what the fake bills per
    GPU unless ``billed_price`` says otherwise (a pod's real rate, its ``cost``, may differ
    from the catalog's list price); ``community_price`` None means not offered on the
    community cloud, ``secure`` False not on the secure one. ``max_count`` is the most GPUs
    of this type one pod can have.
    """

    id: str
    name: str
    memory: int
    price: float
    community_price: float | None = None
    secure: bool = True
    max_count: int = 8
    manufacturer: str = "NVIDIA"
    pool: str | None = None
    billed_price: float | None = None
    cluster: bool = True  # offered for clusters' nodes (product CLUSTER)

    def catalog_entry(self) -> dict[str, Any]:
        """The type as ``GET /catalog/gpus`` lists it (availability not included)."""
        community = self.community_price is not None
        price: dict[str, Any] = {
            "secure": self.price if self.secure else 0.0,
            "community": self.community_price if self.community_price is not None else 0.0,
        }
        if self.pool is not None:
            price["serverless"] = round(self.price * 1.5, 2)
        return {
            "id": self.id,
            "name": self.name,
            "pool": self.pool,
            "manufacturer": self.manufacturer,
            "memory": self.memory,
            "secure": self.secure,
            "community": community,
            "price": price,
            "maxCount": {
                "secure": self.max_count if self.secure else 0,
                "community": self.max_count if community else 0,
            },
        }


DEFAULT_GPU_TYPES: tuple[FakeGpuType, ...] = (
    FakeGpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, pool="ADA_24"),
    FakeGpuType("NVIDIA A40", "A40", 48, 0.40, 0.35, max_count=10, pool="AMPERE_48"),
    FakeGpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69, pool="HOPPER_141"),
)
"""The GPU types the fake offers by default (the ones the tests and the demo train on)."""
DEFAULT_GPU_PRICES: dict[str, float] = {gpu.id: gpu.price for gpu in DEFAULT_GPU_TYPES}


# --- state ---------------------------------------------------------------------------


@dataclass
class Account:
    """An account API key with its balance (USD)."""

    key: str
    balance: float


@dataclass
class SshDirect:
    """What a running pod shows as ``ssh.direct``."""

    host: str
    port: int
    username: str = "root"


@dataclass
class FakePod:
    """One pod of the fake, with its lifecycle in trio time."""

    id: str
    owner: str = field(repr=False)
    body: dict[str, Any] = field(repr=False)
    gpu_id: str
    gpu_count: int
    data_center_id: str
    price: float  # USD/h while billing
    created_at: float
    boot_at: float
    boot_provisioning: float
    boot_starting: float
    halted: str | None = None  # "EXITED" or "ERROR" while held there
    gpus_lost: bool = False  # restarted with no GPU: RUNNING, its runtime lists none
    vanish_at: float | None = None
    error_at: float | None = None
    ssh: SshDirect | None = None
    ssh_ready: bool = False  # on_running has returned for this boot
    running_seen: bool = False
    deleted: bool = False
    linger_reads: int = 0
    index: int = 0
    # The container's output lines as the log stream first saw them: (trio time, line).
    container_seen: list[tuple[float, str]] = field(default_factory=list, repr=False)
    # Billing: the trio-time spans the pod billed ``price`` per hour over, and the start of
    # the one still open (None: not billing now).
    billed_spans: list[tuple[float, float]] = field(default_factory=list, repr=False)
    billing_since: float | None = None
    # A cluster's member: the cluster, the rank and overlay address it is given.
    cluster_id: str | None = None
    rank: int | None = None
    ip: str | None = None

    def bill_from(self, at: float) -> None:
        """The pod bills from ``at`` on (created, or started again after a stop)."""
        if self.billing_since is None:
            self.billing_since = at

    def bill_until(self, at: float) -> None:
        """The pod stops billing at ``at`` (stopped, deleted or vanished)."""
        if self.billing_since is not None:
            self.billed_spans.append((self.billing_since, max(at, self.billing_since)))
            self.billing_since = None

    def billed_seconds(self, start: float, end: float) -> float:
        """How many seconds of ``[start, end)`` (trio time) the pod billed."""
        spans = list(self.billed_spans)
        if self.billing_since is not None:
            spans.append((self.billing_since, end))
        return sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)

    @property
    def name(self) -> str:
        """The name the create call gave."""
        return str(self.body.get("name", ""))

    @property
    def env(self) -> dict[str, str]:
        """The environment the create call gave (a copy)."""
        env = self.body.get("env") or {}
        return dict(env)

    def phase(self, now: float) -> str:
        """The status at trio time ``now`` (ignoring deletion)."""
        if self.halted is not None:
            return self.halted
        elapsed = now - self.boot_at
        if elapsed < self.boot_provisioning:
            return "PROVISIONING"
        if elapsed < self.boot_provisioning + self.boot_starting:
            return "STARTING"
        return "RUNNING"

    def running_since(self) -> float:
        """When the current boot reached RUNNING (trio time)."""
        return self.boot_at + self.boot_provisioning + self.boot_starting


@dataclass
class FakeVolume:
    """One network volume of the fake, in trio time (``deleted_at`` None: it exists)."""

    id: str
    owner: str = field(repr=False)
    name: str
    size: int  # GB
    data_center: str
    type: str = "STANDARD"
    created_at: float = 0.0
    deleted_at: float | None = None

    def render(self) -> dict[str, Any]:
        """The volume as Runpod's ``NetworkVolume`` schema describes it."""
        return {
            "id": self.id,
            "name": self.name,
            "size": self.size,
            "dataCenter": self.data_center,
            "type": self.type,
        }

    def billed_seconds(self, start: float, end: float) -> float:
        """How many seconds of ``[start, end)`` (trio time) the volume existed."""
        until = end if self.deleted_at is None else min(end, self.deleted_at)
        return max(0.0, until - max(start, self.created_at))


CLUSTER_CIDR = "10.65.0.0/16"
"""The overlay network every fake cluster gets (its members at 10.65.0.2 onwards)."""
CLUSTER_PRIMARY_PORT = 29500
"""The ``PRIMARY_PORT`` a fake cluster's members see (all ports are open on Runpod's)."""


@dataclass
class FakeCluster:
    """One cluster of the fake: its create body, where it is, and its member pods' ids (in
    the order they were made; their ranks are shuffled)."""

    id: str
    owner: str = field(repr=False)
    body: dict[str, Any] = field(repr=False)
    data_center_id: str
    created_at: float
    assigned_at: float  # ranks, addresses and the network show from then on
    members: list[str] = field(default_factory=list)
    deleted: bool = False

    @property
    def name(self) -> str:
        """The name the create call gave."""
        return str(self.body["name"])


@dataclass
class Fault:
    """A scripted answer for the next request matching ``route``.

    ``route`` is ``"METHOD /pods"``, ``"METHOD /pods/{id}"``, ``"POST /pods/{id}/action"``
    or ``"*"``. With ``succeed`` the real handler runs first (its effects stay) and only
    its answer is replaced; ``status=None`` keeps the real answer. ``timeout`` raises
    ``httpx.ReadTimeout`` in-process and stalls ``stall_seconds`` on loopback;
    ``connect_error`` (in-process only) raises ``httpx.ConnectError`` before anything is
    handled. ``linger_reads`` (deletes) keeps the deleted pod — or a deleted cluster's
    members — listed for that many reads.
    """

    route: str
    status: int | None = 500
    succeed: bool = False
    retry_after: float | None = None
    raw_body: bytes | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: bool = False
    stall_seconds: float = 3600.0
    connect_error: bool = False
    error_message: str = "scripted transport failure"
    linger_reads: int = 0
    pod_id: str | None = None


@dataclass
class RecordedRequest:
    """One request as the fake saw it (the Authorization value is never kept)."""

    time: float
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any
    auth: str  # "account", "pod:<id>", "none" or "invalid"
    status: int | None = None
    schema_errors: list[str] | None = None  # set for create and action bodies
    fault: bool = False


@dataclass
class FakeRequest:
    """A request handed to :meth:`FakeRunpod.handle` (transport-independent)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes
    raw_path: str | None = None  # percent-encoded, when the front end knows it


@dataclass
class FakeResponse:
    """The fake's answer; ``timeout``/``stall_seconds`` tell the front end to misbehave."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    timeout: bool = False
    stall_seconds: float = 0.0
    connect_error: bool = False
    error_message: str = ""
    # A body sent as it is produced (a log stream), after ``body``.
    stream: Callable[[], AsyncIterator[bytes]] | None = None


class FakeRunpod:
    """The fake Runpod account(s), pods and scripted faults. See the module docstring."""

    def __init__(
        self,
        *,
        provisioning_seconds: float = 5.0,
        starting_seconds: float = 10.0,
        gpu_prices: dict[str, float] | None = None,
        gpu_types: Sequence[FakeGpuType] | None = None,
        data_centers: Sequence[str] = DEFAULT_DATA_CENTERS,
        capacity_per_gpu_type: int = 8,
        seed: int | None = 0,
        wall_start: datetime | None = None,
    ) -> None:
        self.provisioning_seconds = provisioning_seconds
        self.starting_seconds = starting_seconds
        self.data_centers = tuple(data_centers)
        self.capacity_per_gpu_type = capacity_per_gpu_type
        self.capacity: dict[tuple[str, str], int] = {}
        # Capacity that changes later: (trio time, GPU type, count, data center or None),
        # applied in order once the fake's clock reaches each.
        self.capacity_changes: list[tuple[float, str, int, str | None]] = []
        # The catalog: every GPU type a pod can be created with, in listing order.
        self.gpu_types: dict[str, FakeGpuType] = {}
        if gpu_types is None:
            if gpu_prices is None:
                gpu_types = DEFAULT_GPU_TYPES
            else:
                gpu_types = [
                    FakeGpuType(gpu, gpu.removeprefix("NVIDIA "), 24, price)
                    for gpu, price in gpu_prices.items()
                ]
        for gpu_type in gpu_types:
            self.add_gpu_type(gpu_type)
        self.network_volumes: dict[str, FakeVolume] = {}
        self.clusters: dict[str, FakeCluster] = {}
        self.accounts: dict[str, Account] = {}
        self.pods: dict[str, FakePod] = {}
        self.requests: list[RecordedRequest] = []
        self.faults: list[Fault] = []
        self.page_size: int | None = None  # set to paginate GET /pods with nextCursor
        self.scoped_keys_can_delete = True
        self.on_running: Hook | None = None
        # What a pod's container printed so far (the fake pods set it): its log's
        # ``container`` source.
        self.container_output: Callable[[FakePod], str] | None = None
        self.log_poll = 0.2  # how often an open log stream looks for new lines
        self.on_stopped: Hook | None = None
        self.on_deleted: Hook | None = None
        self._scoped: dict[str, str] = {}  # pod-scoped key -> pod id
        self._next_fates: list[tuple[float | None, float | None]] = []
        self._rng = random.Random(seed)
        self._epoch: tuple[float, datetime] | None = None
        self._wall_start = wall_start
        self.send_date = True  # False: answers without a Date header
        # Usage shows in ``GET /billing/pods`` only this many seconds after it happened.
        self.billing_lag = 0.0

    # --- set-up and inspection (for tests and the fake pod) ---

    def add_account(self, key: str | None = None, balance: float = 100.0) -> str:
        """Add an account (a random key unless given); return its API key."""
        key = key or "rpa_" + self._token(40)
        self.accounts[key] = Account(key, balance)
        return key

    def add_network_volume(
        self,
        owner: str,
        name: str = "volume",
        *,
        size: int = 50,
        data_center: str | None = None,
        volume_id: str | None = None,
        volume_type: str = "STANDARD",
    ) -> FakeVolume:
        """A network volume of account ``owner`` that exists from now on (in the first
        data center unless given)."""
        volume = FakeVolume(
            id=volume_id or self._new_volume_id(),
            owner=owner,
            name=name,
            size=size,
            data_center=data_center or self.data_centers[0],
            type=volume_type,
            created_at=trio.current_time(),
        )
        self.network_volumes[volume.id] = volume
        return volume

    def live_volumes(self, owner: str | None = None) -> list[FakeVolume]:
        """The network volumes not deleted (of ``owner``, or every account's)."""
        return [
            v
            for v in self.network_volumes.values()
            if v.deleted_at is None and owner in (None, v.owner)
        ]

    def volume_create_requests(self) -> list[RecordedRequest]:
        """Every ``POST /network-volumes`` received, with its schema verdict."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/network-volumes"]

    def pod_scoped_key(self, pod_id: str) -> str:
        """The pod's own key (``RUNPOD_API_KEY`` inside it): GET, DELETE, actions on it."""
        for key, owner in self._scoped.items():
            if owner == pod_id:
                return key
        key = "rpsk_" + self._token(32)
        self._scoped[key] = pod_id
        return key

    @property
    def gpu_prices(self) -> dict[str, float]:
        """USD/h for one GPU of each type the fake offers (what a pod of it bills per GPU)."""
        return {
            gpu.id: gpu.price if gpu.billed_price is None else gpu.billed_price
            for gpu in self.gpu_types.values()
        }

    def add_gpu_type(self, gpu_type: FakeGpuType) -> None:
        """Offer a GPU type (replacing one of the same id), with the default capacity in
        every data center that has none set for it yet."""
        self.gpu_types[gpu_type.id] = gpu_type
        for dc in self.data_centers:
            self.capacity.setdefault((gpu_type.id, dc), self.capacity_per_gpu_type)

    def remove_gpu_type(self, gpu_id: str) -> None:
        """Stop offering a GPU type: it leaves the catalog and creates of it fail (400)."""
        del self.gpu_types[gpu_id]

    def set_capacity(self, gpu_id: str, count: int, data_center: str | None = None) -> None:
        """Set how many GPUs of a type are free in a data center (all of them if None)."""
        for dc in [data_center] if data_center else self.data_centers:
            self.capacity[(gpu_id, dc)] = count

    def set_capacity_at(
        self, when: float, gpu_id: str, count: int, data_center: str | None = None
    ) -> None:
        """From trio time ``when`` on, :meth:`set_capacity` as given: "no capacity for a
        while" is ``set_capacity(gpu, 0)`` now and ``set_capacity_at(later, gpu, 8)``."""
        self.capacity_changes.append((when, gpu_id, count, data_center))
        self.capacity_changes.sort(key=lambda change: change[0])

    def fail_next(self, route: str, status: int | None = 500, *, times: int = 1, **kw: Any) -> None:
        """Script the next ``times`` requests matching ``route`` (see :class:`Fault`)."""
        for _ in range(times):
            self.faults.append(Fault(route, status, **kw))

    def linger_next_delete(self, reads: int) -> None:
        """The next delete is accepted (204), but the pod stays listed for ``reads`` reads."""
        self.faults.append(Fault("DELETE /pods/{id}", None, succeed=True, linger_reads=reads))

    def linger_next_cluster_delete(self, reads: int) -> None:
        """The next cluster delete is accepted (204) and the cluster is gone, but each of its
        members stays listed (``includeClusterPods``) for ``reads`` reads."""
        self.faults.append(Fault("DELETE /clusters/{id}", None, succeed=True, linger_reads=reads))

    def script_next_pod(
        self, *, vanish_after: float | None = None, error_after: float | None = None
    ) -> None:
        """The next created pod vanishes (404) or ends in ERROR this long after creation."""
        self._next_fates.append((vanish_after, error_after))

    async def lose_gpus(self, pod_id: str) -> None:
        """The pod's host restarts it with no GPU (another tenant took them while it was
        down): whatever ran in it ends, it boots again and shows RUNNING, its runtime
        listing no GPU — as Runpod's zero-GPU pods do."""
        pod = self.pods[pod_id]
        await self._stopped(pod)
        pod.gpus_lost = True
        self._boot_again(pod, trio.current_time())

    def vanish(self, pod_id: str) -> None:
        """Make a pod disappear now, without a delete (it reads 404 from now on)."""
        self.pods[pod_id].vanish_at = trio.current_time()

    def set_ssh_endpoint(self, pod_id: str, host: str, port: int, username: str = "root") -> None:
        """What the pod shows as ``ssh.direct`` once RUNNING (call from ``on_running``)."""
        self.pods[pod_id].ssh = SshDirect(host, port, username)

    def pod(self, pod_id: str) -> FakePod:
        """A pod by id (deleted ones included)."""
        return self.pods[pod_id]

    def live_pods(self) -> list[FakePod]:
        """Pods not deleted and not vanished, in creation order."""
        now = trio.current_time()
        return [p for p in self.pods.values() if not p.deleted and not _vanished(p, now)]

    def status(self, pod_id: str) -> str:
        """A pod's status now: its phase, or TERMINATED once deleted or vanished."""
        pod = self.pods[pod_id]
        if pod.deleted or _vanished(pod, trio.current_time()):
            return "TERMINATED"
        return self._phase(pod, trio.current_time())

    def pod_env(self, pod_id: str) -> dict[str, str]:
        """The environment the create call gave the pod."""
        return self.pods[pod_id].env

    def pod_runtime_env(self, pod_id: str) -> dict[str, str]:
        """The environment the container sees: the create's plus Runpod's own variables."""
        pod = self.pods[pod_id]
        env = pod.env
        env["RUNPOD_POD_ID"] = pod.id
        env["RUNPOD_API_KEY"] = self.pod_scoped_key(pod.id)
        direct = self._direct(pod)
        env["RUNPOD_PUBLIC_IP"] = direct.host
        env["RUNPOD_TCP_PORT_22"] = str(direct.port)
        if pod.cluster_id is not None:
            env.update(self.cluster_env(pod.id))
        return env

    def create_requests(self) -> list[RecordedRequest]:
        """Every ``POST /pods`` received, with its schema verdict."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/pods"]

    def billing_requests(self) -> list[RecordedRequest]:
        """Every ``GET /billing/pods`` received, with its verdict against the published
        parameters."""
        return [r for r in self.requests if r.path == "/billing/pods"]

    # --- clusters: set-up and inspection ---

    def cluster(self, cluster_id: str) -> FakeCluster:
        """A cluster by id (deleted ones included)."""
        return self.clusters[cluster_id]

    def live_clusters(self, owner: str | None = None) -> list[FakeCluster]:
        """The clusters not deleted (of ``owner``, or every account's)."""
        return [c for c in self.clusters.values() if not c.deleted and owner in (None, c.owner)]

    def cluster_members(self, cluster_id: str) -> list[FakePod]:
        """Every pod made for the cluster, by rank (deleted and vanished ones included)."""
        members = [self.pods[pod_id] for pod_id in self.clusters[cluster_id].members]
        return sorted(members, key=lambda pod: pod.rank or 0)

    def member(self, cluster_id: str, rank: int) -> FakePod:
        """The cluster's member of rank ``rank``."""
        return self.cluster_members(cluster_id)[rank]

    async def fail_member(self, cluster_id: str, rank: int) -> None:
        """The member's container exits (its job failed, say): it shows EXITED from now on,
        stops billing, and everything in it ends (``on_stopped``); the others go on."""
        pod = self.member(cluster_id, rank)
        now = trio.current_time()
        pod.halted = "EXITED"
        pod.bill_until(now)
        await self._stopped(pod)

    def vanish_member(self, cluster_id: str, rank: int) -> None:
        """The member disappears now, as Runpod losing its machine would (see
        :meth:`vanish`); the others go on."""
        self.vanish(self.member(cluster_id, rank).id)

    def cluster_env(self, pod_id: str) -> dict[str, str]:
        """The variables Runpod sets on a cluster's member: the primary's (rank 0) overlay
        address and port (also under the legacy ``MASTER_*`` names), this node's address
        and rank, the node count, the GPUs per node, ``HOST_NODE_ADDR`` (the primary's
        ``address:port``) and ``WORLD_SIZE`` (every GPU of every node)."""
        pod = self.pods[pod_id]
        assert pod.cluster_id is not None, f"pod {pod_id} is in no cluster"
        cluster = self.clusters[pod.cluster_id]
        primary = self.member(cluster.id, 0)
        nodes = len(cluster.members)
        addr, port = str(primary.ip), str(CLUSTER_PRIMARY_PORT)
        return {
            "PRIMARY_ADDR": addr,
            "MASTER_ADDR": addr,
            "PRIMARY_PORT": port,
            "MASTER_PORT": port,
            "NODE_ADDR": str(pod.ip),
            "NODE_RANK": str(pod.rank),
            "NUM_NODES": str(nodes),
            "NUM_TRAINERS": str(pod.gpu_count),
            "HOST_NODE_ADDR": f"{addr}:{port}",
            "WORLD_SIZE": str(nodes * pod.gpu_count),
        }

    def cluster_create_requests(self) -> list[RecordedRequest]:
        """Every ``POST /clusters`` received, with its schema verdict."""
        return [r for r in self.requests if r.method == "POST" and r.path == "/clusters"]

    def cluster_billing_requests(self) -> list[RecordedRequest]:
        """Every ``GET /billing/clusters`` received, with its verdict against the published
        parameters."""
        return [r for r in self.requests if r.path == "/billing/clusters"]

    def transport(self) -> FakeTransport:
        """An httpx transport answering from this fake in-process."""
        return FakeTransport(self)

    # --- the request handler ---

    async def handle(self, request: FakeRequest) -> FakeResponse:
        """Answer one request (front-end independent)."""
        now = trio.current_time()
        self.wall(now)  # the fake's clock starts, at the latest, with its first request
        path = request.path
        if path == PREFIX or path.startswith(PREFIX + "/"):
            path = path[len(PREFIX) :] or "/"
        else:
            path = "/not-v2" + path
        headers = {k: v for k, v in request.headers.items() if k != "authorization"}
        if "authorization" in request.headers:
            headers["authorization"] = "<present>"
        try:
            parsed: Any = json.loads(request.body) if request.body else None
        except ValueError:
            parsed = _NOT_JSON
        record = RecordedRequest(
            now, request.method, path, dict(request.query), headers, parsed, "none"
        )
        self.requests.append(record)
        route = _route(request.method, path)
        # Every body is checked against the published schema, faulted requests included.
        schema = {
            "POST /clusters": "CreateClusterRequest",
            "POST /pods": "CreatePodRequest",
            "POST /pods/{id}/action": "PodActionRequest",
            "POST /network-volumes": "CreateNetworkVolumeRequest",
        }
        if route in schema:
            record.schema_errors = (
                ["$: not JSON"]
                if parsed is _NOT_JSON
                else runpod_schema.errors(schema[route], parsed)
            )
        elif route in (
            "GET /billing/pods",
            "GET /billing/network-volumes",
            "GET /billing/clusters",
        ):
            record.schema_errors = _billing_query(request.query, path)[1]
        await self._advance(now)
        fault = self._take_fault(route, path)
        if fault is not None and fault.connect_error:
            record.fault = True
            return FakeResponse(0, [], connect_error=True, error_message=fault.error_message)
        if fault is not None and not fault.succeed:
            response = self._fault_response(fault)
            record.fault = True
        else:
            response = await self._dispatch(request, path, parsed, record)
            if fault is not None:
                record.fault = True
                if fault.linger_reads and request.method == "DELETE":
                    pod_id = path.split("/")[2]
                    if pod_id in self.pods:
                        self.pods[pod_id].linger_reads = fault.linger_reads
                    elif pod_id in self.clusters:
                        for member in self.clusters[pod_id].members:
                            self.pods[member].linger_reads = fault.linger_reads
                if fault.status is not None or fault.timeout:
                    response = self._fault_response(fault)
        record.status = response.status
        if self.send_date and not any(name.lower() == "date" for name, _ in response.headers):
            # Every answer of an HTTP server with a clock carries its Date (RFC 9110).
            response.headers.append(("date", self.http_date(now)))
        return response

    async def _dispatch(
        self, request: FakeRequest, path: str, body: Any, record: RecordedRequest
    ) -> FakeResponse:
        parts = _segments(request.raw_path) if request.raw_path is not None else None
        if parts is None:
            parts = path.strip("/").split("/")
        if parts[0] == "clusters" or parts == ["billing", "clusters"]:
            return await self._cluster_dispatch(request, parts, body, record)
        catalog = parts[:2] == ["catalog", "gpus"] and len(parts) <= 3
        centers = parts == ["catalog", "datacenters"]
        billing = parts == ["billing", "pods"]
        volume_billing = parts == ["billing", "network-volumes"]
        volumes = parts[0] == "network-volumes" and len(parts) <= 2
        if (
            not catalog
            and not centers
            and not billing
            and not volume_billing
            and not volumes
            and (
                parts[0] != "pods"
                or len(parts) > 3
                or (len(parts) == 3 and parts[2] not in ("action", "logs"))
            )
        ):
            return _problem(404, "resource not found")
        auth = self._authenticate(request.headers.get("authorization"))
        record.auth = auth
        if auth in ("none", "invalid"):
            detail = "missing bearer token" if auth == "none" else "invalid api key"
            return _problem(401, detail)
        method = request.method
        if catalog or centers:
            if auth.startswith("pod:"):
                return _problem(403, "access denied")
            if method != "GET":
                return _problem(405, "The requested method is not allowed for this path.")
            if centers:
                return self._data_centers(request.query)
            return self._catalog(parts[2] if len(parts) == 3 else None, request.query)
        if billing or volume_billing:
            if auth.startswith("pod:"):
                return _problem(403, "access denied")
            if method != "GET":
                return _problem(405, "The requested method is not allowed for this path.")
            owner = request.headers["authorization"].split(None, 1)[1]
            if volume_billing:
                return self._volume_billing(owner, request.query)
            return self._billing(owner, request.query, record)
        if volumes:
            if auth.startswith("pod:"):
                return _problem(403, "access denied")
            owner = request.headers["authorization"].split(None, 1)[1]
            return await self._volumes(owner, method, parts[1:], body, record)
        pod_id = parts[1] if len(parts) > 1 else None
        if auth.startswith("pod:"):
            allowed = pod_id == auth[4:] and (
                (len(parts) == 2 and method in ("GET", "DELETE"))
                or (len(parts) == 3 and parts[2] == "action" and method == "POST")
            )
            if not allowed:
                return _problem(403, "access denied")
            owner = self.pods[auth[4:]].owner
        else:
            owner = request.headers["authorization"].split(None, 1)[1]
        if len(parts) == 1:
            if method == "GET":
                return self._list(owner, request.query)
            if method == "POST":
                return await self._create(owner, body, record)
            return _problem(405, "The requested method is not allowed for this path.")
        assert pod_id is not None
        pod = self.pods.get(pod_id)
        now = trio.current_time()
        visible = (
            pod is not None
            and pod.owner == owner
            and not _vanished(pod, now)
            and (not pod.deleted or pod.linger_reads > 0)
        )
        member_change = (method == "DELETE" and len(parts) == 2) or parts[2:] == ["action"]
        if pod is not None and visible and not pod.deleted and pod.cluster_id and member_change:
            return _problem(
                409, f"pod {pod.id} belongs to cluster {pod.cluster_id}: delete the cluster"
            )
        if len(parts) == 3 and parts[2] == "logs":
            if method != "GET":
                return _problem(405, "The requested method is not allowed for this path.")
            if pod is None or not visible or pod.deleted:
                return _problem(404, "pod not found")
            return self._logs(pod, request)
        if len(parts) == 3:
            if method != "POST":
                return _problem(405, "The requested method is not allowed for this path.")
            if pod is None or not visible or pod.deleted:
                return _problem(404, "pod not found")
            return await self._action(pod, body, record, auth)
        if pod is None or not visible:
            return _problem(404, "pod not found")
        if method == "GET":
            if pod.deleted:
                pod.linger_reads -= 1
            return _json(200, self._render(pod, now))
        if method == "DELETE":
            if pod.deleted:
                return _problem(404, "pod not found")
            if auth.startswith("pod:") and not self.scoped_keys_can_delete:
                return _problem(403, "access denied")
            await self._delete(pod)
            return FakeResponse(204, _rate_headers())
        return _problem(405, "The requested method is not allowed for this path.")

    # --- endpoints ---

    def _list(self, owner: str, query: dict[str, str]) -> FakeResponse:
        now = trio.current_time()
        members = query.get("includeClusterPods") == "true"
        pods = [
            p
            for p in self.pods.values()
            if p.owner == owner and not _vanished(p, now) and (not p.deleted or p.linger_reads > 0)
            if members or p.cluster_id is None
        ]
        start = 0
        cursor = query.get("cursor")
        if cursor is not None:
            if not cursor.startswith("page-") or not cursor[5:].isdigit():
                return _problem(400, "invalid cursor")
            start = int(cursor[5:])
        end = len(pods) if self.page_size is None else start + self.page_size
        page = pods[start:end]
        for pod in page:
            if pod.deleted:
                pod.linger_reads -= 1
        answer: dict[str, Any] = {"pods": [self._render(p, now) for p in page]}
        if end < len(pods):
            answer["nextCursor"] = f"page-{end}"
        return _json(200, answer)

    def _catalog(self, gpu_id: str | None, query: dict[str, str]) -> FakeResponse:
        """``GET /catalog/gpus`` (``gpu_id`` None) or ``GET /catalog/gpus/{id}``."""
        asked, refusal = _catalog_query(query)
        if refusal is not None:
            return refusal
        if gpu_id is not None:
            gpu = self.gpu_types.get(gpu_id)
            if gpu is None:
                return _problem(404, "resource not found")
            return _json(200, self._catalog_entry(gpu, asked, single=True) or {})
        entries = [self._catalog_entry(gpu, asked) for gpu in self.gpu_types.values()]
        return _json(200, {"gpus": [entry for entry in entries if entry is not None]})

    def _catalog_entry(
        self, gpu: FakeGpuType, asked: dict[str, Any] | None, *, single: bool = False
    ) -> dict[str, Any] | None:
        """A type's catalog entry, with its availability when ``asked`` (None: a listing
        filtered by country leaves the type out)."""
        entry = gpu.catalog_entry()
        if asked is None:
            return entry
        count: int = asked.get("count", 1)
        cloud: str = asked.get("cloud", "SECURE")
        countries: list[str] | None = asked.get("countryCodes")
        offered = (
            ("POD" in asked["product"] or ("CLUSTER" in asked["product"] and gpu.cluster))
            and count <= gpu.max_count
            and (gpu.secure if cloud == "SECURE" else gpu.community_price is not None)
        )
        cuda_ok = _cuda_wanted(asked)
        centers: list[dict[str, Any]] = []
        for dc in self.data_centers:
            name, country = DATA_CENTER_NAMES.get(dc, (dc, ""))
            if countries is not None and country not in countries:
                continue
            free = self._free(gpu.id, dc) // count if offered and cuda_ok else 0
            centers.append({"id": dc, "name": name, "availability": _level(free)})
        if countries is not None and not centers and not single:
            return None
        levels = [c["availability"] for c in centers]
        best = max(levels, key=_LEVELS.index) if levels else "NONE"
        entry["availability"] = best
        if best != "NONE":
            entry["dataCenters"] = centers
        if cuda_ok:
            entry["cudaVersions"] = [{"version": CUDA_VERSION, "available": best != "NONE"}]
        else:
            entry["cudaVersions"] = []
        return entry

    # --- the data centers' catalog ---

    def _data_centers(self, query: dict[str, str]) -> FakeResponse:
        """``GET /catalog/datacenters``: the fake's data centers, filtered by ``regions``,
        with each GPU type's stock there when ``include=GPU_AVAILABILITY`` (the query is
        checked against the published parameters first: 422 when it breaks them)."""
        errors = runpod_schema.query_errors("/catalog/datacenters", query)
        if errors:
            return _problem(422, "Request validation failed.", errors=errors)
        include = set(query["include"].split(",")) if query.get("include") else set()
        regions = set(query["regions"].split(",")) if query.get("regions") else None
        found = []
        for dc in self.data_centers:
            region = DATA_CENTER_REGIONS.get(dc, "UNKNOWN")
            if regions is not None and region not in regions:
                continue
            entry: dict[str, Any] = {
                "id": dc,
                "name": DATA_CENTER_NAMES.get(dc, (dc, ""))[0],
                "region": region,
                "globalNetwork": region != "UNKNOWN",
                "networkVolumeTypes": ["STANDARD"],
                "compliance": ["GDPR"] if region == "EUROPE" else ["SOC_2_TYPE_2"],
            }
            if "GPU_AVAILABILITY" in include and self.gpu_types:
                entry["gpuAvailability"] = [
                    {"id": gpu.id, "name": gpu.name, "availability": _level(self._free(gpu.id, dc))}
                    for gpu in self.gpu_types.values()
                    if gpu.secure
                ]
            found.append(entry)
        return _json(200, {"dataCenters": found})

    async def _create(self, owner: str, body: Any, record: RecordedRequest) -> FakeResponse:
        if body is _NOT_JSON:
            return _problem(400, "request body is not valid JSON")
        errors = record.schema_errors
        if errors:
            return _problem(422, "Request validation failed.", errors=errors)
        if ("gpu" in body) == ("cpu" in body):
            return _problem(400, "exactly one of gpu or cpu must be set")
        if "cpu" in body:
            return _problem(400, "CPU pods are not offered by this fake")
        if "templateId" in body:
            return _problem(400, "templates are not offered by this fake")
        gpu = body["gpu"]
        if gpu.get("minCudaVersion") and gpu.get("allowedCudaVersions"):
            return _problem(400, "minCudaVersion and allowedCudaVersions are mutually exclusive")
        mounts = body.get("mounts") or {}
        if "persistent" in mounts and "network" in mounts:
            return _problem(400, "at most one of mounts.persistent and mounts.network")
        volume_centers: list[str] = []
        for mount in mounts.get("network", []):
            volume = self.network_volumes.get(mount["volumeId"])
            if volume is None or volume.owner != owner or volume.deleted_at is not None:
                return _problem(404, f"network volume {mount['volumeId']} not found")
            volume_centers.append(volume.data_center)
        gpu_id, count = gpu["id"], gpu.get("count", 1)
        offered = self.gpu_types.get(gpu_id)
        if offered is None:
            return _problem(400, f"GPU type {gpu_id!r} is not available")
        cloud = body.get("cloud", "SECURE")
        if not (offered.secure if cloud == "SECURE" else offered.community_price is not None):
            return _problem(400, f"GPU type {gpu_id!r} is not offered on the {cloud} cloud")
        if count > offered.max_count:
            return _problem(400, f"at most {offered.max_count} GPUs of type {gpu_id!r} per pod")
        wanted = body.get("dataCenterIds") or list(self.data_centers)
        unknown = [dc for dc in wanted if dc not in self.data_centers]
        if unknown:
            return _problem(400, f"unknown data center {unknown[0]!r}")
        if volume_centers:
            # A pod is placed where its network volume lives, or nowhere.
            if volume_centers[0] not in wanted:
                return _problem(
                    400,
                    f"network volume {mounts['network'][0]['volumeId']} is in "
                    f"{volume_centers[0]}, which dataCenterIds does not allow",
                )
            wanted = [volume_centers[0]]
        price = round(self.gpu_prices[gpu_id] * count, 4)
        if self.accounts[owner].balance < price:
            return _problem(402, "Insufficient balance to create this pod. Add funds and retry.")
        placed = next((dc for dc in wanted if self._free(gpu_id, dc) >= count), None)
        if placed is None:
            return _problem(400, NO_CAPACITY)
        now = trio.current_time()
        vanish_after, error_after = self._next_fates.pop(0) if self._next_fates else (None, None)
        pod = FakePod(
            id=self._new_id(),
            owner=owner,
            body=body,
            gpu_id=gpu_id,
            gpu_count=count,
            data_center_id=placed,
            price=price,
            created_at=now,
            boot_at=now,
            boot_provisioning=self.provisioning_seconds,
            boot_starting=self.starting_seconds,
            vanish_at=None if vanish_after is None else now + vanish_after,
            error_at=None if error_after is None else now + error_after,
            index=len(self.pods),
        )
        pod.bill_from(now)
        self.pods[pod.id] = pod
        return _json(201, self._render(pod, now))

    async def _action(
        self, pod: FakePod, body: Any, record: RecordedRequest, auth: str
    ) -> FakeResponse:
        errors = record.schema_errors
        if errors:
            return _problem(422, "Request validation failed.", errors=errors)
        action = body["action"]
        now = trio.current_time()
        phase = self._phase(pod, now)
        if action not in _ALLOWED_ACTIONS.get(phase, ()):
            return _problem(409, f"cannot {action} a pod that is {phase}")
        if action == "terminate":
            if auth.startswith("pod:") and not self.scoped_keys_can_delete:
                return _problem(403, "access denied")
            await self._delete(pod)
            return FakeResponse(204, _rate_headers())
        if action == "stop":
            pod.halted = "EXITED"
            pod.bill_until(now)
            await self._stopped(pod)
        else:  # start or restart: boot again, skipping provisioning (same machine)
            if action == "restart":
                await self._stopped(pod)
            self._boot_again(pod, now)
        return _json(200, self._render(pod, now))

    def _boot_again(self, pod: FakePod, now: float) -> None:
        """Boot a stopped (or restarting) pod on the same machine: no provisioning."""
        pod.halted = None
        pod.bill_from(now)
        pod.boot_at = now
        pod.boot_provisioning = 0.0
        pod.boot_starting = self.starting_seconds

    # --- a pod's log ---

    def _logs(self, pod: FakePod, request: FakeRequest) -> FakeResponse:
        """``GET /pods/{id}/logs``: Server-Sent Events, the parameters checked against the
        published description; the backfill, then new lines until the pod is gone."""
        errors: list[str] = []
        values: dict[str, Any] = {}
        for name in runpod_schema.POD_LOG_PARAMETERS:
            param = runpod_schema.parameter(name)
            key = param["name"]
            where = request.headers if param["in"] == "header" else request.query
            lookup = key.lower() if param["in"] == "header" else key
            if lookup not in where:
                continue
            raw: Any = where[lookup]
            if param["schema"].get("type") == "integer":
                with suppress(ValueError):
                    raw = int(raw)
            errors.extend(runpod_schema.parameter_errors(name, raw))
            values[key] = raw
        since = values.get("since")
        if since is not None and not errors and _parse_wall(since) is None:
            errors.append("query since: is not a 'date-time'")
        if errors:
            return _problem(422, "Request validation failed.", errors=sorted(errors))
        source = values.get("source")
        lines = self._log_lines(pod, trio.current_time(), source)
        cursor = values.get("Last-Event-ID")
        if cursor is not None:
            start = _resume_index(cursor, lines)
        elif since is not None:
            moment = _parse_wall(since)
            assert moment is not None  # checked above
            start = next((i for i, (t, _, _) in enumerate(lines) if t >= moment), len(lines))
        else:
            start = max(0, len(lines) - int(values.get("tail", 100)))

        async def events() -> AsyncIterator[bytes]:
            sent = start
            while True:
                now = trio.current_time()
                found = self._log_lines(pod, now, source)
                for index in range(sent, len(found)):
                    moment, origin, text = found[index]
                    yield _sse(index, moment, origin, text)
                sent = max(sent, len(found))
                if pod.deleted or _vanished(pod, now):
                    return
                await trio.sleep(self.log_poll)

        return FakeResponse(
            200,
            [
                *_rate_headers(),
                ("content-type", "text/event-stream"),
                ("cache-control", "no-cache"),
                ("x-accel-buffering", "no"),
            ],
            stream=events,
        )

    def _log_lines(
        self, pod: FakePod, now: float, source: str | None
    ) -> list[tuple[datetime, str, str]]:
        """Every line of the pod's log up to ``now``, oldest first: the ``system`` source
        tells the current boot (the image pull during PROVISIONING, the container's start),
        the ``container`` source what its container printed."""
        found: list[tuple[float, str, str]] = []
        if source in (None, "system"):
            found += [(t, "system", text) for t, text in _system_story(pod) if t <= now]
        if source in (None, "container"):
            if self.container_output is not None and pod.running_seen:
                printed = self.container_output(pod).splitlines()
                for text in printed[len(pod.container_seen) :]:
                    pod.container_seen.append((now, text))
            found += [(t, "container", text) for t, text in pod.container_seen]
        found.sort(key=lambda item: item[0])
        return [(self.wall(t), origin, text) for t, origin, text in found]

    # --- billing ---

    def _billing_window(
        self, query: dict[str, str], path: str
    ) -> (
        tuple[dict[str, Any], list[tuple[datetime, datetime]], datetime, datetime, str]
        | FakeResponse
    ):
        """A billing query read against ``GET path``'s published parameters: its values,
        the window's buckets, the window snapped out to whole buckets and the bucket size;
        or the refusal (422 for a malformed value, 400 for a window that is not one)."""
        values, errors = _billing_query(query, path)
        if errors:
            return _problem(422, "Request validation failed.", errors=errors)
        if "lastN" in values and ("startTime" in values or "endTime" in values):
            return _problem(400, "lastN is mutually exclusive with startTime and endTime")
        if (
            "startTime" in values
            and "endTime" in values
            and values["endTime"] <= values["startTime"]
        ):
            return _problem(400, "endTime must be after startTime")
        size: str = values.get("bucketSize", "day")
        now = trio.current_time()
        wall_now = self.wall(now)
        if "lastN" in values:
            end = _bucket_after(_bucket_start(wall_now, size), size)
            start = _bucket_start(wall_now, size)
            for _ in range(values["lastN"] - 1):
                start = _bucket_start(start - timedelta(seconds=1), size)
        else:
            start = _bucket_start(values.get("startTime", wall_now - timedelta(days=30)), size)
            end = _bucket_end(values.get("endTime", wall_now), size)
        if end <= start:
            return _problem(400, "endTime must be after startTime")
        buckets: list[tuple[datetime, datetime]] = []
        cursor = start
        while cursor < end:
            if len(buckets) >= _MAX_BUCKETS:
                return _problem(400, f"more than {_MAX_BUCKETS} buckets of {size}")
            after = _bucket_after(cursor, size)
            buckets.append((cursor, after))
            cursor = after
        return values, buckets, start, end, size

    def _billing(self, owner: str, query: dict[str, str], record: RecordedRequest) -> FakeResponse:
        """``GET /billing/pods``: the query checked against the published parameters, the
        window snapped out to whole buckets, one record per pod per bucket it billed in."""
        window = self._billing_window(query, "/billing/pods")
        if isinstance(window, FakeResponse):
            return window
        values, buckets, start, end, size = window
        now = trio.current_time()
        wanted = values.get("podId")
        billed_until = now - self.billing_lag  # what has reached the billing yet
        records: list[dict[str, Any]] = []
        for pod in self.pods.values():
            if pod.owner != owner or (wanted is not None and pod.id != wanted):
                continue
            if pod.cluster_id is not None:
                continue  # pod-only billing: a member bills under its cluster
            for low, high in buckets:
                a, b = self._trio_at(low), min(self._trio_at(high), billed_until)
                seconds = pod.billed_seconds(a, b) if b > a else 0.0
                if seconds <= 0:
                    continue
                amount = round(pod.price * seconds / 3600, 6)
                records.append(
                    {
                        "startTime": _stamp(low),
                        "endTime": _stamp(high),
                        "podId": pod.id,
                        "totalAmount": amount,
                        "gpuAmount": amount,
                        "cpuAmount": 0.0,
                        "diskAmount": 0.0,
                    }
                )
        return _billing_answer(
            records,
            (start, end, size),
            ("podId", wanted, "uniquePodCount"),
            ("totalAmount", "gpuAmount", "cpuAmount", "diskAmount"),
        )

    # --- network volumes ---

    async def _volumes(
        self, owner: str, method: str, rest: list[str], body: Any, record: RecordedRequest
    ) -> FakeResponse:
        """``/network-volumes`` (list, create) and ``/network-volumes/{id}`` (read,
        delete), each account seeing only its own volumes."""
        not_allowed = _problem(405, "The requested method is not allowed for this path.")
        if not rest:
            if method == "GET":
                listed = [v.render() for v in self.live_volumes(owner)]
                return _json(200, {"networkVolumes": listed})
            if method != "POST":
                return not_allowed
            if body is _NOT_JSON:
                return _problem(400, "request body is not valid JSON")
            if record.schema_errors:
                return _problem(422, "Request validation failed.", errors=record.schema_errors)
            if body["dataCenter"] not in self.data_centers:
                return _problem(400, f"unknown data center {body['dataCenter']!r}")
            volume = self.add_network_volume(
                owner,
                body["name"],
                size=body["size"],
                data_center=body["dataCenter"],
                volume_type=body.get("type", "STANDARD"),
            )
            return _json(201, volume.render())
        found = self.network_volumes.get(rest[0])
        if found is None or found.owner != owner or found.deleted_at is not None:
            return _problem(404, "network volume not found")
        if method == "GET":
            return _json(200, found.render())
        if method != "DELETE":
            return not_allowed
        users = [p.id for p in self.live_pods() if found.id in _mounted(p)]
        if users:
            return _problem(409, f"network volume {found.id} is in use by pod {', '.join(users)}")
        found.deleted_at = trio.current_time()
        return FakeResponse(204, _rate_headers())

    def _volume_billing(self, owner: str, query: dict[str, str]) -> FakeResponse:
        """``GET /billing/network-volumes``: the query checked against the published
        parameters, one record per volume per bucket it existed in, at
        :data:`VOLUME_PRICE` per GB per month."""
        window = self._billing_window(query, "/billing/network-volumes")
        if isinstance(window, FakeResponse):
            return window
        values, buckets, start, end, size = window
        wanted = values.get("networkVolumeId")
        billed_until = trio.current_time() - self.billing_lag
        records: list[dict[str, Any]] = []
        for volume in self.network_volumes.values():
            if volume.owner != owner or (wanted is not None and volume.id != wanted):
                continue
            for low, high in buckets:
                a, b = self._trio_at(low), min(self._trio_at(high), billed_until)
                seconds = volume.billed_seconds(a, b) if b > a else 0.0
                if seconds <= 0:
                    continue
                amount = round(volume.size * VOLUME_PRICE * seconds / _MONTH_SECONDS, 6)
                fast = volume.type == "HIGH_PERFORMANCE"
                records.append(
                    {
                        "startTime": _stamp(low),
                        "endTime": _stamp(high),
                        "networkVolumeId": volume.id,
                        "totalAmount": amount,
                        "standardAmount": 0.0 if fast else amount,
                        "highPerformanceAmount": amount if fast else 0.0,
                    }
                )
        return _billing_answer(
            records,
            (start, end, size),
            ("networkVolumeId", wanted, "uniqueNetworkVolumeCount"),
            ("totalAmount", "standardAmount", "highPerformanceAmount"),
        )

    # --- clusters ---

    async def _cluster_dispatch(
        self, request: FakeRequest, parts: list[str], body: Any, record: RecordedRequest
    ) -> FakeResponse:
        """``/clusters``, ``/clusters/{id}``, ``/clusters/{id}/pods`` and
        ``/billing/clusters``. An account sees its own clusters; a member's own key its
        cluster only (read, its members, delete)."""
        billing = parts == ["billing", "clusters"]
        if not billing and (len(parts) > 3 or (len(parts) == 3 and parts[2] != "pods")):
            return _problem(404, "resource not found")
        auth = self._authenticate(request.headers.get("authorization"))
        record.auth = auth
        if auth in ("none", "invalid"):
            detail = "missing bearer token" if auth == "none" else "invalid api key"
            return _problem(401, detail)
        method = request.method
        not_allowed = _problem(405, "The requested method is not allowed for this path.")
        if auth.startswith("pod:"):
            own = self.pods[auth[4:]]
            allowed = (
                not billing
                and len(parts) >= 2
                and parts[1] == own.cluster_id
                and (method == "GET" or (method == "DELETE" and len(parts) == 2))
            )
            if not allowed:
                return _problem(403, "access denied")
            if method == "DELETE" and not self.scoped_keys_can_delete:
                return _problem(403, "access denied")
            owner = own.owner
        else:
            owner = request.headers["authorization"].split(None, 1)[1]
        if billing:
            return self._cluster_billing(owner, request.query) if method == "GET" else not_allowed
        now = trio.current_time()
        if len(parts) == 1:
            if method == "GET":
                listed = [self._render_cluster(c, now) for c in self.live_clusters(owner)]
                return _json(200, {"clusters": listed})
            if method == "POST":
                return await self._create_cluster(owner, body, record)
            return not_allowed
        cluster = self.clusters.get(parts[1])
        if cluster is None or cluster.owner != owner or cluster.deleted:
            return _problem(404, "cluster not found")
        if len(parts) == 3:
            if method != "GET":
                return not_allowed
            members = [p for p in self.cluster_members(cluster.id) if _member_listed(p, now)]
            members.sort(key=lambda pod: pod.index)
            return _json(200, {"pods": [self._render(p, now) for p in members]})
        if method == "GET":
            return _json(200, self._render_cluster(cluster, now))
        if method == "DELETE":
            cluster.deleted = True
            for pod in self.cluster_members(cluster.id):
                if not pod.deleted and not _vanished(pod, now):
                    await self._delete(pod)
            return FakeResponse(204, _rate_headers())
        return not_allowed

    async def _create_cluster(self, owner: str, body: Any, record: RecordedRequest) -> FakeResponse:
        """``POST /clusters``: a TRAINING cluster of identical pods placed whole in the
        first allowed data center with room for all of them (the network volume's, when
        one is mounted)."""
        if body is _NOT_JSON:
            return _problem(400, "request body is not valid JSON")
        if record.schema_errors:
            return _problem(422, "Request validation failed.", errors=record.schema_errors)
        if body["type"] != "TRAINING":
            return _problem(400, f"{body['type']} clusters are not offered by this fake")
        compute = body["compute"]
        gpu_id, per_pod, count = (
            compute["gpuTypeId"],
            compute["gpuCountPerPod"],
            compute["podCount"],
        )
        offered = self.gpu_types.get(gpu_id)
        if offered is None or not offered.secure or not offered.cluster:
            return _problem(400, f"GPU type {gpu_id!r} is not available for clusters")
        if per_pod > offered.max_count:
            return _problem(400, f"at most {offered.max_count} GPUs of type {gpu_id!r} per pod")
        wanted = body.get("dataCenterIds") or list(self.data_centers)
        unknown = [dc for dc in wanted if dc not in self.data_centers]
        if unknown:
            return _problem(400, f"unknown data center {unknown[0]!r}")
        mounts = body.get("mounts") or {}
        if "persistent" in mounts and "network" in mounts:
            return _problem(400, "at most one of mounts.persistent and mounts.network")
        for mount in mounts.get("network", []):
            volume = self.network_volumes.get(mount["volumeId"])
            if volume is None or volume.owner != owner or volume.deleted_at is not None:
                return _problem(404, f"network volume {mount['volumeId']} not found")
            if volume.data_center not in wanted:
                return _problem(
                    400,
                    f"network volume {volume.id} is in {volume.data_center}, which "
                    "dataCenterIds does not allow",
                )
            wanted = [volume.data_center]
        price = round(self.gpu_prices[gpu_id] * per_pod, 4)
        if self.accounts[owner].balance < price * count:
            return _problem(
                402, "Insufficient balance to create this cluster. Add funds and retry."
            )
        placed = next((dc for dc in wanted if self._free(gpu_id, dc) >= per_pod * count), None)
        if placed is None:
            return _problem(400, NO_CAPACITY)
        now = trio.current_time()
        cluster = FakeCluster(
            id=self._new_cluster_id(),
            owner=owner,
            body=body,
            data_center_id=placed,
            created_at=now,
            assigned_at=now + self.provisioning_seconds / 2,
        )
        self.clusters[cluster.id] = cluster
        member_body = {
            key: body[key]
            for key in ("name", "image", "env", "ports", "args", "disk", "mounts")
            if key in body
        }
        member_body["cloud"] = "SECURE"
        member_body["gpu"] = {"id": gpu_id, "count": per_pod}
        ranks = self._rng.sample(range(count), count)
        for made, rank in enumerate(ranks):
            pod = FakePod(
                id=self._new_id(),
                owner=owner,
                body=dict(member_body),
                gpu_id=gpu_id,
                gpu_count=per_pod,
                data_center_id=placed,
                price=price,
                created_at=now,
                boot_at=now,
                boot_provisioning=self.provisioning_seconds,
                boot_starting=self.starting_seconds,
                index=len(self.pods),
                cluster_id=cluster.id,
                rank=rank,
                ip=f"10.65.0.{made + 2}",
            )
            pod.bill_from(now)
            self.pods[pod.id] = pod
            cluster.members.append(pod.id)
        return _json(201, self._render_cluster(cluster, now))

    def _render_cluster(self, cluster: FakeCluster, now: float) -> dict[str, Any]:
        """The cluster as Runpod's ``Cluster`` schema describes it."""
        members = [p for p in self.cluster_members(cluster.id) if _member_listed(p, now)]
        by_status: dict[str, int] = {}
        for pod in members:
            phase = self._phase(pod, now)
            by_status[phase] = by_status.get(phase, 0) + 1
        answer: dict[str, Any] = {
            "id": cluster.id,
            "name": cluster.name,
            "type": cluster.body["type"],
            "compute": dict(cluster.body["compute"]),
            "dataCenterId": cluster.data_center_id,
            "pods": {"total": len(members), "byStatus": by_status},
            "createdAt": self._wall(cluster.created_at),
        }
        if now >= cluster.assigned_at:
            answer["network"] = {"cidr": CLUSTER_CIDR}
            primary = next((p for p in members if p.rank == 0), None)
            if primary is not None:
                phase = self._phase(primary, now)
                lead: dict[str, Any] = {"podId": primary.id, "status": phase}
                if phase == "RUNNING" and primary.ssh_ready:
                    direct = self._direct(primary)
                    lead["sshEndpoint"] = f"{direct.host}:{direct.port}"
                answer["primary"] = lead
        return answer

    def _membership(self, pod: FakePod, now: float) -> dict[str, Any]:
        """A member's ``cluster`` (nothing for a standalone pod): its rank null and its
        address omitted until they are assigned."""
        if pod.cluster_id is None:
            return {}
        assigned = now >= self.clusters[pod.cluster_id].assigned_at
        member: dict[str, Any] = {"id": pod.cluster_id, "rank": pod.rank if assigned else None}
        if assigned:
            member["ip"] = pod.ip
        return {"cluster": member}

    def _cluster_billing(self, owner: str, query: dict[str, str]) -> FakeResponse:
        """``GET /billing/clusters``: the query checked against the published parameters,
        one record per cluster per bucket its members billed in (GPU only)."""
        window = self._billing_window(query, "/billing/clusters")
        if isinstance(window, FakeResponse):
            return window
        values, buckets, start, end, size = window
        wanted = values.get("clusterId")
        billed_until = trio.current_time() - self.billing_lag
        records: list[dict[str, Any]] = []
        for cluster in self.clusters.values():
            if cluster.owner != owner or (wanted is not None and cluster.id != wanted):
                continue
            members = self.cluster_members(cluster.id)
            for low, high in buckets:
                a, b = self._trio_at(low), min(self._trio_at(high), billed_until)
                if b <= a:
                    continue
                amount = round(
                    sum(pod.price * pod.billed_seconds(a, b) / 3600 for pod in members), 6
                )
                if amount <= 0:
                    continue
                records.append(
                    {
                        "startTime": _stamp(low),
                        "endTime": _stamp(high),
                        "clusterId": cluster.id,
                        "totalAmount": amount,
                        "gpuAmount": amount,
                        "diskAmount": 0.0,
                        "networkingAmount": 0.0,
                    }
                )
        return _billing_answer(
            records,
            (start, end, size),
            ("clusterId", wanted, "uniqueClusterCount"),
            ("totalAmount", "gpuAmount", "diskAmount", "networkingAmount"),
        )

    def _new_cluster_id(self) -> str:
        while True:
            cluster_id = self._token(10, string.ascii_lowercase + string.digits)
            if cluster_id not in self.clusters:
                return cluster_id

    def _trio_at(self, moment: datetime) -> float:
        """The trio time of a wall time of the fake's clock."""
        self.wall(trio.current_time())
        assert self._epoch is not None
        clock0, wall0 = self._epoch
        return clock0 + (moment - wall0).total_seconds()

    # --- lifecycle ---

    async def _advance(self, now: float) -> None:
        """Apply what time has done: capacity that changed, vanishing, ERROR, first sight
        of RUNNING (hooks)."""
        while self.capacity_changes and self.capacity_changes[0][0] <= now:
            _, gpu_id, count, data_center = self.capacity_changes.pop(0)
            self.set_capacity(gpu_id, count, data_center)
        for pod in list(self.pods.values()):
            if pod.deleted:
                continue
            if _vanished(pod, now):
                pod.deleted = True
                pod.linger_reads = 0
                assert pod.vanish_at is not None
                pod.bill_until(pod.vanish_at)
                if self.on_deleted is not None:
                    await self.on_deleted(pod)
                continue
            if pod.error_at is not None and now >= pod.error_at and pod.halted is None:
                pod.error_at = None
                pod.halted = "ERROR"
                await self._stopped(pod)
                continue
            if pod.phase(now) == "RUNNING" and not pod.running_seen:
                pod.running_seen = True
                if self.on_running is not None:
                    await self.on_running(pod)
                pod.ssh_ready = True

    async def _stopped(self, pod: FakePod) -> None:
        was_up = pod.running_seen
        pod.running_seen = False
        pod.ssh_ready = False
        if was_up and self.on_stopped is not None:
            await self.on_stopped(pod)

    async def _delete(self, pod: FakePod) -> None:
        pod.bill_until(trio.current_time())
        pod.deleted = True
        pod.ssh_ready = False
        if self.on_deleted is not None:
            await self.on_deleted(pod)

    def _phase(self, pod: FakePod, now: float) -> str:
        return pod.phase(now)

    def _free(self, gpu_id: str, dc: str) -> int:
        used = sum(
            p.gpu_count
            for p in self.live_pods()
            if p.gpu_id == gpu_id and p.data_center_id == dc and p.halted != "EXITED"
        )
        return self.capacity.get((gpu_id, dc), 0) - used

    def _direct(self, pod: FakePod) -> SshDirect:
        # TEST-NET-1 (RFC 5737): a default that can never reach a real machine.
        return pod.ssh or SshDirect("192.0.2.10", 22000 + pod.index, "root")

    def _render(self, pod: FakePod, now: float) -> dict[str, Any]:
        """The pod as Runpod's ``Pod`` schema describes it."""
        phase = self._phase(pod, now)
        body = pod.body
        ports = list(body.get("ports", []))
        direct: dict[str, Any] | None = None
        runtime: dict[str, Any] | None = None
        if phase == "RUNNING":
            ssh = self._direct(pod)
            runtime = {"uptime": int(now - pod.running_since()), "ports": []}
            # One utilization entry per GPU the running pod has (none once they are lost).
            gpus = 0 if pod.gpus_lost else pod.gpu_count
            runtime["gpus"] = [{"util": 0, "memoryUtil": 0} for _ in range(gpus)]
            if "22/tcp" in ports:
                runtime["ports"].append(
                    {"private": 22, "public": ssh.port, "type": "tcp", "ip": ssh.host}
                )
                if pod.ssh_ready:
                    direct = {
                        "host": ssh.host,
                        "port": ssh.port,
                        "username": ssh.username,
                        "command": f"ssh {ssh.username}@{ssh.host} -p {ssh.port}",
                    }
        proxy = None
        if phase != "PROVISIONING":
            user = f"{pod.id}-64411eb2"
            proxy = {
                "host": "ssh.runpod.io",
                "port": 22,
                "username": user,
                "command": f"ssh {user}@ssh.runpod.io",
            }
        started = self._wall(pod.running_since()) if phase == "RUNNING" else None
        return {
            "id": pod.id,
            "name": pod.name,
            "image": body.get("image", ""),
            "args": body.get("args", ""),
            "disk": body.get("disk", 20),
            "ports": ports,
            "env": pod.env,
            "registry": None,
            "status": phase,
            # A member is changed only through its cluster.
            "actions": [] if pod.cluster_id else list(_ALLOWED_ACTIONS.get(phase, ())),
            "mounts": body.get("mounts", {}),
            "gpu": {"id": pod.gpu_id, "count": pod.gpu_count},
            "cloud": body.get("cloud", "SECURE"),
            "dataCenterId": pod.data_center_id,
            "cudaVersion": "12.8",
            "ssh": {"proxy": proxy, "direct": direct},
            "template": None,
            "cost": pod.price if phase in _BILLING else 0.0,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": runtime,
            "createdAt": self._wall(pod.created_at),
            "startedAt": started,
            **self._membership(pod, now),
        }

    # --- helpers ---

    def _authenticate(self, header: str | None) -> str:
        if not header:
            return "none"
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return "none"
        if token in self.accounts:
            return "account"
        pod_id = self._scoped.get(token)
        if pod_id is not None and pod_id in self.pods:
            return f"pod:{pod_id}"
        return "invalid"

    def _take_fault(self, route: str, path: str) -> Fault | None:
        for i, fault in enumerate(self.faults):
            if fault.route not in ("*", route):
                continue
            if fault.pod_id is not None and f"/{fault.pod_id}" not in path:
                continue
            return self.faults.pop(i)
        return None

    def _fault_response(self, fault: Fault) -> FakeResponse:
        status = fault.status if fault.status is not None else 500
        headers = _rate_headers()
        if fault.retry_after is not None:
            headers.append(("retry-after", f"{fault.retry_after:g}"))
        if 300 <= status < 400:
            headers.append(("location", "https://elsewhere.example/v2/pods"))
        headers.extend(fault.headers.items())
        if fault.raw_body is not None:
            content_type = fault.content_type or "application/json"
            response = FakeResponse(status, [*headers, ("content-type", content_type)])
            response.body = fault.raw_body
        else:
            detail = {
                429: "rate limit exceeded for the minute window",
                408: "request timed out",
            }.get(status, "scripted failure")
            response = _problem(status, detail)
            response.headers = [*headers, *response.headers[len(_rate_headers()) :]]
        response.timeout = fault.timeout
        response.stall_seconds = fault.stall_seconds if fault.timeout else 0.0
        return response

    def _new_volume_id(self) -> str:
        while True:
            volume_id = self._token(10, string.ascii_lowercase + string.digits)
            if volume_id not in self.network_volumes:
                return volume_id

    def _new_id(self) -> str:
        while True:
            pod_id = self._token(14, string.ascii_lowercase + string.digits)
            if pod_id not in self.pods:
                return pod_id

    def _token(self, size: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(self._rng.choice(alphabet) for _ in range(size))

    def wall(self, at: float) -> datetime:
        """The fake's (Runpod's) wall time at trio time ``at``."""
        if self._epoch is None:
            start = self._wall_start or datetime.now(UTC)
            self._epoch = (at, start.astimezone(UTC).replace(microsecond=0))
        clock0, wall0 = self._epoch
        return wall0 + timedelta(seconds=at - clock0)

    def http_date(self, at: float) -> str:
        """The ``Date`` header the fake sends at trio time ``at``."""
        return email.utils.format_datetime(self.wall(at).replace(microsecond=0), usegmt=True)

    def _wall(self, at: float) -> str:
        moment = self.wall(at)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


_NOT_JSON: Any = object()


def _mounted(pod: FakePod) -> list[str]:
    """The ids of the network volumes the pod's create mounted."""
    mounts = pod.body.get("mounts") or {}
    return [str(mount.get("volumeId")) for mount in mounts.get("network", [])]


def _member_listed(pod: FakePod, now: float) -> bool:
    """Whether a member still shows among its cluster's pods (not deleted, not vanished)."""
    return not pod.deleted and not _vanished(pod, now)


def _vanished(pod: FakePod, now: float) -> bool:
    return pod.vanish_at is not None and now >= pod.vanish_at


_MAX_BUCKETS = 10_000
_BUCKET_STEP = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(days=7)}


def _billing_answer(
    records: list[dict[str, Any]],
    window: tuple[datetime, datetime, str],
    billed: tuple[str, str | None, str],
    amounts: tuple[str, ...],
) -> FakeResponse:
    """A billing endpoint's answer: ``records`` in time order, the resolved ``window``
    (start, end, bucket size), ``billed`` = (the billed thing's id key, the id asked for,
    the key counting the distinct ones), and the total of each of ``amounts``."""
    id_key, wanted, count_key = billed
    start, end, size = window
    records.sort(key=lambda r: (r["startTime"], r[id_key]))
    return _json(
        200,
        {
            "records": records,
            "metadata": {
                "query": {
                    "startTime": _stamp(start),
                    "endTime": _stamp(end),
                    "bucketSize": size,
                    id_key: wanted,
                },
                "recordCount": len(records),
                count_key: len({r[id_key] for r in records}),
                "totals": {k: round(sum(float(r[k]) for r in records), 6) for k in amounts},
            },
        },
    )


def _billing_query(
    query: dict[str, str], path: str = "/billing/pods"
) -> tuple[dict[str, Any], list[str]]:
    """The billing query read as the published parameters of ``GET path`` describe it
    (numbers and times parsed), and every violation; a parameter it does not list is one
    too."""
    errors = runpod_schema.query_errors(path, query)
    params = runpod_schema.operation_parameters(path)
    values: dict[str, Any] = {}
    for key, raw in query.items():
        schema = params[key]["schema"] if key in params else {}
        value: Any = raw
        if schema.get("type") == "integer":
            with suppress(ValueError):
                value = int(raw)
        elif schema.get("format") == "date-time":
            # The format is only an annotation to the validator: checked here.
            value = _parse_wall(raw)
            if value is None or not _RFC3339.fullmatch(raw):
                errors.append(f"query {key}: {raw!r} is not a 'date-time'")
        values[key] = value
    return values, sorted(errors)


_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _bucket_start(moment: datetime, size: str) -> datetime:
    """The start of the bucket of ``size`` that ``moment`` falls in (UTC)."""
    moment = moment.astimezone(UTC)
    if size == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if size == "day":
        return day
    if size == "week":  # weeks start on Monday
        return day - timedelta(days=day.weekday())
    if size == "month":
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def _bucket_after(start: datetime, size: str) -> datetime:
    """The start of the bucket after the one starting at ``start``."""
    if size in _BUCKET_STEP:
        return start + _BUCKET_STEP[size]
    if size == "month":
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start.replace(year=start.year + 1)


def _bucket_end(moment: datetime, size: str) -> datetime:
    """``moment`` snapped up to the end of its bucket (itself when on a boundary)."""
    start = _bucket_start(moment, size)
    return start if start == moment else _bucket_after(start, size)


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _layers(pod: FakePod) -> list[tuple[str, float]]:
    """The image's layers as the fake pulls them: an id and a size in MB each."""
    seed = sum(ord(c) for c in pod.id)
    return [
        (f"{(seed * 7919 + i * 104729) % 16**12:012x}", round(20.0 + (seed + 37 * i) % 900, 1))
        for i in range(4)
    ]


def _system_story(pod: FakePod) -> list[tuple[float, str]]:
    """What the host says of the pod's current boot, each line at its trio time: the image
    pulled while the pod is PROVISIONING (lines as ``docker pull`` prints them), the
    container created and started while it is STARTING."""
    image = str(pod.body.get("image", ""))
    t0, pull, start = pod.boot_at, pod.boot_provisioning, pod.boot_starting
    story: list[tuple[float, str]] = []
    if pull > 0:
        layers = _layers(pod)
        story.append((t0, f"Pulling image {image}"))
        story += [(t0, f"{layer}: Pulling fs layer") for layer, _ in layers]
        for fraction in (0.25, 0.5, 0.75):
            for layer, size in layers:
                story.append(
                    (
                        t0 + pull * fraction,
                        f"{layer}: Downloading  {size * fraction:.1f}MB/{size}MB",
                    )
                )
        story += [(t0 + pull * 0.9, f"{layer}: Pull complete") for layer, _ in layers]
        story.append((t0 + pull * 0.95, f"Status: Downloaded newer image for {image}"))
    story.append((t0 + pull, f"create container {pod.name}"))
    story.append((t0 + pull + start * 0.5, f"start container {pod.name}"))
    return story


def _sse(index: int, moment: datetime, source: str, text: str) -> bytes:
    stamp = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    data = json.dumps({"ts": stamp, "source": source, "line": text})
    return f"id: {stamp}/{index + 1:012d}\ndata: {data}\n\n".encode()


def _parse_wall(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _resume_index(cursor: str, lines: list[tuple[datetime, str, str]]) -> int:
    """Where a stream resumes after the event ``cursor`` (its own ``ts/seq`` ids, or a
    bare timestamp: the lines after it)."""
    stamp, _, seq = cursor.partition("/")
    if seq.isdigit():
        return min(int(seq), len(lines))
    moment = _parse_wall(stamp)
    if moment is None:
        return len(lines)
    return next((i for i, (t, _, _) in enumerate(lines) if t > moment), len(lines))


def _route(method: str, path: str) -> str:
    parts = path.strip("/").split("/")
    if parts[0] == "billing":
        pass  # no id in a billing path
    elif parts[0] == "catalog":
        if len(parts) >= 3:
            parts[2] = "{id}"
    elif len(parts) >= 2:
        parts[1] = "{id}"
    return f"{method} /" + "/".join(parts)


def _segments(raw_path: str) -> list[str] | None:
    """The decoded segments of a percent-encoded path below ``/v2`` (None: not below it),
    so that an id holding an encoded ``/`` stays one segment."""
    if raw_path != PREFIX and not raw_path.startswith(PREFIX + "/"):
        return None
    return [unquote(part) for part in raw_path[len(PREFIX) :].strip("/").split("/")]


_LEVELS = ("NONE", "LOW", "MEDIUM", "HIGH")


def _level(free: int) -> str:
    """The stock level the fake shows for ``free`` placeable pods."""
    if free <= 0:
        return "NONE"
    return "LOW" if free == 1 else "MEDIUM" if free < 4 else "HIGH"


def _catalog_query(query: dict[str, str]) -> tuple[dict[str, Any] | None, FakeResponse | None]:
    """The catalog's query read as the published parameters describe it: the asked-for
    availability (None: not asked), or the refusal (422 for a malformed value, 400 for a
    combination the description rules out)."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    for name in runpod_schema.CATALOG_GPU_PARAMETERS:
        param = runpod_schema.parameter(name)
        key = param["name"]
        if key not in query:
            continue
        raw = query[key]
        value: Any = raw
        kind = param["schema"].get("type")
        if kind == "array":  # style form, explode false: one comma-separated value
            value = raw.split(",") if raw else []
        elif kind == "integer":
            try:
                value = int(raw)
            except ValueError:
                value = raw
        errors.extend(runpod_schema.parameter_errors(name, value))
        values[key] = value
    if errors:
        return None, _problem(422, "Request validation failed.", errors=errors)
    if "include" not in values or not values["include"]:
        extra = sorted(set(values) - {"include"})
        if extra:
            return None, _problem(400, f"{', '.join(extra)} valid only with include=AVAILABILITY")
        return None, None
    if not values.get("product"):
        return None, _problem(400, "product is required with include=AVAILABILITY")
    if "cudaVersions" in values and "minCudaVersion" in values:
        return None, _problem(400, "cudaVersions and minCudaVersion are mutually exclusive")
    return values, None


def _cuda_wanted(asked: dict[str, Any]) -> bool:
    """Whether the fake's machines (all on :data:`CUDA_VERSION`) fit the CUDA filters."""
    if "cudaVersions" in asked:
        return CUDA_VERSION in asked["cudaVersions"]
    floor = asked.get("minCudaVersion")
    if floor is None:
        return True
    have = tuple(int(p) for p in CUDA_VERSION.split("."))
    want = tuple(int(p) for p in str(floor).split("."))
    return have[: len(want)] >= want


def _rate_headers() -> list[tuple[str, str]]:
    return [
        ("ratelimit-policy", '"minute";q=600;w=60'),
        ("ratelimit", '"minute";r=599;t=60'),
    ]


def _json(status: int, data: object) -> FakeResponse:
    return FakeResponse(
        status,
        [*_rate_headers(), ("content-type", "application/json")],
        json.dumps(data).encode(),
    )


def _problem(status: int, detail: str, *, errors: list[str] | None = None) -> FakeResponse:
    problem: dict[str, Any] = {
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if errors:
        problem["errors"] = errors
    return FakeResponse(
        status,
        [*_rate_headers(), ("content-type", "application/problem+json")],
        json.dumps(problem).encode(),
    )


# --- front ends ------------------------------------------------------------------------


class FakeTransport(httpx.AsyncBaseTransport):
    """Answers httpx requests from a :class:`FakeRunpod` in-process (trio's clock)."""

    def __init__(self, fake: FakeRunpod) -> None:
        self.fake = fake

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Hand the request to the fake; turn scripted failures into httpx errors."""
        body = await request.aread()
        answer = await self.fake.handle(
            FakeRequest(
                method=request.method,
                path=request.url.path,
                query=dict(parse_qsl(request.url.query.decode())),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                raw_path=request.url.raw_path.decode("ascii").partition("?")[0],
            )
        )
        if answer.connect_error:
            raise httpx.ConnectError(answer.error_message, request=request)
        if answer.timeout:
            raise httpx.ReadTimeout("scripted read timeout", request=request)
        if answer.stream is not None:
            return httpx.Response(
                answer.status,
                headers=answer.headers,
                stream=_Streamed(answer.body, answer.stream),
                request=request,
            )
        return httpx.Response(
            answer.status, headers=answer.headers, content=answer.body, request=request
        )


class _Streamed(httpx.AsyncByteStream):
    """A streamed answer, in-process: its body, then what its producer yields."""

    def __init__(self, first: bytes, produce: Callable[[], AsyncIterator[bytes]]) -> None:
        self._first = first
        self._produce = produce
        self._running: AsyncIterator[bytes] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._first:
            yield self._first
        self._running = self._produce()
        async for chunk in self._running:
            yield chunk

    async def aclose(self) -> None:
        running, self._running = self._running, None
        closing = getattr(running, "aclose", None)
        if closing is not None:
            await closing()


class FakeAsgi:
    """The fake as an ASGI 3 application (for hypercorn)."""

    def __init__(self, fake: FakeRunpod) -> None:
        self.fake = fake

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        answer = await self.fake.handle(
            FakeRequest(
                method=scope["method"],
                path=scope["path"],
                query=dict(parse_qsl(scope["query_string"].decode("latin-1"))),
                headers={
                    k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
                },
                body=body,
                raw_path=(
                    scope["raw_path"].decode("latin-1").partition("?")[0]
                    if scope.get("raw_path")
                    else None
                ),
            )
        )
        if answer.timeout or answer.connect_error:
            await trio.sleep(answer.stall_seconds or 3600.0)
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        if answer.stream is None:
            await send({"type": "http.response.body", "body": answer.body})
            return
        produce = answer.stream

        async def stream(scope: trio.CancelScope) -> None:
            if answer.body:
                await send({"type": "http.response.body", "body": answer.body, "more_body": True})
            async for chunk in produce():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            scope.cancel()

        async def disconnected(scope: trio.CancelScope) -> None:
            # The client went away: the stream ends with it.
            while (await receive())["type"] != "http.disconnect":
                pass
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, nursery.cancel_scope)
            nursery.start_soon(disconnected, nursery.cancel_scope)


@asynccontextmanager
async def serve_loopback(
    fake: FakeRunpod, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve ``fake`` over real HTTP on loopback; yield its base URL (``.../v2``)."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.loglevel = "WARNING"
    # The fake's own Date (its clock, not hypercorn's) goes out with every answer.
    config.include_date_header = False
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, FakeAsgi(fake), config)
        try:
            yield binds[0].rstrip("/") + PREFIX
        finally:
            nursery.cancel_scope.cancel()


# --- command line -----------------------------------------------------------------------


async def serve_until_signalled(
    fake: FakeRunpod, key: str, *, host: str = "127.0.0.1", port: int = 0, print_url: bool = True
) -> None:
    """Serve ``fake`` on loopback until SIGINT or SIGTERM, printing its URL and ``key``.

    With ``print_url``: the base URL, then the key, one per line (for scripts).
    """
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serve_loopback(fake, host, port) as url:
            if print_url:
                print(url, flush=True)
                print(key, flush=True)
            else:
                print(f"fake Runpod API v2 at {url}; account API key: {key}", flush=True)
            async for _ in signals:
                return


def main(argv: Sequence[str] | None = None) -> int:
    """Run the fake on loopback until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m overbrainer.testing.runpod_api")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--print-url", action="store_true", help="print the URL, then the key")
    parser.add_argument("--api-key", default=None, help="the account key (default: random)")
    parser.add_argument("--balance", type=float, default=100.0)
    parser.add_argument("--provisioning-seconds", type=float, default=2.0)
    parser.add_argument("--starting-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    fake = FakeRunpod(
        provisioning_seconds=args.provisioning_seconds,
        starting_seconds=args.starting_seconds,
        seed=None,
    )
    key = fake.add_account(args.api_key, balance=args.balance)
    trio.run(
        partial(serve_until_signalled, fake, key, host=args.host, port=args.port,
                print_url=args.print_url)
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
