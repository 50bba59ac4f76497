"""Runpod's clock as this machine sees it, through the ``Date`` header of the API's answers.

A pod's bound is counted on the pod and on Runpod's own timestamps, never on this machine's
wall clock, which may be hours off or jump (a laptop waking, an NTP step). What overbrainer
needs of absolute time (how old a pod is, how long until its deadline, its uptime and spend)
it takes from Runpod's clock: the last ``Date`` seen, carried forward on the monotonic clock
(trio's), which no change of the wall clock moves. Pure: the monotonic time is passed in.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from overbrainer.plurals import plural

LARGE_OFFSET = 60.0
"""How far (seconds) this machine's clock may be from Runpod's before it is recorded in the
run's log and the user is warned. An HTTP date has whole seconds, and an answer takes a
moment: a few seconds apart means nothing."""


def parse_http_date(text: str | None) -> datetime | None:
    """An HTTP ``Date`` (``Tue, 01 Dec 2026 12:00:00 GMT``) in UTC; None if unreadable."""
    if not text:
        return None
    import email.utils  # here: the read commands import this module but never parse a date

    try:
        moment = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass
class ServerClock:
    """The last ``Date`` Runpod's API sent, and when (trio's monotonic time) it arrived."""

    date: datetime | None = None
    at: float = 0.0

    def saw(self, date: datetime | None, at: float) -> None:
        """An answer arrived at monotonic time ``at`` carrying ``date`` (None: no usable
        ``Date`` header, which changes nothing)."""
        if date is not None:
            self.date = date.astimezone(UTC)
            self.at = at

    @property
    def known(self) -> bool:
        """Whether any answer carried a usable ``Date``."""
        return self.date is not None

    def now(self, at: float) -> datetime | None:
        """Runpod's time at monotonic time ``at``; None while no ``Date`` was seen."""
        if self.date is None:
            return None
        return self.date + timedelta(seconds=at - self.at)

    def monotonic(self, moment: datetime, at: float) -> float | None:
        """The monotonic time at which Runpod's clock reads ``moment`` (``at`` is now);
        None while no ``Date`` was seen."""
        now = self.now(at)
        if now is None:
            return None
        return at + (moment.astimezone(UTC) - now).total_seconds()

    def offset(self, local: datetime, at: float) -> float | None:
        """This machine's wall clock (``local``, read at monotonic time ``at``) minus
        Runpod's, in seconds: positive when this machine is ahead. None while unknown."""
        now = self.now(at)
        if now is None:
            return None
        return (local.astimezone(UTC) - now).total_seconds()


def large(offset: float | None, recorded: float = 0.0) -> bool:
    """Whether ``offset`` is worth recording: :data:`LARGE_OFFSET` or more away from the
    offset already ``recorded`` by this command (0 before anything was)."""
    return offset is not None and math.isfinite(offset) and abs(offset - recorded) >= LARGE_OFFSET


def span(seconds: float) -> str:
    """``3 h 0 min``, ``2 years 3 days``, ``45 min 10 s``: an offset's size, for people,
    rounded to its last unit shown (an HTTP date is a second off, at best, anyway)."""
    whole = round(abs(seconds))
    for above, unit in ((365 * 86400, 86400), (86400, 3600), (3600, 60)):
        if whole >= above:
            whole = round(whole / unit) * unit
            break
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days >= 365:
        years, days = divmod(days, 365)
        text = plural(years, "year")
        return f"{text} {_days(days)}" if days else text
    if days:
        return f"{_days(days)} {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _days(days: int) -> str:
    return plural(days, "day")


def offset_text(offset: float) -> str:
    """``3 h 0 min behind`` or ``2 years ahead of``, as in "this machine's clock is … Runpod's"."""
    return f"{span(offset)} ahead of" if offset > 0 else f"{span(offset)} behind"


def skew_warning(offset: float, run_id: str) -> str:
    """What the user reads when this machine's clock is far from Runpod's."""
    return (
        f"this machine's clock is {offset_text(offset)} Runpod's (by the Date of its API's "
        f"answers): run {run_id}'s pod is bounded by Runpod's and the pod's own clocks all the "
        "same, but the times this command records are off by as much; set this machine's "
        "clock right (turn on NTP time sync)"
    )
