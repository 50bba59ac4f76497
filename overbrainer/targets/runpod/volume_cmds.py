"""``volume ls``, ``volume du NAME``, ``volume prune NAME`` and ``volume rm NAME``: the
account's network volumes against this project's runs.

What a volume holds is read through Runpod's S3-compatible API (no pod needed), so ``du``
and ``prune`` need the S3 API key and ``ls`` says "unknown" without it. Which runs used a
volume is the log's ``pod.VolumeAttached`` (folded into ``PodView.volume``). A volume is
never deleted while a run of the project that attached it has not ended, nor while a pod
lists it in its mounts (Runpod refuses that too, with 409); its deletion is confirmed by
a listing without it.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import trio

from overbrainer.config.model import RunpodSettings
from overbrainer.errors import OverbrainerError, UsageError
from overbrainer.events.aggregate import RunLog
from overbrainer.events.states import RunState
from overbrainer.events.store import UnknownRun
from overbrainer.runpod.client import RunpodClient, VolumeInUse
from overbrainer.runpod.models import BucketSize, NetworkVolume, Pod, PodStatus
from overbrainer.runpod.orphans import run_of
from overbrainer.runpod.s3 import S3Error, StoredObject, VolumeS3, volume_s3
from overbrainer.runpod.volume_usage import (
    Pruning,
    Usage,
    checkpoints_of,
    monthly_cost,
    prune_plan,
    usage_of,
)
from overbrainer.targets.runpod.pods import PodContext

__all__ = [
    "NEEDS_S3",
    "S3Opener",
    "VolumeRow",
    "VolumeUser",
    "delete_volume",
    "list_volumes",
    "named_volume",
    "plan_pruning",
    "prune",
    "refusal",
    "runs_by_volume",
    "s3_opener",
    "usage",
    "users_of",
    "volume_spend",
]

NEEDS_S3 = "set OVERBRAINER_RUNPOD__S3_ACCESS_KEY/__S3_SECRET"
"""What gives overbrainer the S3 API key (in ``.env`` or the environment)."""

S3Opener = Callable[[NetworkVolume], VolumeS3 | None]
"""The S3 client of a volume, or None when no S3 API key is configured."""

_GONE_TRIES = 10  # listings looked at for a deleted volume to be gone
_GONE_WAIT = 1.0  # seconds between them


def runs_by_volume(states: Sequence[RunLog]) -> dict[str, list[str]]:
    """The runs of ``states`` that attached each volume (``pod.VolumeAttached``), by the
    volume's id, oldest run first."""
    found: dict[str, list[str]] = {}
    for state in states:
        volume = state.pod.volume
        if volume is not None:
            found.setdefault(str(volume["id"]), []).append(state.run.run_id)
    return found


def named_volume(volumes: Sequence[NetworkVolume], name: str) -> NetworkVolume:
    """The account's volume called ``name`` (or of id ``name``): names are not unique at
    Runpod, so two of one name is an error asking for the id."""
    by_id = [v for v in volumes if v.id == name]
    if by_id:
        return by_id[0]
    named = [v for v in volumes if v.name == name]
    if len(named) == 1:
        return named[0]
    if named:
        listed = ", ".join(f"{v.id} in {v.data_center or '?'}" for v in named)
        raise UsageError(
            f"the account has {len(named)} network volumes named {name!r} ({listed}): give "
            "the id of the one you mean"
        )
    known = ", ".join(sorted({v.name or v.id for v in volumes})) or "none"
    raise UsageError(
        f"the account has no network volume named {name!r} (its volumes: {known}); "
        "`overbrainer volume ls` lists them"
    )


# --- volume ls -------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeRow:
    """One volume of ``volume ls``: what it holds (``used``, bytes; None with ``unknown``
    saying why) and the project's runs that attached it."""

    volume: NetworkVolume
    used: int | None
    unknown: str
    runs: tuple[str, ...]

    @property
    def monthly(self) -> float | None:
        return monthly_cost(self.volume.size_gb)

    def to_json(self) -> dict[str, object]:
        v = self.volume
        return {
            "name": v.name,
            "id": v.id,
            "data_center": v.data_center,
            "size_gb": v.size_gb,
            "used_bytes": self.used,
            "used_unknown": self.unknown or None,
            "monthly_usd": self.monthly,
            "runs": list(self.runs),
        }


