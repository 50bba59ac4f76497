"""A target's network volume (``volume = "NAME"``) among the account's: the one to mount,
or none yet (the first run creates it), or why none can be used. Pure: the caller lists
the volumes (``GET /network-volumes``)."""

from collections.abc import Sequence
from dataclasses import dataclass

from overbrainer.runpod.models import NetworkVolume
from overbrainer.runpod.volume_layout import VOLUME_MOUNT

__all__ = ["VOLUME_MOUNT", "VOLUME_PRICE_PER_GB_MONTH", "VolumeFound", "find_volume"]

VOLUME_PRICE_PER_GB_MONTH = 0.07
"""What Runpod bills a network volume per GB and month (USD, its first TB)."""


@dataclass(frozen=True)
class VolumeFound:
    """The volume named ``name`` in ``data_center``: ``volume`` is it (None: there is none
    yet, and the first run creates it), unless ``problem`` says why none may be used."""

    name: str
    data_center: str
    volume: NetworkVolume | None = None
    problem: str | None = None


def find_volume(
    volumes: Sequence[NetworkVolume], name: str, data_center: str, target: str
) -> VolumeFound:
    """The volume of target ``target`` (``volume = name``, in ``data_center``) among the
    account's ``volumes``. Names are not unique at Runpod: one of that name elsewhere
    (a pod can only mount a volume of its own data center) or two of it here is a
    problem that names what to change, never a guess."""
    named = [v for v in volumes if v.name == name]
    here = [v for v in named if v.data_center == data_center]
    if len(here) == 1:
        return VolumeFound(name, data_center, here[0])
    if len(here) > 1:
        ids = ", ".join(v.id for v in here)
        return VolumeFound(
            name,
            data_center,
            problem=(
                f"the account has {len(here)} network volumes named {name!r} in {data_center} "
                f"({ids}): delete the extra ones or give targets.{target}.volume another name"
            ),
        )
    if named:
        there = named[0].data_center or data_center
        elsewhere = ", ".join(sorted({v.data_center or "an unknown data center" for v in named}))
        return VolumeFound(
            name,
            data_center,
            problem=(
                f"the account's network volume {name!r} lives in {elsewhere}, not in "
                f"{data_center} (a pod mounts only a volume of its own data center): set "
                f'targets.{target}.volume_data_center = "{there}" or give '
                f"targets.{target}.volume another name"
            ),
        )
    return VolumeFound(name, data_center)
