"""``runs ls``'s state column of a run recovered on a new pod: running, with its recovery."""

import pytest

from overbrainer.cli.runs_read import state_text


def _row(state: str, recoveries: int, max_recoveries: int | None) -> dict[str, object]:
    return {
        "state": state,
        "job_ended": None,
        "checkpoint_step": 40,
        "files_removed": False,
        "recoveries": recoveries,
        "max_recoveries": max_recoveries,
    }


@pytest.mark.parametrize(
    ("state", "recoveries", "shown"),
    [
        # Starting its new pod, or its job running there: running, with the recovery.
        ("preparing", 2, "running (recovery 2/3)"),
        ("running", 1, "running (recovery 1/3)"),
        # No recovery: as ever.
        ("running", 0, "running (checkpoint 40)"),
        # Ended: its outcome, as ever (runs show lists the recoveries).
        ("succeeded", 3, "succeeded (checkpoint 40)"),
        ("failed", 3, "failed (checkpoint 40)"),
    ],
)
def test_a_recovered_run_is_shown_running_with_its_recovery(
    state: str, recoveries: int, shown: str
) -> None:
    assert state_text(_row(state, recoveries, 3)) == shown
