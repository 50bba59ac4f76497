"""How the job made its base model ready, read from the job's ``model_ready.json`` (written
by its first step, ``train/overbrainer_model.py``) and recorded as ``run.ModelReady``.

Looked for at each of the follower's polls until found, and once more after the trainer's
first metrics line (the step runs before the trainer: by then it wrote its record, or never
will) or the job's end. Only on a pod, whose job has that step."""

import json
import math
from datetime import UTC, datetime

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.exec.base import ExecError
from overbrainer.lifecycle.service import Job
from overbrainer.session.session import Session
from overbrainer.train.axolotl import MODEL_READY_FILE
from overbrainer.train.metrics import MetricsEvent
from overbrainer.utc import iso_utc

# The record is a line of a few dozen bytes; more is not ours.
_MAX_BYTES = 4096


def parse_ready(data: bytes) -> ev.ModelReady | None:
    """The event of a ``model_ready.json``; None if it is not one (partial, foreign)."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    cached, seconds, moment = record.get("cached"), record.get("seconds"), record.get("time")
    if not isinstance(cached, bool):
        return None
    numbers = (seconds, moment)
    if not all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return None
    assert isinstance(seconds, int | float) and isinstance(moment, int | float)
    if not (math.isfinite(seconds) and seconds >= 0 and math.isfinite(moment) and moment > 0):
        return None
    try:
        at = iso_utc(datetime.fromtimestamp(moment, UTC))
    except (OverflowError, OSError, ValueError):
        return None
    return ev.ModelReady(cached=cached, seconds=float(seconds), at=at)


class ModelWatch:
    """Records how the job of ``job`` made its base model ready, once it says so."""

    def __init__(self, session: Session, job: Job, state: RunLog) -> None:
        self.session = session
        self.job = job
        self.done = not state.run.kind_facts.rents_pod
        self.last_look = False

    def saw(self, events: list[MetricsEvent]) -> None:
        """The trainer's metrics lines: once there is one, the step is over."""
        if events:
            self.last_look = True

    async def finish(self) -> None:
        """The job ended: one last look, for a job that ended between two polls."""
        self.last_look = True
        await self()

    async def __call__(self) -> None:
        if self.done:
            return
        last = self.last_look
        job = self.job
        path = f"{job.remote_dir}/{MODEL_READY_FILE}"
        try:
            data = await job.executor.read_file(path, 0, _MAX_BYTES)
        except ExecError:
            return  # following says what fails, at its own look; the next poll tries again
        ready = parse_ready(data) if data else None
        if ready is None:
            self.done = last
            return
        self.done = True
        try:
            await self.session.journal.append(job.run_id, lambda s: decisions.model_ready(s, ready))
        except OverbrainerError as error:
            # Following goes on: nothing depends on this record.
            self.session.front.warn(f"{error} (while recording how the base model was made ready)")
