"""Whether a run whose pod was lost goes on, on a new pod: the decision as a table."""

import pytest

from overbrainer.runpod.recovery import Fail, Off, Recover, cheapest_rate, decide

NEXT = "overbrainer train --resume-from R"


def _decide(
    *,
    done: int = 0,
    max_recoveries: int = 3,
    spent: float = 0.0,
    cap: float | None = None,
    rate: float | None = 0.5,
    max_hours: float = 4.0,
) -> Recover | Fail | Off:
    return decide(
        run_id="R",
        target="gpu",
        why="pod p1 no longer exists",
        done=done,
        max_recoveries=max_recoveries,
        spent=spent,
        max_cost_usd=cap,
        rate=rate,
        max_hours=max_hours,
        next_command=NEXT,
    )


@pytest.mark.parametrize(
    ("case", "verdict"),
    [
        # Recovery off: the run fails as its pod goes, as before recoveries existed.
        ({"max_recoveries": 0}, Off()),
        ({"max_recoveries": 0, "done": 0, "cap": 0.01}, Off()),
        # Recoveries left, no cap: the next attempt, with no cap on its pod.
        ({}, Recover(1, 3, None)),
        ({"done": 2}, Recover(3, 3, None)),
        # A cap: the new pod's cap is what is left of it.
        ({"cap": 10.0, "spent": 4.0}, Recover(1, 3, 6.0)),
        # Exactly one hour at the cheapest rate left: enough.
        ({"cap": 10.0, "spent": 9.5, "rate": 0.5}, Recover(1, 3, 0.5)),
        # A max_hours under an hour needs only that long.
        ({"cap": 10.0, "spent": 9.8, "rate": 0.5, "max_hours": 0.25}, Recover(1, 3, 0.2)),
        # The rate unknown: anything left will do.
        ({"cap": 10.0, "spent": 9.99, "rate": None}, Recover(1, 3, 0.01)),
    ],
)
def test_a_recovery_goes_on_while_attempts_and_money_are_left(
    case: dict[str, float], verdict: Recover | Off
) -> None:
    assert _decide(**case) == verdict  # type: ignore[arg-type]


def test_the_last_recovery_used_fails_the_run_saying_they_are_exhausted() -> None:
    assert _decide(done=3) == Fail(
        "run R failed: pod p1 no longer exists; recoveries exhausted (3/3, max_recoveries "
        f"of target gpu): go on with `{NEXT}`"
    )


@pytest.mark.parametrize(
    ("spent", "rate", "left", "need"),
    [
        (9.6, 0.5, "0.40", "0.50 (1 h at $0.50/h)"),
        (10.0, 0.5, "0.00", "0.50 (1 h at $0.50/h)"),
        (12.0, None, "0.00", "0.00"),  # spent past the cap (the estimate ran over)
    ],
)
def test_a_recovery_the_cap_cannot_pay_for_creates_no_pod_and_says_why(
    spent: float, rate: float | None, left: str, need: str
) -> None:
    verdict = _decide(cap=10.0, spent=spent, rate=rate)
    assert verdict == Fail(
        f"run R failed: pod p1 no longer exists; no recovery: its pods cost ${spent:.2f} so "
        f"far of max_cost_usd $10.00, which leaves ${left}, and a recovery's pod needs at "
        f"least ${need}; no new pod was created: raise max_cost_usd of target gpu in "
        f"overbrainer.toml and go on with `{NEXT}`"
    )


def test_a_short_max_hours_is_said_in_minutes() -> None:
    verdict = _decide(cap=1.0, spent=0.95, rate=0.5, max_hours=0.25)
    assert isinstance(verdict, Fail)
    assert "needs at least $0.12 (15 min at $0.50/h)" in verdict.message


@pytest.mark.parametrize(
    ("rates", "cheapest"),
    [([], None), ([None], None), ([0.5, None, 0.3], 0.3), ([0.0, 0.7], 0.7)],
)
def test_the_cheapest_rate_is_the_lowest_known_one(
    rates: list[float | None], cheapest: float | None
) -> None:
    assert cheapest_rate(rates) == cheapest