async def list_volumes(ctx: PodContext, s3: S3Opener, states: Sequence[RunLog]) -> list[VolumeRow]:
    """Every network volume of the account, with what it holds when the S3 API key is set,
    and the runs of ``states`` that attached it."""
    volumes = await ctx.client.list_network_volumes()
    used = {r: tuple(ids) for r, ids in runs_by_volume(states).items()}
    rows = []
    for volume in sorted(volumes, key=lambda v: (v.name, v.id)):
        size: int | None = None
        unknown = ""
        try:
            client = s3(volume)
        except S3Error as error:
            client, unknown = None, f"unknown ({error})"
        if client is None and not unknown:
            unknown = f"unknown ({NEEDS_S3})"
        if client is not None:
            try:
                async with client:
                    size = usage_of(await client.list_objects()).total
            except S3Error as error:
                unknown = f"unknown ({error})"
        rows.append(VolumeRow(volume, size, unknown, used.get(volume.id, ())))
    return rows


def s3_opener(settings: RunpodSettings) -> S3Opener:
    """The opener of ``[runpod]``'s S3 API key and endpoint."""
    return lambda volume: volume_s3(settings, volume.id, volume.data_center or "")


def _required(s3: S3Opener, volume: NetworkVolume, command: str) -> VolumeS3:
    client = s3(volume)
    if client is None:
        raise OverbrainerError(
            f"volume {command} reads the volume through Runpod's S3 API, and no S3 API key is "
            f"configured: create one in Runpod's console (Settings, S3 API Keys), then "
            f"{NEEDS_S3} in .env or the environment"
        )
    return client


# --- volume du -------------------------------------------------------------------------


async def usage(s3: S3Opener, volume: NetworkVolume) -> tuple[Usage, list[StoredObject]]:
    """What takes the space of ``volume``, and its objects."""
    async with _required(s3, volume, "du") as client:
        objects = await client.list_objects()
    return usage_of(objects), objects


# --- volume prune ----------------------------------------------------------------------


async def plan_pruning(
    ctx: PodContext,
    objects: Sequence[StoredObject],
    *,
    older_than: timedelta,
    now: datetime,
) -> Pruning:
    """Which checkpoints of ``objects`` go: older than ``older_than``, none of a run in
    progress (or whose pod may exist), never the newest of a run that did not succeed."""
    checkpoints = checkpoints_of(objects)
    states: dict[str, RunLog] = {}
    for run_id in sorted({c.run_id for c in checkpoints}):
        try:
            states[run_id] = await ctx.session.journal.state(run_id)
        except (UnknownRun, ValueError):
            continue
    live = frozenset(r for r, s in states.items() if not s.final or s.pod.may_bill())
    finished = frozenset(r for r, s in states.items() if s.run.state == RunState.succeeded)
    return prune_plan(checkpoints, older_than=older_than, now=now, live=live, finished=finished)


async def prune(s3: S3Opener, volume: NetworkVolume, pruning: Pruning) -> int:
    """Delete the checkpoints of ``pruning`` from ``volume``; the bytes freed."""
    freed = 0
    async with _required(s3, volume, "prune") as client:
        for checkpoint in pruning.delete:
            for key in checkpoint.keys:
                await client.delete_object(key)
            freed += checkpoint.size
    return freed


# --- volume rm -------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeUser:
    """What keeps a volume from being deleted: a run of the project that attached it and
    has not ended (``pod_id``: its pod, when one lists the volume), or a pod listing it in
    its mounts (``run_id``: the run its marker names, None for a pod not overbrainer's;
    ``cluster_id``: the cluster it is a member of, if any)."""

    run_id: str | None
    pod_id: str | None
    state: RunLog | None
    cluster_id: str | None = None

    def text(self) -> str:
        where = f"cluster {self.cluster_id}" if self.cluster_id else f"pod {self.pod_id}"
        if self.run_id is None:
            return f"{where} (not overbrainer's)"
        return f"run {self.run_id} ({where})" if self.pod_id else f"run {self.run_id}"

    def next_command(self) -> str:
        """The command that ends this use."""
        if self.run_id is None:
            where = f"cluster {self.cluster_id}" if self.cluster_id else f"pod {self.pod_id}"
            return f"delete {where} in Runpod's console"
        if self.state is not None and self.state.final:
            return f"`overbrainer pod rm {self.run_id}` deletes its pod"
        if self.state is None:
            return f"`overbrainer pod rm {self.run_id} --force` deletes its pods"
        return (
            f"wait for it to end, or `overbrainer train cancel {self.run_id}` stops it "
            f"(`overbrainer train stop {self.run_id}` saves a checkpoint first)"
        )


