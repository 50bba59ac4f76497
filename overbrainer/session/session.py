"""A command's :class:`Session`: the journal, the front end, the Ctrl-C controller and the
project, shared by the targets and the run's lifecycle; and who recorded what."""

from dataclasses import dataclass
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.session.journal import Journal


@dataclass
class Session:
    """What the run operations of one command share."""

    journal: Journal
    front: Front
    interrupts: Interrupts
    project_dir: Path

    def run_dir(self, run_id: str) -> Path:
        """``runs/<id>/`` in the project."""
        from overbrainer.projections.files import run_dir

        return run_dir(self.project_dir, run_id)


async def ended_by(session: Session, run_id: str) -> str:
    """`` by `train cancel` as alice on host laptop-a (pid 42)``: who recorded the run's end
    (empty when it is not found)."""
    return await recorded_by(session, run_id, ev.RunEnded)


async def recorded_by(session: Session, run_id: str, kind: type[ev.Event]) -> str:
    """`` by `pod rm` as alice on host laptop-a (pid 42)``: who appended the run's latest
    event of ``kind`` (empty when there is none)."""
    records = await session.journal.history(run_id)
    for record in reversed(records):
        if isinstance(record.event, kind):
            actor = record.actor
            return (
                f" by `{actor.get('command', '?')}` as {actor.get('user', '?')} on host "
                f"{actor.get('host', '?')} (pid {actor.get('pid', '?')})"
            )
    return ""
