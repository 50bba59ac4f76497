"""The preflight of a Runpod target: the API key (by listing the account's pods), the GPU
types (by the catalog, with its stock for the pod's GPU count), the candidates they give,
the image. Every verdict comes from :mod:`overbrainer.preflight.checks`; nothing is
written and no pod is created.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING

from overbrainer.config.load import ConfigError
from overbrainer.config.model import RUNPOD_DEFAULT_IMAGE, RunpodTarget, Settings
from overbrainer.preflight import checks
from overbrainer.preflight.checks import ApiFailure, Check
from overbrainer.runpod.clocks import ServerClock
from overbrainer.runpod.models import GpuType, Pod
from overbrainer.runpod.volumes import VolumeFound
from overbrainer.train.parallelism import Choice, GpuMemory, choose_for

if TYPE_CHECKING:
    from overbrainer.runpod.client import RunpodClient
    from overbrainer.runpod.volume_usage import Usage

__all__ = ["check_pod_target", "gpu_memory_of", "parallelism_of"]


def gpu_memory_of(spec: RunpodTarget, catalog: Sequence[GpuType] | None) -> GpuMemory | None:
    """The memory of one GPU of the pod, as the least it may have: with a list of types,
    the smallest of those the catalog knows (any of them may be the one rented); with
    ``"auto"``, ``min_vram_gb`` (no candidate has less). None: the catalog was not read.
    The catalog's GB are a GPU's binary gigabytes (a 24 GB card holds 24 GiB)."""
    if spec.gpu_types == "auto":
        assert spec.min_vram_gb is not None  # the configuration requires it with "auto"
        return GpuMemory(float(spec.min_vram_gb), f"at least: min_vram_gb = {spec.min_vram_gb}")
    if catalog is None:
        return None
    known = {gpu.id: gpu.memory_gb for gpu in catalog}
    sizes = [(known[t], t) for t in spec.gpu_types if known.get(t)]
    if not sizes:
        return None
    memory, name = min(sizes)
    assert memory is not None
    many = len(sizes) > 1
    source = f"{name} in Runpod's catalog{', the smallest of gpu_types' if many else ''}"
    return GpuMemory(float(memory), source)


def parallelism_of(
    settings: Settings, spec: RunpodTarget, catalog: Sequence[GpuType] | None
) -> Choice:
    """How the pod's job shares the model among its ``gpu_count`` GPUs."""
    return choose_for(
        settings.training, processes=spec.job_processes, gpu=gpu_memory_of(spec, catalog)
    )


async def check_pod_target(
    found: list[Check], settings: Settings, name: str, spec: RunpodTarget
) -> tuple[list[Pod] | None, ServerClock | None, list[GpuType] | None]:
    """The key (by listing the account's pods), the GPU types (by the catalog, with its
    stock for the pod's GPU count), the candidates they give, the image, how the job's
    processes share the model among the pod's GPUs; the pods listed,
    Runpod's clock as the answers told it and the catalog read."""
    from overbrainer.runpod.candidates import wanted_of
    from overbrainer.runpod.client import RunpodClient, RunpodError, RunpodUnreachable

    base = settings.runpod.base_url
    pods: list[Pod] | None = None
    clock: ServerClock | None = None
    read: list[GpuType] | None = None
    wanted = wanted_of(name, spec, priced=settings.project.monthly_budget_usd is not None)
    try:
        key = settings.require_runpod_api_key()
    except ConfigError as error:
        found.append(checks.runpod_key_check(base, "; ".join(error.problems)))
        found.append(checks.skipped("gpu types", "not checked: no API key"))
        if wanted.needs_catalog:
            found.append(checks.skipped("gpu candidates", "not chosen: no API key"))
        if spec.volume is not None:
            found.append(checks.skipped("network volume", "not looked up: no API key"))
    else:
        async with RunpodClient(key, base) as client:
            answer: int | ApiFailure
            try:
                pods = await client.list_pods()
                answer = len(pods)
            except RunpodError as error:
                unreachable = isinstance(error, RunpodUnreachable)
                answer = ApiFailure(error.status, str(error), unreachable=unreachable)
            found.append(checks.runpod_key_check(base, answer))
            if isinstance(answer, ApiFailure):
                found.append(checks.skipped("gpu types", "not checked: see runpod key"))
                if wanted.needs_catalog:
                    found.append(checks.skipped("gpu candidates", "not chosen: see runpod key"))
                if spec.volume is not None:
                    found.append(checks.skipped("network volume", "not looked up: see runpod key"))
            else:
                catalog: list[GpuType] | ApiFailure
                try:
                    catalog = await client.list_gpu_types(
                        availability=True, gpu_count=spec.gpu_count, product=wanted.product
                    )
                    read = catalog
                except RunpodError as error:
                    catalog = ApiFailure(error.status, str(error))
                if spec.gpu_types != "auto":
                    found.append(
                        checks.gpu_types_check(name, spec.gpu_types, spec.gpu_count, catalog)
                    )
                if wanted.needs_catalog:
                    found.append(checks.candidates_check(wanted, catalog))
                if spec.volume is not None:
                    found.append(await _volume(client, name, spec, settings))
            clock = client.server_clock if client.server_clock.known else None
    if spec.wait_for_capacity is not None and spec.capacity_wait_seconds > 0:
        found.append(
            checks.capacity_wait_check(name, spec.wait_for_capacity, spec.capacity_wait_seconds)
        )
    found.append(
        checks.image_check(
            "pod image",
            f"targets.{name}.image",
            spec.image,
            allowed_unpinned=spec.allow_unpinned_image,
            default=spec.image == RUNPOD_DEFAULT_IMAGE and "image" not in spec.model_fields_set,
        )
    )
    found.append(checks.parallelism_check(parallelism_of(settings, spec, read)))
    return pods, clock, read


async def _volume(
    client: "RunpodClient", name: str, spec: RunpodTarget, settings: Settings
) -> Check:
    """The target's network volume among the account's (listed once), and what it holds
    (read through Runpod's S3 API when its key is set)."""
    from overbrainer.runpod.client import RunpodError
    from overbrainer.runpod.volumes import find_volume

    volume, center = spec.volume, spec.volume_center
    assert volume is not None and center is not None
    answer: VolumeFound | ApiFailure
    try:
        answer = find_volume(await client.list_network_volumes(), volume, center, name)
    except RunpodError as error:
        answer = ApiFailure(error.status, str(error))
    held = None
    if isinstance(answer, VolumeFound) and answer.volume is not None:
        held = await _held(settings, answer.volume.id, center)
    return checks.volume_check(spec.volume_size_gb, answer, volume, center, held)


async def _held(settings: Settings, volume_id: str, center: str) -> "Usage | str":
    """What the volume holds by part, or why that is not known (a phrase)."""
    from overbrainer.runpod.s3 import S3Error, volume_s3
    from overbrainer.runpod.volume_usage import usage_of

    try:
        s3 = volume_s3(settings.runpod, volume_id, center)
        if s3 is None:
            return (
                "what it holds is read through Runpod's S3 API: set "
                "OVERBRAINER_RUNPOD__S3_ACCESS_KEY/__S3_SECRET to see it here"
            )
        async with s3:
            return usage_of(await s3.list_objects())
    except S3Error as error:
        return f"what it holds could not be read ({error})"
