"""The provisioning walk on trio's MockClock: the fake Runpod API in-process, pod machines
in memory (``overbrainer/testing/fake_executor.py``), the real event store on a temporary
directory. Waits of minutes run in milliseconds."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.events.errors import StoreError
from overbrainer.runpod.pod_scripts import ENV_HOST_KEY, ENV_MAX_SECONDS, RUN_MARKER
from overbrainer.runpod.timing import Timing
from overbrainer.targets.runpod.delete import DeleteUnconfirmed
from overbrainer.targets.runpod.provision import (
    CreateStopped,
    NothingPlaced,
    PodRefused,
    Provisioned,
    ProvisionError,
    ProvisionInterrupted,
    open_provisioned,
    provision,
)
from overbrainer.testing.fake_executor import (
    CANARY_KEY,
    POD_HOST,
    FakeExecutor,
    MachinePlan,
    PodRig,
    pod_rig,
    runpod_target,
)
from overbrainer.testing.runpod_api import NO_CAPACITY, FakeRunpod
from overbrainer.utc import parse_utc

A40 = "NVIDIA A40"
RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"
FOREVER = 10**9


@pytest.fixture
async def rig(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with pod_rig(tmp_path) as rig:
        yield rig


async def walk(rig: PodRig, run_id: str, *types: str, keep: bool = False) -> Provisioned:
    return await provision(rig.context, run_id, runpod_target(types), keep=keep)


def create_gpus(rig: PodRig) -> list[str]:
    return [body["gpu"]["id"] for body in rig.creates()]  # type: ignore[index]


def results(rig: PodRig, run_id: str) -> list[tuple[int, str]]:
    return [(a["n"], a["result"]) for a in rig.state(run_id).pod.attempts]


def request_times(rig: PodRig, method: str, path: str) -> list[float]:
    return [r.time for r in rig.fake.requests if r.method == method and r.path == path]


# --- the way to a ready pod -------------------------------------------------------------


async def test_a_pod_that_answers_ssh_and_says_ready_is_provisioned(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    ready = await walk(rig, run_id, A40)

    assert rig.names(run_id) == [
        "run.Created",
        "pod.KeysGenerated",
        "pod.AttemptSent",
        "pod.AttemptResolved",
        "pod.Created",
        "pod.EndpointSeen",
        "pod.Ready",
    ]
    pod = rig.fake.live_pods()[0]
    assert ready.pod_id == pod.id
    assert ready.pod_name == f"overbrainer-{run_id}-1" == pod.name
    assert ready.gpu_type == A40 and ready.rate == pytest.approx(0.40)
    assert (ready.endpoint.host, ready.endpoint.port) == (POD_HOST, 22000)
    assert ready.remote_dir == f"runs/{run_id}"
    state = rig.state(run_id)
    assert state.pod.status == "ready" and state.pod.pod_id == pod.id
    assert state.pod.endpoint == {"host": POD_HOST, "port": 22000, "user": "root"}
    assert state.pod.cost_per_hour == pytest.approx(0.40)
    # Ready once Runpod shows RUNNING (15 s) and the verdict is written (3 s later).
    assert 18 <= trio.current_time() - start < 30
    ssh_dir = rig.project / "runs" / run_id / "ssh"
    assert (ssh_dir / "id_ed25519").exists()
    assert "Port 22000" in (ssh_dir / "config").read_text()
    assert state.pod.host_public_key == ready.access.host_public_key


async def test_attempt_sent_is_stored_before_the_create_leaves(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.set_capacity(RTX, 0)
    await walk(rig, run_id, RTX, A40)

    creates = [names for method, _, names in rig.seen_at_request if method == "POST"]
    assert len(creates) == 2
    # When each create reached Runpod, its AttemptSent was already in the store.
    assert creates[0][-1] == "pod.AttemptSent" and creates[0].count("pod.AttemptSent") == 1
    assert creates[1][-1] == "pod.AttemptSent" and creates[1].count("pod.AttemptSent") == 2


async def test_the_create_body_carries_the_marker_and_only_schema_fields(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    spec = runpod_target([A40], data_center_ids=["EU-RO-1"], container_disk_gb=60)
    await provision(rig.context, run_id, spec, keep=False)

    (body,) = rig.creates()
    assert rig.fake.create_requests()[0].schema_errors == []
    assert body["name"] == f"overbrainer-{run_id}-1"
    assert body["gpu"] == {"id": A40, "count": 1}
    assert body["ports"] == ["22/tcp"] and body["disk"] == 60
    assert body["dataCenterIds"] == ["EU-RO-1"] and body["cloud"] == "SECURE"
    env = body["env"]
    assert isinstance(env, dict) and env[RUN_MARKER] == run_id
    assert str(body["args"]).startswith("bash -c ")
    # The pod's bound is max_hours from its creation, counted on the pod: no absolute time
    # (this machine's clock) goes into it. Its deadline, for the log, is Runpod's createdAt
    # plus max_hours.
    assert env[ENV_MAX_SECONDS] == "7200" and "OVERBRAINER_DEADLINE" not in env
    (sent,) = rig.events(run_id, ev.AttemptSent)
    assert isinstance(sent, ev.AttemptSent)
    assert (sent.deadline, sent.max_hours) == ("", 2)
    (created,) = rig.events(run_id, ev.PodCreated)
    assert isinstance(created, ev.PodCreated)
    pod = rig.fake.live_pods()[0]
    assert created.created_at == rig.fake.wall(pod.created_at).isoformat().replace("+00:00", "Z")
    made = parse_utc(created.created_at)
    deadline = parse_utc(created.deadline)
    assert made is not None and deadline is not None
    assert deadline - made == timedelta(hours=2)
    assert rig.state(run_id).pod.deadline == created.deadline


async def test_no_secret_reaches_the_log_or_the_projections(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    await walk(rig, run_id, A40)

    host_key_b64 = rig.fake.pod_env(rig.fake.live_pods()[0].id)[ENV_HOST_KEY]
    logged = json.dumps([r.to_json() for r in rig.store.history(run_id)])
    projections = "".join(p.read_text() for p in (rig.project / "runs" / run_id).glob("*.json"))
    bodies = json.dumps(rig.creates())
    for text in (logged, projections, rig.err.getvalue()):
        assert CANARY_KEY[4:14] not in text
        assert host_key_b64[:40] not in text
        assert "PRIVATE KEY" not in text
    assert CANARY_KEY[4:14] not in bodies


# --- create errors ------------------------------------------------------------------------


async def test_gpu_types_are_tried_in_order_403_and_400_move_on(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 403)  # the first create: no access to that pool
    rig.fake.set_capacity(H100, 0)  # the second: no capacity
    ready = await walk(rig, run_id, RTX, H100, A40)

    assert create_gpus(rig) == [RTX, H100, A40]
    assert results(rig, run_id) == [(1, "no_access"), (2, "no_capacity"), (3, "created")]
    attempts = rig.state(run_id).pod.attempts
    assert attempts[0]["detail"] == "scripted failure"
    assert attempts[1]["detail"] == NO_CAPACITY
    assert ready.gpu_type == A40 and ready.attempt == 3


@pytest.mark.parametrize(
    ("status", "result", "words"),
    [(402, "insufficient_balance", "balance is too low"), (422, "invalid_request", "malformed")],
)
async def test_402_and_422_stop_at_once(
    rig: PodRig, status: int, result: str, words: str, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", status)
    with pytest.raises(CreateStopped) as caught:
        await walk(rig, run_id, RTX, A40)

    assert len(rig.creates()) == 1
    assert results(rig, run_id) == [(1, result)]
    message = str(caught.value)
    assert words in message and run_id in message and f"HTTP {status}" in message
    assert rig.fake.live_pods() == []
    assert not rig.state(run_id).pod.may_bill()


async def test_a_real_low_balance_stops_the_walk(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with pod_rig(tmp_path, balance=0.05) as rig:
        run_id = await rig.new_run()
        with pytest.raises(CreateStopped, match="balance is too low"):
            await walk(rig, run_id, RTX, A40)
        assert create_gpus(rig) == [RTX]


async def test_429_waits_retry_after_then_sends_the_same_type(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 429, retry_after=37)
    ready = await walk(rig, run_id, RTX, A40)

    assert create_gpus(rig) == [RTX, RTX]
    first, second = request_times(rig, "POST", "/pods")
    assert second - first == pytest.approx(37, abs=0.01)
    assert results(rig, run_id) == [(1, "rate_limited"), (2, "created")]
    assert ready.gpu_type == RTX


async def test_a_rate_limit_that_does_not_end_stops_the_walk(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 429, retry_after=5, times=50)
    with pytest.raises(CreateStopped, match="kept rate-limiting"):
        await walk(rig, run_id, RTX, A40)
    assert create_gpus(rig) == [RTX] * (Timing().rate_limited + 1)


async def test_nothing_placed_names_every_attempt(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.set_capacity(RTX, 0)
    rig.fake.set_capacity(A40, 0)
    with pytest.raises(NothingPlaced) as caught:
        await walk(rig, run_id, RTX, A40)

    message = str(caught.value)
    assert f"run {run_id} got no pod" in message
    assert f"attempt 1 ({RTX}): no capacity: {NO_CAPACITY}" in message
    assert f"attempt 2 ({A40}): no capacity" in message
    assert "overbrainer train" in message
    state = rig.state(run_id)
    assert not state.pod.may_bill()
    # No pod will ever need the run's client key.
    assert not (rig.project / "runs" / run_id / "ssh" / "id_ed25519").exists()


# --- ambiguous creates ----------------------------------------------------------------------


async def test_an_ambiguous_create_whose_pod_appeared_is_adopted(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 500, succeed=True)
    ready = await walk(rig, run_id, A40)

    assert len(rig.creates()) == 1
    (pod,) = rig.fake.live_pods()
    assert ready.pod_id == pod.id
    (resolved,) = rig.events(run_id, ev.AttemptResolved)
    assert isinstance(resolved, ev.AttemptResolved)
    assert resolved.result == "created" and resolved.pod_id == pod.id
    assert "adopted after an ambiguous create" in resolved.detail
    # Looked for it 5 s after the create (and again at 15 s, for late duplicates).
    (sent,) = request_times(rig, "POST", "/pods")
    lists = request_times(rig, "GET", "/pods")
    assert [round(t - sent) for t in lists[:2]] == [5, 15]


async def test_a_duplicate_of_an_ambiguous_create_is_deleted(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 502, succeed=True)
    assert rig.spy is not None
    rig.spy.duplicate_creates = 1  # a proxy sent the create twice
    ready = await walk(rig, run_id, A40)

    first, second = rig.fake.pods.values()
    assert first.name == second.name == f"overbrainer-{run_id}-1"
    assert ready.pod_id == first.id  # the oldest is adopted
    assert rig.fake.status(second.id) == "TERMINATED"
    names = rig.names(run_id)
    assert names.index("pod.StrayRecorded") < names.index("pod.Deleting")
    deleting = rig.events(run_id, ev.PodDeleting)
    assert [(d.pod_id, d.reason) for d in deleting] == [(second.id, "duplicate")]  # type: ignore[attr-defined]
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert deleted.pod_id == second.id  # type: ignore[attr-defined]
    state = rig.state(run_id)
    assert state.pod.strays == {} and state.pod.pods[second.id] == "deleted"
    assert state.pod.pod_id == first.id and state.pod.status == "ready"


@pytest.mark.parametrize("fault", [{"status": 503}, {"status": None, "timeout": True}])
async def test_an_ambiguous_create_that_left_no_pod_is_sent_again(
    rig: PodRig, fault: dict[str, object], autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", **fault)  # type: ignore[arg-type]
    ready = await walk(rig, run_id, A40, RTX)

    assert create_gpus(rig) == [A40, A40]
    assert [b["name"] for b in rig.creates()] == [
        f"overbrainer-{run_id}-1",
        f"overbrainer-{run_id}-2",
    ]
    first, second = request_times(rig, "POST", "/pods")
    assert second - first >= 15
    assert results(rig, run_id) == [(1, "not_created"), (2, "created")]
    assert ready.attempt == 2 and len(rig.fake.live_pods()) == 1


async def test_ambiguous_creates_more_than_twice_move_to_the_next_type(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 503, times=3)
    ready = await walk(rig, run_id, RTX, A40)

    assert create_gpus(rig) == [RTX, RTX, RTX, A40]
    assert [r for _, r in results(rig, run_id)] == ["not_created"] * 3 + ["created"]
    assert ready.gpu_type == A40


# --- a pod that does not get ready ------------------------------------------------------------


async def test_a_pod_without_ssh_is_deleted_after_15_minutes_and_the_next_type_tried(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(no_machine=True)
    ready = await walk(rig, run_id, RTX, A40)

    first, second = rig.fake.pods.values()
    assert rig.fake.status(first.id) == "TERMINATED"
    assert ready.pod_id == second.id and ready.gpu_type == A40
    times = request_times(rig, "POST", "/pods")
    assert times[1] - times[0] >= 15 * 60
    attempt = rig.state(run_id).pod.attempts[0]
    assert attempt["result"] == "not_ready" and attempt["pod_id"] == first.id
    assert "no SSH within 15 min" in attempt["detail"]
    (deleting,) = rig.events(run_id, ev.PodDeleting)
    assert deleting.reason == "not_ready"  # type: ignore[attr-defined]
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert isinstance(deleted, ev.PodDeleted)
    assert deleted.by == "client"
    assert deleted.uptime_seconds == pytest.approx(15 * 60, abs=10)
    assert deleted.uptime_seconds is not None
    assert deleted.spend == pytest.approx(0.69 * deleted.uptime_seconds / 3600, rel=1e-3)
    assert rig.state(run_id).pod.pods[first.id] == "deleted"


async def test_a_pod_that_vanishes_is_recorded_gone_and_the_next_type_tried(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.script_next_pod(vanish_after=8)
    ready = await walk(rig, run_id, RTX, A40)

    first = next(iter(rig.fake.pods.values()))
    assert ready.gpu_type == A40
    assert rig.state(run_id).pod.attempts[0]["result"] == "vanished"
    deleted = rig.events(run_id, ev.PodDeleted)[0]
    assert deleted.pod_id == first.id and deleted.by == "found_gone"  # type: ignore[attr-defined]


async def test_a_pod_that_ends_in_error_is_deleted_and_the_next_type_tried(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.script_next_pod(error_after=12)
    ready = await walk(rig, run_id, RTX, A40)

    first = next(iter(rig.fake.pods.values()))
    assert ready.gpu_type == A40
    attempt = rig.state(run_id).pod.attempts[0]
    assert attempt["result"] == "dead" and "ERROR" in attempt["detail"]
    assert rig.fake.status(first.id) == "TERMINATED"
    assert rig.events(run_id, ev.PodDeleted)[0].by == "client"  # type: ignore[attr-defined]


async def test_a_changed_host_key_is_never_trusted(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(host_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKey")
    ready = await walk(rig, run_id, RTX, A40)

    machine = rig.network.machines[(POD_HOST, 22000)]
    assert machine.refused > 1  # asked again and again, never accepted
    first_pod = next(iter(rig.fake.pods.values())).id
    endpoints = [e for e in rig.events(run_id, ev.EndpointSeen) if e.pod_id == first_pod]  # type: ignore[attr-defined]
    assert endpoints == []
    attempt = rig.state(run_id).pod.attempts[0]
    assert attempt["result"] == "not_ready" and "pinned" in attempt["detail"]
    assert rig.err.getvalue().count("not trusting it") == 1
    assert ready.gpu_type == A40


async def test_a_watchdog_refusal_deletes_the_pod_and_refuses_the_run(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(verdict=b"failed cannot read the pod: HTTP 403\n")
    with pytest.raises(PodRefused) as caught:
        await walk(rig, run_id, RTX, A40)

    assert create_gpus(rig) == [RTX]  # no other type
    message = str(caught.value)
    assert "watchdog cannot guard it: cannot read the pod: HTTP 403" in message
    assert run_id in message and "deleted" in message
    (pod,) = rig.fake.pods.values()
    assert rig.fake.status(pod.id) == "TERMINATED"
    assert rig.events(run_id, ev.PodDeleting)[0].reason == "refused"  # type: ignore[attr-defined]
    assert rig.state(run_id).pod.attempts[0]["result"] == "refused"
    assert not rig.state(run_id).pod.may_bill()


async def test_a_failed_bootstrap_refuses_the_run(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(verdict=None, bootstrap_failed=b"sshd did not start\n")
    with pytest.raises(PodRefused, match="bootstrap failed: sshd did not start"):
        await walk(rig, run_id, RTX, A40)
    assert create_gpus(rig) == [RTX]
    assert rig.fake.live_pods() == []


async def test_an_unconfirmed_delete_stops_the_walk(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(no_machine=True)
    rig.fake.linger_next_delete(FOREVER)
    with pytest.raises(DeleteUnconfirmed) as caught:
        await walk(rig, run_id, RTX, A40)

    assert create_gpus(rig) == [RTX]  # never a second pod while one may bill
    message = str(caught.value)
    assert "may still bill" in message and "`overbrainer pod ls`" in message
    assert "no pod is created while another may still bill" in message
    state = rig.state(run_id)
    assert state.pod.status == "deleting" and state.pod.may_bill()
    assert "pod.Deleted" not in rig.names(run_id)


# --- Ctrl-C -----------------------------------------------------------------------------------


async def test_ctrl_c_before_the_first_create_sends_nothing(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.interrupts.interrupt()
    with pytest.raises(ProvisionInterrupted) as caught:
        await walk(rig, run_id, A40)

    assert rig.fake.create_requests() == []
    assert str(caught.value) == (
        f"interrupted: run {run_id} stopped before its job started; it has no pod left"
    )
    assert caught.value.exit_code == 130
    assert rig.names(run_id)[-1] == "run.Interrupted"
    assert rig.state(run_id).run.interrupted_stage == "creating a pod"


async def _interrupt_at(rig: PodRig, at: float) -> None:
    await trio.sleep_until(at)
    rig.interrupts.interrupt()


async def test_ctrl_c_while_the_pod_boots_deletes_it(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_interrupt_at, rig, start + 10)
        with pytest.raises(ProvisionInterrupted) as caught:
            await walk(rig, run_id, A40, RTX)

    assert str(caught.value) == (
        f"interrupted: run {run_id} stopped before its job started; it has no pod left"
    )
    (pod,) = rig.fake.pods.values()
    assert rig.fake.status(pod.id) == "TERMINATED"
    assert len(rig.creates()) == 1
    names = rig.names(run_id)
    assert names[-3:] == ["run.Interrupted", "pod.Deleting", "pod.Deleted"]
    assert rig.events(run_id, ev.PodDeleting)[0].reason == "interrupted"  # type: ignore[attr-defined]
    assert "waiting for pod" in (rig.state(run_id).run.interrupted_stage or "")
    assert trio.current_time() - start < 60  # not after the 15 minutes of SSH


async def test_ctrl_c_with_an_unconfirmed_delete_says_a_pod_may_be_left(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.linger_next_delete(FOREVER)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_interrupt_at, rig, trio.current_time() + 10)
        with pytest.raises(ProvisionInterrupted) as caught:
            await walk(rig, run_id, A40)

    assert str(caught.value) == (
        f"interrupted: run {run_id} stopped before its job started, but a pod of it may be "
        "left: check `overbrainer pod ls`"
    )
    assert "may still bill" in rig.err.getvalue()
    assert rig.state(run_id).pod.may_bill()


async def test_ctrl_c_while_waiting_out_a_rate_limit_stops_before_the_next_create(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 429, retry_after=120)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_interrupt_at, rig, start + 30)
        with pytest.raises(ProvisionInterrupted, match="it has no pod left"):
            await walk(rig, run_id, A40)
    assert len(rig.creates()) == 1
    assert trio.current_time() - start < 60


async def test_ctrl_c_during_an_ambiguous_create_still_finds_and_deletes_its_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 500, succeed=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_interrupt_at, rig, trio.current_time() + 2)
        with pytest.raises(ProvisionInterrupted, match="it has no pod left"):
            await walk(rig, run_id, A40)
    (pod,) = rig.fake.pods.values()
    assert rig.fake.status(pod.id) == "TERMINATED"
    assert rig.state(run_id).pod.pods[pod.id] == "deleted"


# --- the job's connection ----------------------------------------------------------------------


async def test_open_provisioned_holds_a_connection_for_the_job(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    async with open_provisioned(rig.context, run_id, runpod_target([A40]), keep=False) as ready:
        assert isinstance(ready.executor, FakeExecutor) and not ready.executor.closed
        verdict = await ready.executor.read_file(f"{ready.pod.remote_dir}/.pod/watchdog", 0, 99)
        assert verdict == b"ready\n"
        executor = ready.executor
    assert executor.closed
    assert rig.state(run_id).pod.status == "ready"  # the pod is the caller's to end


async def test_a_ready_pod_that_cannot_be_reached_again_is_deleted(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    original = rig.network.connect
    calls = 0

    def connect(access):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if rig.state(run_id).pod.status == "ready":
            rig.network.machines[(access.endpoint.host, access.endpoint.port)].down = True
        return original(access)

    rig.context.connect = connect
    with pytest.raises(ProvisionError, match="could not be reached again"):
        async with open_provisioned(rig.context, run_id, runpod_target([A40]), keep=False):
            raise AssertionError("never reached")
    (pod,) = rig.fake.pods.values()
    assert rig.fake.status(pod.id) == "TERMINATED"
    assert not rig.state(run_id).pod.may_bill()


async def test_timing_can_be_shrunk(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    fast = Timing(ssh_within=30, poll=1)
    async with pod_rig(tmp_path, timing=fast, fake=FakeRunpod()) as rig:
        run_id = await rig.new_run()
        rig.plans[0] = MachinePlan(no_machine=True)
        await walk(rig, run_id, RTX, A40)
        first, second = request_times(rig, "POST", "/pods")
        assert 30 <= second - first < 60


async def test_after_a_deleted_pod_a_type_without_capacity_still_moves_on(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.plans[0] = MachinePlan(no_machine=True)
    rig.fake.set_capacity(H100, 0)
    ready = await walk(rig, run_id, RTX, H100, A40)

    assert create_gpus(rig) == [RTX, H100, A40]
    assert results(rig, run_id) == [(1, "not_ready"), (2, "no_capacity"), (3, "created")]
    assert ready.gpu_type == A40


async def test_an_ambiguous_create_that_cannot_be_looked_up_stops_the_walk(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 503)
    rig.fake.fail_next("GET /pods", 500, times=100)
    with pytest.raises(CreateStopped) as caught:
        await walk(rig, run_id, RTX, A40)

    assert len(rig.creates()) == 1  # never sent again blindly
    message = str(caught.value)
    assert "a pod may have been created" in message and "`overbrainer pod ls`" in message
    state = rig.state(run_id)
    assert state.pod.attempts[0]["result"] is None and state.pod.may_bill()
    # The client key stays: a pod of this run may exist.
    assert (rig.project / "runs" / run_id / "ssh" / "id_ed25519").exists()


# --- the store fails ----------------------------------------------------------------------


async def test_no_create_is_sent_when_attempt_sent_cannot_be_appended(
    rig: PodRig, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    app = rig.store._app
    real_save = app.save
    refused: list[str] = []

    def save(*envelopes: object, **kwargs: object) -> object:
        # The disk fills up just as the attempt is to be recorded: SQLite raises.
        names = [getattr(envelope, "name", "") for envelope in envelopes]
        if "pod.AttemptSent" in names:
            refused.append(run_id)
            raise sqlite3.OperationalError("database or disk is full")
        return real_save(*envelopes, **kwargs)

    monkeypatch.setattr(app, "save", save)
    with pytest.raises(StoreError) as caught:
        await walk(rig, run_id, A40, RTX)

    assert "database or disk is full" in str(caught.value)
    assert refused == [run_id]  # one try: the walk stopped, no other GPU type was tried
    assert rig.fake.create_requests() == []  # nothing left for Runpod
    assert rig.fake.live_pods() == []
    assert rig.names(run_id) == ["run.Created", "pod.KeysGenerated"]
    assert not rig.state(run_id).pod.may_bill()
