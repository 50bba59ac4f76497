"""A separate process appending to one run (for the concurrency tests)."""

import sys
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore


def main() -> None:
    project, run_id, tag, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = RunStore(None, project, Actor.here(f"worker {tag}"))
    print("READY", flush=True)
    sys.stdin.readline()  # start together
    for i in range(count):
        store.append(run_id, lambda _, i=i: [ev.NoteAdded(note=f"{tag}-{i}")])

    # Both try to end the run: the decision sees the other's end after a conflict.
    def end(state: RunLog) -> list[ev.Event]:
        return [] if state.final else [ev.RunEnded(state="cancelled", message=f"by {tag}")]

    store.append(run_id, end)
    store.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
