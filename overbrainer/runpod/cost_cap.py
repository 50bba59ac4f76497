"""A pod's cost cap while its job is followed, as pure functions: no I/O, no clock.

A pod created with ``max_cost_usd`` has cost its cap once its recorded rate (``pod.Created``'s
``cost_per_hour``, the pod's whole rate) times its age since Runpod's ``createdAt`` reaches
it; its watchdog deletes it then, counting on the pod as it counts the deadline. At
:data:`NEAR` of the cap the cap is near (the log records it); following stops the job
:data:`FOLLOW_MARGIN` before the cap, but never before halfway from near to it, so that the job's
results so far come home before the watchdog deletes the pod. A kept pod has no cap once
its job started, as it has no deadline. Once the cap is near, the watchdog asks the job
to save a checkpoint and stop: a job that does so in time ends ``stopped``, not failed.
"""

import math
from datetime import datetime, timedelta
from enum import StrEnum

from overbrainer.events.aggregate import PodView
from overbrainer.utc import parse_utc

NEAR = 0.95
"""The share of the cap at which it is near (the watchdog writes ``.pod/cost_cap_near``)."""

FOLLOW_MARGIN = 5 * 60.0
"""How long before the pod reaches its cap following stops the job, retrieves its results
and deletes the pod (seconds): the watchdog deletes it at the cap, results home or not."""


def max_cost(pod: PodView) -> float | None:
    """The cap the run's current pod was created with (None: none, or an older log)."""
    for attempt in reversed(pod.attempts):
        if attempt.get("pod_id") == pod.pod_id and attempt.get("max_cost_usd") is not None:
            return float(attempt["max_cost_usd"])
    return None


def cap_seconds(max_cost_usd: float, rate: float) -> float | None:
    """How long after its creation a pod billing ``rate`` USD/h has cost ``max_cost_usd``,
    rounded down to the millisecond as the watchdog rounds it; None without a usable rate."""
    if not (math.isfinite(rate) and rate > 0 and math.isfinite(max_cost_usd)):
        return None
    return max(0.0, math.floor(max_cost_usd * 3_600_000 / rate) / 1000)


def cap_at(pod: PodView, share: float = 1.0) -> datetime | None:
    """When (Runpod's clock) the current pod has cost ``share`` of its cap; None when it has
    no cap, is kept, or its rate or creation is unknown."""
    cap = max_cost(pod)
    created = parse_utc(pod.created_at)
    if cap is None or pod.keep or created is None or pod.cost_per_hour is None:
        return None
    seconds = cap_seconds(cap, pod.cost_per_hour)
    if seconds is None:
        return None
    return created + timedelta(seconds=seconds * share)


def follow_until(pod: PodView) -> datetime | None:
    """When following ends the run at the cap: :data:`FOLLOW_MARGIN` before the pod
    reaches it, or halfway from near (:data:`NEAR`) to the cap, whichever is later: the
    pod's watchdog asks the job to save a checkpoint and stop once the cap is near, and
    the job gets at least half of what is left for it."""
    at = cap_at(pod)
    near = cap_at(pod, NEAR)
    if at is None or near is None:
        return None
    return max(near + (at - near) / 2, at - timedelta(seconds=FOLLOW_MARGIN))


class Bound(StrEnum):
    """Which bound of a pod ends following first."""

    deadline = "deadline"
    cost_cap = "cost_cap"


def first_bound(pod: PodView, deadline_slack: float) -> Bound:
    """Which of the pod's bounds following meets first: its deadline (plus
    ``deadline_slack``, the watchdog's turn) or its cost cap (less the margin)."""
    capped = follow_until(pod)
    if capped is None:
        return Bound.deadline
    deadline = parse_utc(pod.deadline)
    if deadline is not None and deadline + timedelta(seconds=deadline_slack) < capped:
        return Bound.deadline
    return Bound.cost_cap


def seconds_until(moment: datetime | None, now: datetime) -> float:
    """Seconds from ``now`` until ``moment`` (0 once past; infinite for None)."""
    if moment is None:
        return math.inf
    return max(0.0, (moment - now).total_seconds())


def cap_text(pod: PodView) -> str:
    """``max_cost_usd = $1.00 at $2.00/h, reached 30 min after its creation``."""
    cap = max_cost(pod)
    rate = pod.cost_per_hour
    if cap is None or rate is None:
        return "its cost cap"
    seconds = cap_seconds(cap, rate)
    when = "" if seconds is None else f", reached {seconds / 60:.4g} min after its creation"
    return f"max_cost_usd = ${cap:.2f} at ${rate:.2f}/h{when}"


def bound_passed(pod: PodView, now: datetime) -> Bound | None:
    """Which bound of the pod's watchdog had passed at ``now`` (Runpod's clock) — the one
    met first — for a pod found gone: its deadline, its cost cap, or None (neither: it went
    for another reason). A kept pod has no bound its watchdog keeps."""
    if pod.keep:
        return None
    passed: list[tuple[datetime, Bound]] = []
    deadline = parse_utc(pod.deadline)
    if deadline is not None and deadline <= now:
        passed.append((deadline, Bound.deadline))
    capped = cap_at(pod)
    if capped is not None and capped <= now:
        passed.append((capped, Bound.cost_cap))
    return min(passed)[1] if passed else None
