"""What Runpod's REST API v2 answers (pods, errors, the GPU catalog), parsed into typed
values that are safe to use.

Everything here is account-provided data: names and ids are sanitized or validated, an
unknown status becomes ``UNKNOWN``, and an SSH endpoint is only handed out once its host,
user and port are known to be harmless on an ssh command line. No network, no trio: cheap
to import.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal, NoReturn

from overbrainer.errors import OverbrainerError
from overbrainer.runpod.redact import one_line
from overbrainer.utc import parse_utc

__all__ = [
    "Availability",
    "BadBillingData",
    "BadClusterData",
    "BadGpuData",
    "BadPodData",
    "BadVolumeData",
    "BillingRecord",
    "BucketSize",
    "Cluster",
    "ClusterBilling",
    "ClusterBillingRecord",
    "ClusterMember",
    "DataCenter",
    "DataCenterAvailability",
    "GpuType",
    "NetworkVolume",
    "Pod",
    "PodBilling",
    "PodStatus",
    "Problem",
    "SshEndpoint",
    "UnsafeSshEndpoint",
    "VolumeBilling",
    "VolumeBillingRecord",
    "check_cluster_id",
    "check_pod_id",
    "check_volume_id",
    "parse_cluster",
    "parse_cluster_billing",
    "parse_data_center",
    "parse_gpu_type",
    "parse_network_volume",
    "parse_pod",
    "parse_pod_billing",
    "parse_problem",
    "parse_volume_billing",
]

_POD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


class PodStatus(StrEnum):
    """A pod's lifecycle status; anything Runpod adds later reads as ``UNKNOWN``."""

    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"
    UNKNOWN = "UNKNOWN"


class BadPodData(ValueError):
    """Runpod's answer does not describe a usable pod (the message is already one line)."""


class UnsafeSshEndpoint(OverbrainerError):
    """A pod's ``ssh.direct`` holds a value that must never reach an ssh command line."""


def check_pod_id(value: object) -> str:
    """Return ``value`` if it is a pod id safe to put in a URL path, else raise BadPodData."""
    return _checked_id(value, "pod id", BadPodData)


def _checked_id(value: object, what: str, error: type[ValueError]) -> str:
    """``value`` when it is an id (of a pod, a volume, a cluster: one rule) safe to put in
    a URL path, else ``error`` naming ``what``."""
    if isinstance(value, str) and _POD_ID.fullmatch(value):
        return value
    _bad(what, value, error)


def _bad(what: str, value: object, error: type[ValueError] | None = None) -> NoReturn:
    shown = one_line(repr(value), 60) if isinstance(value, str) else type(value).__name__
    raise (error or BadPodData)(f"unusable {what} {shown}")


@dataclass(frozen=True)
class SshEndpoint:
    """A validated direct SSH endpoint: host name or IP, port, and user name."""

    host: str
    port: int
    username: str

    @classmethod
    def parse(cls, host: object, port: object, username: object) -> SshEndpoint:
        """Validate the three parts; raise UnsafeSshEndpoint naming the first bad one."""
        if not isinstance(host, str) or not _host_ok(host):
            raise UnsafeSshEndpoint(f"pod SSH host {_show(host)} is not a host name or IP")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise UnsafeSshEndpoint(f"pod SSH port {_show(port)} is not in 1..65535")
        if not isinstance(username, str) or not _USERNAME.fullmatch(username):
            raise UnsafeSshEndpoint(f"pod SSH user {_show(username)} is not a plain user name")
        return cls(host, port, username)


def _show(value: object) -> str:
    return one_line(repr(value), 60)


def _host_ok(host: str) -> bool:
    if not host or len(host) > 253 or host.startswith("-") or "%" in host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return all(_HOST_LABEL.fullmatch(label) for label in host.split("."))
    return True


@dataclass(frozen=True)
class Problem:
    """An RFC 9457 problem as Runpod sends it: ``{title, status, detail, errors?}``."""

    status: int
    title: str
    detail: str
    errors: tuple[str, ...] = ()