async def users_of(
    ctx: PodContext, volume: NetworkVolume, states: Mapping[str, RunLog]
) -> list[VolumeUser]:
    """The runs of ``states`` (the project's) not ended that attached ``volume``, and the
    account's pods (clusters' members too) that list it in their mounts, one per cluster."""
    pods: list[Pod] = [
        p
        for p in await ctx.client.list_pods(include_cluster_pods=True)
        if volume.id in p.network_volumes and p.status is not PodStatus.TERMINATED
    ]
    pod_of = {run_of(p): p for p in pods if run_of(p) is not None}
    users: list[VolumeUser] = []
    for run_id, state in sorted(states.items()):
        attached = state.pod.volume is not None and state.pod.volume["id"] == volume.id
        if attached and (not state.final or run_id in pod_of):
            pod = pod_of.get(run_id)
            cluster = pod.cluster.cluster_id if pod is not None and pod.cluster else None
            users.append(VolumeUser(run_id, pod.id if pod else None, state, cluster))
    named: set[str | None] = {u.run_id for u in users}
    clusters: set[str | None] = set()
    for pod in pods:
        marker = run_of(pod)
        cluster = pod.cluster.cluster_id if pod.cluster is not None else None
        if (marker is not None and marker in named) or cluster in clusters:
            continue
        users.append(VolumeUser(marker, pod.id, states.get(marker or ""), cluster))
        named.add(marker)
        if cluster is not None:
            clusters.add(cluster)
    return users


def refusal(volume: NetworkVolume, users: Sequence[VolumeUser]) -> str:
    """Why ``volume rm`` refuses, naming each user and what ends its use."""
    uses = "; ".join(f"{u.text()}: {u.next_command()}" for u in users)
    return (
        f"volume rm: network volume {volume.name} ({volume.id}) is in use by {uses}; then "
        f"run `overbrainer volume rm {volume.name or volume.id}` again. Nothing was deleted"
    )


async def delete_volume(ctx: PodContext, volume: NetworkVolume) -> None:
    """Delete ``volume`` and wait until Runpod's listing no longer has it."""
    try:
        await ctx.client.delete_network_volume(volume.id)
    except VolumeInUse as error:
        raise OverbrainerError(
            f"volume rm: Runpod refused to delete network volume {volume.name} ({volume.id}): "
            f"a pod mounts it ({error.detail or error}); `overbrainer pod ls` shows the pods. "
            "Nothing was deleted"
        ) from None
    for attempt in range(_GONE_TRIES):
        listed = await ctx.client.list_network_volumes()
        if all(v.id != volume.id for v in listed):
            return
        if attempt + 1 < _GONE_TRIES:
            await trio.sleep(_GONE_WAIT)
    raise OverbrainerError(
        f"volume rm: Runpod accepted the deletion of network volume {volume.name} "
        f"({volume.id}), but still lists it after {_GONE_TRIES} looks; run `overbrainer "
        "volume ls` later to see it gone"
    )


# --- runs ls --since -------------------------------------------------------------------


async def volume_spend(
    client: RunpodClient, volume_ids: Collection[str], start: datetime, end: datetime
) -> tuple[float, datetime]:
    """What Runpod billed for the volumes ``volume_ids`` from ``start`` to ``end`` (USD),
    and from when its billing counted (its buckets are whole hours or days, so it may
    start before ``start``)."""
    bucket: BucketSize = "hour" if end - start <= timedelta(days=7) else "day"
    billing = await client.volume_billing(start, end, bucket=bucket)
    return sum(billing.amount(v) for v in set(volume_ids)), billing.start
