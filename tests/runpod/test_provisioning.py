"""Provisioning's walk as a table: each row feeds events to the pure machine and checks the
commands it gives back, with no I/O, clock or trio."""

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from overbrainer.runpod.candidates import Candidate
from overbrainer.runpod.client import AmbiguousCreate, CreateNotSent
from overbrainer.runpod.client import CreateFailed as ClientCreateFailed
from overbrainer.runpod.decide import after_create_error
from overbrainer.runpod.provisioning import (
    AwaitCapacity,
    Booted,
    Cancelled,
    Clock,
    Command,
    Created,
    CreateFailed,
    DeletePod,
    Done,
    Event,
    Failed,
    Interrupted,
    NotFound,
    Outcome,
    Overtaken,
    Policy,
    ReadClock,
    Reconcile,
    ReconcileFailed,
    Record,
    Resolve,
    SendCreate,
    Settle,
    Wait,
    Waited,
    Walk,
)

A = Candidate("A40", max_hours=2.0, price_per_gpu=0.4)
B = Candidate("A100", max_hours=1.5, price_per_gpu=1.2, shortened=True)
C = Candidate("H100", max_hours=1.0, price_per_gpu=2.5)


def status(code: int, *, retry_after: float | None = None) -> CreateFailed:
    """A create Runpod answered with ``code``, as the client raises it."""
    error = ClientCreateFailed(f"said {code}", status=code, detail="", retry_after=retry_after)
    return CreateFailed(after_create_error(error))


AMBIGUOUS = CreateFailed(after_create_error(AmbiguousCreate("no clear answer", detail="reset")))
NOT_SENT = CreateFailed(
    after_create_error(CreateNotSent("Runpod could not be reached", reason="dns"))
)


def decision_of(event: CreateFailed) -> Outcome:
    return Outcome("stopped", decision=event.decision)


@dataclass(frozen=True)
class Row:
    events: Sequence[Event]
    commands: Sequence[Command]  # what the last event gives
    candidates: Sequence[Candidate] = (A, B)
    policy: Policy = field(default_factory=Policy)


WAITS = Policy(capacity_wait=1800.0)
ONE_WALK = (status(400), status(400))  # both candidates (A, B) without capacity

