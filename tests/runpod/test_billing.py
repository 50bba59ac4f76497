"""What Runpod billed: ``GET /billing/pods`` on the fake (per-second billing at the pod's
cost, buckets snapped to the published rules, a lag), the client's read of it (never
leaking the key), the pure rules of which window to ask and when an amount is final, and
a whole run on the MockClock rig whose log ends with Runpod's billed amount, which
``runs ls`` shows (or the estimate, marked ``~``, while it is unknown or not final)."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.cli import runs_read
from overbrainer.cli.main import main
from overbrainer.errors import UsageError
from overbrainer.events import types as ev
from overbrainer.events.aggregate import PodView, RunLog, RunView, empty_cost
from overbrainer.events.types import PodState, RunState
from overbrainer.projections.spend import run_spend
from overbrainer.runpod import billing
from overbrainer.runpod.client import CreatePod, RunpodApiError, RunpodClient
from overbrainer.targets.runpod.billing import read_billing
from overbrainer.testing import runpod_schema
from overbrainer.testing.pod_training import training
from overbrainer.testing.runpod_api import FAKE_URL, FakeRunpod

CANARY = "rpa_CANARY7q2w9e4r1t8y3u6i5o0pZxKvBnMlJhGfDsA"
# The fake's clock starts at 09:50 UTC on a fixed day: its buckets are known in advance.
WALL = datetime(2026, 3, 2, 9, 50, tzinfo=UTC)
A40 = "NVIDIA A40"  # $0.40/h on the fake


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def fake() -> FakeRunpod:
    fake = FakeRunpod(wall_start=WALL)
    fake.add_account(CANARY)
    return fake


@pytest.fixture
async def client(fake: FakeRunpod) -> AsyncIterator[RunpodClient]:
    async with RunpodClient(
        CANARY, FAKE_URL, transport=fake.transport(), rng=random.Random(1)
    ) as client:
        yield client


async def _pod(client: RunpodClient) -> str:
    spec = CreatePod(name="p", image="img:1", gpu_type=A40, gpu_count=1, disk_gb=20)
    return (await client.create_pod(spec)).id


# --- the fake's GET /billing/pods, read by the client -------------------------------------


async def test_a_pod_bills_per_second_at_its_cost_in_hour_buckets(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod_id = await _pod(client)  # at 09:50
    other = await _pod(client)
    await trio.sleep(1800)  # to 10:20
    assert await client.delete_pod(pod_id)
    found = await client.pod_billing(
        pod_id, _utc("2026-03-02T09:30:00Z"), _utc("2026-03-02T10:30:00Z")
    )
    # The window is snapped out to whole hours, and said so.
    assert (found.start, found.end, found.bucket) == (
        _utc("2026-03-02T09:00:00Z"),
        _utc("2026-03-02T11:00:00Z"),
        "hour",
    )
    assert [(r.start.hour, r.pod_id) for r in found.records] == [(9, pod_id), (10, pod_id)]
    assert [r.total for r in found.records] == pytest.approx(
        [0.40 * 600 / 3600, 0.40 * 1200 / 3600], abs=1e-6
    )
    assert found.amount(pod_id) == pytest.approx(0.20, abs=1e-5)
    assert found.amount(other) == 0  # filtered out by the pod's id
    # The answer is the published shape, and the request the published parameters.
    request = fake.billing_requests()[-1]
    assert request.schema_errors == [] and request.status == 200
    assert request.query == {
        "podId": pod_id,
        "startTime": "2026-03-02T09:30:00Z",
        "endTime": "2026-03-02T10:30:00Z",
        "bucketSize": "hour",
    }


async def test_a_stopped_pod_bills_nothing_and_usage_shows_only_after_the_lag(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    fake.billing_lag = 900.0
    pod_id = await _pod(client)
    await trio.sleep(600)
    await client.pod_action(pod_id, "stop")
    await trio.sleep(3600)  # stopped: not billed
    await client.pod_action(pod_id, "start")
    await trio.sleep(600)
    start, end = WALL - timedelta(hours=1), WALL + timedelta(hours=3)
    # 10 min then 10 min billed, but the last 15 min have not reached the billing yet.
    found = await client.pod_billing(pod_id, start, end)
    assert found.amount(pod_id) == pytest.approx(0.40 * 600 / 3600, abs=1e-5)
    await trio.sleep(900)
    assert await client.delete_pod(pod_id)
    found = await client.pod_billing(pod_id, start, end)
    # 10 + 10 min: the last 15 min are still behind the lag.
    assert found.amount(pod_id) == pytest.approx(0.40 * 1200 / 3600, abs=1e-5)
    await trio.sleep(900)
    found = await client.pod_billing(pod_id, start, end, bucket="day")
    assert found.amount(pod_id) == pytest.approx(0.40 * 2100 / 3600, abs=1e-5)
    assert len(found.records) == 1 and found.bucket == "day"


@pytest.mark.parametrize(
    ("query", "status", "said"),
    [
        ({"bucketSize": "minute"}, 422, "query bucketSize"),
        ({"startTime": "yesterday"}, 422, "query startTime"),
        ({"endTime": "2026-03-02 10:00"}, 422, "query endTime"),
        ({"lastN": "0"}, 422, "query lastN"),
        ({"pod": "abc"}, 422, "query pod: not a parameter"),
        ({"lastN": "3", "startTime": "2026-03-02T00:00:00Z"}, 400, "mutually exclusive"),
        ({"startTime": "2026-03-02T10:00:00Z", "endTime": "2026-03-02T09:00:00Z"}, 400, "after"),
    ],
)
async def test_a_billing_request_outside_the_published_parameters_is_refused(
    fake: FakeRunpod, query: dict[str, str], status: int, said: str
) -> None:
    async with RunpodClient(CANARY, FAKE_URL, transport=fake.transport()) as client:
        answer = await client._http.get("/billing/pods", params=query)
    assert answer.status_code == status
    assert said in answer.text


async def test_last_n_and_defaults_resolve_to_whole_buckets_in_the_published_shape(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod_id = await _pod(client)
    await trio.sleep(7200)  # to 11:50
    for query, window in [
        ({"lastN": "2", "bucketSize": "hour"}, ("2026-03-02T10:00:00Z", "2026-03-02T12:00:00Z")),
        ({}, ("2026-01-31T00:00:00Z", "2026-03-03T00:00:00Z")),  # 30 days, in days
        ({"lastN": "1", "bucketSize": "month"}, ("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z")),
        ({"lastN": "1", "bucketSize": "week"}, ("2026-03-02T00:00:00Z", "2026-03-09T00:00:00Z")),
    ]:
        answer = await client._http.get("/billing/pods", params=query)
        data = answer.json()
        assert runpod_schema.errors("ListPodBillingResponse", data) == []
        meta = data["metadata"]
        assert (meta["query"]["startTime"], meta["query"]["endTime"]) == window
        assert meta["uniquePodCount"] == 1 and meta["query"]["podId"] is None
        assert meta["totals"]["totalAmount"] == pytest.approx(
            sum(r["totalAmount"] for r in data["records"])
        )
    assert sum(r["totalAmount"] for r in data["records"] if r["podId"] == pod_id) > 0


async def test_a_pod_scoped_key_cannot_read_the_accounts_billing(
    fake: FakeRunpod, client: RunpodClient
) -> None:
    pod_id = await _pod(client)
    scoped = fake.pod_scoped_key(pod_id)
    async with RunpodClient(scoped, FAKE_URL, transport=fake.transport()) as pod_client:
        with pytest.raises(RunpodApiError) as raised:
            await pod_client.pod_billing(pod_id, WALL - timedelta(hours=1), WALL)
    assert raised.value.status == 403


async def test_a_failed_billing_read_never_shows_the_key(
    fake: FakeRunpod, client: RunpodClient, autojump_clock: trio.testing.MockClock
) -> None:
    pod_id = await _pod(client)
    # Runpod echoing the key back, in an error and in an answer that cannot be read.
    fake.fail_next(
        "GET /billing/pods", 400, raw_body=f"bad token {CANARY}".encode(), content_type="text/plain"
    )
    fake.fail_next("GET /billing/pods", 200, raw_body=json.dumps({"records": [CANARY]}).encode())
    texts: list[str] = []
    for _ in range(2):
        with pytest.raises(RunpodApiError) as raised:
            await client.pod_billing(pod_id, WALL - timedelta(hours=1), WALL + timedelta(hours=1))
        texts += [str(raised.value), repr(raised.value), raised.value.detail]
    assert "HTTP 400" in texts[0] and "could not be read" in texts[3]
    for text in texts:
        for start in range(len(CANARY) - 5):
            assert CANARY[start : start + 6] not in text, text


# --- the pure rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("created", "now", "expected"),
    [
        ("10:20:05", "10:25:00", ("10:00:00", "11:00:00", "hour")),
        ("10:00:00", "12:00:00", ("10:00:00", "12:00:00", "hour")),
        ("09:59:59", "10:00:01", ("09:00:00", "11:00:00", "hour")),
    ],
)
def test_the_window_asked_is_whole_hours_from_the_pods_creation_to_runpods_now(
    created: str, now: str, expected: tuple[str, str, str]
) -> None:
    day = "2026-03-02T"
    start, end, bucket = billing.window(_utc(day + created + "Z"), _utc(day + now + "Z"))
    assert (start, end, bucket) == (
        _utc(day + expected[0] + "Z"),
        _utc(day + expected[1] + "Z"),
        expected[2],
    )


def test_a_window_longer_than_a_month_is_asked_in_days() -> None:
    start, end, bucket = billing.window(_utc("2026-01-01T10:20:00Z"), _utc("2026-03-02T10:00:00Z"))
    assert (start, end, bucket) == (
        _utc("2026-01-01T00:00:00Z"),
        _utc("2026-03-03T00:00:00Z"),
        "day",
    )


@pytest.mark.parametrize(
    ("ended", "read", "final"),
    [
        ("10:20:00", "10:20:30", False),  # right after the delete
        ("10:20:00", "10:59:59", False),  # its hour is not over
        ("10:20:00", "11:00:00", True),  # its hour is over, and 40 min have passed
        ("10:58:00", "11:00:00", False),  # its hour is over, but only 2 min passed
        ("10:58:00", "11:08:00", True),
        (None, "23:00:00", False),  # an end never known is never final
    ],
)
def test_a_billed_amount_is_final_once_its_hour_is_over_and_it_settled(
    ended: str | None, read: str, final: bool
) -> None:
    day = "2026-03-02T"
    end = _utc(day + ended + "Z") if ended is not None else None
    assert billing.is_final(end, _utc(day + read + "Z")) is final


def _state(**costs: dict[str, object]) -> RunLog:
    pods = {pod_id: PodState(str(c.pop("status", "deleted"))) for pod_id, c in costs.items()}
    full = {pod_id: {**empty_cost(), **cost} for pod_id, cost in costs.items()}
    return RunLog(
        run=RunView(run_id="r1", state=RunState.succeeded, created_at="2026-03-02T09:49:00Z"),
        pod=PodView(pod_id=next(iter(costs)), status=next(iter(pods.values())), pods=pods,
                    costs=full),
    )  # fmt: skip


def test_the_reads_a_run_needs_are_its_gone_pods_not_billed_final() -> None:
    state = _state(
        a={"created_at": "2026-03-02T09:50:00Z", "ended_at": "2026-03-02T10:20:00Z"},
        b={"billed": 0.2, "billed_final": True},
        c={"status": "job_running", "created_at": "2026-03-02T09:50:00Z"},
        d={"gone_at": "2026-03-02T10:30:00Z", "billed": 0.01},  # a stray, created when?
    )
    asks = billing.asks(state, _utc("2026-03-02T10:25:00Z"))
    assert [(a.pod_id, a.start, a.end, a.ended) for a in asks] == [
        ("a", _utc("2026-03-02T09:00:00Z"), _utc("2026-03-02T11:00:00Z"),
         _utc("2026-03-02T10:20:00Z")),
        # Its creation unknown: from a day before its run's.
        ("d", _utc("2026-03-01T09:00:00Z"), _utc("2026-03-02T11:00:00Z"),
         _utc("2026-03-02T10:30:00Z")),
    ]  # fmt: skip
    assert [a.pod_id for a in billing.asks(state, _utc("2026-03-02T10:25:00Z"), "d")] == ["d"]


@pytest.mark.parametrize(
    ("costs", "text", "billed", "estimated"),
    [
        ({"a": {"billed": 0.21, "billed_final": True, "estimate": 0.2}}, "$0.21", 0.21, 0.0),
        ({"a": {"billed": 0.05, "estimate": 0.2}}, "~$0.20", 0.0, 0.2),  # not final yet
        ({"a": {"estimate": 0.2}}, "~$0.20", 0.0, 0.2),  # billing unknown
        ({"a": {"billed": 0.05}}, "~$0.05", 0.0, 0.05),  # found gone: no estimate
        ({"a": {}}, "", 0.0, 0.0),  # nothing known
        (
            {"a": {"billed": 1.0, "billed_final": True}, "b": {"estimate": 0.5}},
            "~$1.50",
            1.0,
            0.5,
        ),
    ],
)
def test_a_runs_spend_is_billed_where_final_and_estimated_elsewhere(
    costs: dict[str, dict[str, object]], text: str, billed: float, estimated: float
) -> None:
    spend = run_spend(_state(**costs), _utc("2026-03-02T12:00:00Z"))
    assert (spend.text(), spend.billed, spend.estimated) == (text, billed, estimated)


@pytest.mark.parametrize(
    ("text", "hours"), [("12h", 12), ("7d", 168), ("30d", 720), ("2w", 336), (" 1D ", 24)]
)
def test_since_takes_hours_days_or_weeks(text: str, hours: int) -> None:
    assert runs_read.parse_since(text) == timedelta(hours=hours)


@pytest.mark.parametrize("text", ["", "30", "d", "1.5d", "-3d", "30m", "7 days", "0d", "1y"])
def test_since_refuses_anything_else_naming_the_forms_it_takes(text: str) -> None:
    with pytest.raises(UsageError, match=r"like 12h, 7d or 30d"):
        runs_read.parse_since(text)


# --- a whole run ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("created", "listed"),
    [
        ("2026-03-01T12:00:00Z", True),  # exactly 30 days before the clock
        ("2026-03-01T11:59:59Z", False),
        ("2026-03-01T13:00:00+01:00", True),  # the same instant in another zone
        ("not a time", False),
    ],
)
def test_since_compares_instants_whatever_their_zone(created: str, listed: bool) -> None:
    state = RunLog(run=RunView(run_id="r1", created_at=created))
    now = _utc("2026-03-31T12:00:00Z")
    assert runs_read._created_since(state, now - timedelta(days=30)) is listed


def _ls(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    code = main(["-C", str(project), "runs", "ls", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_after_a_run_the_log_holds_what_runpod_billed_and_runs_ls_shows_it(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with training(tmp_path) as t:
        assert await t.train() == 0
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        fake_pod = t.rig.fake.pod(pod_id)
        billed_by_fake = fake_pod.price * fake_pod.billed_seconds(-1e12, 1e12) / 3600
        # Read right after the delete: what Runpod billed so far, not final.
        assert t.rig.names(run_id)[-3:] == ["pod.Deleting", "pod.Deleted", "pod.Billed"]
        (first,) = t.rig.events(run_id, ev.PodBilled)
        assert isinstance(first, ev.PodBilled)
        assert first.pod_id == pod_id and not first.final
        assert first.amount == pytest.approx(billed_by_fake, abs=1e-5)
        created = _utc(str(t.rig.state(run_id).pod.created_at))
        assert _utc(first.period_start) <= created < _utc(first.period_end)
        state = t.rig.state(run_id)
        estimate = state.pod.spend
        assert estimate is not None and estimate == pytest.approx(billed_by_fake, rel=0.1)
        # Not final: `runs ls` shows the estimate, marked; both amounts are in its JSON.
        spend = run_spend(state, datetime.now(UTC))
        assert spend.text() == f"~${estimate:.2f}"
        assert spend.to_json() == {
            "spend_usd": estimate,
            "spend_estimated_usd": estimate,
            "billed_usd": first.amount,
            "billed_final": False,
            "estimate_usd": estimate,
        }

        # Two hours on, `pod billing` (this read) makes it final.
        await trio.sleep(7200)
        readings = await read_billing(t.command().ctx, run_id)
        assert [(r.pod_id, r.final) for r in readings] == [(pod_id, True)]
        final = t.rig.events(run_id, ev.PodBilled)[-1]
        assert isinstance(final, ev.PodBilled) and final.final
        assert final.amount == pytest.approx(billed_by_fake, abs=1e-5)
        assert await read_billing(t.command().ctx, run_id) == []  # nothing left to read
    code, out, _ = _ls(capsys, tmp_path)
    line = out.splitlines()[1]
    assert code == 0 and line.endswith(f" ${final.amount:.2f}") and "~" not in line
    code, out, _ = _ls(capsys, tmp_path, "--json")
    row = json.loads(out)
    assert (row["billed_usd"], row["billed_final"]) == (final.amount, True)
    assert row["spend"] == f"${final.amount:.2f}" and row["estimate_usd"] == estimate


async def test_billing_that_cannot_be_read_or_is_not_there_yet_leaves_the_estimate(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with training(tmp_path) as t:
        t.rig.fake.fail_next("GET /billing/pods", 503, times=50)
        assert await t.train() == 0  # the run succeeds all the same
        run_id = t.run_id()
        assert t.rig.names(run_id)[-1] == "pod.Deleted"
        assert f"`overbrainer pod billing {run_id}` reads it later" in t.err()
        estimate = t.rig.state(run_id).pod.spend
        assert estimate is not None

        # The next run's usage has not reached Runpod's billing: nothing is recorded.
        t.rig.fake.faults.clear()
        t.rig.fake.billing_lag = 3600.0
        assert await t.train() == 0
        second = t.run_id()
        assert second != run_id and t.rig.names(second)[-1] == "pod.Deleted"
        assert "Runpod shows no billing for it yet" in t.err()
    code, out, _ = _ls(capsys, tmp_path, "--json")
    (row,) = [r for r in map(json.loads, out.splitlines()) if r["id"] == run_id]
    assert (code, row["spend"]) == (0, f"~${estimate:.2f}")
    assert (row["billed_usd"], row["estimate_usd"]) == (None, estimate)


async def test_runs_ls_since_lists_the_runs_of_that_span_and_ends_with_their_total(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with training(tmp_path) as t:
        assert await t.train() == 0
        old = t.run_id()
        await trio.sleep(7200)
        assert await read_billing(t.command().ctx, old)  # final now
        t.rig.fake.fail_next("GET /billing/pods", 503, times=50)
        assert await t.train() == 0
        new = t.run_id()
        states = {r: t.rig.state(r) for r in (old, new)}
    created = {r: _utc(str(s.run.created_at)) for r, s in states.items()}
    billed = run_spend(states[old], created[new]).billed
    estimate = states[new].pod.spend
    assert billed > 0 and estimate is not None

    # A clock 10 days after the runs: both are within 30d, neither within 12h.
    monkeypatch.setattr(runs_read, "clock", lambda: created[new] + timedelta(days=10))
    code, out, _ = _ls(capsys, tmp_path, "--since", "30d")
    lines = out.splitlines()
    # (Both created within the same second here: their IDs need not sort by creation.)
    assert code == 0 and sorted(line.split()[0] for line in lines[1:-1]) == sorted([old, new])
    assert lines[-1] == (
        f"total ${billed + estimate:.2f} for 2 runs created in the last 30d, "
        f"${estimate:.2f} of it estimated (`overbrainer pod billing` reads what Runpod billed)"
    )
    code, out, err = _ls(capsys, tmp_path, "--since", "12h")
    assert (code, out) == (0, "") and "no run matches" in err
    # A week back from the same clock reaches neither; eleven days, both.
    assert _ls(capsys, tmp_path, "--since", "1w")[1] == ""
    assert len(_ls(capsys, tmp_path, "--since", "11d")[1].splitlines()) == 4
    code, _, err = _ls(capsys, tmp_path, "--since", "30 days")
    assert code == 2 and "--since takes a whole number of hours, days or weeks" in err
