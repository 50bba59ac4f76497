"""Runpod's clock as the client keeps it, and the words for an offset: tables, no I/O."""

from datetime import UTC, datetime, timedelta

import pytest

from overbrainer.runpod.clocks import (
    ServerClock,
    large,
    offset_text,
    parse_http_date,
    skew_warning,
    span,
)

T0 = datetime(2026, 3, 13, 20, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Fri, 13 Mar 2026 20:00:00 GMT", T0),
        ("  Fri, 13 Mar 2026 20:00:00 GMT ", T0),
        ("Fri, 13 Mar 2026 21:00:00 +0100", T0),
        ("Friday, 13-Mar-26 20:00:00 GMT", T0),  # the obsolete RFC 850 form
        ("Fri Mar 13 20:00:00 2026", T0),  # asctime, no zone: UTC
        ("", None),
        (None, None),
        ("yesterday", None),
        ("Fri, 13 Mar 2026 25:00:00 GMT", None),
        ("Fri, 99 Mar 2026 20:00:00 GMT", None),
    ],
)
def test_http_dates(text: str | None, expected: datetime | None) -> None:
    assert parse_http_date(text) == expected


def test_runpods_time_is_carried_forward_on_the_monotonic_clock() -> None:
    clock = ServerClock()
    assert not clock.known
    assert clock.now(5.0) is None and clock.offset(T0, 5.0) is None
    assert clock.monotonic(T0, 5.0) is None
    clock.saw(T0, 100.0)
    clock.saw(None, 200.0)  # an answer without a Date changes nothing
    assert clock.known
    assert clock.now(100.0) == T0
    assert clock.now(160.5) == T0 + timedelta(seconds=60.5)
    # When Runpod's clock reads T0 + 1 h: an hour after the answer, on the monotonic clock.
    assert clock.monotonic(T0 + timedelta(hours=1), 130.0) == 100.0 + 3600
    # This machine 3 h behind, read 10 s after the answer.
    local = T0 + timedelta(seconds=10) - timedelta(hours=3)
    assert clock.offset(local, 110.0) == -3 * 3600
    # A later answer wins (even one that moves Runpod's clock back).
    clock.saw(T0 - timedelta(seconds=1), 300.0)
    assert clock.now(301.0) == T0


@pytest.mark.parametrize(
    ("offset", "recorded", "expected"),
    [
        (0.0, 0.0, False),
        (59.9, 0.0, False),
        (-60.0, 0.0, True),
        (10800.0, 0.0, True),
        (10830.0, 10800.0, False),  # already said
        (3600.0, 10800.0, True),  # moved (a jump) since it was said
        (None, 0.0, False),
        (float("nan"), 0.0, False),
        (float("inf"), 0.0, False),
    ],
)
def test_what_offset_is_worth_recording(
    offset: float | None, recorded: float, expected: bool
) -> None:
    assert large(offset, recorded) is expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (59, "59 s"),
        (59.6, "1 min 0 s"),
        (-10799, "3 h 0 min"),
        (3599.8, "1 h 0 min"),
        (3570, "59 min 30 s"),
        (-61, "1 min 1 s"),
        (-10800, "3 h 0 min"),
        (7260.7, "2 h 1 min"),
        (7289, "2 h 1 min"),
        (86400 - 1, "1 day 0 h"),
        (86400 + 7200, "1 day 2 h"),
        (5 * 86400, "5 days 0 h"),
        (730 * 86400, "2 years"),
        (730 * 86400 - 3, "2 years"),
        (731 * 86400 + 3600, "2 years 1 day"),
        (740 * 86400, "2 years 10 days"),
        (365 * 86400, "1 year"),
    ],
)
def test_spans(seconds: float, text: str) -> None:
    assert span(seconds) == text


def test_the_warning_says_which_way_how_far_and_what_to_do() -> None:
    assert offset_text(-10800) == "3 h 0 min behind"
    assert offset_text(730 * 86400) == "2 years ahead of"
    assert skew_warning(-10800, "r1") == (
        "this machine's clock is 3 h 0 min behind Runpod's (by the Date of its API's answers): "
        "run r1's pod is bounded by Runpod's and the pod's own clocks all the same, but the "
        "times this command records are off by as much; set this machine's clock right (turn "
        "on NTP time sync)"
    )
