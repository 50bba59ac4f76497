"""A run's training as it goes: the metrics a follower saw, and where the run stands.

The command following a run's job reads its metrics file on the target every poll; what it
saw is kept here, beside ``run.json``, so that ``runs ls``, ``runs show`` and the report
show a run in progress without the network:

- ``runs/<id>/progress.json``: the fold of the metrics so far and when it was seen
  (rewritten atomically when it changes);
- ``runs/<id>/metrics.seen.jsonl``: the metrics lines seen, for a job that is not on this
  machine (a job here writes ``runs/<id>/metrics.jsonl`` itself);
- ``runs/<id>/metrics.seen.recovery-N.jsonl``: the same for the job of recovery N (a lost
  pod's replacement), its first line saying the step the job resumed from.

Where the metrics of a recovered run's attempts are kept: here, each attempt's mirror in a
file of its own, never rewritten by a later attempt, nor by the retrieval of the results
(which brings home the last attempt's ``metrics.jsonl`` only: the lost pods' files went
with them). :func:`curve_events` joins them into one series.

These are caches: nothing is recorded in the log per step, a file that cannot be written
costs only the view, and the retrieved ``metrics.jsonl`` supersedes the last attempt's
mirror (the earlier attempts' mirrors are all that is left of their lines).

The rest is pure: where a run stands (:class:`Standing`) from a summary, its time and the
time now.
"""

import contextlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.states import RunState
from overbrainer.projections.attempts import Attempt, join_attempts, resumed_line
from overbrainer.projections.files import write_json_atomic
from overbrainer.train.metrics import MetricsEvent, MetricsSummary, parse_metrics_lines
from overbrainer.utc import parse_utc

if TYPE_CHECKING:
    from overbrainer.exec.markers import JobEnd

PROGRESS_FILE = "progress.json"
SEEN_FILE = "metrics.seen.jsonl"
RECOVERY_SEEN = "metrics.seen.recovery-{}.jsonl"
"""The mirror of recovery N's job (N from 1)."""
METRICS_FILE = "metrics.jsonl"
TAIL_BYTES = 256 * 1024
"""How much of the end of a metrics file ``runs ls`` reads for a job on this machine."""
STALE_SECONDS = 300.0
"""Older than this, a run's progress is shown with its age, and no ETA."""


# --- what a follower writes ------------------------------------------------------------


def seen_file(recovery: int) -> str:
    """The name of the mirror of the job of ``recovery`` (0: the run's first job)."""
    return RECOVERY_SEEN.format(recovery) if recovery else SEEN_FILE


class LiveFiles:
    """What the follower of one run's job keeps beside its ``run.json``.

    ``mirror``: the job is not on this machine, so the metrics lines seen are copied here,
    into the mirror of its attempt: ``recovery`` (0: the run's first job), whose job
    resumed from step ``resumed``. Every write is best effort (a full or read-only disk
    costs only these caches).
    """

    def __init__(
        self, run_dir: Path, *, mirror: bool, recovery: int = 0, resumed: int | None = None
    ) -> None:
        self.run_dir = run_dir
        self.mirror = mirror
        self.recovery = recovery
        self.resumed = resumed
        self._started = False
        self._last: MetricsSummary | None = None

    def saw(self, events: Sequence[MetricsEvent], summary: MetricsSummary) -> None:
        """The follower read ``events`` (from the start of the metrics file on its first
        call), folding to ``summary``."""
        with contextlib.suppress(OSError):
            if self.mirror and (events or not self._started):
                # A follower reads the file from its start: the copy starts afresh too.
                mode = "a" if self._started else "w"
                head = []
                if not self._started and self.recovery and self.resumed is not None:
                    head = [resumed_line(self.resumed)]
                with (self.run_dir / seen_file(self.recovery)).open(mode, encoding="utf-8") as out:
                    out.writelines(event.to_line() for event in [*head, *events])
            self._started = True
            if summary != self._last and summary.lines:
                write_json_atomic(
                    self.run_dir / PROGRESS_FILE,
                    {"summary": summary.to_dict(), "seen_at": _iso(datetime.now(UTC))},
                )
                self._last = summary


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _parse_time(text: object) -> datetime | None:
    return parse_utc(text)


