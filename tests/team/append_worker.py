"""A process on its own checkout appending to a run of the team store (concurrency tests).

Usage: python -m tests.team.append_worker URL PROJECT RUN TAG COUNT
"""

import sys
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore


def main() -> None:
    url, project, run_id, tag, count = sys.argv[1:6]
    store = RunStore(url, Path(project), Actor.here(f"worker {tag}"))
    print("READY", flush=True)
    sys.stdin.readline()  # start together
    for i in range(int(count)):
        store.append(run_id, lambda _s, i=i: [ev.NoteAdded(note=f"{tag}-{i}")])

    # Both try to end the run: the loser reloads, sees the other's end and appends nothing.
    def end(state: RunLog) -> list[ev.Event]:
        return [] if state.final else [ev.RunEnded(state="cancelled", message=f"by {tag}")]

    store.append(run_id, end)
    store.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
