"""What Runpod billed for a run's pods: which to read, over which window, and when a read
counts as final. Pure: the run's state and Runpod's time in, decisions out.

Runpod bills per second but reports usage in time buckets, and how soon a pod's usage
reaches its billing is not documented: right after a delete the amount may be 0 or partial.
So a read is **final** only when Runpod's clock, at the read, is past both the end of the
hour bucket holding the pod's end and :data:`SETTLE` after that end; an earlier read is
recorded as it is (``final`` false) and read again later (``overbrainer pod billing``).
A pod's end is Runpod's ``createdAt`` plus its uptime when the delete recorded them, else
when the pod was recorded gone (this machine's clock, less the offset recorded from
Runpod's) — later than the real end at worst, which only makes finality wait longer.

The window asked starts at the pod's creation (or, unknown, a day before its run's) and
ends at Runpod's now, both snapped out to whole hours: the pod filter makes a wider window
cost nothing, and only whole buckets keep Runpod from widening it by itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from overbrainer.utc import parse_utc

if TYPE_CHECKING:
    from overbrainer.events.aggregate import RunLog
    from overbrainer.runpod.models import BucketSize

__all__ = [
    "SETTLE",
    "BillingAsk",
    "asks",
    "is_final",
    "pod_end",
    "window",
]

SETTLE = timedelta(minutes=10)
"""How long after a pod's end (and its hour bucket's end) its billing counts as complete."""
_HOUR = timedelta(hours=1)
_UNKNOWN_START = timedelta(days=1)  # before the run's creation, when the pod's is unknown
_HOURLY_SPAN = timedelta(days=31)  # a longer window is asked in days: fewer records


@dataclass(frozen=True)
class BillingAsk:
    """One pod's billing to read: from ``start`` to ``end`` in buckets of ``bucket``;
    ``ended`` is the pod's end on Runpod's clock (None: unknown)."""

    pod_id: str
    start: datetime
    end: datetime
    bucket: BucketSize
    ended: datetime | None


def _floor(moment: datetime, step: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return epoch + step * math.floor((moment - epoch) / step)


def _ceil(moment: datetime, step: timedelta) -> datetime:
    floor = _floor(moment, step)
    return floor if floor == moment else floor + step


def window(created: datetime, now: datetime) -> tuple[datetime, datetime, BucketSize]:
    """The window and bucket size to ask for a pod created at ``created`` (Runpod's clock)
    when Runpod's clock says ``now``: whole hours, or whole days for more than a month."""
    start = _floor(created, _HOUR)
    end = _ceil(max(now, created + timedelta(seconds=1)), _HOUR)
    if end - start <= _HOURLY_SPAN:
        return start, end, "hour"
    day = timedelta(days=1)
    return _floor(created, day), _ceil(end, day), "day"


def pod_end(cost: dict[str, Any], clock_offset: float | None) -> datetime | None:
    """When a gone pod stopped billing, on Runpod's clock: its ``createdAt`` plus uptime, or
    when it was recorded gone corrected by this machine's recorded ``clock_offset``."""
    ended = parse_utc(cost.get("ended_at"))
    if ended is not None:
        return ended
    gone = parse_utc(cost.get("gone_at"))
    if gone is None:
        return None
    if clock_offset is not None and math.isfinite(clock_offset):
        gone -= timedelta(seconds=clock_offset)
    return gone


def is_final(ended: datetime | None, read_at: datetime) -> bool:
    """Whether a read at ``read_at`` (Runpod's clock) of a pod that ended at ``ended`` is
    complete: past the end of the pod's last hour bucket, and :data:`SETTLE` past its end."""
    if ended is None:
        return False
    return read_at >= _ceil(ended, _HOUR) and read_at >= ended + SETTLE


def asks(state: RunLog, now: datetime, only: str | None = None) -> list[BillingAsk]:
    """The billing reads a run needs at Runpod's ``now``: one per pod recorded gone whose
    billed amount is not final yet (``only``: that pod alone)."""
    pod = state.pod
    found: list[BillingAsk] = []
    offset = state.run.clock_offset
    for pod_id, cost in pod.costs.items():
        if (only is not None and pod_id != only) or not pod.deleted(pod_id):
            continue
        if cost.get("billed_final"):
            continue
        created = parse_utc(cost.get("created_at"))
        if created is None:
            run_created = parse_utc(state.run.created_at)
            if run_created is None:
                continue
            if offset is not None and math.isfinite(offset):
                run_created -= timedelta(seconds=offset)
            created = run_created - _UNKNOWN_START
        start, end, bucket = window(created, now)
        found.append(BillingAsk(pod_id, start, end, bucket, pod_end(cost, offset)))
    return found
