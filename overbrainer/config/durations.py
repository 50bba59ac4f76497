"""Spans of time written in the configuration: ``"30m"``, ``"2h"``, ``"90s"``, ``"1h30m"``.

The other spans overbrainer reads (``--older-than``, ``--since``) are whole hours, days or
weeks on the command line; a wait in the configuration needs minutes and seconds too.
"""

import re

__all__ = ["DURATION_FORM", "MAX_DURATION_SECONDS", "parse_duration"]

# Hours, minutes and seconds in that order, each at most once, at least one of them.
_DURATION_RE = re.compile(r"^(?=\d)(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")

MAX_DURATION_SECONDS = 7 * 24 * 3600.0
"""The longest span accepted (a week): anything longer is a typo more likely than a wish."""

DURATION_FORM = 'a whole number of hours, minutes or seconds, like "30m", "2h", "90s" or "1h30m"'
"""What a duration looks like, as an error says it."""


def parse_duration(text: str) -> float:
    """The seconds ``text`` spans: ``"0"`` is 0, else hours, minutes and seconds written
    ``<n>h<n>m<n>s`` (any of the three, in that order). Anything else, or more than a
    week, is a ``ValueError`` saying the value and the form expected."""
    word = text.strip()
    if word == "0":
        return 0.0
    found = _DURATION_RE.fullmatch(word) if word.isascii() else None
    if found is None:
        raise ValueError(f"{text!r} is not a span of time: write {DURATION_FORM}")
    hours, minutes, seconds = (int(found.group(unit) or 0) for unit in "hms")
    total = float(hours * 3600 + minutes * 60 + seconds)
    if total > MAX_DURATION_SECONDS:
        raise ValueError(f'{text!r} is longer than a week: write at most 168h, like "30m" or "2h"')
    return total
