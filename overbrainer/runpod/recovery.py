"""Whether a run whose pod was lost before its job ended goes on, on a new pod.

Pure: what was lost, how many recoveries the run had and what its pods cost so far in,
a verdict out (:func:`decide`), tested as a table. The driver is
``overbrainer.targets.runpod.recovery``.

The money rule: ``max_cost_usd`` bounds the whole run, every pod of every attempt (billed
where Runpod's billing is final, estimated otherwise). A recovery's pod is created only
when what is left of the cap pays for :data:`RECOVERY_MIN_HOURS` at the cheapest rate a pod
of the run was created at (or for the whole ``max_hours`` when that is shorter) — the rule
a run's first pod meets too (a GPU type whose one hour the cap does not pay for is left
out). The new pod's own cap, the one its watchdog keeps, is what is left.
"""

from dataclasses import dataclass

__all__ = ["RECOVERY_MIN_HOURS", "Fail", "Off", "Recover", "cheapest_rate", "decide"]

RECOVERY_MIN_HOURS = 1.0
"""The least time a recovery's pod must be paid for by what is left of ``max_cost_usd``."""


@dataclass(frozen=True)
class Recover:
    """Go on, on a new pod: recovery ``attempt`` of ``max_recoveries``; ``cost_left`` is
    the new pod's cost cap (None: the target has none)."""

    attempt: int
    max_recoveries: int
    cost_left: float | None


@dataclass(frozen=True)
class Fail:
    """The run fails, for the reason ``message`` says (it names the next command)."""

    message: str


@dataclass(frozen=True)
class Off:
    """The target recovers nothing (``max_recoveries = 0``): the run fails as its pod
    goes."""


def cheapest_rate(rates: list[float | None]) -> float | None:
    """The lowest known USD/h among the run's pods (None: none known)."""
    known = [rate for rate in rates if rate is not None and rate > 0]
    return min(known) if known else None


def decide(
    *,
    run_id: str,
    target: str,
    why: str,
    done: int,
    max_recoveries: int,
    spent: float,
    max_cost_usd: float | None,
    rate: float | None,
    max_hours: float,
    next_command: str,
) -> Recover | Fail | Off:
    """The verdict on run ``run_id`` (of ``target``) whose pod was lost (``why``), after
    ``done`` recoveries of ``max_recoveries``: its pods cost ``spent`` so far, ``rate`` is
    the cheapest USD/h a pod of it was created at (None: unknown), ``next_command`` what
    the user runs to go on when it fails (say, ``overbrainer train --resume-from RUN``)."""
    if max_recoveries <= 0:
        return Off()
    if done >= max_recoveries:
        return Fail(
            f"run {run_id} failed: {why}; recoveries exhausted ({done}/{max_recoveries}, "
            f"max_recoveries of target {target}): go on with `{next_command}`"
        )
    if max_cost_usd is None:
        return Recover(done + 1, max_recoveries, None)
    left = max_cost_usd - spent
    need = 0.0 if rate is None else rate * min(RECOVERY_MIN_HOURS, max_hours)
    if left <= 0 or left < need:
        paid = (
            ""
            if rate is None
            else f" ({_hours(min(RECOVERY_MIN_HOURS, max_hours))} at ${rate:.2f}/h)"
        )
        return Fail(
            f"run {run_id} failed: {why}; no recovery: its pods cost ${spent:.2f} so far of "
            f"max_cost_usd ${max_cost_usd:.2f}, which leaves ${max(left, 0.0):.2f}, and a "
            f"recovery's pod needs at least ${need:.2f}{paid}; no new pod was created: "
            f"raise max_cost_usd of target {target} in overbrainer.toml and go on with "
            f"`{next_command}`"
        )
    # Float sums (9.8 of 10 leaves 0.1999…): to a millionth of a dollar.
    return Recover(done + 1, max_recoveries, round(left, 6))


def _hours(hours: float) -> str:
    return f"{hours * 60:g} min" if hours < 1 else f"{hours:g} h"