def parse_problem(status: int, content_type: str | None, data: object) -> Problem | None:
    """Return the problem if the answer has Runpod's own error shape, else None.

    Runpod's shape: media type ``application/problem+json``, an object with string
    ``title`` and ``detail`` and an integer ``status`` equal to the HTTP status. A proxy's
    or a load balancer's error page does not have it -- which is how a 404 from Runpod
    ("no such pod") is told apart from a 404 from something in between.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/problem+json" or not isinstance(data, dict):
        return None
    title, code, detail = data.get("title"), data.get("status"), data.get("detail")
    if not isinstance(title, str) or not isinstance(detail, str):
        return None
    if isinstance(code, bool) or not isinstance(code, int) or code != status:
        return None
    raw_errors = data.get("errors")
    errors: tuple[str, ...] = ()
    if isinstance(raw_errors, list):
        errors = tuple(e for e in raw_errors if isinstance(e, str))
    return Problem(status, title, detail, errors)


@dataclass(frozen=True)
class Pod:
    """A pod as Runpod reported it, with account-provided text made safe to print.

    ``env`` holds the pod's environment exactly as given at create time (the run marker
    and the pod's host key live there), so it is kept out of ``repr``.
    """

    id: str
    name: str
    status: PodStatus
    raw_status: str
    env: Mapping[str, str] = field(repr=False)
    gpu_id: str | None
    gpu_count: int | None
    data_center_id: str | None
    cost: float
    created_at: datetime | None
    started_at: datetime | None
    ssh_direct: SshEndpoint | None
    ssh_problem: str | None = None
    # The GPUs a running pod's runtime lists (None: not shown). A pod restarted on a host
    # whose GPUs another tenant took runs with none.
    gpus_running: int | None = None
    # The pod's membership of a cluster (None: a standalone pod).
    cluster: ClusterMember | None = None
    # The ids of the network volumes it mounts (``mounts.network[].volumeId``).
    network_volumes: tuple[str, ...] = ()

    def ssh_endpoint(self) -> SshEndpoint | None:
        """The validated direct SSH endpoint, or None while Runpod shows none.

        Raises UnsafeSshEndpoint if Runpod shows one that is unsafe to use.
        """
        if self.ssh_problem is not None:
            raise UnsafeSshEndpoint(f"pod {self.id}: {self.ssh_problem}")
        return self.ssh_direct

    @property
    def without_gpus(self) -> bool:
        """Whether the pod runs with none of the GPUs it was created with."""
        return self.status is PodStatus.RUNNING and bool(self.gpu_count) and self.gpus_running == 0

    @property
    def billing(self) -> bool:
        """Whether the pod holds compute that is billed at ``cost`` per hour."""
        return self.status not in (PodStatus.EXITED, PodStatus.TERMINATED)


def parse_pod(data: object) -> Pod:
    """Parse one pod object of Runpod's answer, tolerating missing or unknown fields.

    Raises BadPodData only when there is no object or no safe ``id``: without an id
    nothing about the pod can be acted upon.
    """
    if not isinstance(data, dict):
        raise BadPodData(f"a pod is a {type(data).__name__}, not an object")
    pod_id = check_pod_id(data.get("id"))
    raw_status = data.get("status")
    status_text = one_line(raw_status, 40) if isinstance(raw_status, str) else ""
    try:
        status = PodStatus(status_text)
    except ValueError:
        status = PodStatus.UNKNOWN
    gpu = data.get("gpu")
    gpu_id = gpu_count = None
    if isinstance(gpu, dict):
        gpu_id = _text(gpu.get("id"), 100)
        count = gpu.get("count")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            gpu_count = count
    direct, problem = _ssh_direct(data.get("ssh"))
    runtime = data.get("runtime")
    gpus = runtime.get("gpus") if isinstance(runtime, dict) else None
    return Pod(
        id=pod_id,
        name=_text(data.get("name"), 200) or "",
        status=status,
        raw_status=status_text,
        env=_env(data.get("env")),
        gpu_id=gpu_id,
        gpu_count=gpu_count,
        data_center_id=_text(data.get("dataCenterId"), 100),
        cost=_cost(data.get("cost")),
        created_at=_time(data.get("createdAt")),
        started_at=_time(data.get("startedAt")),
        ssh_direct=direct,
        ssh_problem=problem,
        gpus_running=len(gpus) if isinstance(gpus, list) else None,
        cluster=_membership(data.get("cluster")),
        network_volumes=_mounted_volumes(data.get("mounts")),
    )


def _mounted_volumes(mounts: object) -> tuple[str, ...]:
    network = mounts.get("network") if isinstance(mounts, dict) else None
    if not isinstance(network, list):
        return ()
    found = (m.get("volumeId") for m in network if isinstance(m, dict))
    return tuple(v for v in found if isinstance(v, str) and _POD_ID.fullmatch(v))


def _text(value: object, limit: int) -> str | None:
    return one_line(value, limit) if isinstance(value, str) else None


def _env(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _cost(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    cost = float(value)
    return cost if math.isfinite(cost) and cost >= 0 else 0.0


def _time(value: object) -> datetime | None:
    return parse_utc(value)


def _ssh_direct(ssh: object) -> tuple[SshEndpoint | None, str | None]:
    if not isinstance(ssh, dict):
        return None, None
    direct = ssh.get("direct")
    if direct is None:
        return None, None
    if not isinstance(direct, dict):
        return None, "ssh.direct is not an object"
    try:
        endpoint = SshEndpoint.parse(direct.get("host"), direct.get("port"), direct.get("username"))
    except UnsafeSshEndpoint as error:
        return None, str(error)
    return endpoint, None


# --- what Runpod billed (GET /billing/pods) ----------------------------------------------

BucketSize = Literal["hour", "day", "week", "month", "year"]
"""The length of one billing record's time bucket."""


