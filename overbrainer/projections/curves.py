"""A run's loss curves, from its metrics lines: training loss and evaluation loss against
the step, and what they came to (final, best). Pure."""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from overbrainer.train.metrics import MetricsEvent

Point = tuple[float, float]


@dataclass(frozen=True)
class Curves:
    """A run's training loss and evaluation loss, each as (step, loss) in step order (one
    point per step: the latest line for a step wins, as a re-read file repeats lines)."""

    loss: tuple[Point, ...] = ()
    eval_loss: tuple[Point, ...] = ()

    @property
    def empty(self) -> bool:
        """Whether there is nothing to draw."""
        return not self.loss and not self.eval_loss

    def final(self, which: str = "loss") -> Point | None:
        """The last point of ``which`` (``loss`` or ``eval_loss``)."""
        points = self.loss if which == "loss" else self.eval_loss
        return points[-1] if points else None

    def best(self, which: str = "loss") -> Point | None:
        """The lowest point of ``which`` (the earliest of equals)."""
        points = self.loss if which == "loss" else self.eval_loss
        return min(points, key=lambda p: (p[1], p[0])) if points else None


def curves_of(events: Iterable[MetricsEvent]) -> Curves:
    """The curves of a run's metrics lines (non-finite losses left out: nothing to draw)."""
    loss: dict[float, float] = {}
    evals: dict[float, float] = {}
    for event in events:
        if event.event != "log" or event.step is None:
            continue
        if event.loss is not None and math.isfinite(event.loss):
            loss[float(event.step)] = event.loss
        if event.eval_loss is not None and math.isfinite(event.eval_loss):
            evals[float(event.step)] = event.eval_loss
    return Curves(tuple(sorted(loss.items())), tuple(sorted(evals.items())))


def thin(points: Sequence[Point], most: int) -> list[Point]:
    """At most about ``most`` points of ``points`` for drawing: per bucket of steps its
    lowest and highest (so no spike disappears), and always the first and the last."""
    if len(points) <= most or most < 4:
        return list(points)
    buckets = most // 2
    size = len(points) / buckets
    kept: list[Point] = []
    for index in range(buckets):
        chunk = points[int(index * size) : int((index + 1) * size)]
        if not chunk:
            continue
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        kept.extend(sorted({low, high}))
    if kept[0] != points[0]:
        kept.insert(0, points[0])
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept
