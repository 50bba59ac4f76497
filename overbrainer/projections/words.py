"""Numbers, counts and states as people read them: ``1 file``, ``65.6 kB``, ``3m05s``,
``running the job``. Pure."""

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from overbrainer.plurals import plural
from overbrainer.train.metrics import MetricsSummary, format_epoch, format_loss, format_rate

_POD_STATUS = {
    "none": "no pod",
    "creating": "being created",
    "created": "booting",
    "ready": "ready",
    "job_running": "running the job",
    "awaiting_retrieval": "awaiting retrieval",
    "kept": "kept",
    "deleting": "being deleted",
    "deleted": "deleted",
    "stray": "stray",
}


def shown_path(path: Path, project_dir: Path, cwd: Path | None = None) -> str:
    """How a message names ``path`` (as given: under ``project_dir`` as given with ``-C``,
    or as the user typed it): relative to the project when the current directory is in
    or below the project and the path is in it (``runs/<id>/output``, as every message
    names a run's files); else as given (``../proj/runs/<id>/output``), which reaches it
    from where the user is."""
    here = (cwd or Path.cwd()).resolve()
    root = (here / project_dir).resolve()
    full = (here / path).resolve()
    if here.is_relative_to(root) and full.is_relative_to(root):
        return str(full.relative_to(root))
    return str(path)


def size_text(count: int) -> str:
    """``count`` bytes for people: ``512 bytes``, ``65.6 kB``, ``1.2 GB``."""
    if count < 1000:
        return plural(count, "byte")
    value = float(count)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000:
            return f"{value:.1f} {unit}"
    return f"{value:.1f} PB"


def duration_text(seconds: float | None) -> str:
    """``45s``, ``3m05s``, ``2h07m`` (``unknown`` for None)."""
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def model_ready_text(cached: bool, seconds: float) -> str:
    """How a job's base model was made ready: ``from the cache, ready in 2s`` or
    ``downloaded in 41s``."""
    took = duration_text(seconds)
    return f"from the cache, ready in {took}" if cached else f"downloaded in {took}"


def pod_status_text(status: str) -> str:
    """A pod's recorded status in words (``job_running`` is ``running the job``)."""
    return _POD_STATUS.get(status, status.replace("_", " "))


def metrics_text(metrics: Mapping[str, Any]) -> str:
    """A run's recorded metrics for people: ``step 5/5, epoch 3, loss 0.7143, eval_loss
    0.8123, learning_rate 4e-05`` (the bookkeeping counters left out)."""
    summary = MetricsSummary.from_dict(metrics)
    parts: list[str] = []
    if summary.step is not None:
        total = f"/{summary.max_steps}" if summary.max_steps else ""
        parts.append(f"step {summary.step}{total}")
    if summary.epoch is not None:
        parts.append(f"epoch {format_epoch(summary.epoch)}")
    if summary.loss is not None:
        parts.append(f"loss {format_loss(summary.loss)}")
    if summary.eval_loss is not None:
        parts.append(f"eval_loss {format_loss(summary.eval_loss)}")
    if summary.learning_rate is not None:
        parts.append(f"learning_rate {format_rate(summary.learning_rate)}")
    return ", ".join(parts)


def job_shape(processes: int | None, parallelism: str | None) -> str:
    """A job's processes and how they share the model: ``2 processes (ddp)``, ``one process
    per GPU (zero3)``, ``1 process``."""
    if processes is None:
        count = "one process per GPU"
    else:
        count = plural(processes, "process", "processes")
    return count + (f" ({parallelism})" if parallelism else "")
