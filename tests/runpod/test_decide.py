"""Provisioning's pure decisions: create errors, ambiguous creates, a booting pod, the
watchdog's verdict, spend and the texts a user reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.runpod import decide
from overbrainer.runpod.client import AmbiguousCreate, CreateFailed
from overbrainer.runpod.decide import BootKind, Step, VerdictKind
from overbrainer.runpod.models import PodStatus, parse_pod
from overbrainer.runpod.pod_scripts import RUN_MARKER

RUN = "20260101-100000-abcd"
T0 = datetime(2026, 1, 1, 10, tzinfo=UTC)


def pod(**fields: Any) -> Any:
    data: dict[str, Any] = {"id": "p1", "name": f"overbrainer-{RUN}-1", "status": "RUNNING"}
    data.update(fields)
    return parse_pod(data)


# --- create errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "step", "result"),
    [
        (400, Step.NEXT_TYPE, "no_capacity"),
        (403, Step.NEXT_TYPE, "no_access"),
        (402, Step.STOP, "insufficient_balance"),
        (422, Step.STOP, "invalid_request"),
        (401, Step.STOP, "bad_api_key"),
        (404, Step.STOP, "not_found"),
        (418, Step.STOP, "refused"),
    ],
)
def test_what_a_definite_create_error_means(status: int, step: Step, result: str) -> None:
    choice = decide.after_create_error(
        CreateFailed("fixed text", status=status, detail="Runpod's words")
    )
    assert (choice.step, choice.result) == (step, result)
    assert choice.detail == "Runpod's words" and choice.text == "fixed text"


def test_a_create_error_without_detail_keeps_the_fixed_text() -> None:
    choice = decide.after_create_error(CreateFailed("fixed text", status=400))
    assert choice.detail == "fixed text"


def test_429_waits_what_runpod_asked() -> None:
    choice = decide.after_create_error(CreateFailed("slow down", status=429, retry_after=42.0))
    assert (choice.step, choice.wait, choice.result) == (Step.RETRY, 42.0, "rate_limited")
    default = decide.after_create_error(CreateFailed("slow down", status=429))
    assert default.wait == 10.0


@pytest.mark.parametrize("status", [None, 408, 500, 503, 201])
def test_an_ambiguous_create_is_reconciled(status: int | None) -> None:
    choice = decide.after_create_error(AmbiguousCreate("unknown", status=status))
    assert choice.step is Step.RECONCILE and choice.result == "ambiguous"


# --- ambiguous creates -------------------------------------------------------------------


def test_reconcile_adopts_the_oldest_pod_of_this_attempt_and_drops_the_rest() -> None:
    mine = {RUN_MARKER: RUN}
    name = f"overbrainer-{RUN}-2"
    pods = [
        pod(id="late", name=name, env=mine, createdAt="2026-01-01T10:00:09Z"),
        pod(id="first", name=name, env=mine, createdAt="2026-01-01T10:00:01Z"),
        pod(id="earlier", name=f"overbrainer-{RUN}-1", env=mine),
        pod(id="gone", name=f"overbrainer-{RUN}-1", env=mine),
        pod(id="other-run", name=name, env={RUN_MARKER: "20260101-100000-ffff"}),
        pod(id="no-marker", name=name),
    ]
    found = decide.reconcile(pods, RUN, name, {"gone": "deleted", "earlier": "stray"})
    assert found.adopt is not None and found.adopt.id == "first"
    assert sorted(p.id for p in found.duplicates) == ["earlier", "late"]


def test_reconcile_with_no_pod_of_this_attempt_adopts_nothing() -> None:
    pods = [pod(id="x", name=f"overbrainer-{RUN}-1", env={RUN_MARKER: RUN})]
    found = decide.reconcile(pods, RUN, f"overbrainer-{RUN}-2", {})
    assert found.adopt is None and [p.id for p in found.duplicates] == ["x"]
    assert decide.reconcile([], RUN, "n", {}) == decide.Reconciled(None, ())


# --- a booting pod -----------------------------------------------------------------------


def test_observe_a_booting_pod() -> None:
    direct = {"direct": {"host": "203.0.113.7", "port": 22022, "username": "root"}}
    assert decide.observe(None).kind is BootKind.VANISHED
    for status in ("ERROR", "EXITED", "TERMINATED"):
        seen = decide.observe(pod(status=status))
        assert seen.kind is BootKind.DEAD and status in seen.detail
    assert decide.observe(pod(status="STARTING", ssh=direct)).kind is BootKind.WAIT
    assert decide.observe(pod(status="RUNNING", ssh={"direct": None})).kind is BootKind.WAIT
    assert decide.observe(pod(status="SOMETHING_NEW")).kind is BootKind.WAIT
    ready = decide.observe(pod(ssh=direct))
    assert ready.kind is BootKind.ENDPOINT and ready.endpoint is not None
    assert (ready.endpoint.host, ready.endpoint.port) == ("203.0.113.7", 22022)
    unsafe = decide.observe(pod(ssh=direct), unsafe_endpoint="pod SSH host '-oProxy' is bad")
    assert unsafe.kind is BootKind.WAIT and "bad" in unsafe.detail
    assert pod(status="SOMETHING_NEW").status is PodStatus.UNKNOWN


@pytest.mark.parametrize(
    ("verdict", "failed", "kind", "words"),
    [
        (b"", b"", VerdictKind.PENDING, ""),
        (b"ready\n", b"", VerdictKind.READY, "ready"),
        (
            b"failed missing key: RUNPOD_API_KEY is not set\n",
            b"",
            VerdictKind.REFUSED,
            "watchdog cannot guard it: missing key: RUNPOD_API_KEY is not set",
        ),
        (b"failed\n", b"", VerdictKind.REFUSED, "no reason given"),
        (
            b"ready\n",
            b"sshd did not start\n",
            VerdictKind.REFUSED,
            "bootstrap failed: sshd did not start",
        ),
        (b"", b"no host key\n", VerdictKind.REFUSED, "bootstrap failed: no host key"),
        (b"maybe\x1b[31m\n", b"", VerdictKind.REFUSED, "unknown verdict"),
    ],
)
def test_the_watchdogs_verdict(
    verdict: bytes, failed: bytes, kind: VerdictKind, words: str
) -> None:
    judged = decide.read_verdict(verdict, failed)
    assert judged.kind is kind and words in judged.reason
    assert "\x1b" not in judged.reason


# --- attempts, deadlines, spend ------------------------------------------------------------


def test_attempt_names_numbers_and_deadlines() -> None:
    assert decide.pod_name(RUN, 3) == f"overbrainer-{RUN}-3"
    assert decide.next_attempt([]) == 1
    assert decide.next_attempt([{"n": 1}, {"n": 4}]) == 5
    moment = decide.deadline(T0, 1.5)
    assert moment == T0 + timedelta(hours=1, minutes=30)
    # Never before the bound the watchdog keeps (max_hours rounded up to whole seconds).
    assert decide.deadline(T0 + timedelta(microseconds=5), 1.5) == moment + timedelta(seconds=1)
    assert decide.deadline(T0, 0.002) == T0 + timedelta(seconds=8)


def test_uptime_and_spend() -> None:
    now = T0 + timedelta(minutes=90)
    assert decide.uptime_and_spend("2026-01-01T10:00:00Z", now, 0.5) == (5400.0, 0.75)
    assert decide.uptime_and_spend("2026-01-01T10:00:00Z", now, None) == (5400.0, None)
    assert decide.uptime_and_spend(None, now, 0.5) == (None, None)
    # A pod clock ahead of ours never gives a negative uptime.
    assert decide.uptime_and_spend("2026-01-01T12:00:00Z", now, 0.5) == (0.0, 0.0)


def test_nothing_placed_names_each_attempt() -> None:
    attempts = [
        {"n": 1, "gpu_type": "NVIDIA A40", "result": "no_capacity", "detail": "none left"},
        {
            "n": 2,
            "gpu_type": "NVIDIA H100",
            "result": "not_ready",
            "detail": "no SSH",
            "pod_id": "p9",
        },
        {"n": 3, "gpu_type": "NVIDIA B200", "result": None, "detail": ""},
    ]
    text = decide.nothing_placed(RUN, attempts)
    assert text.startswith(f"run {RUN} got no pod: attempt 1 (NVIDIA A40): no capacity: none left")
    assert "attempt 2 (NVIDIA H100): not ready pod p9: no SSH" in text
    assert "attempt 3 (NVIDIA B200): unresolved" in text
    assert text.endswith("then run `overbrainer train` again")


# --- interrupted before the job --------------------------------------------------------------


def log(*events: ev.Event) -> RunLog:
    created = ev.RunCreated(
        run_id=RUN, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
    )
    return fold((e, "2026-01-01T10:00:00Z") for e in (created, *events))


SENT = ev.AttemptSent(n=1, pod_name=f"overbrainer-{RUN}-1", gpu_type="A40", deadline="x")
MADE = ev.PodCreated(pod_id="p1", gpu_type="A40")
NO_POD_LEFT = f"interrupted: run {RUN} stopped before its job started; it has no pod left"
MAY_BE_LEFT = (
    f"interrupted: run {RUN} stopped before its job started, but a pod of it may be left: "
    "check `overbrainer pod ls`"
)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ((), NO_POD_LEFT),
        ((SENT, ev.AttemptResolved(n=1, result="no_capacity")), NO_POD_LEFT),
        ((SENT,), MAY_BE_LEFT),  # a create whose outcome is unknown
        ((SENT, MADE), MAY_BE_LEFT),
        ((SENT, MADE, ev.PodDeleting(pod_id="p1", reason="interrupted")), MAY_BE_LEFT),
        (
            (
                SENT,
                MADE,
                ev.PodDeleting(pod_id="p1", reason="interrupted"),
                ev.PodDeleted(pod_id="p1", by="client"),
            ),
            NO_POD_LEFT,
        ),
        (
            (
                SENT,
                MADE,
                ev.PodDeleting(pod_id="p1", reason="interrupted"),
                ev.PodDeleted(pod_id="p1", by="client"),
                ev.StrayRecorded(pod_id="p2", reason="duplicate"),
            ),
            MAY_BE_LEFT,
        ),
    ],
)
def test_interrupted_before_job_says_whether_a_pod_may_be_left(
    events: tuple[ev.Event, ...], message: str
) -> None:
    assert decide.interrupted_before_job(log(*events)) == message


def test_rate_text() -> None:
    assert decide.rate_text(0.534) == " ($0.53/h)"
    assert decide.rate_text(None) == ""


@pytest.mark.parametrize(
    ("started", "within"),
    [
        (None, 15.0),  # not shown: a few tries
        (0.0, 900.0),  # started now: as long as a booting pod is given
        (600.0, 300.0),  # 10 min ago: the rest of it
        (890.0, 15.0),  # almost past it: still a few tries
        (7200.0, 15.0),  # up for hours: a few tries
        (-60.0, 900.0),  # Runpod's start a minute ahead of its Date: never more than the bound
    ],
)
def test_how_long_a_pod_that_refuses_ssh_is_tried_again(
    started: float | None, within: float
) -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    at = None if started is None else now - timedelta(seconds=started)
    assert decide.connect_again_within(at, now, 900.0, 15.0) == within
