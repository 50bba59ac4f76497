"""The walk with the project's network volume (``volume = "NAME"``): found by its name or
created before the first create, recorded, the pod created only where it lives with the
volume mounted; a volume that cannot be used stops the run before any pod (the fake
Runpod API in-process, trio's MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.events import types as ev
from overbrainer.runpod.models import NetworkVolume
from overbrainer.runpod.volumes import find_volume
from overbrainer.targets.runpod.provision import ProvisionError, provision
from overbrainer.testing.fake_executor import CANARY_KEY, PodRig, pod_rig, runpod_target

A40 = "NVIDIA A40"


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[PodRig]:
    async with pod_rig(tmp_path) as rig:
        yield rig


def volume_requests(rig: PodRig) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in rig.fake.requests if "network-volumes" in r.path]


async def test_the_first_run_creates_the_volume_before_its_pod_and_mounts_it(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    target = runpod_target(
        [A40], volume="cache", volume_size_gb=20, data_center_ids=["EU-RO-1", "US-KS-2"],
        volume_data_center="US-KS-2",
    )  # fmt: skip
    run_id = await rig.new_run()
    ready = await provision(rig.context, run_id, target, keep=False)
    (volume,) = rig.fake.live_volumes(CANARY_KEY)
    assert (volume.name, volume.size, volume.data_center) == ("cache", 20, "US-KS-2")
    assert volume_requests(rig) == [("GET", "/network-volumes"), ("POST", "/network-volumes")]
    # Listed and created before the first create; the pod only where the volume lives.
    first_create = min(r.time for r in rig.fake.create_requests())
    assert all(r.time <= first_create for r in rig.fake.requests if "volumes" in r.path)
    (body,) = rig.creates()
    assert body["dataCenterIds"] == ["US-KS-2"]
    assert body["mounts"] == {"network": [{"volumeId": volume.id, "path": "/runpod-volume"}]}
    assert ready.data_center == "US-KS-2"
    names = rig.names(run_id)
    assert names.index("pod.VolumeAttached") < names.index("pod.AttemptSent")
    (attached,) = rig.events(run_id, ev.VolumeAttached)
    assert isinstance(attached, ev.VolumeAttached)
    assert (attached.volume_id, attached.volume_name, attached.data_center) == (
        volume.id,
        "cache",
        "US-KS-2",
    )
    assert attached.created is True and attached.size_gb == 20
    assert f"created network volume cache ({volume.id}) in US-KS-2" in rig.err.getvalue()


async def test_a_later_run_finds_the_volume_by_its_name_and_creates_none(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    existing = rig.fake.add_network_volume(CANARY_KEY, "cache", data_center="EU-RO-1")
    rig.fake.add_network_volume(CANARY_KEY, "other", data_center="EU-RO-1")
    target = runpod_target([A40], volume="cache", data_center_ids=["EU-RO-1"])
    run_id = await rig.new_run()
    await provision(rig.context, run_id, target, keep=False)
    assert volume_requests(rig) == [("GET", "/network-volumes")]
    (body,) = rig.creates()
    assert body["mounts"] == {"network": [{"volumeId": existing.id, "path": "/runpod-volume"}]}
    (attached,) = rig.events(run_id, ev.VolumeAttached)
    assert attached.created is False  # type: ignore[attr-defined]


async def test_a_volume_of_that_name_in_another_data_center_stops_the_run_before_any_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    rig.fake.add_network_volume(CANARY_KEY, "cache", data_center="US-TX-3")
    target = runpod_target([A40], volume="cache", volume_data_center="EU-RO-1")
    run_id = await rig.new_run()
    with pytest.raises(ProvisionError) as stopped:
        await provision(rig.context, run_id, target, keep=False)
    message = str(stopped.value)
    assert "network volume 'cache' lives in US-TX-3, not in EU-RO-1" in message
    assert 'set targets.gpu.volume_data_center = "US-TX-3"' in message
    assert "no pod was created" in message
    assert rig.fake.create_requests() == [] and rig.fake.volume_create_requests() == []
    assert "pod.VolumeAttached" not in rig.names(run_id)


async def test_a_volume_that_cannot_be_created_stops_the_run_before_any_pod(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    rig.fake.fail_next("POST /network-volumes", 403)
    target = runpod_target([A40], volume="cache", volume_data_center="EU-RO-1")
    run_id = await rig.new_run()
    with pytest.raises(ProvisionError, match="cannot find or create the network volume 'cache'"):
        await provision(rig.context, run_id, target, keep=False)
    assert rig.fake.create_requests() == []


def test_two_volumes_of_one_name_in_the_data_center_are_never_guessed_between() -> None:
    def volume(volume_id: str, center: str) -> NetworkVolume:
        return NetworkVolume(volume_id, "cache", 50, center, "STANDARD")

    found = find_volume([volume("a", "EU-RO-1"), volume("b", "EU-RO-1")], "cache", "EU-RO-1", "gpu")
    assert found.volume is None
    assert found.problem is not None and "(a, b)" in found.problem
    assert "targets.gpu.volume another name" in found.problem
    alone = find_volume([volume("a", "EU-RO-1"), volume("c", "US-KS-2")], "cache", "US-KS-2", "g")
    assert alone.volume is not None and alone.volume.id == "c" and alone.problem is None
