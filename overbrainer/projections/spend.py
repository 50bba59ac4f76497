"""What a run's pods cost: Runpod's billed amount where it is final, overbrainer's own
estimate (uptime × rate) elsewhere, marked as such. Pure: a run's state and a time in.

A pod's cost is, in this order: what Runpod billed once final (``pod.Billed``); the
estimate ``pod.Deleted`` recorded; for a pod that may still bill, its rate times its age
so far; a billed amount not final yet (a lower bound); else unknown. Only the first is
not an estimate: ``$0.42`` is what Runpod billed, ``~$0.42`` is (partly) estimated.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.states import ALIVE, PodState
from overbrainer.utc import parse_utc

__all__ = ["Spend", "money", "recorded_spend", "run_spend"]


@dataclass(frozen=True)
class Spend:
    """A run's spend in USD: ``billed`` (Runpod's final amounts), ``estimated`` (the part
    that is an estimate), ``estimate`` (overbrainer's estimate of every pod, None when
    none is known), how many pods have a ``billed_pods`` final amount or an ``unknown``
    cost, and ``billed_so_far``: what Runpod billed, final or not (None: nothing read)."""

    billed: float = 0.0
    estimated: float = 0.0
    estimate: float | None = None
    pods: int = 0
    billed_pods: int = 0
    unknown: int = 0
    billed_so_far: float | None = None  # every amount Runpod billed, final or not

    @property
    def total(self) -> float:
        """Billed plus estimated."""
        return self.billed + self.estimated

    @property
    def known(self) -> bool:
        """Whether anything is known of what the run cost."""
        return self.pods > self.unknown

    @property
    def exact(self) -> bool:
        """Whether every pod's cost is what Runpod billed, final."""
        return self.pods > 0 and self.billed_pods == self.pods

    def text(self) -> str:
        """``$0.42`` billed, ``~$0.42`` estimated (in part), empty when unknown."""
        if not self.known:
            return ""
        return money(self.total) if self.exact else "~" + money(self.total)

    def to_json(self) -> dict[str, Any]:
        """The fields ``runs ls --json`` carries."""
        return {
            "spend_usd": _round(self.total) if self.known else None,
            "spend_estimated_usd": _round(self.estimated) if self.known else None,
            "billed_usd": _round(self.billed_so_far),
            "billed_final": self.exact,
            "estimate_usd": _round(self.estimate) if self.estimate is not None else None,
        }


def money(amount: float) -> str:
    """``$0.42``."""
    return f"${amount:.2f}"


def _round(amount: float | None) -> float | None:
    return None if amount is None else round(amount, 6)


def _live(rate: object, created_at: object, now: datetime, offset: float | None) -> float | None:
    """A pod that may still bill: its rate times its age on Runpod's clock (this machine's
    clock, less its recorded ``offset`` from Runpod's)."""
    if not isinstance(rate, int | float) or not isinstance(created_at, str) or not created_at:
        return None
    started = parse_utc(created_at)
    if started is None:
        return None
    if offset is not None and math.isfinite(offset):
        now -= timedelta(seconds=offset)
    return float(rate) * max(0.0, (now - started).total_seconds() / 3600)


def run_spend(state: RunLog, now: datetime | None, *, here: bool = False) -> Spend:
    """What run ``state``'s pods cost as of ``now`` (this machine's clock; None: as
    recorded, no estimate of a pod that may still bill). ``here``: the run was started from
    this machine, so the clock offset its log records is this machine's and is taken out of
    a live estimate."""
    pod = state.pod
    offset = state.run.clock_offset if here else None
    costs: dict[str, dict[str, Any]] = dict(pod.costs)
    if not costs and pod.pod_id is not None:
        # A run recorded before pods' costs were kept apart: its current pod only.
        costs[pod.pod_id] = {
            "created_at": pod.created_at,
            "rate": pod.cost_per_hour,
            "estimate": pod.spend,
        }
    billed = estimated = 0.0
    estimate: float | None = None
    billed_pods = unknown = 0
    so_far: float | None = None
    for pod_id, cost in costs.items():
        if cost.get("billed") is not None:
            so_far = (so_far or 0.0) + cost["billed"]
        guess = cost.get("estimate")
        status = pod.pods.get(pod_id, pod.status if pod_id == pod.pod_id else PodState.none)
        if guess is None and status in ALIVE and now is not None:
            guess = _live(cost.get("rate"), cost.get("created_at"), now, offset)
        if guess is not None:
            estimate = (estimate or 0.0) + guess
        if cost.get("billed_final") and cost.get("billed") is not None:
            billed += cost["billed"]
            billed_pods += 1
        elif guess is not None:
            estimated += guess
        elif cost.get("billed") is not None:
            estimated += cost["billed"]
        else:
            unknown += 1
    return Spend(billed, estimated, estimate, len(costs), billed_pods, unknown, so_far)


def recorded_spend(state: RunLog) -> str:
    """What the run's pods cost as its log records it: ``$0.42`` billed, ``~$0.42``
    estimated (in part), empty when nothing is recorded (a pod still billing included)."""
    return run_spend(state, None).text()