# --- where a run stands ----------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """Where a run's training stands: its latest metrics, the pace-based time left, and
    when that was seen (``seen_at``; None when only the log's recorded metrics are known)."""

    summary: MetricsSummary
    eta_seconds: float | None = None
    seen_at: datetime | None = None

    @property
    def percent(self) -> float | None:
        """How far the training is, in percent."""
        fraction = self.summary.fraction
        return None if fraction is None else 100 * fraction

    def age(self, now: datetime) -> float | None:
        """Seconds since it was seen (None: not known)."""
        return None if self.seen_at is None else max(0.0, (now - self.seen_at).total_seconds())

    def eta_at(self, now: datetime) -> float | None:
        """Time left as of ``now``: the ETA when seen, less the time since (None when it
        cannot be told, or the view is stale)."""
        age = self.age(now)
        if self.eta_seconds is None or age is None or age > STALE_SECONDS:
            return None
        return max(0.0, self.eta_seconds - age)

    def to_json(self, now: datetime) -> dict[str, Any]:
        """The standing as JSON primitives (for ``--json``)."""
        s = self.summary
        eta = self.eta_at(now)
        percent = self.percent
        return {
            "step": s.step,
            "max_steps": s.max_steps,
            "percent": None if percent is None else round(percent, 1),
            "epoch": _finite(s.epoch),
            "loss": _finite(s.loss),
            "eval_loss": _finite(s.eval_loss),
            "eta_seconds": None if eta is None else round(eta),
            "seen_at": None if self.seen_at is None else _iso(self.seen_at),
        }


def _finite(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return str(value)


def pace_eta(events: Iterable[MetricsEvent]) -> float | None:
    """Seconds left at the last step, from the pace between the first known point (the
    trainer's begin, else the first step seen) and the last step; None when it cannot be
    told (no two points, no maximum, a clock going backwards)."""
    origin: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    total: int | None = None
    for event in events:
        if event.max_steps:
            total = event.max_steps
        if event.time is None:
            continue
        if event.event == "begin" and origin is None:
            origin = (event.time, 0)
        elif event.event == "log" and event.step is not None:
            if origin is None:
                origin = (event.time, event.step)
            last = (event.time, event.step)
    if origin is None or last is None or not total:
        return None
    elapsed, steps = last[0] - origin[0], last[1] - origin[1]
    if elapsed <= 0 or steps <= 0:
        return None
    return elapsed / steps * max(0, total - last[1])


def standing_of(events: Sequence[MetricsEvent], seen_at: datetime | None) -> Standing:
    """Where a run stands after ``events`` (a whole metrics file, or its end)."""
    summary = MetricsSummary().with_events(events)
    return Standing(summary, pace_eta(events), seen_at)


def _from_progress_file(run_dir: Path) -> Standing | None:
    try:
        data = json.loads((run_dir / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict):
        return None
    summary = MetricsSummary.from_dict(data["summary"])
    seen_at = _parse_time(data.get("seen_at"))
    eta = None
    if summary.step and summary.max_steps and summary.started_at and summary.last_time:
        elapsed = summary.last_time - summary.started_at
        if elapsed > 0:
            eta = elapsed / summary.step * max(0, summary.max_steps - summary.step)
    return Standing(summary, eta, seen_at)


def _tail_events(path: Path) -> tuple[list[MetricsEvent], datetime] | None:
    """The events at the end of a metrics file and when it was last written."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - TAIL_BYTES)
            handle.seek(start)
            data = handle.read(TAIL_BYTES)
            written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None
    if start:
        data = data[data.find(b"\n") + 1 :]  # the first line is cut
    events, _, _ = parse_metrics_lines(data, final=True)
    return events, written


def standing(state: RunLog, run_dir: Path) -> Standing | None:
    """Where ``state``'s run stands, as this machine knows without the network.

    A run in progress: a job on this machine from its own metrics file; any other from
    what the command following it here last saw; else, and for an ended run, the metrics
    its log recorded (None when there are none).
    """
    run = state.run
    if run.state == RunState.running:
        found: Standing | None = None
        if run.kind_facts.runs_here:
            tail = _tail_events(run_dir / METRICS_FILE)
            if tail is not None and tail[0]:
                found = standing_of(*tail)
        else:
            found = _from_progress_file(run_dir)
        if found is not None and found.summary.lines:
            return found
    if run.metrics:
        return Standing(MetricsSummary.from_dict(run.metrics))
    return None


def _events_in(path: Path) -> list[MetricsEvent] | None:
    """The metrics lines of a file (None: it cannot be read)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    events, _, _ = parse_metrics_lines(data, final=True)
    return events


def _recoveries_seen(run_dir: Path) -> list[int]:
    """The recoveries whose job's lines a follower here mirrored, in order."""
    prefix, suffix = RECOVERY_SEEN.split("{}")
    found = []
    with contextlib.suppress(OSError):
        for path in run_dir.glob(RECOVERY_SEEN.format("*")):
            number = path.name.removeprefix(prefix).removesuffix(suffix)
            if number.isdigit() and int(number) > 0:
                found.append(int(number))
    return sorted(found)


def attempts_seen(run_dir: Path) -> list[Attempt]:
    """The metrics lines of each attempt of a run known here, in order: what the commands
    following its jobs mirrored, the last attempt's as retrieved (or written here) when its
    ``metrics.jsonl`` is home."""
    attempts = []
    for name in [SEEN_FILE, *(seen_file(n) for n in _recoveries_seen(run_dir))]:
        events = _events_in(run_dir / name)
        if events is not None:
            attempts.append(Attempt.of(events))
    final = _events_in(run_dir / METRICS_FILE)
    if final:
        last = attempts[-1] if attempts else None
        if last is not None and last.events and last.events[0] == final[0]:
            # The same job's file, complete: it stands for its mirror (and its resume step).
            attempts[-1] = Attempt(final, last.resumed)
        else:
            # A job no follower here mirrored (a later attempt followed from elsewhere).
            attempts.append(Attempt(final))
    return attempts


def curve_events(run_dir: Path) -> list[MetricsEvent]:
    """Every metrics line of a run known here, as one series across its attempts (a
    recovered run's lost pods: see :mod:`overbrainer.projections.attempts`)."""
    return join_attempts(attempts_seen(run_dir))


def standing_text(standing: Standing, now: datetime, *, eta: bool = True) -> str:
    """``step 30/100 (30%), epoch 0.9, loss 1.234, eval_loss 1.301, ETA 3m10s (seen 4s
    ago)``: a run in progress, for people (without the ETA when not ``eta``: its job
    ended)."""
    from overbrainer.projections.words import duration_text
    from overbrainer.train.metrics import format_epoch, format_loss

    s = standing.summary
    parts: list[str] = []
    if s.step is not None:
        total = f"/{s.max_steps} ({standing.percent:.0f}%)" if s.max_steps else ""
        parts.append(f"step {s.step}{total}")
    if s.epoch is not None:
        parts.append(f"epoch {format_epoch(s.epoch)}")
    for name, value in (("loss", s.loss), ("eval_loss", s.eval_loss)):
        if value is not None:
            parts.append(f"{name} {format_loss(value)}")
    left = standing.eta_at(now) if eta else None
    if left is not None:
        parts.append(f"ETA {duration_text(left)}")
    text = ", ".join(parts) or "no step yet"
    age = standing.age(now)
    if age is not None:
        text += f" (seen {duration_text(age)} ago)"
    return text


def ended_job(state: RunLog, run_dir: Path, *, here: bool) -> "JobEnd | None":
    """How the job of a run the log still calls running ended, when this machine can tell
    without writing: a job of the local target started from this machine (``here``) runs in
    the run's own directory, whose markers say it. None for every other run (a job on
    another machine is known only by asking it: ``train attach`` does)."""
    run = state.run
    if run.state != RunState.running or not run.kind_facts.runs_here or not here or run.job is None:
        return None
    from overbrainer.exec.markers import job_end

    return job_end(run_dir)


def collect_hint(run_id: str) -> str:
    """What brings home the results of a run whose job ended unfollowed."""
    return f"`overbrainer train attach {run_id}` brings its results home and ends the run"
