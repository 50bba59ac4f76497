"""Times as overbrainer writes and reads them: ISO 8601 in UTC, ``2026-01-01T16:00:00Z``."""

from datetime import UTC, datetime


def iso_utc(moment: datetime) -> str:
    """``2026-01-01T16:00:00Z``: how times are written in events."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_utc(text: object) -> datetime | None:
    """The moment an ISO 8601 text names, in UTC (a time without an offset is taken as
    UTC, as Runpod and our events write them); None for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)  # Python 3.11 reads a trailing "Z"
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)
