"""Training progress as one line: step/max, percent, epoch, loss, learning rate, ETA and,
on Runpod, the spend so far."""

from overbrainer.projections.words import duration_text
from overbrainer.train.metrics import MetricsSummary, format_epoch, format_loss, format_rate


def eta_seconds(summary: MetricsSummary) -> float | None:
    """Time left, from the pace since the first step (None until it can be told)."""
    if (
        summary.step is None
        or not summary.max_steps
        or summary.started_at is None
        or summary.last_time is None
        or summary.step <= 0
    ):
        return None
    elapsed = summary.last_time - summary.started_at
    if elapsed <= 0:
        return None
    return elapsed / summary.step * max(0, summary.max_steps - summary.step)


def progress_text(summary: MetricsSummary, spend: float | None = None) -> str:
    """``step 30/100 (30%), epoch 0.9, loss 1.234, lr 0.0002, ETA 3m10s, spend $0.12``."""
    parts: list[str] = []
    if summary.step is not None:
        if summary.max_steps:
            parts.append(
                f"step {summary.step}/{summary.max_steps} ({100 * (summary.fraction or 0):.0f}%)"
            )
        else:
            parts.append(f"step {summary.step}")
    if summary.epoch is not None:
        parts.append(f"epoch {format_epoch(summary.epoch)}")
    if summary.loss is not None:
        parts.append(f"loss {format_loss(summary.loss)}")
    if summary.learning_rate is not None:
        parts.append(f"lr {format_rate(summary.learning_rate)}")
    eta = eta_seconds(summary)
    if eta is not None:
        parts.append(f"ETA {duration_text(eta)}")
    if spend is not None:
        parts.append(f"spend ${spend:.2f}")
    return ", ".join(parts) if parts else "waiting for the first metrics"
