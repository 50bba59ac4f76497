"""Reading ``metrics.jsonl``: parsing complete lines, folding them into a summary, and the
final ``train:`` line.

The lines are written by the metrics plugin (:mod:`overbrainer.train.overbrainer_metrics`).
A follower reads the file from an offset in bounded chunks; :func:`parse_metrics_lines` takes
only the complete lines of a chunk and says how many bytes it used, so the next read starts
at the first byte of the unfinished line.
"""

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Self

MAX_LINE_BYTES = 1 << 20
"""A line longer than this without a newline is given up on (counted malformed), so one
runaway line can never stall a follower that reads in bounded chunks."""

_FLOAT_FIELDS = ("time", "epoch", "loss", "eval_loss", "learning_rate", "grad_norm")
_INT_FIELDS = ("step", "max_steps")
# A phase name: what the job does next (``saving_adapter``, ``merging``).
_PHASE_RE = re.compile(r"^[a-z_]{1,40}$")
# How the plugin spells the floats JSON cannot carry.
_SPELLED = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True)
class MetricsEvent:
    """One line of ``metrics.jsonl``: ``begin`` at train start, ``log`` on each trainer log
    (an evaluation is a ``log`` with ``eval_loss`` and the step it was computed at),
    ``phase`` when the job moves on to saving or merging, ``stopped`` once a save-and-stop
    request saved its checkpoint at ``step``.

    Unknown event names are kept (and ignored by the summary) so newer plugins stay readable.
    """

    event: str
    time: float | None = None
    step: int | None = None
    epoch: float | None = None
    max_steps: int | None = None
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    phase: str | None = None
    # Why a ``stopped`` job was asked to stop, when its request said (``deadline``,
    # ``cost_cap``: the pod's watchdog).
    reason: str | None = None

    def to_line(self) -> str:
        """The event as one metrics line (what :func:`parse_metrics_lines` reads back),
        without its unknown values."""
        record: dict[str, Any] = {"event": self.event}
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name != "event" and value is not None:
                record[field.name] = _json_float(value) if isinstance(value, float) else value
        return json.dumps(record, sort_keys=True) + "\n"


class _Malformed(ValueError):
    pass


def _float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Malformed
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in _SPELLED:
        return _SPELLED[value]
    raise _Malformed


def _int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _Malformed
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Malformed


def _event(line: bytes) -> MetricsEvent:
    """The event of one line, or :class:`_Malformed`."""
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, ValueError) as error:
        raise _Malformed from error
    if not isinstance(record, dict):
        raise _Malformed
    name = record.get("event")
    if not isinstance(name, str) or not name:
        raise _Malformed
    values: dict[str, Any] = {key: _float(record.get(key)) for key in _FLOAT_FIELDS}
    values.update({key: _int(record.get(key)) for key in _INT_FIELDS})
    phase = record.get("phase")
    if phase is not None and (not isinstance(phase, str) or not _PHASE_RE.fullmatch(phase)):
        raise _Malformed
    # A reason is only ever shown: one that is not a plain word is left out, not fatal.
    reason = record.get("reason")
    if not isinstance(reason, str) or not _PHASE_RE.fullmatch(reason):
        reason = None
    return MetricsEvent(event=name, phase=phase, reason=reason, **values)


def parse_metrics_lines(
    data: bytes, *, final: bool = False, max_line: int = MAX_LINE_BYTES
) -> tuple[list[MetricsEvent], int, int]:
    """The events in the complete lines of ``data``: ``(events, malformed, consumed)``.

    Only lines ending in a newline are read; ``consumed`` is the number of bytes up to and
    including the last newline, and the bytes after it are left for the next read. With
    ``final`` (the job has ended and the file is drained) a last line without a newline is
    read too. A trailing fragment longer than ``max_line`` is consumed and counted malformed.
    Blank lines are skipped; malformed lines are counted, never fatal.
    """
    end = data.rfind(b"\n") + 1
    if final or len(data) - end > max_line:
        end = len(data)
    events: list[MetricsEvent] = []
    malformed = 0
    for raw in data[:end].split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        try:
            events.append(_event(line))
        except _Malformed:
            malformed += 1
    return events, malformed, end


