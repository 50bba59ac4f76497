"""The cost cap's pure decisions, as tables."""

from datetime import datetime, timedelta

import pytest

from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import PodView, RunLog, fold
from overbrainer.events.types import PodState
from overbrainer.runpod import cost_cap
from overbrainer.runpod.cost_cap import Bound
from overbrainer.utc import parse_utc

CREATED = "2026-01-01T10:00:00Z"
T0 = parse_utc(CREATED)
assert T0 is not None


def _pod(
    cap: float | None = 1.0,
    rate: float | None = 2.0,
    *,
    keep: bool = False,
    deadline: str | None = "2026-01-01T12:00:00Z",
    created: str | None = CREATED,
) -> PodView:
    pod = PodView(keep=keep, pod_id="p1", cost_per_hour=rate, created_at=created, deadline=deadline)
    pod.attempts = [
        {"n": 1, "pod_id": None, "max_cost_usd": 5.0},
        {"n": 2, "pod_id": "p1", "max_cost_usd": cap},
    ]
    return pod


@pytest.mark.parametrize(
    ("cap", "rate", "seconds"),
    [
        (1.0, 2.0, 1800.0),  # $1 at $2/h: 30 min
        (1.0, 3.0, 1200.0),
        (0.01, 7.0, 5.142),  # rounded down to the millisecond, never up
        (10.0, 0.44, 81818.181),
        (1.0, 0.0, None),  # no rate: no bound here (the watchdog decides)
        (1.0, float("nan"), None),
        (1.0, -2.0, None),
    ],
)
def test_cap_seconds(cap: float, rate: float, seconds: float | None) -> None:
    assert cost_cap.cap_seconds(cap, rate) == seconds


@pytest.mark.parametrize(
    ("pod", "near", "until"),
    [
        # 30 min: near at 28.5 min; halfway from there to the cap, later than 5 min before.
        (_pod(), 1710, 1755),
        # 10 h: near at 9.5 h; following stops 5 min before the cap.
        (_pod(20.0), 34200, 36000 - 300),
        (_pod(None), None, None),  # no cap
        (_pod(rate=None), None, None),  # no rate recorded
        (_pod(keep=True), None, None),  # a kept pod has none
        (_pod(created=None), None, None),
    ],
)
def test_when_the_cap_is_near_and_when_following_stops(
    pod: PodView, near: float | None, until: float | None
) -> None:
    def since(moment: datetime | None) -> float | None:
        return None if moment is None else (moment - T0).total_seconds()

    assert since(cost_cap.cap_at(pod, cost_cap.NEAR)) == near
    assert since(cost_cap.follow_until(pod)) == until


@pytest.mark.parametrize(
    ("pod", "bound"),
    [
        (_pod(), Bound.cost_cap),  # 28.5 min, the deadline at 2 h
        (_pod(10.0), Bound.deadline),  # 5 h, past the deadline (2 h + slack)
        (_pod(None), Bound.deadline),
        (_pod(deadline=None), Bound.cost_cap),
        (_pod(4.2), Bound.cost_cap),  # 2 h 6 min less 5 min: before 2 h + 5 min of slack
        (_pod(4.4), Bound.deadline),  # 2 h 12 min less 5 min: after it
    ],
)
def test_the_first_bound(pod: PodView, bound: Bound) -> None:
    assert cost_cap.first_bound(pod, deadline_slack=300.0) is bound


@pytest.mark.parametrize(
    ("moment", "now", "left"),
    [
        (None, T0, float("inf")),
        (T0 + timedelta(seconds=90), T0, 90.0),
        (T0, T0 + timedelta(seconds=5), 0.0),
    ],
)
def test_seconds_until(moment: datetime | None, now: datetime, left: float) -> None:
    assert cost_cap.seconds_until(moment, now) == left


def test_the_cap_is_read_from_the_attempt_that_made_the_pod() -> None:
    assert cost_cap.max_cost(_pod(3.0)) == 3.0
    assert cost_cap.max_cost(PodView(pod_id="p1")) is None
    assert cost_cap.cap_text(_pod()) == (
        "max_cost_usd = $1.00 at $2.00/h, reached 30 min after its creation"
    )
    assert cost_cap.cap_text(_pod(rate=None)) == "its cost cap"


