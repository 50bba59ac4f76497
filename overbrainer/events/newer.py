"""A log written by another overbrainer than the one reading it.

An older overbrainer reads what a newer one wrote as long as it knows every kind of event
in it: fields it does not know are ignored (``types.event_from``). An event it does not
know at all cannot be folded — guessing what it did to a run or its pod could leave a pod
billing — so the log is refused, with the version that wrote the event and the upgrade.
"""

import json
from typing import Any

from overbrainer.events.errors import StoreError
from overbrainer.version import installed, is_newer

UPGRADE = (
    "`pipx upgrade overbrainer`, `uv tool upgrade overbrainer` or `pip install -U overbrainer`"
)


class UnreadableEvent(StoreError):
    """A stored event this overbrainer cannot decode (see :func:`unreadable`)."""


def unreadable(
    run_id: str, seq: int, kind: str, actor: dict[str, Any] | None, ours: str | None = None
) -> UnreadableEvent:
    """The refusal of event ``seq`` of ``run_id``, which is ``kind`` (an event name such as
    ``run.Paused``, or ``stored as CLASS`` when its class cannot be found), recorded by
    ``actor`` (the event's stamp, if it could be read)."""
    ours = installed() if ours is None else ours
    theirs = str((actor or {}).get("version") or "")
    by = _by(actor)
    what = f"event {seq} of run {run_id} ({kind}) is of a kind overbrainer {ours} does not know"
    if theirs and is_newer(theirs, ours):
        return UnreadableEvent(
            f"{what}: it was recorded by overbrainer {theirs}{by}, a newer version; upgrade "
            f"overbrainer to {theirs} or later ({UPGRADE}) and run the command again"
        )
    recorded = f"recorded by overbrainer {theirs}{by}" if theirs else "its recorder is unknown"
    return UnreadableEvent(
        f"{what} ({recorded}); the log was written by a different or damaged overbrainer: "
        f"read it with the version that wrote it, or upgrade ({UPGRADE})"
    )


def _by(actor: dict[str, Any] | None) -> str:
    if not actor or not actor.get("host"):
        return ""
    user = actor.get("user")
    return f" on {user}@{actor['host']}" if user else f" on {actor['host']}"


def raw_fields(state: bytes) -> dict[str, Any]:
    """A stored event's fields read from its bytes as they are (empty if they are not a
    JSON object), for an event whose class this version cannot find to decode it."""
    try:
        data = json.loads(state)
    except (ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
