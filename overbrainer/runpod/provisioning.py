"""Provisioning's walk as a pure state machine: events in, commands out; no I/O, no clock,
no trio.

:class:`Walk` decides what the walk does next — which GPU type to try, whether to send a
create again, look for the pod of an ambiguous create, wait out a rate limit, settle a
created pod, delete it, or end — from what the driver
(:mod:`overbrainer.targets.runpod.provision`) saw happen. The driver performs each command
(the create, the listing, the waits, the deletes, the log's appends) and feeds back what
came of it. The policy is all here, so it is tested as tables of events and commands:

- 400 and 403 concern this GPU type only: the next one is tried; 429 waits ``Retry-After``
  and sends the same type again, at most ``rate_limited`` times and never for longer than
  ``max_retry_after``; an ambiguous create (no clear answer) is reconciled before anything
  is sent again, and a create that left no pod is sent again at most ``resends`` times;
  anything else (401, 402, 422, a create that never left) stops the walk.
- A created pod is settled; one that is not ready is deleted and the next type tried, one
  that is refused is deleted and the run refused.
- A walk that tried every type with no pod ends ``nothing_placed``, unless the policy
  waits for capacity (``capacity_wait``) and some type answered "no capacity" (400): then
  it asks the time (:class:`ReadClock`), waits (:class:`AwaitCapacity`: 30 s, doubling up
  to 5 min, never past the wait's end, counted from the first walk that found none) and
  walks every type again; once the wait is over it ends ``nothing_placed``, saying how
  long it waited.
- Ctrl-C, a cancel asked through the log, another command overtaking the walk, or any
  other failure end the walk, deleting the pod it holds (``live``) if any.

Each candidate carries its own bound (``max_hours``, shortened by the cost cap); the
commands carry the candidate, so a create is always sent with its candidate's bound.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from overbrainer.events import types as ev
from overbrainer.runpod.candidates import Candidate
from overbrainer.runpod.decide import CreateDecision, Step

__all__ = [
    "AwaitCapacity",
    "Booted",
    "Cancelled",
    "Clock",
    "Command",
    "CreateFailed",
    "Created",
    "DeletePod",
    "Done",
    "Event",
    "Failed",
    "Interrupted",
    "NotFound",
    "Outcome",
    "Overtaken",
    "Policy",
    "ReadClock",
    "Reconcile",
    "ReconcileFailed",
    "Record",
    "Resolve",
    "SendCreate",
    "Settle",
    "Wait",
    "Waited",
    "Walk",
]


# --- commands (what the driver does) ----------------------------------------------------


@dataclass(frozen=True)
class SendCreate:
    """Record ``AttemptSent`` and send a create on ``candidate`` (with its bound);
    ``resend`` counts the creates of this candidate sent before (0: the first)."""

    candidate: Candidate
    resend: int = 0


@dataclass(frozen=True)
class Reconcile:
    """Look for the pod of the ambiguous create just sent (``detail`` says why)."""

    detail: str


@dataclass(frozen=True)
class Wait:
    """Wait ``seconds`` (a race Ctrl-C ends), ``why`` being the stage a user reads."""

    seconds: float
    why: str


@dataclass(frozen=True)
class ReadClock:
    """Tell the machine the time (:class:`Clock`): every type was tried and none had
    capacity, and the machine waits for some."""


@dataclass(frozen=True)
class AwaitCapacity:
    """No type had capacity: record it, show what is awaited until ``until`` and wait
    ``seconds`` (a race Ctrl-C ends), then feed :class:`Waited` for the next walk.

    ``until`` and ``since`` (when the wait began) are on the clock :class:`Clock` gave;
    ``walks`` counts the walks that found no capacity so far."""

    seconds: float
    until: float
    since: float
    walks: int


@dataclass(frozen=True)
class Settle:
    """Wait for the created pod ``pod_id`` to be ready."""

    pod_id: str


@dataclass(frozen=True)
class Resolve:
    """Record the outcome of the current attempt (``AttemptResolved``)."""

    result: str
    detail: str
    pod_id: str | None = None


@dataclass(frozen=True)
class Record:
    """Record how the walk is ending before its pod is deleted: a Ctrl-C noted at
    ``stage`` (``interrupted``) or a cancel asked through the log taken (``cancel_taken``)."""

    what: Literal["interrupted", "cancel_taken"]
    stage: str


@dataclass(frozen=True)
class DeletePod:
    """Delete pod ``pod_id`` with ``reason``. ``strict``: a delete that cannot be confirmed
    stops the walk (no pod is created while another may bill); else it is only warned of,
    the walk ending anyway."""

    pod_id: str
    reason: ev.DeleteReason
    strict: bool = False


@dataclass(frozen=True)
class Outcome:
    """How the walk ended.

    ``kind``: ``ready`` (``pod_id`` is the pod), ``nothing_placed`` (every type tried;
    ``waited``: the seconds waited for capacity, ``walks`` the walks over every type made
    when it waited, else 0),
    ``stopped`` (``decision`` says why), ``rate_limited`` (``wait`` last asked),
    ``unknown`` (an ambiguous create that could not be looked up: ``detail``),
    ``refused`` (``pod_id`` refused, ``detail`` why), ``interrupted``, ``cancelled`` (at
    ``stage``), ``overtaken``, ``failed`` (the driver's own error, raised again).
    """

    kind: Literal[
        "ready",
        "nothing_placed",
        "stopped",
        "rate_limited",
        "unknown",
        "refused",
        "interrupted",
        "cancelled",
        "overtaken",
        "failed",
    ]
    pod_id: str | None = None
    detail: str = ""
    stage: str = ""
    wait: float = 0.0
    decision: CreateDecision | None = None
    deleted: str | None = None
    waited: float = 0.0
    walks: int = 0


@dataclass(frozen=True)
class Done:
    """The walk is over; nothing more is sent."""

    outcome: Outcome


Command = (
    SendCreate
    | Reconcile
    | Wait
    | ReadClock
    | AwaitCapacity
    | Settle
    | Resolve
    | Record
    | DeletePod
    | Done
)


# --- events (what the driver saw) -------------------------------------------------------


@dataclass(frozen=True)
class Created:
    """The create gave pod ``pod_id``, or the reconcile adopted it (recorded by the
    driver)."""

    pod_id: str


@dataclass(frozen=True)
class CreateFailed:
    """The create failed as ``decision`` says
    (:func:`~overbrainer.runpod.decide.after_create_error`)."""

    decision: CreateDecision


@dataclass(frozen=True)
class NotFound:
    """The reconcile found no pod of the ambiguous create (the driver resolved the attempt
    ``not_created``)."""


@dataclass(frozen=True)
class ReconcileFailed:
    """The pods could not be listed to find out whether the ambiguous create made one."""

    detail: str


@dataclass(frozen=True)
class Booted:
    """How settling the pod ended: ``ready``, ``refused``, ``not_ready``, ``vanished`` or
    ``dead``, with why."""

    kind: str
    detail: str = ""


@dataclass(frozen=True)
class Waited:
    """A :class:`Wait` ended."""


@dataclass(frozen=True)
class Clock:
    """The time, in seconds on the driver's monotonic clock (after :class:`ReadClock`)."""

    now: float


@dataclass(frozen=True)
class Interrupted:
    """Ctrl-C was noted at ``stage``."""

    stage: str


@dataclass(frozen=True)
class Cancelled:
    """A cancel asked through the log was found at ``stage``."""

    stage: str


@dataclass(frozen=True)
class Overtaken:
    """The log says another command ended the run or is deleting the walk's pod."""


@dataclass(frozen=True)
class Failed:
    """Anything else went wrong in the driver (it raises its error once the walk's pod is
    deleted)."""


Event = (
    Created
    | CreateFailed
    | NotFound
    | ReconcileFailed
    | Booted
    | Waited
    | Clock
    | Interrupted
    | Cancelled
    | Overtaken
    | Failed
)


@dataclass(frozen=True)
class Policy:
    """How often the walk sends again: ``resends`` after ambiguous creates that left no
    pod, ``rate_limited`` after 429s, never waiting longer than ``max_retry_after``; how
    long it waits for capacity when no type has any (``capacity_wait`` seconds, 0: not at
    all), walking again after ``capacity_first`` seconds, then twice as long each time up
    to ``capacity_cap``."""

    resends: int = 2
    rate_limited: int = 5
    max_retry_after: float = 300.0
    capacity_wait: float = 0.0
    capacity_first: float = 30.0
    capacity_cap: float = 300.0


_RATE_LIMIT = "waiting out Runpod's rate limit"


class Walk:
    """One provisioning walk over ``candidates`` (tried in order); see the module."""

    def __init__(self, candidates: Sequence[Candidate], policy: Policy = Policy()) -> None:
        if not candidates:
            raise ValueError("a walk needs at least one candidate")
        self.candidates = tuple(candidates)
        self.policy = policy
        self.index = 0
        self.resends = 0  # ambiguous creates of this candidate that left no pod
        self.limited = 0  # 429s on this candidate
        # The pod this walk created and has not handed to a delete yet: on any way out
        # other than success, it is deleted.
        self.live: str | None = None
        self.done = False
        # Waiting for capacity: whether this walk over the types met a "no capacity"
        # answer, when the wait began and ends (None: not begun), the next pause, the walks
        # over every type made, and whether the Waited expected ends a wait for capacity.
        self.no_capacity = False
        self.since: float | None = None
        self.until = 0.0
        self.pause = policy.capacity_first
        self.walks = 0
        self.awaiting = False

    @property
    def candidate(self) -> Candidate:
        """The candidate being tried."""
        return self.candidates[self.index]

    def start(self) -> list[Command]:
        """The first commands: send a create on the first candidate."""
        return [SendCreate(self.candidate)]

    def send(self, event: Event) -> list[Command]:
        """What to do after ``event``; the list ends with :class:`Done` when the walk is
        over (no event is taken after that)."""
        if self.done:
            raise RuntimeError("the walk is over")
        commands = self._after(event)
        if commands and isinstance(commands[-1], Done):
            self.done = True
        return commands

    def _after(self, event: Event) -> list[Command]:
        match event:
            case Created(pod_id):
                self.live = pod_id
                return [Settle(pod_id)]
            case CreateFailed(decision):
                return self._create_failed(decision)
            case NotFound():
                self.resends += 1
                if self.resends > self.policy.resends:
                    return self._next()
                return [SendCreate(self.candidate, self.resends + self.limited)]
            case ReconcileFailed(detail):
                return [Done(Outcome("unknown", detail=detail))]
            case Booted(kind, detail):
                return self._booted(kind, detail)
            case Waited():
                if self.awaiting:
                    return self._walk_again()
                return [SendCreate(self.candidate, self.resends + self.limited)]
            case Clock(now):
                return self._capacity(now)
            case Interrupted(stage):
                return [
                    Record("interrupted", stage),
                    *self._release("interrupted"),
                    Done(Outcome("interrupted", stage=stage, deleted=self._let_go())),
                ]
            case Cancelled(stage):
                return [
                    Record("cancel_taken", stage),
                    *self._release("cancelled"),
                    Done(Outcome("cancelled", stage=stage, deleted=self._let_go())),
                ]
            case Overtaken():
                return [
                    *self._release("failed"),
                    Done(Outcome("overtaken", deleted=self._let_go())),
                ]
            case Failed():
                return [*self._release("failed"), Done(Outcome("failed", deleted=self._let_go()))]
        raise TypeError(f"not a walk event: {event!r}")

    def _create_failed(self, decision: CreateDecision) -> list[Command]:
        if decision.step is Step.RECONCILE:
            said = decision.text
            if decision.detail and decision.detail != decision.text:
                said = f"{decision.text} ({decision.detail})"
            return [Reconcile(said)]
        resolve = Resolve(decision.result, decision.detail)
        if decision.step is Step.NEXT_TYPE:
            if decision.result == "no_capacity":
                self.no_capacity = True
            return [resolve, *self._next()]
        if decision.step is Step.STOP:
            return [resolve, Done(Outcome("stopped", decision=decision))]
        self.limited += 1
        if self.limited > self.policy.rate_limited or decision.wait > self.policy.max_retry_after:
            return [resolve, Done(Outcome("rate_limited", wait=decision.wait))]
        return [resolve, Wait(decision.wait, _RATE_LIMIT)]

    def _booted(self, kind: str, detail: str) -> list[Command]:
        pod_id = self.live
        if pod_id is None:
            raise RuntimeError("a pod settled that the walk does not hold")
        if kind == "ready":
            self.live = None  # handed to the caller
            return [Done(Outcome("ready", pod_id=pod_id))]
        self.live = None  # handed to the delete: a failed one is not retried on the way out
        reason: ev.DeleteReason = "refused" if kind == "refused" else "not_ready"
        commands: list[Command] = [
            Resolve(kind, detail, pod_id),
            DeletePod(pod_id, reason, strict=True),
        ]
        if kind == "refused":
            return [*commands, Done(Outcome("refused", pod_id=pod_id, detail=detail))]
        return [*commands, *self._next()]

    def _next(self) -> list[Command]:
        """The next candidate; when none is left, the wait for capacity (if the policy
        waits and a type had none) or the end of the walk."""
        if self.index + 1 >= len(self.candidates):
            # Once waiting, the time tells how long the wait was, whatever ends it.
            if self.policy.capacity_wait > 0 and (self.no_capacity or self.since is not None):
                return [ReadClock()]
            return [Done(self._nothing_placed(0.0))]
        self.index += 1
        self.resends = self.limited = 0
        return [SendCreate(self.candidate)]

    def _capacity(self, now: float) -> list[Command]:
        """Every type was tried: wait (backing off, never past the wait's end) if some had
        no capacity, else or once the wait is over, end."""
        if self.since is None:
            self.since, self.until = now, now + self.policy.capacity_wait
        self.walks += 1
        left = self.until - now
        if left <= 0 or not self.no_capacity:
            return [Done(self._nothing_placed(now - self.since))]
        seconds = min(self.pause, left)
        self.pause = min(self.pause * 2, self.policy.capacity_cap)
        self.awaiting = True
        return [AwaitCapacity(seconds, self.until, self.since, self.walks)]

    def _walk_again(self) -> list[Command]:
        """After a wait for capacity: every type again, from the first."""
        self.awaiting = False
        self.index = self.resends = self.limited = 0
        self.no_capacity = False
        return [SendCreate(self.candidate)]

    def _nothing_placed(self, waited: float) -> Outcome:
        return Outcome("nothing_placed", waited=waited, walks=self.walks)

    def _release(self, reason: ev.DeleteReason) -> list[Command]:
        return [] if self.live is None else [DeletePod(self.live, reason)]

    def _let_go(self) -> str | None:
        """The pod being deleted on the way out (None: none), no longer held."""
        pod_id, self.live = self.live, None
        return pod_id
