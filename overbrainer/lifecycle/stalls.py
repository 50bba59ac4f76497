"""When a running job is stalled: it wrote no metrics line for ``[training] stall_minutes``
(before its first line, ``first_step_minutes``: the model is downloaded and loaded first;
and once its training is over — a ``phase`` line: saving, merging — ``first_step_minutes``
too: a merge of a big model writes nothing for long).

A hung job (a deadlocked collective, a dead data loader, a GPU that stopped answering)
keeps its process alive and its target billing while it trains nothing. Whoever follows
the run watches the time since the last line it read and, past the bound, ends the job
(``run._end_stalled``); the pod's watchdog keeps the same rule when nothing follows
(``runpod/scripts/watchdog.sh``).

Every span here is on trio's monotonic clock (``trio.current_time``), counted from what
this process saw: a wall clock stepped never fakes a stall. That clock is trusted to say
when to look, never to end a job on its own (as ``bounds.py`` does for a target's bound):
a VM restored, or a machine whose monotonic clock counts its sleep, moves it hours at
once while the job wrote on. So a stall that seems due is declared only once a look at
the job made after that moment found no new line. A follower that starts on a job
already running (``train attach``) counts the job's start from when it began to follow:
it only declares a stall it watched whole.
"""

from dataclasses import dataclass

import trio

from overbrainer.config.model import TrainingSettings
from overbrainer.plurals import plural
from overbrainer.train.metrics import MetricsEvent

__all__ = ["LineClock", "Stall", "StallRule", "stalled"]

JUMP_GAP = 120.0
"""A gap between two looks at a job this long (seconds) is a jump of the clock, not
silence of the job: a follower looks every few seconds."""

TRAINING_OVER = frozenset({"phase", "stopped"})
"""The metrics events after which the job trains no more: it saves, merges or ends."""


@dataclass(frozen=True)
class StallRule:
    """How long a job may write no metrics line (seconds): ``silence`` between lines,
    ``first_line`` from its start to its first."""

    silence: float
    first_line: float

    @classmethod
    def of(cls, training: TrainingSettings) -> "StallRule":
        """The rule of ``[training]``."""
        return cls(training.stall_minutes * 60, training.first_step_minutes * 60)

    def due(
        self, *, job_start: float, last_line: float | None, training_over: bool = False
    ) -> float:
        """When a job started at ``job_start`` whose last line came at ``last_line`` (None:
        none yet) is stalled, unless a line comes first; ``training_over``: its training
        ended (it saves or merges), which has the longer bound too."""
        if last_line is None:
            return job_start + self.first_line
        return last_line + (self.first_line if training_over else self.silence)


@dataclass(frozen=True)
class Stall:
    """A stalled job: ``silent`` seconds without a metrics line, the last at ``last_step``
    (None: it wrote none, or none with a step); ``first_line``: it never wrote one."""

    silent: float
    last_step: int | None
    first_line: bool

    @property
    def minutes(self) -> float:
        """The span without a line, in whole minutes (rounded down: never more than seen)."""
        return float(int(self.silent // 60))

    def describe(self) -> str:
        """What the job did not do, for people."""
        span = _span(self.silent)
        if self.first_line:
            return f"it wrote no metrics line in the {span} since it started"
        at = "" if self.last_step is None else f" (at step {self.last_step})"
        return f"it wrote no metrics line for {span} after its last one{at}"


def stalled(
    rule: StallRule,
    *,
    job_start: float,
    last_line: float | None,
    last_step: int | None,
    now: float,
    training_over: bool = False,
) -> Stall | None:
    """The stall of a job started at ``job_start`` whose last metrics line came at
    ``last_line`` (None: none yet), at step ``last_step``, as of ``now``; None while it is
    within its bound (``training_over``: the longer one, see :meth:`StallRule.due`). All
    times on one monotonic clock."""
    if now < rule.due(job_start=job_start, last_line=last_line, training_over=training_over):
        return None
    since = job_start if last_line is None else last_line
    return Stall(silent=now - since, last_step=last_step, first_line=last_line is None)


class LineClock:
    """What a follower saw of a job's metrics lines, on the monotonic clock: give it every
    read's new events (:meth:`saw`) and tell it each look at the job that completed
    (:meth:`looked`, after :meth:`saw`); :meth:`until_stalled` returns once the job
    stalls, confirmed by a look."""

    def __init__(self, rule: StallRule) -> None:
        self.rule = rule
        self.job_start = trio.current_time()
        self.last_line: float | None = None
        self.last_step: int | None = None
        self.training_over = False
        # Set by a line: the first line's bound may come before the first-step allowance's.
        self._moved = trio.Event()
        self._looked = trio.Event()
        # The first look's gap counts from the start: the clock may jump before it ends.
        self._last_look = self.job_start

    def saw(self, events: list[MetricsEvent]) -> None:
        """New lines were read now."""
        if not events:
            return
        self.last_line = trio.current_time()
        steps = [e.step for e in events if e.step is not None]
        if steps:
            self.last_step = max(steps)
        self.training_over = self.training_over or any(e.event in TRAINING_OVER for e in events)
        self._moved.set()

    def looked(self) -> None:
        """A look at the job (its status and its new lines, given to :meth:`saw` first)
        completed now."""
        now = trio.current_time()
        gap = now - self._last_look
        self._last_look = now
        if gap > JUMP_GAP:
            # Looks come a poll apart: this machine's monotonic clock jumped (a VM restored,
            # a clock counting sleep), or a look hung. The job's silence is not counted
            # across the gap: its bound moves by it.
            self.job_start += gap
            if self.last_line is not None:
                self.last_line += gap
            self._moved.set()
        self._looked.set()

    def check(self) -> Stall | None:
        """The stall as of now, if any."""
        return stalled(
            self.rule,
            job_start=self.job_start,
            last_line=self.last_line,
            last_step=self.last_step,
            now=trio.current_time(),
            training_over=self.training_over,
        )

    async def until_stalled(self) -> Stall:
        """Return the stall once there is one, confirmed by a look at the job made after
        it seemed due (a line read meanwhile moves the bound)."""
        while True:
            self._moved = trio.Event()
            due = self.rule.due(
                job_start=self.job_start,
                last_line=self.last_line,
                training_over=self.training_over,
            )
            with trio.move_on_at(due):
                await self._moved.wait()
            if self.check() is None:
                continue
            self._looked = trio.Event()
            await self._looked.wait()
            stall = self.check()
            if stall is not None:
                return stall


def _span(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes >= 1:
        return plural(minutes, "minute")
    return plural(int(seconds), "second")
