"""Provisioning's decisions, as pure functions: no I/O, no clock, no trio.

What a failed create means (next GPU type, stop, wait and send again, or look for the pod
first); what a pod seen through the API means for its readiness; what the watchdog's
verdict means; which pods an ambiguous create left; and the texts a user reads when the
walk ends without a pod. ``provision.py`` does the I/O around them.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import PodState
from overbrainer.runpod.models import Pod, PodStatus, SshEndpoint
from overbrainer.runpod.pod_scripts import RUN_MARKER
from overbrainer.runpod.redact import one_line
from overbrainer.utc import parse_utc

if TYPE_CHECKING:
    from overbrainer.runpod.client import CreateFailed

# --- attempts --------------------------------------------------------------------------


def pod_name(run_id: str, n: int) -> str:
    """The name of attempt ``n`` of run ``run_id``: ``overbrainer-<run>-<n>``."""
    return f"overbrainer-{run_id}-{n}"


def next_attempt(attempts: Sequence[Mapping[str, Any]]) -> int:
    """The number of the next attempt (attempts are numbered from 1 across GPU types)."""
    return 1 + max((int(a.get("n", 0)) for a in attempts), default=0)


def deadline(created: datetime, max_hours: float) -> datetime:
    """When the pod must be gone whatever happens: its creation (Runpod's ``createdAt``)
    plus ``max_hours``, UTC, rounded up to a whole second as the pod's watchdog rounds its
    bound (so it is never said to end before it may)."""
    moment = created.astimezone(UTC) + timedelta(hours=max_hours)
    if moment.microsecond:
        moment += timedelta(seconds=1)
    return moment.replace(microsecond=0)


class Step(StrEnum):
    """What the walk does after a create that did not give a pod."""

    NEXT_TYPE = "next_type"
    STOP = "stop"
    RETRY = "retry"
    RECONCILE = "reconcile"


@dataclass(frozen=True)
class CreateDecision:
    """What a failed create means.

    ``result`` and ``detail`` go into the attempt's ``AttemptResolved`` (``detail`` is
    Runpod's own words when it gave any, else the fixed text); ``wait`` is the pause before
    sending again (``RETRY``); ``text`` is the fixed user-facing text for ``STOP``.
    """

    step: Step
    result: str
    detail: str
    text: str = ""
    wait: float = 0.0


# Runpod's own advice for creates: a 400 (no capacity, or a rule this request breaks for
# this GPU type) and a 403 (no access to that pool) concern this candidate only.
_NEXT_TYPE = {400: "no_capacity", 403: "no_access"}
_STOP_RESULTS = {
    401: "bad_api_key",
    402: "insufficient_balance",
    404: "not_found",
    409: "conflict",
    422: "invalid_request",
}


def after_create_error(error: "CreateFailed") -> CreateDecision:
    """What the walk does after the create failed with ``error``.

    Ambiguous (transport error, 408, 5xx, unreadable answer) → reconcile: a pod may exist.
    400 (no capacity, or a rule this candidate breaks) and 403 (no access to that pool) →
    the next GPU type. 429 → wait ``Retry-After`` and send the same type again. Anything
    else (402 balance, 422 malformed request, 401 key, …) → stop at once; so does a create
    that never reached Runpod (no answer and not ambiguous: Runpod could not be reached).
    """
    text = str(error)
    detail = error.detail or text
    if error.ambiguous:
        return CreateDecision(Step.RECONCILE, "ambiguous", detail, text)
    status = error.status
    if status is None:
        return CreateDecision(Step.STOP, "not_sent", detail, text)
    if status in _NEXT_TYPE:
        return CreateDecision(Step.NEXT_TYPE, _NEXT_TYPE[status], detail, text)
    if status == 429:
        wait = error.retry_after if error.retry_after is not None else 10.0
        return CreateDecision(Step.RETRY, "rate_limited", detail, text, max(0.0, wait))
    result = _STOP_RESULTS.get(status or 0, "refused")
    return CreateDecision(Step.STOP, result, detail, text)


# --- ambiguous creates -----------------------------------------------------------------


@dataclass(frozen=True)
class Reconciled:
    """What the listing after an ambiguous create showed: the pod of this attempt (if it
    appeared) and the run's other pods, which are duplicates to delete."""

    adopt: Pod | None
    duplicates: tuple[Pod, ...]


def reconcile(
    pods: Sequence[Pod], run_id: str, attempt_name: str, known: Mapping[str, PodState]
) -> Reconciled:
    """Sort the account's ``pods`` after an ambiguous create of ``attempt_name``.

    Only pods carrying this run's marker count. The oldest one named for this attempt is
    adopted; every other one is a duplicate, except pods the run's log already records
    deleted (``known``: pod id → status, as ``PodView.pods``).
    """
    ours = [
        p for p in pods if p.env.get(RUN_MARKER) == run_id and known.get(p.id) != PodState.deleted
    ]
    ours.sort(
        key=lambda p: (p.created_at is None, p.created_at or datetime.min.replace(tzinfo=UTC))
    )
    adopt = next((p for p in ours if p.name == attempt_name), None)
    duplicates = tuple(p for p in ours if adopt is None or p.id != adopt.id)
    return Reconciled(adopt, duplicates)


# --- a booting pod ---------------------------------------------------------------------


class BootKind(StrEnum):
    """What one read of a booting pod says."""

    WAIT = "wait"
    ENDPOINT = "endpoint"
    VANISHED = "vanished"
    DEAD = "dead"


@dataclass(frozen=True)
class Boot:
    """One read of a booting pod: wait, try SSH at ``endpoint``, or give it up."""

    kind: BootKind
    detail: str = ""
    endpoint: SshEndpoint | None = None


_DEAD = (PodStatus.ERROR, PodStatus.EXITED, PodStatus.TERMINATED)


def observe(pod: Pod | None, *, unsafe_endpoint: str | None = None) -> Boot:
    """What a read of a booting pod means.

    ``None`` (Runpod says no such pod) → vanished. ERROR, EXITED or TERMINATED → dead.
    RUNNING with a direct SSH endpoint → try SSH there. Anything else → wait. An endpoint
    that is unsafe to use (``unsafe_endpoint`` names why) is waited out like a missing one.
    """
    if pod is None:
        return Boot(
            BootKind.VANISHED, "the pod vanished while starting (Runpod no longer knows it)"
        )
    if pod.status in _DEAD:
        return Boot(BootKind.DEAD, f"the pod ended in {pod.status.value} while starting")
    if unsafe_endpoint is not None:
        return Boot(BootKind.WAIT, unsafe_endpoint)
    if pod.status is PodStatus.RUNNING and pod.ssh_direct is not None:
        return Boot(BootKind.ENDPOINT, endpoint=pod.ssh_direct)
    return Boot(BootKind.WAIT)


class VerdictKind(StrEnum):
    """What the watchdog's files on the pod say."""

    PENDING = "pending"
    READY = "ready"
    REFUSED = "refused"


@dataclass(frozen=True)
class Verdict:
    """The pod's verdict: ready, refused (with why), or not written yet."""

    kind: VerdictKind
    reason: str = ""


def read_verdict(verdict: bytes, bootstrap_failed: bytes) -> Verdict:
    """Judge ``.pod/watchdog`` and ``.pod/bootstrap_failed`` (empty when absent).

    A failed bootstrap wins. Then ``ready`` is ready, ``failed <reason>`` is a refusal,
    nothing yet is pending, and anything else is a refusal too: overbrainer trains only on
    a pod whose watchdog said ``ready``.
    """
    failed = _text(bootstrap_failed)
    if failed:
        return Verdict(VerdictKind.REFUSED, f"the pod's bootstrap failed: {failed}")
    said = _text(verdict)
    if not said:
        return Verdict(VerdictKind.PENDING)
    if said == "ready":
        return Verdict(VerdictKind.READY, "ready")
    if said.startswith("failed"):
        reason = said[len("failed") :].strip() or "no reason given"
        return Verdict(VerdictKind.REFUSED, f"the pod's watchdog cannot guard it: {reason}")
    return Verdict(VerdictKind.REFUSED, f"the pod's watchdog wrote an unknown verdict {said!r}")


def _text(data: bytes) -> str:
    return one_line(data.decode("utf-8", "replace").strip(), 300)


# --- spend -----------------------------------------------------------------------------


def connect_again_within(
    started_at: datetime | None, now: datetime, ssh_within: float, floor: float
) -> float:
    """How long to keep trying to open SSH to a running pod that refuses it (seconds): a
    pod that just started or restarted may refuse for minutes while it boots (its image
    pulling, its sshd not up), as long as a booting pod is given (``ssh_within`` from its
    start, on Runpod's clock ``now``); a pod up for longer, ``floor`` (a moment's refusal)."""
    if started_at is None:
        return floor
    left = ssh_within - (now - started_at).total_seconds()
    return max(floor, min(ssh_within, left))


def uptime_and_spend(
    created_at: str | None, now: datetime, rate: float | None
) -> tuple[float | None, float | None]:
    """A deleted pod's uptime (seconds since its creation) and spend (rate × uptime).

    Either is None when what it needs is unknown.
    """
    start = parse_utc(created_at)
    if start is None:
        return None, None
    uptime = max(0.0, (now.astimezone(UTC) - start).total_seconds())
    if rate is None or not math.isfinite(rate):
        return uptime, None
    return uptime, round(rate * uptime / 3600.0, 6)


# --- texts -----------------------------------------------------------------------------


def attempt_line(attempt: Mapping[str, Any]) -> str:
    """``attempt 2 (NVIDIA A40): no capacity: <Runpod's detail>``."""
    result = str(attempt.get("result") or "unresolved").replace("_", " ")
    detail = str(attempt.get("detail") or "")
    pod = attempt.get("pod_id")
    where = f" pod {pod}" if pod else ""
    said = f": {detail}" if detail else ""
    return f"attempt {attempt.get('n')} ({attempt.get('gpu_type')}): {result}{where}{said}"


def nothing_placed(run_id: str, attempts: Sequence[Mapping[str, Any]], *, waited: str = "") -> str:
    """The error of a walk that tried every GPU type without a ready pod; after a wait for
    capacity, ``waited`` says how long and ``attempts`` are the last walk's."""
    lines = "; ".join(attempt_line(a) for a in attempts) or "no attempt was made"
    if waited:
        return (
            f"run {run_id} got no pod: {waited}; the last time: {lines}. Add other "
            "gpu_types or data_center_ids to the target in overbrainer.toml, or wait "
            "longer (wait_for_capacity), then run `overbrainer train` again"
        )
    return (
        f"run {run_id} got no pod: {lines}. Add other gpu_types or data_center_ids to the "
        "target in overbrainer.toml, then run `overbrainer train` again"
    )


def interrupted_before_job(state: RunLog) -> str:
    """The error of a run interrupted before its job started, saying from its log whether
    a pod of it may be left."""
    run_id = state.run.run_id
    if state.pod.may_bill():
        return (
            f"interrupted: run {run_id} stopped before its job started, but a pod of it may "
            "be left: check `overbrainer pod ls`"
        )
    return f"interrupted: run {run_id} stopped before its job started; it has no pod left"


def rate_text(rate: float | None) -> str:
    """`` ($0.53/h)``, or nothing when the rate is unknown."""
    return f" (${rate:.2f}/h)" if rate is not None else ""