ROWS = {
    "the walk starts with a create on the first candidate": Row([], [SendCreate(A)]),
    "a created pod is settled": Row([Created("p1")], [Settle("p1")]),
    "a ready pod ends the walk with it": Row(
        [Created("p1"), Booted("ready")], [Done(Outcome("ready", pod_id="p1"))]
    ),
    "400 (no capacity) moves to the next candidate": Row(
        [status(400)], [Resolve("no_capacity", "said 400"), SendCreate(B)]
    ),
    "403 (no access) moves to the next candidate": Row(
        [status(403)], [Resolve("no_access", "said 403"), SendCreate(B)]
    ),
    "400 on the last candidate places nothing": Row(
        [status(400), status(400)],
        [Resolve("no_capacity", "said 400"), Done(Outcome("nothing_placed"))],
    ),
    "401 stops at once": Row(
        [status(401)], [Resolve("bad_api_key", "said 401"), Done(decision_of(status(401)))]
    ),
    "402 stops at once": Row(
        [status(402)],
        [Resolve("insufficient_balance", "said 402"), Done(decision_of(status(402)))],
    ),
    "422 stops at once": Row(
        [status(422)], [Resolve("invalid_request", "said 422"), Done(decision_of(status(422)))]
    ),
    "a create never sent stops without looking for a pod": Row(
        [NOT_SENT],
        [
            Resolve("not_sent", "Runpod could not be reached"),
            Done(Outcome("stopped", decision=NOT_SENT.decision)),
        ],
    ),
    "429 waits Retry-After": Row(
        [status(429, retry_after=42.0)],
        [Resolve("rate_limited", "said 429"), Wait(42.0, "waiting out Runpod's rate limit")],
    ),
    "429 without Retry-After waits 10 s": Row(
        [status(429)],
        [Resolve("rate_limited", "said 429"), Wait(10.0, "waiting out Runpod's rate limit")],
    ),
    "after a rate limit's wait the same candidate is sent again": Row(
        [status(429), Waited()], [SendCreate(A, resend=1)]
    ),
    "a rate limit asking a longer wait than allowed stops": Row(
        [status(429, retry_after=301.0)],
        [Resolve("rate_limited", "said 429"), Done(Outcome("rate_limited", wait=301.0))],
    ),
    "a rate limit that does not end stops after the allowed retries": Row(
        [status(429), Waited(), status(429), Waited(), status(429)],
        [Resolve("rate_limited", "said 429"), Done(Outcome("rate_limited", wait=10.0))],
        policy=Policy(rate_limited=2),
    ),
    "the rate-limit count starts again on the next candidate": Row(
        [status(429), Waited(), status(429), Waited(), status(400), status(429)],
        [Resolve("rate_limited", "said 429"), Wait(10.0, "waiting out Runpod's rate limit")],
        policy=Policy(rate_limited=2),
    ),
    "an ambiguous create is reconciled before anything is sent again": Row(
        [AMBIGUOUS], [Reconcile("no clear answer (reset)")]
    ),
    "an ambiguous create whose pod appeared settles it": Row(
        [AMBIGUOUS, Created("p1")], [Settle("p1")]
    ),
    "an ambiguous create that left no pod is sent again": Row(
        [AMBIGUOUS, NotFound()], [SendCreate(A, resend=1)]
    ),
    "ambiguous creates past the allowed resends move to the next candidate": Row(
        [AMBIGUOUS, NotFound(), AMBIGUOUS, NotFound(), AMBIGUOUS, NotFound()],
        [SendCreate(B)],
    ),
    "an ambiguous create that cannot be looked up stops": Row(
        [AMBIGUOUS, ReconcileFailed("no listing")],
        [Done(Outcome("unknown", detail="no listing"))],
    ),
    "a pod not ready in time is deleted and the next candidate tried": Row(
        [Created("p1"), Booted("not_ready", "no SSH")],
        [
            Resolve("not_ready", "no SSH", "p1"),
            DeletePod("p1", "not_ready", strict=True),
            SendCreate(B),
        ],
    ),
    "a vanished pod is deleted and the next candidate tried": Row(
        [Created("p1"), Booted("vanished", "gone")],
        [
            Resolve("vanished", "gone", "p1"),
            DeletePod("p1", "not_ready", strict=True),
            SendCreate(B),
        ],
    ),
    "a dead pod on the last candidate is deleted and nothing is placed": Row(
        [Created("p1"), Booted("dead", "ERROR")],
        [
            Resolve("dead", "ERROR", "p1"),
            DeletePod("p1", "not_ready", strict=True),
            Done(Outcome("nothing_placed")),
        ],
        candidates=[A],
    ),
    "a refused pod is deleted and the run refused": Row(
        [Created("p1"), Booted("refused", "no watchdog")],
        [
            Resolve("refused", "no watchdog", "p1"),
            DeletePod("p1", "refused", strict=True),
            Done(Outcome("refused", pod_id="p1", detail="no watchdog")),
        ],
    ),
    "Ctrl-C with no pod records it and ends": Row(
        [Interrupted("creating a pod")],
        [
            Record("interrupted", "creating a pod"),
            Done(Outcome("interrupted", stage="creating a pod")),
        ],
    ),
    "Ctrl-C while a pod boots deletes it": Row(
        [Created("p1"), Interrupted("booting")],
        [
            Record("interrupted", "booting"),
            DeletePod("p1", "interrupted"),
            Done(Outcome("interrupted", stage="booting", deleted="p1")),
        ],
    ),
    "Ctrl-C during a rate limit's wait sends nothing more": Row(
        [status(429), Interrupted("waiting")],
        [Record("interrupted", "waiting"), Done(Outcome("interrupted", stage="waiting"))],
    ),
    "a cancel while a pod boots takes it and deletes the pod": Row(
        [Created("p1"), Cancelled("booting")],
        [
            Record("cancel_taken", "booting"),
            DeletePod("p1", "cancelled"),
            Done(Outcome("cancelled", stage="booting", deleted="p1")),
        ],
    ),
    "overtaken while a pod boots deletes it as failed": Row(
        [Created("p1"), Overtaken()],
        [DeletePod("p1", "failed"), Done(Outcome("overtaken", deleted="p1"))],
    ),
    "any other failure deletes the pod held": Row(
        [Created("p1"), Failed()],
        [DeletePod("p1", "failed"), Done(Outcome("failed", deleted="p1"))],
    ),
    "a pod handed to its delete is not deleted again on the way out": Row(
        [Created("p1"), Booted("not_ready", "no SSH"), Failed()],
        [Done(Outcome("failed"))],
    ),
    "each candidate's create carries that candidate and its bound": Row(
        [status(400), status(400)],
        [Resolve("no_capacity", "said 400"), SendCreate(C)],
        candidates=[A, B, C],
    ),
    # Waiting for capacity (30 min here): the walk asks the time, waits, walks again.
    "with a wait, a walk that found no capacity asks the time": Row(
        [status(400), status(400)],
        [Resolve("no_capacity", "said 400"), ReadClock()],
        policy=WAITS,
    ),
    "the first wait for capacity is 30 s, the wait ending 30 min after": Row(
        [status(400), status(400), Clock(100.0)],
        [AwaitCapacity(30.0, until=1900.0, since=100.0, walks=1)],
        policy=WAITS,
    ),
    "after a wait for capacity every type is tried again from the first": Row(
        [status(400), status(400), Clock(100.0), Waited()], [SendCreate(A)], policy=WAITS
    ),
    "the waits for capacity double": Row(
        [*ONE_WALK, Clock(100.0), Waited(), *ONE_WALK, Clock(131.0)],
        [AwaitCapacity(60.0, until=1900.0, since=100.0, walks=2)],
        policy=WAITS,
    ),
    "the waits for capacity stop doubling at 5 min": Row(
        [
            *ONE_WALK,
            *[
                e
                for now in (0.0, 30.0, 90.0, 210.0, 450.0)
                for e in (Clock(now), Waited(), *ONE_WALK)
            ],
            Clock(750.0),
        ],
        [AwaitCapacity(300.0, until=1800.0, since=0.0, walks=6)],
        policy=WAITS,
    ),
    "a wait for capacity never goes past the wait's end": Row(
        [*ONE_WALK, Clock(0.0), Waited(), *ONE_WALK, Clock(1790.0)],
        [AwaitCapacity(10.0, until=1800.0, since=0.0, walks=2)],
        policy=WAITS,
    ),
    "once the wait for capacity is over the walk places nothing, saying how long it waited": Row(
        [*ONE_WALK, Clock(0.0), Waited(), *ONE_WALK, Clock(1801.0)],
        [Done(Outcome("nothing_placed", waited=1801.0, walks=2))],
        policy=WAITS,
    ),
    "a walk with no 'no capacity' answer does not wait": Row(
        [status(403), status(403)],
        [Resolve("no_access", "said 403"), Done(Outcome("nothing_placed"))],
        policy=WAITS,
    ),
    "a pod not ready on the last type after no capacity on the first still waits": Row(
        [status(400), Created("p1"), Booted("not_ready", "no SSH")],
        [
            Resolve("not_ready", "no SSH", "p1"),
            DeletePod("p1", "not_ready", strict=True),
            ReadClock(),
        ],
        policy=WAITS,
    ),
    "only a walk that met 'no capacity' waits: the next one without it ends": Row(
        [*ONE_WALK, Clock(0.0), Waited(), status(403), status(403), Clock(31.0)],
        [Done(Outcome("nothing_placed", waited=31.0, walks=2))],
        policy=WAITS,
    ),
    "Ctrl-C during a wait for capacity ends the walk with no pod": Row(
        [*ONE_WALK, Clock(0.0), Interrupted("waiting for capacity")],
        [
            Record("interrupted", "waiting for capacity"),
            Done(Outcome("interrupted", stage="waiting for capacity")),
        ],
        policy=WAITS,
    ),
    "a cancel during a wait for capacity is taken": Row(
        [*ONE_WALK, Clock(0.0), Cancelled("waiting for capacity")],
        [
            Record("cancel_taken", "waiting for capacity"),
            Done(Outcome("cancelled", stage="waiting for capacity")),
        ],
        policy=WAITS,
    ),
    "a rate limit after a wait for capacity is waited out as before": Row(
        [*ONE_WALK, Clock(0.0), Waited(), status(429), Waited()],
        [SendCreate(A, resend=1)],
        policy=WAITS,
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_walk_answers_each_event_with_its_commands(row: Row) -> None:
    walk = Walk(row.candidates, row.policy)
    given = walk.start()
    for event in row.events:
        given = walk.send(event)
    assert given == list(row.commands)


def test_a_walk_that_ended_takes_no_further_event() -> None:
    walk = Walk([A])
    walk.start()
    walk.send(status(402))
    with pytest.raises(RuntimeError):
        walk.send(Waited())


def test_a_walk_needs_a_candidate() -> None:
    with pytest.raises(ValueError):
        Walk([])


def test_a_send_carries_the_candidates_cost_cap_bound() -> None:
    walk = Walk([A, B])
    walk.start()
    (_, send) = walk.send(status(400))
    assert isinstance(send, SendCreate)
    assert (send.candidate.max_hours, send.candidate.shortened) == (1.5, True)