def _running(*more: ev.Event) -> RunLog:
    events: list[ev.Event] = [
        ev.RunCreated(run_id="r", target="gpu", kind="runpod", remote_dir="x", settings_digest="d"),
        ev.AttemptSent(n=1, pod_name="overbrainer-r-1", gpu_type="A40", max_cost_usd=1.0),
        ev.AttemptResolved(n=1, result="created", pod_id="p1"),
        ev.PodCreated(pod_id="p1", gpu_type="A40", cost_per_hour=2.0, created_at=CREATED),
        ev.JobStarted(job_dir="x", pid=1),
        ev.PodJobRunning(pod_id="p1"),
        *more,
    ]
    return fold((e, CREATED) for e in events)


NEAR = ev.CostCapNear(pod_id="p1", max_cost_usd=1.0, cost_per_hour=2.0)


@pytest.mark.parametrize(
    ("state", "pod_id", "events"),
    [
        (_running(), "p1", [NEAR]),
        (_running(NEAR), "p1", []),  # once
        (_running(), "other", []),  # not the run's pod
        (_running(ev.PodDeleting(pod_id="p1", reason="cost_cap")), "p1", []),
    ],
)
def test_cost_cap_near_is_recorded_once_while_the_pod_lives(
    state: RunLog, pod_id: str, events: list[ev.Event]
) -> None:
    assert decisions.cost_cap_near(state, pod_id, 1.0, 2.0) == events


def test_the_cap_recorded_with_the_attempt_and_near_fold_into_the_pod() -> None:
    state = _running(NEAR)
    assert state.pod.attempts[0]["max_cost_usd"] == 1.0
    assert state.pod.cost_cap_near and state.pod.status == PodState.job_running


@pytest.mark.parametrize(
    ("state", "names"),
    [
        (_running(), ["run.Ended", "run.NoteAdded"]),
        (_running(ev.RunEnded(state="failed", message="m")), []),
    ],
)
def test_fail_at_cost_cap(state: RunLog, names: list[str]) -> None:
    events = decisions.fail_at_cost_cap(state, "cost_cap: m", "why")
    assert [e.name for e in events] == names
    if events:
        assert events[0] == ev.RunEnded(state="failed", message="cost_cap: m")
        assert events[1] == ev.NoteAdded(note="artifacts not retrieved: why")


@pytest.mark.parametrize(
    ("pod", "minutes", "passed"),
    [
        (_pod(), 29, None),  # neither bound yet: found gone for another reason
        (_pod(), 30, Bound.cost_cap),  # $1 at $2/h: the cap at 30 min
        (_pod(), 200, Bound.cost_cap),  # both passed: the cap came first
        (_pod(cap=10.0), 121, Bound.deadline),  # the deadline (2 h) came first
        (_pod(cap=10.0), 119, None),
        (_pod(cap=None), 121, Bound.deadline),
        (_pod(cap=None, deadline=None), 1000, None),
        (_pod(rate=None), 31, None),  # no rate: no cap known here
        (_pod(keep=True), 1000, None),  # a kept pod: its watchdog keeps no bound
    ],
)
def test_the_bound_a_gone_pods_watchdog_kept(
    pod: PodView, minutes: int, passed: Bound | None
) -> None:
    assert cost_cap.bound_passed(pod, T0 + timedelta(minutes=minutes)) == passed


@pytest.mark.parametrize(
    ("bound", "by", "words"),
    [
        (None, "found_gone", "pod p1 no longer exists; the job went with it"),
        ("cost_cap", "watchdog", "pod p1 reached its cost cap and its watchdog deleted it"),
        ("deadline", "watchdog", "pod p1 reached its deadline and its watchdog deleted it"),
    ],
)
def test_a_pod_found_gone_is_recorded_with_the_bound_its_watchdog_kept(
    bound: str | None, by: str, words: str
) -> None:
    state = RunLog()
    state.run.state = ev.RunState.running
    state.pod.pod_id = "p1"
    events = decisions.pod_gone(state, "p1", bound)
    deleted, ended = events[0], events[1]
    assert isinstance(deleted, ev.PodDeleted) and (deleted.by, deleted.reason) == (by, bound)
    assert isinstance(ended, ev.RunEnded) and ended.message is not None
    assert ended.message.startswith(words)
