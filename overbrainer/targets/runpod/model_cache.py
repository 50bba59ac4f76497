"""The model cache of a Runpod target with a network volume: the job's ``HF_HOME`` and
Axolotl's ``dataset_prepared_path`` on the volume (``runpod.volume_layout``), so the base
model is downloaded, and the data tokenised, once per volume, not once per pod. Without a
volume, the pod's own (the image's ``HF_HOME``, the run directory's ``prepared/``).

``[training.env]`` ``HF_HOME`` still wins: the job's commands apply it after the pod's job
environment (``target.pod_commands``)."""

from overbrainer.config.model import RunpodTarget
from overbrainer.runpod.volume_layout import hf_home_key, on_pod, prepared_key


def has_volume(spec: RunpodTarget) -> bool:
    """Whether the target's pods mount a network volume (by name, or by its id)."""
    return spec.volume is not None or spec.network_volume_id is not None


def volume_hf_home(spec: RunpodTarget) -> str | None:
    """The job's ``HF_HOME`` on the target's volume; None without one."""
    return on_pod(hf_home_key()) if has_volume(spec) else None


def volume_prepared_path(spec: RunpodTarget) -> str | None:
    """Axolotl's ``dataset_prepared_path`` on the target's volume; None without one."""
    return on_pod(prepared_key()) if has_volume(spec) else None
