"""Times are written as ISO 8601 in UTC with a "Z" and read back from any ISO form."""

from datetime import UTC, datetime, timedelta, timezone

from overbrainer.utc import iso_utc, parse_utc

MOMENT = datetime(2026, 1, 1, 11, 30, tzinfo=UTC)


def test_a_time_is_written_in_utc_with_a_z() -> None:
    assert iso_utc(MOMENT) == "2026-01-01T11:30:00Z"
    east = MOMENT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert iso_utc(east) == "2026-01-01T11:30:00Z"


def test_a_time_is_read_back_from_every_iso_form_it_comes_in() -> None:
    for text in (
        "2026-01-01T11:30:00Z",
        "2026-01-01T11:30:00+00:00",
        "2026-01-01T11:30:00",  # no offset: UTC, as Runpod writes some of its times
        "2026-01-01T17:00:00+05:30",
        "2026-01-01 11:30:00.000Z",
    ):
        found = parse_utc(text)
        assert found == MOMENT and found is not None and found.tzinfo is UTC, text
    assert parse_utc(iso_utc(MOMENT)) == MOMENT


def test_what_is_no_time_reads_as_none() -> None:
    for text in ("yesterday", "", None, 17, "2026-13-01T00:00:00Z"):
        assert parse_utc(text) is None