class BadBillingData(ValueError):
    """Runpod's billing answer cannot be read (the message is already one line)."""


@dataclass(frozen=True)
class BillingRecord:
    """What one pod cost over one time bucket ``[start, end)``, in USD."""

    start: datetime
    end: datetime
    pod_id: str
    total: float


@dataclass(frozen=True)
class PodBilling:
    """Runpod's pod billing over the window it resolved (``start``/``end``, snapped to
    whole buckets of ``bucket``), one record per pod per bucket."""

    start: datetime
    end: datetime
    bucket: str
    records: tuple[BillingRecord, ...]

    def amount(self, pod_id: str) -> float:
        """What pod ``pod_id`` cost over the window: the sum of its records (USD)."""
        return sum(r.total for r in self.records if r.pod_id == pod_id)


def parse_pod_billing(data: object) -> PodBilling:
    """Read a ``ListPodBillingResponse``; anything unusable raises BadBillingData."""
    start, end, bucket, rows = _billing_rows(data, "podId", "pod")
    records = tuple(BillingRecord(*row) for row in rows)
    return PodBilling(start=start, end=end, bucket=bucket, records=records)


def _billing_time(value: object) -> datetime:
    moment = _time(value)
    if moment is None:
        raise BadBillingData(f"a billing time that is not one: {_show(value)}")
    return moment


