"""The monthly budget's rule: the month's spend (runs created this UTC month), and whether a
new run's bound fits in what is left."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.projections.budget import Budget, month_bounds, month_name, month_spend


def _run(created: str, spend: float | None, *, n: int = 1) -> RunLog:
    """A Runpod run created at ``created`` whose one pod was deleted having cost ``spend``
    (None: a run on this machine, no pod)."""
    events: list[ev.Event] = [
        ev.RunCreated(
            run_id=f"20260101-100000-{n:04x}",
            target="gpu",
            kind="runpod" if spend is not None else "local",
            remote_dir="r",
            settings_digest="d",
            base_model="m",
            adapter="lora",
        )
    ]
    if spend is not None:
        events += [
            ev.AttemptSent(n=1, pod_name="p", gpu_type="NVIDIA A40", max_hours=2.0),
            ev.AttemptResolved(n=1, result="created", pod_id=f"p{n}"),
            ev.PodCreated(
                pod_id=f"p{n}", gpu_type="NVIDIA A40", cost_per_hour=1.0, created_at=created
            ),
            ev.PodDeleting(pod_id=f"p{n}", reason="retrieved"),
            ev.PodDeleted(pod_id=f"p{n}", by="client", uptime_seconds=3600.0, spend=spend),
        ]
    return fold([(e, created) for e in events])


NOW = datetime(2026, 12, 2, 20, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "start", "end"),
    [
        (datetime(2026, 12, 2, 20, 0, tzinfo=UTC), "2026-12-01", "2027-01-01"),
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), "2026-12-01", "2027-01-01"),
        (datetime(2027, 1, 1, 0, 0, tzinfo=UTC), "2027-01-01", "2027-02-01"),
        (datetime(2026, 2, 28, 12, 0, tzinfo=UTC), "2026-02-01", "2026-03-01"),
        # 23:30 on Nov 30 in New York is Dec 1 in UTC: the month is UTC's.
        (
            datetime(2026, 11, 30, 23, 30, tzinfo=timezone(timedelta(hours=-5))),
            "2026-12-01",
            "2027-01-01",
        ),
    ],
)
def test_the_month_is_the_utc_calendar_month(now: datetime, start: str, end: str) -> None:
    first, after = month_bounds(now)
    assert (first.date().isoformat(), after.date().isoformat()) == (start, end)
    assert first.tzinfo is UTC and after.tzinfo is UTC


def test_the_month_is_named_by_its_utc_month() -> None:
    assert month_name(NOW) == "Dec 2026"
    assert month_name(datetime(2026, 12, 31, 20, 0, tzinfo=timezone(timedelta(hours=-5)))) == (
        "Jan 2027"
    )


@pytest.mark.parametrize(
    ("runs", "spent"),
    [
        ([], 0.0),
        ([("2026-12-01T00:00:00Z", 3.0)], 3.0),  # the month's first moment counts
        ([("2026-11-30T23:59:59Z", 3.0)], 0.0),  # the last moment of the month before does not
        ([("2026-12-01T00:00:00Z", 3.0), ("2026-12-02T10:00:00Z", 1.5)], 4.5),
        ([("2026-10-15T10:00:00Z", 50.0), ("2026-12-02T10:00:00Z", 1.5)], 1.5),
        ([("2025-12-02T10:00:00Z", 50.0)], 0.0),  # the same month a year before
        ([("2026-12-02T10:00:00Z", None)], 0.0),  # a run on this machine costs nothing
    ],
)
def test_the_months_spend_counts_the_runs_created_in_it(
    runs: list[tuple[str, float | None]], spent: float
) -> None:
    states = [_run(created, spend, n=n) for n, (created, spend) in enumerate(runs)]
    assert month_spend(states, NOW) == pytest.approx(spent)


def test_a_run_created_last_month_counts_there_whenever_its_pod_billed() -> None:
    # Created at 23:00 on Nov 30, its pod ran for hours into December: all of it is November's.
    late = _run("2026-11-30T23:00:00Z", 12.0)
    assert month_spend([late], NOW) == 0.0
    assert month_spend([late], datetime(2026, 11, 30, 23, 59, tzinfo=UTC)) == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("budget", "spent", "bound", "fits"),
    [
        (100.0, 0.0, 10.0, True),
        (100.0, 90.0, 10.0, True),  # exactly at the budget is allowed
        (100.0, 90.0, 10.01, False),
        (100.0, 100.0, 0.5, False),
        (100.0, 120.0, 1.0, False),  # already past it
        (0.3, 0.1, 0.2, True),  # float sums that land on the budget (0.1 + 0.2)
        (100.0, 0.0, None, False),  # nothing bounds the run
    ],
)
def test_a_run_fits_when_its_bound_and_the_months_spend_stay_within_the_budget(
    budget: float, spent: float, bound: float | None, fits: bool
) -> None:
    verdict = Budget(budget, spent, bound, "Dec 2026")
    assert verdict.fits is fits
    assert (verdict.refusal("gpu") == "") is fits


def test_the_budget_line_names_the_spend_the_budget_and_the_runs_bound() -> None:
    assert Budget(100.0, 12.0, 8.0, "Dec 2026").line() == (
        "budget: $12.00 of $100.00 spent this month (Dec 2026); this run may cost up to $8.00"
    )


def test_a_refusal_names_the_spend_the_budget_the_bound_and_what_is_left() -> None:
    text = Budget(100.0, 87.505, 20.0, "Dec 2026").refusal("gpu")
    assert text == (
        "this month's spend (Dec 2026) is $87.50 of project.monthly_budget_usd $100.00; this "
        "run may cost up to $20.00, which would pass it: lower targets.gpu.max_cost_usd to "
        "12.49 (what is left) or raise project.monthly_budget_usd, no pod was created"
    )


def test_a_refusal_with_nothing_left_says_to_raise_the_budget_or_wait() -> None:
    text = Budget(100.0, 100.0, 5.0, "Dec 2026").refusal("gpu")
    assert "nothing is left this month; raise project.monthly_budget_usd" in text
    assert "max_cost_usd" not in text


def test_a_refusal_of_an_unbounded_run_says_to_set_max_cost_usd() -> None:
    text = Budget(100.0, 40.0, None, "Dec 2026").refusal("gpu")
    assert "nothing bounds what a run on target gpu may cost" in text
    assert "set targets.gpu.max_cost_usd = 60 or less" in text


def test_a_bound_that_counts_a_pod_per_recovery_says_so() -> None:
    line = Budget(100.0, 12.0, 32.0, "Dec 2026", pods=4).line()
    assert line.endswith(
        "this run may cost up to $32.00 (4 pods: its first and one per recovery, max_recoveries)"
    )
    assert "(4 pods" in Budget(100.0, 80.0, 32.0, "Dec 2026", pods=4).refusal("gpu")
