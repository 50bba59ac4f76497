"""``runs ls``'s spend of a pod that may still bill: an estimate from this machine's clock
and Runpod's ``createdAt``, corrected by the clock offset this machine recorded."""

from datetime import UTC, datetime, timedelta

import pytest

from overbrainer.cli.runs_read import spend_text
from overbrainer.events.aggregate import PodView, RunLog, RunView

CREATED = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)  # Runpod's clock
RUNPOD_NOW = CREATED + timedelta(hours=1)


def _state(offset: float | None, *, spend: float | None = None) -> RunLog:
    return RunLog(
        run=RunView(run_id="r1", state="running", clock_offset=offset),
        pod=PodView(
            pod_id="p1",
            status="job_running",
            cost_per_hour=0.40,
            created_at="2026-01-01T10:00:00Z",
            spend=spend,
        ),
    )


@pytest.mark.parametrize(
    ("offset", "here", "expected"),
    [
        (None, True, "~$0.40"),  # a right clock
        (730 * 86400.0, True, "~$0.40"),  # 2 years ahead, recorded here: taken out
        (-3 * 3600.0, True, "~$0.40"),  # 3 h behind, recorded here
        (730 * 86400.0, False, "~$7008.40"),  # recorded by another machine: not this one's
    ],
)
def test_a_billing_pods_spend_is_estimated_on_runpods_clock(
    offset: float | None, here: bool, expected: str
) -> None:
    local_now = RUNPOD_NOW + timedelta(seconds=offset or 0.0)
    assert spend_text(_state(offset), local_now, here=here) == expected


def test_a_recorded_estimate_wins_marked_and_a_clock_behind_never_goes_negative() -> None:
    # A run recorded before pods' costs were kept apart: its pod's recorded estimate,
    # marked as such (only what Runpod billed is shown unmarked).
    assert spend_text(_state(None, spend=1.234), RUNPOD_NOW) == "~$1.23"
    assert spend_text(_state(None), CREATED - timedelta(hours=3)) == "~$0.00"