def _amount(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadBillingData(f"a billed amount that is not a number: {_show(value)}")
    amount = float(value)
    if not math.isfinite(amount) or amount < 0:
        raise BadBillingData(f"a billed amount that is not one: {amount!r}")
    return amount


# --- the GPU catalog ---------------------------------------------------------------------


class Availability(StrEnum):
    """Stock of a GPU type (overall or in one data center); anything new reads ``UNKNOWN``."""

    NONE = "NONE"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"
    UNKNOWN = "UNKNOWN"


class BadGpuData(ValueError):
    """Runpod's answer does not describe a usable GPU type (the message is one line)."""


@dataclass(frozen=True)
class DataCenterAvailability:
    """How much of a GPU type one data center has free (only when availability was asked)."""

    id: str
    name: str
    availability: Availability


@dataclass(frozen=True)
class GpuType:
    """One entry of Runpod's GPU catalog (``GET /catalog/gpus``), its text made safe to print.

    ``id`` is what a create's ``gpu.id`` (and a target's ``gpu_types``) takes; ``name`` is
    the short name people use ("RTX 4090"). Prices are list USD/h for ONE GPU on each cloud
    (the rate a pod really bills is its ``cost``); ``max_count_*`` the most GPUs of this
    type one pod can have there. ``availability``, ``data_centers`` and ``cuda_versions``
    are filled only when the catalog was asked for availability (``None`` / empty
    otherwise); ``cuda_versions`` maps a ``major.minor`` version to whether a machine with
    it has capacity now.
    """

    id: str
    name: str
    manufacturer: str
    memory_gb: int | None
    secure: bool
    community: bool
    price_secure: float | None
    price_community: float | None
    max_count_secure: int | None
    max_count_community: int | None
    availability: Availability | None = None
    data_centers: tuple[DataCenterAvailability, ...] = ()
    cuda_versions: Mapping[str, bool] = field(default_factory=dict)

    def offered(self, *, secure: bool = True) -> bool:
        """Whether pods of this type can be created on the secure (or community) cloud."""
        return self.secure if secure else self.community

    def max_count(self, *, secure: bool = True) -> int | None:
        """The most GPUs of this type one pod can have on that cloud (None: not said)."""
        return self.max_count_secure if secure else self.max_count_community


_GPU_ID_LIMIT = 200


def parse_gpu_type(data: object) -> GpuType:
    """Parse one ``GpuType`` object of Runpod's answer, tolerating missing or unknown fields.

    Raises BadGpuData only when there is no object or no usable ``id`` (a printable string
    of at most 200 characters): without its id a GPU type cannot be named in a create.
    """
    if not isinstance(data, dict):
        raise BadGpuData(f"a GPU type is a {type(data).__name__}, not an object")
    gpu_id = data.get("id")
    if (
        not isinstance(gpu_id, str)
        or not gpu_id.strip()
        or len(gpu_id) > _GPU_ID_LIMIT
        or not gpu_id.isprintable()
    ):
        shown = one_line(repr(gpu_id), 60) if isinstance(gpu_id, str) else type(gpu_id).__name__
        raise BadGpuData(f"unusable GPU type id {shown}")
    price = data.get("price")
    prices = price if isinstance(price, dict) else {}
    counts_raw = data.get("maxCount")
    counts = counts_raw if isinstance(counts_raw, dict) else {}
    availability_raw = data.get("availability")
    return GpuType(
        id=gpu_id,
        name=_text(data.get("name"), 100) or gpu_id,
        manufacturer=_text(data.get("manufacturer"), 40) or "UNKNOWN",
        memory_gb=_count(data.get("memory")),
        secure=data.get("secure") is True,
        community=data.get("community") is True,
        price_secure=_price(prices.get("secure")),
        price_community=_price(prices.get("community")),
        max_count_secure=_count(counts.get("secure")),
        max_count_community=_count(counts.get("community")),
        availability=(None if availability_raw is None else _availability(availability_raw)),
        data_centers=_data_centers(data.get("dataCenters")),
        cuda_versions=_cuda_versions(data.get("cudaVersions")),
    )


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _price(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    price = float(value)
    return price if math.isfinite(price) and price >= 0 else None


def _availability(value: object) -> Availability:
    try:
        return Availability(value) if isinstance(value, str) else Availability.UNKNOWN
    except ValueError:
        return Availability.UNKNOWN


def _data_centers(value: object) -> tuple[DataCenterAvailability, ...]:
    if not isinstance(value, list):
        return ()
    found: list[DataCenterAvailability] = []
    for item in value:
        if not isinstance(item, dict):
            continue
        center = _text(item.get("id"), 100)
        if not center:
            continue
        found.append(
            DataCenterAvailability(
                id=center,
                name=_text(item.get("name"), 100) or center,
                availability=_availability(item.get("availability")),
            )
        )
    return tuple(found)


_CUDA_VERSION = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")


def _cuda_versions(value: object) -> dict[str, bool]:
    if not isinstance(value, list):
        return {}
    found: dict[str, bool] = {}
    for item in value:
        if not isinstance(item, dict):
            continue
        version = item.get("version")
        if isinstance(version, str) and _CUDA_VERSION.fullmatch(version):
            found[version] = item.get("available") is True
    return found


# --- the data centers --------------------------------------------------------------------


@dataclass(frozen=True)
class DataCenter:
    """One data center of Runpod's catalog (``GET /catalog/datacenters``), its text made safe
    to print. ``id`` is what a target's ``data_center_ids`` takes."""

    id: str
    name: str
    region: str
    global_network: bool
    volume_types: tuple[str, ...]
    compliance: tuple[str, ...]


def parse_data_center(data: object) -> DataCenter | None:
    """Parse one ``DataCenter`` object, tolerating missing or unknown fields; None when it
    has no usable ``id`` (a printable string without spaces, of at most 100 characters)."""
    if not isinstance(data, dict):
        return None
    center = data.get("id")
    if (
        not isinstance(center, str)
        or not center
        or len(center) > 100
        or not center.isprintable()
        or any(ch.isspace() for ch in center)
    ):
        return None
    return DataCenter(
        id=center,
        name=_text(data.get("name"), 100) or center,
        region=_text(data.get("region"), 40) or "UNKNOWN",
        global_network=data.get("globalNetwork") is True,
        volume_types=_words(data.get("networkVolumeTypes")),
        compliance=_words(data.get("compliance")),
    )


def _words(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(one_line(item, 40) for item in value if isinstance(item, str) and item)


# --- network volumes (GET /network-volumes, GET /billing/network-volumes) ---------------


class BadVolumeData(ValueError):
    """Runpod's answer does not describe a usable network volume (the message is one line)."""


def check_volume_id(value: object) -> str:
    """Return ``value`` if it is a volume id safe to put in a URL path, else raise
    BadVolumeData (the same rule as a pod id's)."""
    return _checked_id(value, "network volume id", BadVolumeData)


@dataclass(frozen=True)
class NetworkVolume:
    """A network volume as Runpod reported it, its text made safe to print: ``size_gb``
    is what it holds room for (None: not said), ``data_center`` where it lives (the pods
    that mount it must be there; None: not said), ``type`` its storage tier
    (``STANDARD`` or ``HIGH_PERFORMANCE``; ``UNKNOWN`` when not said)."""

    id: str
    name: str
    size_gb: int | None
    data_center: str | None
    type: str


def parse_network_volume(data: object) -> NetworkVolume:
    """Parse one ``NetworkVolume`` object, tolerating missing or unknown fields; raises
    BadVolumeData only when there is no object or no safe ``id``."""
    if not isinstance(data, dict):
        raise BadVolumeData(f"a network volume is a {type(data).__name__}, not an object")
    volume_id = check_volume_id(data.get("id"))
    center = data.get("dataCenter")
    if center is None:
        center = data.get("dataCenterId")  # the name pods use for theirs
    return NetworkVolume(
        id=volume_id,
        name=_text(data.get("name"), 200) or "",
        size_gb=_count(data.get("size")),
        data_center=_text(center, 100) or None,
        type=_text(data.get("type"), 40) or "UNKNOWN",
    )


@dataclass(frozen=True)
class VolumeBillingRecord:
    """What one network volume cost over one time bucket ``[start, end)``, in USD."""

    start: datetime
    end: datetime
    volume_id: str
    total: float


@dataclass(frozen=True)
class VolumeBilling:
    """Runpod's network volume billing over the window it resolved (``start``/``end``,
    snapped to whole buckets of ``bucket``), one record per volume per bucket."""

    start: datetime
    end: datetime
    bucket: str
    records: tuple[VolumeBillingRecord, ...]

    def amount(self, volume_id: str | None = None) -> float:
        """What volume ``volume_id`` (None: every volume) cost over the window (USD)."""
        return sum(r.total for r in self.records if volume_id in (None, r.volume_id))


def parse_volume_billing(data: object) -> VolumeBilling:
    """Read a ``ListNetworkVolumeBillingResponse``; anything unusable raises
    BadBillingData."""
    start, end, bucket, rows = _billing_rows(data, "networkVolumeId", "network volume")
    records = tuple(VolumeBillingRecord(*row) for row in rows)
    return VolumeBilling(start=start, end=end, bucket=bucket, records=records)


# --- clusters (GET /clusters, GET /clusters/{id}/pods, GET /billing/clusters) -----------


class BadClusterData(ValueError):
    """Runpod's answer does not describe a usable cluster (the message is one line)."""


def check_cluster_id(value: object) -> str:
    """Return ``value`` if it is a cluster id safe to put in a URL path, else raise
    BadClusterData (the same rule as a pod id's)."""
    return _checked_id(value, "cluster id", BadClusterData)


@dataclass(frozen=True)
class ClusterMember:
    """A pod's membership of a cluster (its ``cluster``): the cluster's id, the pod's node
    rank (``NODE_RANK``; None until Runpod assigns it during provisioning; 0 is the
    primary) and its address on the cluster's overlay network (None until assigned)."""

    cluster_id: str
    rank: int | None
    ip: str | None


def _membership(data: object) -> ClusterMember | None:
    """A pod's ``cluster``; None when absent or without a usable cluster id. A rank that
    is not a whole number of at least 0, or an address that is not an IP, reads as not
    assigned."""
    if not isinstance(data, dict):
        return None
    try:
        cluster_id = check_cluster_id(data.get("id"))
    except BadClusterData:
        return None
    rank = _count(data.get("rank"))
    return ClusterMember(cluster_id, rank, _ip(data.get("ip")))


def _ip(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class Cluster:
    """A cluster as Runpod reported it (``Cluster``), its text made safe to print.

    Every member is a pod of ``gpus_per_pod`` GPUs of type ``gpu_id``; ``pod_count`` is
    the shape asked for, ``pods_total`` how many members are provisioned now and
    ``pods_by_status`` how many are in each status. ``primary_*`` describe the rank-0 pod
    (None until placed); ``primary_ssh`` its public SSH endpoint (host, port), None until
    it is RUNNING with SSH, or when what Runpod shows is not a safe host and port.
    ``network_cidr`` is the overlay network (None until provisioned).
    """

    id: str
    name: str
    type: str
    gpu_id: str | None
    gpus_per_pod: int | None
    pod_count: int | None
    data_center_id: str | None
    pods_total: int
    pods_by_status: Mapping[str, int]
    network_cidr: str | None
    primary_pod_id: str | None
    primary_status: PodStatus | None
    primary_ssh: tuple[str, int] | None
    created_at: datetime | None

    @property
    def gpu_count(self) -> int | None:
        """Every GPU of every node (None when the shape is not said)."""
        if self.gpus_per_pod is None or self.pod_count is None:
            return None
        return self.gpus_per_pod * self.pod_count


def parse_cluster(data: object) -> Cluster:
    """Parse one ``Cluster`` object, tolerating missing or unknown fields; raises
    BadClusterData only when there is no object or no safe ``id``."""
    if not isinstance(data, dict):
        raise BadClusterData(f"a cluster is a {type(data).__name__}, not an object")
    cluster_id = check_cluster_id(data.get("id"))
    compute = data.get("compute")
    shape = compute if isinstance(compute, dict) else {}
    pods = data.get("pods")
    summary = pods if isinstance(pods, dict) else {}
    by_status = summary.get("byStatus")
    network = data.get("network")
    primary = data.get("primary")
    lead = primary if isinstance(primary, dict) else {}
    lead_id = lead.get("podId")
    return Cluster(
        id=cluster_id,
        name=_text(data.get("name"), 200) or "",
        type=_text(data.get("type"), 40) or "UNKNOWN",
        gpu_id=_text(shape.get("gpuTypeId"), _GPU_ID_LIMIT),
        gpus_per_pod=_count(shape.get("gpuCountPerPod")),
        pod_count=_count(shape.get("podCount")),
        data_center_id=_text(data.get("dataCenterId"), 100),
        pods_total=_count(summary.get("total")) or 0,
        pods_by_status=(
            {
                one_line(k, 40): v
                for k, v in by_status.items()
                if isinstance(k, str) and _count(v) is not None
            }
            if isinstance(by_status, dict)
            else {}
        ),
        network_cidr=(
            _text(network.get("cidr"), 60) or None if isinstance(network, dict) else None
        ),
        primary_pod_id=(
            lead_id if isinstance(lead_id, str) and _POD_ID.fullmatch(lead_id) else None
        ),
        primary_status=_pod_status(lead.get("status")) if lead else None,
        primary_ssh=_host_port(lead.get("sshEndpoint")),
        created_at=_time(data.get("createdAt")),
    )


def _pod_status(value: object) -> PodStatus:
    try:
        return PodStatus(value) if isinstance(value, str) else PodStatus.UNKNOWN
    except ValueError:
        return PodStatus.UNKNOWN


def _host_port(value: object) -> tuple[str, int] | None:
    """``host:port`` (an IPv6 host in brackets) when both are safe, else None."""
    if not isinstance(value, str):
        return None
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit():
        return None
    try:
        endpoint = SshEndpoint.parse(host, int(port), "root")
    except UnsafeSshEndpoint:
        return None
    return endpoint.host, endpoint.port


@dataclass(frozen=True)
class ClusterBillingRecord:
    """What one cluster cost over one time bucket ``[start, end)``, in USD."""

    start: datetime
    end: datetime
    cluster_id: str
    total: float


@dataclass(frozen=True)
class ClusterBilling:
    """Runpod's cluster billing over the window it resolved (``start``/``end``, snapped
    to whole buckets of ``bucket``), one record per cluster per bucket."""

    start: datetime
    end: datetime
    bucket: str
    records: tuple[ClusterBillingRecord, ...]

    def amount(self, cluster_id: str | None = None) -> float:
        """What cluster ``cluster_id`` (None: every cluster) cost over the window (USD)."""
        return sum(r.total for r in self.records if cluster_id in (None, r.cluster_id))


def parse_cluster_billing(data: object) -> ClusterBilling:
    """Read a ``ListClusterBillingResponse``; anything unusable raises BadBillingData."""
    start, end, bucket, rows = _billing_rows(data, "clusterId", "cluster")
    records = tuple(ClusterBillingRecord(*row) for row in rows)
    return ClusterBilling(start=start, end=end, bucket=bucket, records=records)


def _billing_rows(
    data: object, id_key: str, what: str
) -> tuple[datetime, datetime, str, list[tuple[datetime, datetime, str, float]]]:
    """A billing answer's resolved window, bucket size and records (start, end, the
    billed thing's id under ``id_key``, total); anything unusable raises BadBillingData."""
    if not isinstance(data, dict):
        raise BadBillingData("a billing answer that is not an object")
    items, meta = data.get("records"), data.get("metadata")
    query = meta.get("query") if isinstance(meta, dict) else None
    if not isinstance(items, list) or not isinstance(query, dict):
        raise BadBillingData("a billing answer without its records or its query")
    start, end = _billing_time(query.get("startTime")), _billing_time(query.get("endTime"))
    rows = []
    for item in items:
        if not isinstance(item, dict):
            raise BadBillingData("a billing record that is not an object")
        thing = item.get(id_key)
        if not isinstance(thing, str) or not _POD_ID.fullmatch(thing):
            raise BadBillingData(f"a billing record without a usable {what} id")
        rows.append(
            (
                _billing_time(item.get("startTime")),
                _billing_time(item.get("endTime")),
                thing,
                _amount(item.get("totalAmount")),
            )
        )
    return start, end, _text(query.get("bucketSize"), 20) or "", rows
