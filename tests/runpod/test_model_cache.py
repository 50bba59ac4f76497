"""The model cache of a Runpod target with a network volume: its pods are created with the
job's ``HF_HOME`` on the volume, and Axolotl's ``dataset_prepared_path`` is rendered there;
without a volume, neither (the fake Runpod API in-process, trio's MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio.testing

from overbrainer.config.model import TrainingSettings
from overbrainer.runpod.pod_scripts import ENV_HF_HOME
from overbrainer.targets.runpod.model_cache import volume_hf_home, volume_prepared_path
from overbrainer.targets.runpod.provision import provision
from overbrainer.testing.fake_executor import CANARY_KEY, PodRig, pod_rig, runpod_target
from overbrainer.train.axolotl import render_config

A40 = "NVIDIA A40"


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[PodRig]:
    async with pod_rig(tmp_path) as rig:
        yield rig


async def test_a_pod_on_a_volume_is_created_with_the_volumes_hf_home(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    target = runpod_target([A40], volume="cache", data_center_ids=["EU-RO-1"])
    await provision(rig.context, await rig.new_run(), target, keep=False)
    (body,) = rig.creates()
    env = body["env"]
    assert isinstance(env, dict)
    assert env[ENV_HF_HOME] == "/runpod-volume/overbrainer/hf"


async def test_a_pod_on_a_volume_given_by_its_id_too(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    volume = rig.fake.add_network_volume(CANARY_KEY, "mine", data_center="EU-RO-1")
    target = runpod_target([A40], network_volume_id=volume.id, data_center_ids=["EU-RO-1"])
    await provision(rig.context, await rig.new_run(), target, keep=False)
    (body,) = rig.creates()
    env = body["env"]
    assert isinstance(env, dict)
    assert env[ENV_HF_HOME] == "/runpod-volume/overbrainer/hf"


async def test_a_pod_without_a_volume_keeps_the_images_hf_home(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    await provision(rig.context, await rig.new_run(), runpod_target([A40]), keep=False)
    (body,) = rig.creates()
    env = body["env"]
    assert isinstance(env, dict)
    assert ENV_HF_HOME not in env  # the bootstrap writes the image's own


def test_the_tokenised_data_is_kept_on_the_volume_when_there_is_one() -> None:
    training = TrainingSettings.model_validate(
        {"target": "gpu", "base_model": "a/b", "adapter": "lora"}
    )
    on_volume = runpod_target([A40], volume="cache", volume_data_center="EU-RO-1")
    assert volume_prepared_path(on_volume) == "/runpod-volume/overbrainer/prepared"
    assert volume_hf_home(on_volume) == "/runpod-volume/overbrainer/hf"
    cfg = render_config(training, has_eval=False, prepared=volume_prepared_path(on_volume))
    assert cfg["dataset_prepared_path"] == "/runpod-volume/overbrainer/prepared"
    alone = runpod_target([A40])
    assert volume_prepared_path(alone) is None and volume_hf_home(alone) is None
    cfg = render_config(training, has_eval=False, prepared=volume_prepared_path(alone))
    assert cfg["dataset_prepared_path"] == "./prepared"
