"""What a run came to, gathered for comparing runs side by side (``runs compare``) and for
the report page: its record, its times, its spend, its loss curves and its settings (the
``axolotl.yaml`` it trained with, and a fingerprint of its data).

:func:`gather` reads the run's files; everything after it is pure.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import Recorded
from overbrainer.plurals import plural
from overbrainer.projections.curves import Curves, curves_of
from overbrainer.projections.live import curve_events
from overbrainer.projections.spend import recorded_spend
from overbrainer.projections.words import duration_text
from overbrainer.train.metrics import format_loss
from overbrainer.utc import parse_utc

CONFIG_FILE = "axolotl.yaml"
DATA_FILES = ("data/train.jsonl", "data/eval.jsonl")


@dataclass(frozen=True)
class RunFacts:
    """One run, as comparing and reporting show it."""

    state: RunLog
    records: tuple[Recorded, ...]
    curves: Curves = field(default_factory=Curves)
    settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        """The run's ID."""
        return self.state.run.run_id

    def moment(self, kind: type[ev.Event]) -> datetime | None:
        """When the run's first event of ``kind`` was recorded."""
        for record in self.records:
            if isinstance(record.event, kind):
                return _time(record.at)
        return None

    @property
    def created(self) -> datetime | None:
        """When the run was created."""
        return _time(self.state.run.created_at)

    @property
    def job_started(self) -> datetime | None:
        """When its job started."""
        return self.moment(ev.JobStarted)

    @property
    def ended(self) -> datetime | None:
        """When it ended."""
        return self.moment(ev.RunEnded)

    def training_seconds(self) -> float | None:
        """From the job's start to the run's end."""
        start, end = self.job_started, self.ended
        return None if start is None or end is None else (end - start).total_seconds()

    def total_seconds(self) -> float | None:
        """From the run's creation to its end."""
        start, end = self.created, self.ended
        return None if start is None or end is None else (end - start).total_seconds()


def _time(text: str | None) -> datetime | None:
    return parse_utc(text)


def flatten(config: object, prefix: str = "") -> dict[str, str]:
    """A nested configuration as ``dotted.key → value`` (lists by index: ``datasets.0.path``),
    each value as JSON text."""
    if isinstance(config, Mapping):
        found: dict[str, str] = {}
        for key, value in config.items():
            found.update(flatten(value, f"{prefix}{key}."))
        return found
    if isinstance(config, list) and config and any(isinstance(v, dict | list) for v in config):
        found = {}
        for index, value in enumerate(config):
            found.update(flatten(value, f"{prefix}{index}."))
        return found
    return {prefix.rstrip("."): json.dumps(config, sort_keys=True, default=str)}


def settings_of(run_dir: Path) -> dict[str, str]:
    """The settings a run trained with: its ``axolotl.yaml`` flattened, and a fingerprint
    of each data file (``data/train.jsonl`` → ``sha256:… (N lines)``, ``(1 line)``). Empty when the
    run's files are not here."""
    found: dict[str, str] = {}
    import yaml

    try:
        config = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        config = None  # not here, or edited into something that is no configuration
    if isinstance(config, dict):
        found.update(flatten(config))
    for name in DATA_FILES:
        try:
            data = (run_dir / name).read_bytes()
        except OSError:
            continue
        digest = hashlib.sha256(data).hexdigest()[:12]
        lines = data.count(b"\n")
        found[name] = json.dumps(f"sha256:{digest} ({plural(lines, 'line')})")
    return found


def gather(state: RunLog, records: Sequence[Recorded], run_dir: Path) -> RunFacts:
    """A run's facts from its state, its events and its directory here."""
    return RunFacts(
        state=state,
        records=tuple(records),
        curves=curves_of(curve_events(run_dir)),
        settings=settings_of(run_dir),
    )


# --- side by side ----------------------------------------------------------------------


def shown_value(value: str) -> str:
    """A setting's JSON text for people (strings without their quotes)."""
    try:
        loaded = json.loads(value)
    except ValueError:
        return value
    if isinstance(loaded, str):
        return loaded
    if isinstance(loaded, float):
        return f"{loaded:g}"
    return value


def differing(runs: Sequence[RunFacts]) -> list[tuple[str, list[str]]]:
    """The settings whose values are not the same in every run, as (key, value per run);
    ``-`` where a run has no such setting."""
    keys = sorted({key for run in runs for key in run.settings})
    rows = []
    for key in keys:
        values = [run.settings.get(key) for run in runs]
        if len(set(values)) > 1:
            rows.append((key, ["-" if v is None else shown_value(v) for v in values]))
    return rows


def _loss(point: tuple[float, float] | None) -> str:
    if point is None:
        return "-"
    return f"{format_loss(point[1])} (step {point[0]:g})"


def _spend(state: RunLog) -> str:
    return recorded_spend(state) or "-"


def summary_rows(runs: Sequence[RunFacts]) -> list[tuple[str, list[str]]]:
    """What each run came to, as (label, value per run)."""

    def each(fn: Any) -> list[str]:
        return [fn(run) for run in runs]

    return [
        ("state", each(lambda r: r.state.run.state)),
        ("target", each(lambda r: f"{r.state.run.target} ({r.state.run.kind})")),
        ("model", each(lambda r: f"{r.state.run.adapter} of {r.state.run.base_model}")),
        ("created", each(lambda r: (r.state.run.created_at or "-")[:16].replace("T", " "))),
        ("training", each(lambda r: _span(r.training_seconds()))),
        ("in all", each(lambda r: _span(r.total_seconds()))),
        ("spend", each(lambda r: _spend(r.state))),
        ("final loss", each(lambda r: _loss(r.curves.final("loss")))),
        ("best loss", each(lambda r: _loss(r.curves.best("loss")))),
        ("final eval_loss", each(lambda r: _loss(r.curves.final("eval_loss")))),
        ("best eval_loss", each(lambda r: _loss(r.curves.best("eval_loss")))),
    ]


def _span(seconds: float | None) -> str:
    return "-" if seconds is None else duration_text(seconds)


def side_by_side(runs: Sequence[RunFacts]) -> list[str]:
    """The comparison as text: what each run came to, then the settings that differ."""
    rows = summary_rows(runs)
    differ = differing(runs)
    labels = [label for label, _ in rows] + [key for key, _ in differ]
    pad = max(len(label) for label in labels)
    widths = [
        max(len(run.run_id), *(len(v[i]) for _, v in rows + differ)) for i, run in enumerate(runs)
    ]

    def line(label: str, values: Sequence[str]) -> str:
        cells = "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))
        return f"{label.ljust(pad)}  {cells}".rstrip()

    out = [line("", [run.run_id for run in runs])]
    out += [line(label, values) for label, values in rows]
    if differ:
        out.append("")
        out.append("settings that differ:")
        out += [line(key, values) for key, values in differ]
    elif any(run.settings for run in runs):
        out.append("")
        out.append("settings: the same in every run")
    return out
