"""``events RUN``: a run's audit log replayed, one line per event.

Kept free of cyclopts: the command line reaches it through ``overbrainer/cli/fast_path.py``
without building the command tree, and the command declared in ``events_cmd.py`` calls it
too.
"""

import sys
from typing import TYPE_CHECKING

from overbrainer.cli.common import open_store, print_json
from overbrainer.cli.context import current
from overbrainer.cli.listing import resolve_run
from overbrainer.errors import UsageError
from overbrainer.plurals import plural

if TYPE_CHECKING:
    from overbrainer.events.store import Recorded

_FOLLOW_POLL = 0.2  # SQLite, which has no notifications
_FOLLOW_SAFETY = 5.0  # PostgreSQL: re-read this often even without a notification


def replay(
    run: str,
    /,
    *,
    json: bool = False,
    at: int | None = None,
    follow: bool = False,
    verbose: bool = False,
) -> int:
    """``events RUN``: every event of the run (see its help in ``events_cmd.py``)."""
    from overbrainer.events.aggregate import RunLog
    from overbrainer.front.streams import stdout_gone
    from overbrainer.projections.timeline import line

    invocation = current()
    run = resolve_run(invocation, run)
    if at is not None and (at < 0 or follow):
        raise UsageError("--at takes an event number >= 0 and does not go with --follow")
    store = open_store(invocation, read_only=True)
    changes = None
    try:
        if follow:
            # Watch before reading, so an append between the read and the first wait wakes us.
            changes = store.changes(_FOLLOW_POLL)
        records = store.history(run)
        if not records:
            store.get(run)  # raises the "no run" error
        if at is not None:
            if at > len(records):
                raise UsageError(
                    f"run {run} has {plural(len(records), 'event')}; --at takes 0..{len(records)}"
                )
            state = RunLog()
            for record in records[:at]:
                state.apply(record.event, record.at)
            data = state.to_json()
            data["at"] = at
            if json:
                print_json(data)
            else:
                from overbrainer.projections.summary import summary_lines

                sys.stdout.write(f"after event {at} of {len(records)}:\n")
                sys.stdout.write("\n".join(summary_lines(state)) + "\n")
            return 0
        state = RunLog()
        out = sys.stdout

        def shown(record: "Recorded") -> str:
            return _json_line(record) if json else line(record, state, verbose=verbose)

        for record in records:
            out.write(shown(record) + "\n")
            state.apply(record.event, record.at)
        out.flush()
        if changes is None:
            return 0
        seen = records[-1].seq if records else 0
        # Nobody reads any more (`| head -1`): following would only write into the void.
        while not (state.final and not state.pod.may_bill()) and not stdout_gone():
            # PostgreSQL wakes us on every commit to the log; SQLite returns after a poll.
            # The timeout only bounds a wait on a lost notification.
            changes.wait(_FOLLOW_SAFETY)
            for record in store.history(run, after=seen):
                out.write(shown(record) + "\n")
                state.apply(record.event, record.at)
                seen = record.seq
            out.flush()
        return 0
    finally:
        if changes is not None:
            changes.close()
        store.close()


def _json_line(record: object) -> str:
    import json as _json

    return _json.dumps(record.to_json(), sort_keys=True)  # type: ignore[attr-defined]
