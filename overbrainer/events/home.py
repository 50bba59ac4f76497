"""Where a run lives: the host and user that created it, its remote directory, and who
touched it last.

With a team store every checkout sees every run, but a run's files (its output, its
``ssh/`` keys, the job on its target) stay with the checkout that started it. Commands
that need them (``runs show``; later ``pod rm`` refusing another host's live pod) ask here
and name the host to go to.
"""

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from overbrainer.events.actor import this_host as this_host
from overbrainer.events.aggregate import RunLog

if TYPE_CHECKING:
    from overbrainer.events.store import RunStore

_PROJECTIONS = frozenset({"run.json", "pod.json"})


@dataclass(frozen=True)
class RunHome:
    """The origin of a run (its ``run.Created`` actor) and its latest actor."""

    run_id: str
    host: str
    user: str
    command: str
    remote_dir: str
    last_host: str
    last_command: str
    last_at: str

    @property
    def on_this_host(self) -> bool:
        """Whether the run was created on the machine running this command."""
        return self.host == this_host()

    def to_json(self) -> dict[str, Any]:
        """As JSON primitives (``runs show --json``)."""
        data = asdict(self)
        data["on_this_host"] = self.on_this_host
        return data


def run_home(store: "RunStore", state: RunLog) -> RunHome | None:
    """Where ``state``'s run lives (None for a run without events)."""
    if not state.exists:
        return None
    run_id = state.run.run_id
    first = store.origin(run_id)
    last = store.history(run_id, after=max(0, state.run.version - 1))
    if first is None:
        return None
    latest = last[-1] if last else first
    return RunHome(
        run_id=run_id,
        host=str(first.actor.get("host", "?")),
        user=str(first.actor.get("user", "?")),
        command=str(first.actor.get("command", "?")),
        remote_dir=state.run.remote_dir,
        last_host=str(latest.actor.get("host", "?")),
        last_command=str(latest.actor.get("command", "?")),
        last_at=latest.at,
    )


def has_local_files(run_dir: Path) -> bool:
    """Whether ``runs/<id>/`` holds more than the projections (so the run ran here)."""
    try:
        return any(
            entry.name not in _PROJECTIONS and not entry.name.startswith(".")
            for entry in run_dir.iterdir()
        )
    except OSError:
        return False
