"""The project's monthly budget: what its runs cost this calendar month (UTC), and whether a
new run's bound fits in what is left. Pure: runs' states, a time and numbers in.

A run counts in the month it was created in (its ``run.Created`` time, UTC), all its pods
included, whenever they billed: a run started on the last evening of a month stays in that
month. Its cost is :func:`~overbrainer.projections.spend.run_spend`'s (Runpod's bill where
final, overbrainer's estimate elsewhere, a pod that may still bill at its rate so far).
Runs on this machine or over SSH have no pod and cost nothing here.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from overbrainer.events.aggregate import RunLog
from overbrainer.projections.spend import money, run_spend
from overbrainer.utc import parse_utc

__all__ = ["BUDGET_KEY", "Budget", "month_bounds", "month_name", "month_spend", "month_text"]

BUDGET_KEY = "project.monthly_budget_usd"

# Amounts are compared to the cent's hundredth: a bound computed in floats that lands on
# the budget exactly is within it.
_SLACK = 1e-6


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) ``now`` falls in: its first moment, and the next month's."""
    moment = now.astimezone(UTC)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    if moment.month == 12:
        return start, datetime(moment.year + 1, 1, 1, tzinfo=UTC)
    return start, datetime(moment.year, moment.month + 1, 1, tzinfo=UTC)


def month_name(now: datetime) -> str:
    """``Dec 2026``: the month (UTC) ``now`` falls in."""
    moment = now.astimezone(UTC)
    return f"{_MONTHS[moment.month - 1]} {moment.year}"


def month_spend(states: Iterable[RunLog], now: datetime) -> float:
    """What the runs created in ``now``'s month (UTC) have cost as of ``now`` (USD)."""
    start, end = month_bounds(now)
    total = 0.0
    for state in states:
        created = parse_utc(state.run.created_at)
        if created is not None and start <= created < end:
            total += run_spend(state, now).total
    return total


def month_text(spent: float, budget: float, month: str) -> str:
    """``this month (Dec 2026) $12.00 of the monthly budget $100.00, $88.00 left``."""
    left = f"{money(budget - spent)} left" if spent <= budget else f"{money(spent - budget)} over"
    return f"this month ({month}) {money(spent)} of the monthly budget {money(budget)}, {left}"


@dataclass(frozen=True)
class Budget:
    """A new run against the monthly budget: ``budget`` (USD), what the month ``spent`` so
    far, the run's ``bound`` (the most it may cost; None: nothing bounds it) and the
    ``month`` (``Dec 2026``); ``pods``: how many pods that bound counts (a run without
    ``max_cost_usd`` may get a new pod per recovery, each as dear as its first).
    """

    budget: float
    spent: float
    bound: float | None
    month: str
    pods: int = 1

    @property
    def left(self) -> float:
        """What the month has left of the budget (0 once spent)."""
        return max(0.0, self.budget - self.spent)

    @property
    def fits(self) -> bool:
        """Whether the run may start: its bound is known and, added to the month's spend,
        stays within the budget (exactly at it included)."""
        return self.bound is not None and self.spent + self.bound <= self.budget + _SLACK

    def line(self) -> str:
        """``budget: $12.00 of $100.00 spent this month (Dec 2026); this run may cost up to
        $8.00``."""
        head = (
            f"budget: {money(self.spent)} of {money(self.budget)} spent this month ({self.month})"
        )
        if self.bound is None:
            return head + "; nothing bounds what this run may cost"
        return head + f"; this run may cost up to {money(self.bound)}{self._pods()}"

    def _pods(self) -> str:
        if self.pods == 1:
            return ""
        return f" ({self.pods} pods: its first and one per recovery, max_recoveries)"

    def refusal(self, target: str, nothing: str | None = "no pod") -> str:
        """Why the run may not start, and what to change (empty when it fits); ``nothing``
        says what was not created (``no run``, ``no pod``; None: left unsaid)."""
        if self.fits:
            return ""
        text = self._refusal(target)
        return text if nothing is None else f"{text}, {nothing} was created"

    def _refusal(self, target: str) -> str:
        key = f"targets.{target}.max_cost_usd"
        left = _cents_down(self.left)
        spent = (
            f"this month's spend ({self.month}) is {money(self.spent)} of {BUDGET_KEY} "
            f"{money(self.budget)}"
        )
        if self.bound is None:
            return (
                f"{spent}, and nothing bounds what a run on target {target} may cost (Runpod's "
                f"catalog lists no price for a GPU type it may use): set {key} = {left:g} or "
                "less (what the month has left)"
            )
        over = (
            f"{spent}; this run may cost up to {money(self.bound)}{self._pods()}, which would "
            "pass it"
        )
        if left <= 0:
            return f"{over}: nothing is left this month; raise {BUDGET_KEY} or wait for next month"
        return f"{over}: lower {key} to {left:g} (what is left) or raise {BUDGET_KEY}"


def _cents_down(amount: float) -> float:
    """``amount`` rounded down to the cent (what is left must not be rounded up past it)."""
    return int(round(amount * 100, 6)) / 100
