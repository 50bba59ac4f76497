"""A recovered run's metrics lines as one series, across the jobs of its attempts. Pure.

A Runpod run whose pod is lost goes on on a new pod (a recovery), whose job resumes from a
checkpoint and writes a metrics file of its own: its steps go on from the checkpoint's. The
lines of each attempt are kept apart here (:mod:`overbrainer.projections.live` says where),
the mirror of each recovery's lines starting with a ``resumed`` line naming the step its
job resumed from. Joined, an attempt's lines count up to the step the next one resumed
from: its lines past it were training lost with its pod (done again by the next), and are
dropped.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from overbrainer.train.metrics import MetricsEvent

RESUMED = "resumed"
"""The event of the line a recovery's mirror starts with: ``step`` is the step its job
resumed from (0: from the start)."""


def resumed_line(step: int) -> MetricsEvent:
    """The first line of a recovery's mirror: its job resumed from ``step``."""
    return MetricsEvent(event=RESUMED, step=step)


@dataclass(frozen=True)
class Attempt:
    """The metrics lines of one attempt's job, and the step it resumed from (None: the
    run's first job, or a recovery whose step is not known here)."""

    events: Sequence[MetricsEvent]
    resumed: int | None = None

    @classmethod
    def of(cls, events: Sequence[MetricsEvent]) -> "Attempt":
        """An attempt as its mirror holds it: its ``resumed`` line (if any) said, not kept."""
        resumed = next((e.step for e in events if e.event == RESUMED), None)
        return cls(tuple(e for e in events if e.event != RESUMED), resumed)


def _first_step(events: Sequence[MetricsEvent]) -> int | None:
    return next((e.step for e in events if e.event == "log" and e.step is not None), None)


def _up_to(events: Sequence[MetricsEvent], step: int) -> list[MetricsEvent]:
    """``events`` until the first logged past ``step`` (what follows it came after the
    training that was lost)."""
    kept: list[MetricsEvent] = []
    for event in events:
        if event.event == "log" and event.step is not None and event.step > step:
            break
        kept.append(event)
    return kept


def join_attempts(attempts: Sequence[Attempt]) -> list[MetricsEvent]:
    """The lines of a run's attempts, in order, as one series: each attempt's lines up to
    the step the next resumed from, then the next's. A recovery whose step is not known
    is taken to resume just before its first logged step; one with no logged step yet cuts
    nothing."""
    joined: list[MetricsEvent] = []
    for attempt in attempts:
        resumed = attempt.resumed
        if resumed is None and joined:
            first = _first_step(attempt.events)
            resumed = None if first is None else first - 1
        if resumed is not None:
            joined = _up_to(joined, resumed)
        joined.extend(attempt.events)
    return joined
