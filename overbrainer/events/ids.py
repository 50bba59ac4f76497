"""Run IDs: ``YYYYMMDD-HHMMSS-xxxx``, UTC creation time and four random hex digits."""

import re
from datetime import UTC, datetime

from overbrainer.errors import OverbrainerError

_SAFE = re.compile(r"^[A-Za-z0-9-]+$")
_SHAPE = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")


class BadRunId(OverbrainerError):
    """A run ID that could escape the runs directory or is not an ID at all."""


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run ID for a run created at ``now`` (default: the current UTC time)."""
    import secrets  # here: shell completion reads run IDs and must start fast

    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is only letters, digits and ``-``; refuse anything else.

    Every path built from a run ID goes through here first, so ``../x``, ``/tmp/x`` or
    ``a/b`` never reach the filesystem.
    """
    if not run_id or len(run_id) > 64 or not _SAFE.match(run_id) or run_id.startswith("-"):
        shown = run_id.encode("unicode_escape").decode("ascii")[:80]
        raise BadRunId(
            f"{shown!r} is not a run ID: run IDs look like 20260101-120000-ab12 "
            "(letters, digits and '-' only); list them with `overbrainer runs ls`"
        )
    return run_id


def looks_like_run_id(run_id: str) -> bool:
    """Whether ``run_id`` has the exact shape overbrainer gives its run IDs."""
    return bool(_SHAPE.match(run_id))


def run_ref(text: str) -> str:
    """What names a run in ``text``: the text itself, or the last part of a path to a run's
    directory (``runs/<id>/``, ``/home/me/proj/runs/<id>``, as a shell completes it)."""
    parts = [part for part in text.replace("\\", "/").split("/") if part not in ("", ".")]
    if len(parts) >= 2 and parts[-2] == "runs":
        return parts[-1]
    return text.rstrip("/") if len(parts) == 1 and text.endswith("/") else text


def matching_runs(ref: str, run_ids: list[str]) -> list[str]:
    """The runs ``ref`` names among ``run_ids``: the one run of that exact ID, else every
    run whose ID starts or ends with it (``20260101-1200``, ``ab12``), in their order."""
    if ref in run_ids:
        return [ref]
    return [run_id for run_id in run_ids if run_id.startswith(ref) or run_id.endswith(ref)]
