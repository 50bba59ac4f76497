"""Which runs' files ``runs rm`` and ``runs gc`` may remove, and why not — no I/O.

A run's directory (``runs/<id>/``) goes only once nothing can still need it: its run has
ended (no job writes into it, no follower brings files into it) and every pod of it is
confirmed gone (its ``ssh/`` keys are the only way into a pod that may still bill). A run
started from another checkout of a team store keeps its files there: it is removed there.
What is removed is recorded (``run.FilesRemoved``); the run's events stay.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from overbrainer.events.aggregate import RunLog
from overbrainer.events.states import ALIVE, FINAL_STATES, PodState, RunState
from overbrainer.projections.words import pod_status_text

_UNITS = {"h": 1, "d": 24, "w": 24 * 7}


def parse_age(text: str, option: str = "--older-than") -> timedelta:
    """``12h``, ``7d``, ``30d``, ``2w``: a whole number of hours, days or weeks; anything
    else is a ``ValueError`` naming ``option`` and the forms it takes."""
    word = text.strip()
    number, unit = word[:-1], word[-1:].lower()
    if unit not in _UNITS or not number.isascii() or not number.isdigit():
        raise ValueError(
            f"{option} takes a whole number of hours, days or weeks, like 12h, 7d or 30d "
            f"(not {text!r})"
        )
    hours = int(number) * _UNITS[unit]
    if not 0 < hours <= 100_000 * 24:
        raise ValueError(f"{option} takes a span from 1h to 100000d (not {text!r})")
    return timedelta(hours=hours)


def refusal(state: RunLog, *, elsewhere: str | None = None) -> str | None:
    """Why the files of ``state``'s run may not be removed now, with the command that
    changes that; None when they may. ``elsewhere``: the host of the checkout that started
    the run, when it is not this one and its files are not here (a team store)."""
    run = state.run
    run_id = run.run_id
    if run.state not in FINAL_STATES:
        doing = "is still being prepared" if run.state == RunState.preparing else "is running"
        return (
            f"run {run_id} {doing}: its job or its follower may still write into "
            f"runs/{run_id}/; stop it with `overbrainer train cancel {run_id}` (or follow it "
            f"to its end with `overbrainer train attach {run_id}`), then remove it"
        )
    if state.pod.may_bill():
        return (
            f"{_pods_alive(state)} of run {run_id} may still exist (and bill), and "
            f"runs/{run_id}/ssh/ holds the only key to it; `overbrainer pod rm {run_id}` "
            "deletes it and waits until Runpod no longer shows it, then remove the run"
        )
    if elsewhere is not None:
        return (
            f"run {run_id} was started from the checkout on host {elsewhere}, which holds "
            f"its files: run `overbrainer runs rm {run_id}` there"
        )
    return None


def _pods_alive(state: RunLog) -> str:
    """The pods of the run that may still exist, each with what the log says of it."""
    pod = state.pod

    def status(pod_id: str) -> PodState:
        return pod.status if pod_id == pod.pod_id else pod.pods[pod_id]

    alive = sorted(pod_id for pod_id in pod.pods if status(pod_id) in ALIVE or pod_id in pod.strays)
    if not alive:
        return "a pod being created" if pod.status == PodState.creating else "a pod"
    return ", ".join(f"pod {pod_id} ({pod_status_text(status(pod_id))})" for pod_id in alive)


def created_at(state: RunLog) -> datetime | None:
    """When the run was created (UTC), or None when its log does not say."""
    text = state.run.created_at
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _final_loss(state: RunLog) -> float | None:
    """The run's final evaluation loss, else its final training loss (what ``--keep-best``
    ranks by; lower is better); None without a finite one."""
    for key in ("eval_loss", "loss"):
        value = state.run.metrics.get(key)
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is not None and math.isfinite(number):
            return float(number)
    return None


def best(states: Iterable[RunLog], count: int) -> list[str]:
    """The IDs of the ``count`` runs of lowest final loss (evaluation loss where a run has
    one, else training loss) among those that succeeded or stopped; ties go to the newer
    run."""
    ranked = []
    for state in states:
        loss = _final_loss(state)
        if state.run.state in (RunState.succeeded, RunState.stopped) and loss is not None:
            ranked.append((loss, _newest_first(state.run.run_id), state.run.run_id))
    ranked.sort()
    return [run_id for _, _, run_id in ranked[: max(count, 0)]]


def _newest_first(run_id: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in run_id)


@dataclass(frozen=True)
class Left:
    """A run ``runs gc`` leaves, and why."""

    run_id: str
    why: str


@dataclass(frozen=True)
class Collection:
    """What ``runs gc`` does: the runs whose files go, oldest first, and those old enough
    that it leaves (the best ones kept, those refused), each with why."""

    remove: list[RunLog]
    left: list[Left]


def collect(
    states: Sequence[RunLog],
    *,
    now: datetime,
    older_than: timedelta,
    keep_best: int = 0,
    elsewhere: dict[str, str] | None = None,
) -> Collection:
    """The runs of ``states`` created more than ``older_than`` before ``now`` whose files
    are still here: removed unless among the ``keep_best`` best of all runs, or refused
    (:func:`refusal`). ``elsewhere``: the host each run started from another checkout
    lives on."""
    cutoff = now - older_than
    kept = set(best(states, keep_best)) if keep_best > 0 else set()
    hosts = elsewhere or {}
    remove: list[RunLog] = []
    left: list[Left] = []
    for state in sorted(states, key=lambda s: s.run.run_id):
        moment = created_at(state)
        if state.run.files_removed is not None or moment is None or moment > cutoff:
            continue
        run_id = state.run.run_id
        if run_id in kept:
            left.append(Left(run_id, f"among the {keep_best} best (--keep-best)"))
            continue
        why = refusal(state, elsewhere=hosts.get(run_id))
        if why is not None:
            left.append(Left(run_id, why))
        else:
            remove.append(state)
    return Collection(remove, left)
