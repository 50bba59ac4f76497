"""Deleting a pod and confirming it gone, on trio's MockClock against the fake Runpod API."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.runpod.client import RunpodApiError
from overbrainer.runpod.keys import write_run_keys
from overbrainer.targets.runpod.delete import DeleteUnconfirmed, delete_pod
from overbrainer.targets.runpod.pods import confirm_gone
from overbrainer.testing.fake_executor import PodRig, pod_rig
from overbrainer.utc import iso_utc

A40 = "NVIDIA A40"
FOREVER = 10**9


@pytest.fixture
async def rig(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with pod_rig(tmp_path) as rig:
        yield rig


async def new_pod(rig: PodRig, run_id: str, n: int = 1, *, record: bool = True) -> str:
    """Create a pod of ``run_id`` on the fake; record it as the run's pod."""
    name = f"overbrainer-{run_id}-{n}"
    pod = await rig.create_pod(name, run_id, args="sleep infinity")
    if record:
        await rig.journal.append(
            run_id,
            [
                ev.AttemptSent(n=n, pod_name=name, gpu_type=A40, deadline="2030-01-01T00:00:00Z"),
                ev.AttemptResolved(n=n, result="created", pod_id=pod.id),
                ev.PodCreated(
                    pod_id=pod.id,
                    gpu_type=A40,
                    data_center=pod.data_center_id,
                    cost_per_hour=pod.cost,
                    created_at=iso_utc(pod.created_at) if pod.created_at else None,
                ),
            ],
        )
    return pod.id


def deletes(rig: PodRig) -> list[float]:
    return [r.time for r in rig.fake.requests if r.method == "DELETE"]


