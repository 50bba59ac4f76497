"""What takes the space of a network volume, and which checkpoints on it may go: pure
folds of an S3 listing (``VolumeS3.list_objects``) over the layout of
:mod:`~overbrainer.runpod.volume_layout`, for ``volume ls``, ``volume du`` and ``volume
prune``."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from overbrainer.runpod.s3 import StoredObject
from overbrainer.runpod.volume_layout import checkpoint_of, part_of
from overbrainer.runpod.volumes import VOLUME_PRICE_PER_GB_MONTH

__all__ = [
    "Checkpoint",
    "Pruning",
    "Usage",
    "checkpoints_of",
    "monthly_cost",
    "prune_plan",
    "usage_of",
]


def monthly_cost(size_gb: int | None) -> float | None:
    """What a volume of ``size_gb`` costs a month (USD): Runpod bills its size, not what it
    holds."""
    return None if size_gb is None else size_gb * VOLUME_PRICE_PER_GB_MONTH


@dataclass(frozen=True)
class Usage:
    """The bytes of a volume by what they are for: the model cache, Axolotl's prepared
    data, the data from home, each run's output (its checkpoints and final output), and
    anything not overbrainer's."""

    cache: int = 0
    prepared: int = 0
    data: int = 0
    other: int = 0
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.cache + self.prepared + self.data + self.other + sum(self.runs.values())


def usage_of(objects: Iterable[StoredObject]) -> Usage:
    """The bytes of ``objects`` by the part of the volume's layout each belongs to."""
    sizes = {"cache": 0, "prepared": 0, "data": 0, "other": 0}
    runs: dict[str, int] = {}
    for item in objects:
        part = part_of(item.key)
        if part.kind == "checkpoints" and part.run_id is not None:
            runs[part.run_id] = runs.get(part.run_id, 0) + item.size
        else:
            sizes[part.kind if part.kind in sizes else "other"] += item.size
    return Usage(**sizes, runs=dict(sorted(runs.items())))


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a run on the volume: its objects (their keys), their bytes, and
    when its newest object was written (None: the listing did not say)."""

    run_id: str
    step: int
    prefix: str
    size: int
    keys: tuple[str, ...]
    modified: datetime | None


def checkpoints_of(objects: Iterable[StoredObject]) -> list[Checkpoint]:
    """Every checkpoint (``runs/<run>/output/checkpoint-N``) among ``objects``, by run and
    step."""
    found: dict[str, list[StoredObject]] = {}
    where: dict[str, tuple[str, int]] = {}
    for item in objects:
        seen = checkpoint_of(item.key)
        if seen is not None:
            run_id, step, prefix = seen
            found.setdefault(prefix, []).append(item)
            where[prefix] = (run_id, step)
    checkpoints = []
    for prefix, items in found.items():
        run_id, step = where[prefix]
        times = [i.modified for i in items]
        checkpoints.append(
            Checkpoint(
                run_id=run_id,
                step=step,
                prefix=prefix,
                size=sum(i.size for i in items),
                keys=tuple(sorted(i.key for i in items)),
                modified=None if None in times else max(t for t in times if t is not None),
            )
        )
    return sorted(checkpoints, key=lambda c: (c.run_id, c.step))


@dataclass(frozen=True)
class Pruning:
    """What ``volume prune`` deletes, and what it keeps, each kept one with why."""

    delete: tuple[Checkpoint, ...]
    kept: tuple[tuple[Checkpoint, str], ...]

    @property
    def freed(self) -> int:
        return sum(c.size for c in self.delete)


def prune_plan(
    checkpoints: Sequence[Checkpoint],
    *,
    older_than: timedelta,
    now: datetime,
    live: frozenset[str],
    finished: frozenset[str],
) -> Pruning:
    """The checkpoints written more than ``older_than`` before ``now``, but none of a
    ``live`` run (in progress, or a pod of it may still exist), nor the newest of a run not
    ``finished`` (one that did not end with its final output: a resume starts from its
    newest checkpoint; a run this store does not know counts as not finished). A
    checkpoint whose age the listing did not say is kept."""
    cutoff = now - older_than
    newest: dict[str, int] = {}
    for c in checkpoints:
        newest[c.run_id] = max(newest.get(c.run_id, c.step), c.step)
    delete: list[Checkpoint] = []
    kept: list[tuple[Checkpoint, str]] = []
    for c in checkpoints:
        if c.run_id in live:
            kept.append((c, f"run {c.run_id} is in progress"))
        elif c.modified is None:
            kept.append((c, "its age is unknown"))
        elif c.modified >= cutoff:
            kept.append((c, "not old enough"))
        elif c.run_id not in finished and c.step == newest[c.run_id]:
            kept.append((c, f"the newest checkpoint of run {c.run_id}, which did not finish"))
        else:
            delete.append(c)
    return Pruning(tuple(delete), tuple(kept))
