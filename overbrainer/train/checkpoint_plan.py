"""Which of a job's checkpoints come home while it runs, and which leave this machine — no
I/O.

The trainer saves ``checkpoint-STEP`` folders in the job's output; the metrics plugin
announces each one (a ``saved`` line) once the trainer has written it whole. While a run is
followed, the announced checkpoints are brought home, the newest first (a target that dies
the next minute loses least that way), and only the last ``keep`` stay home.
"""

from collections.abc import Iterable

from overbrainer.train.metrics import MetricsEvent

MAX_ATTEMPTS = 3
"""How many times one checkpoint is fetched before it is given up on (while the job runs,
a failure is retried at the next look; the results at the end do not depend on it)."""

SAVED_EVENTS = ("saved", "stopped")
"""The metrics lines announcing a checkpoint written whole (``stopped``: an older plugin's
announcement of the save a stop asked for, which it wrote without a ``saved`` line)."""


def saved_steps(events: Iterable[MetricsEvent]) -> set[int]:
    """The steps whose checkpoints ``events`` announce as written whole."""
    return {
        event.step
        for event in events
        if event.event in SAVED_EVENTS and event.step is not None and event.step > 0
    }


def to_fetch(
    saved: Iterable[int],
    home: Iterable[int],
    *,
    keep: int,
    skip: Iterable[int] = (),
    after: int = 0,
) -> list[int]:
    """The saved checkpoints to bring home now, the newest first: saved (``saved``), past
    ``after`` (the step a resumed run started from: that checkpoint is home already), not
    ``home`` yet, not in ``skip`` (given up on, or being fetched), and among the last
    ``keep`` of those saved and home — an older one would be pruned as soon as it came."""
    wanted = {step for step in saved if step > after}
    at_home = set(home)
    newest = sorted(wanted | at_home)[-keep:] if keep > 0 else []
    skipped = set(skip)
    return sorted(
        (step for step in newest if step in wanted and step not in at_home | skipped),
        reverse=True,
    )


def to_prune(home: Iterable[int], *, keep: int) -> list[int]:
    """The checkpoints home to remove, the oldest first: all but the last ``keep`` (at least
    the last one always stays)."""
    steps = sorted(set(home))
    return steps[: -max(keep, 1)]


def should_retry(attempts: int) -> bool:
    """Whether a checkpoint whose fetch failed ``attempts`` times is tried again."""
    return attempts < MAX_ATTEMPTS