async def test_deleting_is_logged_before_the_delete_and_deleted_with_uptime_and_spend(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    await trio.sleep(3600)
    await delete_pod(rig.context, run_id, pod_id, "requested")

    (seen,) = [names for method, _, names in rig.seen_at_request if method == "DELETE"]
    assert seen[-1] == "pod.Deleting"
    assert rig.names(run_id)[-2:] == ["pod.Deleting", "pod.Deleted"]
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert isinstance(deleted, ev.PodDeleted)
    assert deleted.by == "client"
    assert deleted.uptime_seconds == pytest.approx(3600, abs=3)
    assert deleted.uptime_seconds is not None
    assert deleted.spend == pytest.approx(0.40 * deleted.uptime_seconds / 3600, rel=1e-4)
    state = rig.state(run_id)
    assert state.pod.status == "deleted" and not state.pod.may_bill()
    assert rig.fake.status(pod_id) == "TERMINATED"


async def test_a_delete_accepted_but_still_listed_is_waited_out(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.linger_next_delete(6)
    start = trio.current_time()
    await delete_pod(rig.context, run_id, pod_id, "requested")

    assert rig.state(run_id).pod.status == "deleted"
    reads = [r for r in rig.fake.requests if r.time > start and r.method == "GET"]
    assert len(reads) > 6  # it kept looking until the pod was no longer shown
    assert trio.current_time() - start < 60


async def test_a_delete_never_confirmed_raises_and_leaves_the_pod_deleting(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.linger_next_delete(FOREVER)
    start = trio.current_time()
    with pytest.raises(DeleteUnconfirmed) as caught:
        await delete_pod(rig.context, run_id, pod_id, "requested")

    assert 60 <= trio.current_time() - start < 70
    message = str(caught.value)
    assert f"pod {pod_id} of run {run_id} ($0.40/h)" in message
    assert "still showed it 60 s later; it may still bill" in message
    assert f"`overbrainer pod ls` and remove it with `overbrainer pod rm {run_id}`" in message
    assert caught.value.pod_id == pod_id and caught.value.run_id == run_id
    state = rig.state(run_id)
    assert state.pod.status == "deleting" and state.pod.may_bill()
    assert "pod.Deleted" not in rig.names(run_id)


async def test_a_delete_that_fails_raises_and_says_the_pod_may_bill(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.fail_next("DELETE /pods/{id}", 500, times=50)
    with pytest.raises(DeleteUnconfirmed, match=f"cannot delete pod {pod_id}.*may still bill"):
        await delete_pod(rig.context, run_id, pod_id, "requested")
    assert rig.state(run_id).pod.may_bill()
    assert rig.fake.status(pod_id) != "TERMINATED"


async def test_a_pod_already_gone_is_recorded_found_gone(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.vanish(pod_id)
    await delete_pod(rig.context, run_id, pod_id, "not_ready")
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert deleted.by == "found_gone"  # type: ignore[attr-defined]


async def test_ctrl_c_never_tears_a_delete(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.linger_next_delete(8)

    async def interrupt_soon() -> None:
        await trio.sleep(1)
        rig.interrupts.interrupt()
        await trio.sleep(1)
        rig.interrupts.interrupt()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(interrupt_soon)
        await delete_pod(rig.context, run_id, pod_id, "interrupted")
    assert rig.state(run_id).pod.status == "deleted"
    assert f"still deleting pod {pod_id}" in rig.err.getvalue()


async def test_a_stray_is_deleted_with_its_own_rate(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    await new_pod(rig, run_id, 1)
    stray = await new_pod(rig, run_id, 2, record=False)
    await rig.journal.append(run_id, [ev.StrayRecorded(pod_id=stray, reason="duplicate")])
    await trio.sleep(1800)
    created = iso_utc(rig.context.clock())
    await trio.sleep(1800)
    await delete_pod(rig.context, run_id, stray, "duplicate", rate=2.0, created_at=created)

    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert deleted.pod_id == stray  # type: ignore[attr-defined]
    assert deleted.spend == pytest.approx(1.0, abs=0.01)  # type: ignore[attr-defined]
    state = rig.state(run_id)
    assert state.pod.strays == {} and state.pod.pods[stray] == "deleted"
    assert state.pod.status == "created"  # the run's own pod is untouched
    assert state.pod.may_bill()  # that pod still exists


async def test_a_pod_recorded_deleted_is_left_alone(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    await delete_pod(rig.context, run_id, pod_id, "requested")
    before = len(rig.fake.requests)
    await delete_pod(rig.context, run_id, pod_id, "requested")
    assert len(rig.fake.requests) == before
    assert rig.names(run_id).count("pod.Deleted") == 1


async def test_confirmed_gone_takes_three_404s_ten_seconds_apart_and_a_listing(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id, record=False)
    assert await rig.context.client.delete_pod(pod_id)
    start = trio.current_time()
    assert await confirm_gone(rig.context, pod_id)

    after = [r for r in rig.fake.requests if r.time >= start]
    reads = [r.time - start for r in after if r.method == "GET" and r.path != "/pods"]
    assert reads == pytest.approx([0, 10, 20], abs=0.01)
    assert [r.path for r in after][-1] == "/pods"


async def test_a_pod_still_shown_is_not_confirmed_gone(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    live = await new_pod(rig, run_id, 1, record=False)
    assert not await confirm_gone(rig.context, live)

    lingering = await new_pod(rig, run_id, 2, record=False)
    rig.fake.linger_next_delete(2)
    assert await rig.context.client.delete_pod(lingering)
    # Two reads still show it: the second one, 10 s later, says it is not gone yet.
    assert not await confirm_gone(rig.context, lingering)


async def test_a_pod_still_listed_as_terminated_counts_as_gone(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id, record=False)
    rig.fake.pod(pod_id).halted = "TERMINATED"
    # Runpod still shows it, TERMINATED: it bills nothing and never comes back.
    assert (await rig.context.client.get_pod(pod_id)) is not None
    assert await confirm_gone(rig.context, pod_id)


async def test_a_confirmed_delete_drops_the_runs_client_key_once_no_pod_may_bill(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    keys = write_run_keys(rig.context.session.run_dir(run_id) / "ssh", run_id)
    pod_id = await new_pod(rig, run_id)
    await delete_pod(rig.context, run_id, pod_id, "requested")
    assert not keys.client_key_path.exists()


async def test_a_delete_asked_to_keep_the_key_keeps_it_for_the_next_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    keys = write_run_keys(rig.context.session.run_dir(run_id) / "ssh", run_id)
    pod_id = await new_pod(rig, run_id)
    await delete_pod(rig.context, run_id, pod_id, "not_ready", keep_key=True)
    assert keys.client_key_path.exists()


async def test_a_404_not_in_runpods_shape_confirms_nothing(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id, record=False)
    rig.fake.fail_next(
        "GET /pods/{id}", 404, raw_body=b"<html>not found</html>", content_type="text/html"
    )
    with pytest.raises(RunpodApiError, match="not in Runpod's error format"):
        await confirm_gone(rig.context, pod_id)


async def test_two_commands_deleting_one_pod_record_one_deleting_and_one_deleted(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    # Issue 12: two followers ending the same pod each appended pod.Deleting.
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    rig.fake.linger_next_delete(4)  # the first delete takes a while to show
    async with trio.open_nursery() as nursery:
        nursery.start_soon(delete_pod, rig.context, run_id, pod_id, "retrieved")
        await trio.sleep(0.5)  # the second command comes in while the first waits
        nursery.start_soon(delete_pod, rig.context, run_id, pod_id, "requested", "pod_rm")
    assert rig.names(run_id)[-2:] == ["pod.Deleting", "pod.Deleted"]
    (deleting,) = rig.events(run_id, ev.PodDeleting)
    assert isinstance(deleting, ev.PodDeleting) and deleting.reason == "retrieved"
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    # The pod was gone by the joined delete, not found gone by chance.
    assert isinstance(deleted, ev.PodDeleted) and deleted.by in ("client", "pod_rm")
    assert rig.fake.status(pod_id) == "TERMINATED"


async def test_a_delete_recorded_by_a_command_that_died_is_joined_not_recorded_again(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    pod_id = await new_pod(rig, run_id)
    # A command recorded its delete, then died before sending it.
    await rig.journal.append(run_id, [ev.PodDeleting(pod_id=pod_id, reason="retrieved")])
    await delete_pod(rig.context, run_id, pod_id, "requested", "pod_rm")
    assert rig.names(run_id)[-2:] == ["pod.Deleting", "pod.Deleted"]
    (deleted,) = rig.events(run_id, ev.PodDeleted)
    assert isinstance(deleted, ev.PodDeleted) and deleted.by == "pod_rm"
    assert rig.fake.status(pod_id) == "TERMINATED"