def _json_float(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


@dataclass(frozen=True)
class MetricsSummary:
    """The fold of a run's metrics: the latest known value of each, and the line counts."""

    lines: int = 0
    malformed: int = 0
    step: int | None = None
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    eval_loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    started_at: float | None = None
    last_time: float | None = None
    # The step whose checkpoint a save-and-stop request saved (the job then stops), and
    # why it was asked when the request said (see MetricsEvent.reason).
    stopped_step: int | None = None
    stopped_reason: str | None = None
    # The job did not merge the adapter: its training was stopped before its end.
    merge_skipped: bool = False
    # The ``phase`` lines among ``lines``: the job's shell writes some of them itself (the
    # merge's), so they are no proof that the metrics plugin was loaded.
    phases: int = 0

    def with_event(self, event: MetricsEvent) -> Self:
        """This summary after ``event`` (a missing value keeps the one before)."""
        changes: dict[str, Any] = {"lines": self.lines + 1}
        if event.time is not None:
            changes["last_time"] = event.time
        if event.event == "begin" and event.time is not None and self.started_at is None:
            changes["started_at"] = event.time
        if event.event == "stopped" and event.step is not None:
            changes["stopped_step"] = event.step
            changes["stopped_reason"] = event.reason
        if event.event == "phase":
            changes["phases"] = self.phases + 1
            if event.phase == MERGE_SKIPPED:
                changes["merge_skipped"] = True
        if event.event in ("begin", "log"):
            for name in (
                "step",
                "max_steps",
                "epoch",
                "loss",
                "eval_loss",
                "learning_rate",
                "grad_norm",
            ):
                value = getattr(event, name)
                if value is not None:
                    changes[name] = value
        return replace(self, **changes)

    def with_events(self, events: Iterable[MetricsEvent], malformed: int = 0) -> Self:
        """This summary after ``events`` and ``malformed`` more malformed lines."""
        summary = self
        for event in events:
            summary = summary.with_event(event)
        if malformed:
            summary = replace(summary, malformed=summary.malformed + malformed)
        return summary

    @property
    def fraction(self) -> float | None:
        """How far the training is, in [0, 1], when steps are known."""
        if self.step is None or not self.max_steps:
            return None
        return min(max(self.step / self.max_steps, 0.0), 1.0)

    def to_dict(self) -> dict[str, int | float | str | None]:
        """The summary as JSON primitives (a NaN loss is the string ``"NaN"``)."""
        result: dict[str, int | float | str | None] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            result[field.name] = _json_float(value) if isinstance(value, float) else value
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """The summary :meth:`to_dict` gave (unknown keys ignored, bad values dropped)."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            raw = data.get(field.name)
            try:
                if field.name in ("lines", "malformed", "phases"):
                    values[field.name] = _int(raw) or 0
                elif field.name == "stopped_reason":
                    values[field.name] = raw if isinstance(raw, str) else None
                elif field.name == "merge_skipped":
                    values[field.name] = raw is True
                elif field.name in (*_INT_FIELDS, "stopped_step"):
                    values[field.name] = _int(raw)
                else:
                    values[field.name] = _float(raw)
            except _Malformed:
                continue
        return cls(**values)


def format_epoch(epoch: float) -> str:
    """An epoch with at most two decimals: ``3``, ``1.5``, ``0.33``."""
    if not math.isfinite(epoch):
        return str(epoch)
    text = f"{epoch:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_loss(loss: float) -> str:
    """A loss with four significant digits, kept when they are zeros: ``1.235``,
    ``0.04321``, ``1.000``, ``nan``."""
    return f"{loss:#.4g}".rstrip(".")


def format_rate(rate: float) -> str:
    """A learning rate with three significant digits: ``0.0002``, ``1.5e-05``."""
    return f"{rate:.3g}"


STOP_REASONS = {
    "deadline": "its pod's watchdog asked, before the pod's deadline",
    "cost_cap": "its pod's watchdog asked, at 95 % of the pod's cost cap",
    "stall": "its pod's watchdog asked, as the job had written no metrics line for too long",
}
"""Why a job was asked to save and stop, by the reason its request held (none: ``train
stop``)."""


def stop_reason_text(reason: str | None) -> str:
    """Who asked a job to save and stop: ``as asked`` (``train stop``), or the bound that
    made the pod's watchdog ask."""
    return f"as {STOP_REASONS[reason]}" if reason in STOP_REASONS else "as asked"


def stopped_text(step: int, reason: str | None = None) -> str:
    """What the follower says when the job acts on a save-and-stop: whether its checkpoint
    comes home is told once the results are (never "saved" before that)."""
    return f"stopping at step {step}, {stop_reason_text(reason)}: the job saves checkpoint-{step}"


MERGE_SKIPPED = "merge_skipped"
"""The phase line a job writes instead of merging when its training was stopped."""

PHASES = {
    "saving_adapter": "training ended; saving the adapter",
    "saving_model": "training ended; saving the model",
    "merging": "merging the adapter into the base model",
    MERGE_SKIPPED: "not merging the adapter: its training was stopped before its end",
}
"""What the follower says for each phase line (unknown phases are not shown)."""


def eval_text(event: MetricsEvent) -> str:
    """``eval_loss 1.234 at step 40 (epoch 0.5)``: an evaluation and where it was computed."""
    assert event.eval_loss is not None
    text = f"eval_loss {format_loss(event.eval_loss)}"
    if event.step is not None:
        text += f" at step {event.step}"
    if event.epoch is not None:
        text += f" (epoch {format_epoch(event.epoch)})"
    return text


def milestones(events: Iterable[MetricsEvent]) -> Iterator[str]:
    """The lines a follower prints for ``events``, in their order: each evaluation once, at
    the step it was computed at, and each known phase."""
    for event in events:
        if event.event == "log" and event.eval_loss is not None:
            yield eval_text(event)
        elif event.event == "phase" and event.phase in PHASES:
            yield PHASES[event.phase]
        elif event.event == "stopped" and event.step is not None:
            yield stopped_text(event.step, event.reason)


def summary_line(
    run_id: str, state: str, summary: MetricsSummary | None, output_dir: str | None
) -> str:
    """The final line of ``train``:
    ``train: run ID STATE; step S/MAX, epoch E, loss L, eval_loss V[; output in DIR]``.

    Unknown values are left out (``step S`` without a known maximum; no metrics part at all
    when nothing is known).
    """
    parts: list[str] = []
    if summary is not None:
        if summary.step is not None:
            total = f"/{summary.max_steps}" if summary.max_steps is not None else ""
            parts.append(f"step {summary.step}{total}")
        if summary.epoch is not None:
            parts.append(f"epoch {format_epoch(summary.epoch)}")
        if summary.loss is not None:
            parts.append(f"loss {format_loss(summary.loss)}")
        if summary.eval_loss is not None:
            parts.append(f"eval_loss {format_loss(summary.eval_loss)}")
    line = f"train: run {run_id} {state}"
    if parts:
        line += "; " + ", ".join(parts)
    if output_dir:
        line += f"; output in {output_dir}"
    return line
