"""The preflight's ``parallelism`` line: the processes, the choice and why (a problem for an
explicit choice that cannot fit), and one GPU's memory as a Runpod target knows it."""

from typing import Any

import pytest

from overbrainer.config.model import RunpodTarget
from overbrainer.preflight.checks import Verdict, parallelism_check
from overbrainer.runpod.models import GpuType
from overbrainer.targets.runpod.preflight import gpu_memory_of
from overbrainer.train.parallelism import Choice, GpuMemory


@pytest.mark.parametrize(
    ("choice", "verdict", "summary"),
    [
        (Choice(1, None, "nothing to share"), Verdict.ok, "1 process: nothing to share"),
        (
            Choice("gpu", "ddp", "why", 2.3, "the basis"),
            Verdict.ok,
            "one process per GPU the job sees, ddp: why (estimate: the basis)",
        ),
        (Choice(8, "ddp", "size unknown"), Verdict.ok, "8 processes, ddp: size unknown"),
        (
            Choice(8, "zero3", "why", 99.0, "basis", warning="may not fit"),
            Verdict.warning,
            "8 processes, zero3: why (estimate: basis)",
        ),
        (
            Choice(2, "ddp", "why", 144.0, "basis", problem="refused"),
            Verdict.problem,
            "2 processes, ddp: why (estimate: basis)",
        ),
    ],
)
def test_the_line_says_the_processes_the_choice_and_why(
    choice: Choice, verdict: Verdict, summary: str
) -> None:
    check = parallelism_check(choice)
    assert (check.name, check.verdict, check.summary) == ("parallelism", verdict, summary)
    assert check.problems == ((choice.problem,) if choice.problem else ())
    assert check.warnings == ((choice.warning,) if choice.warning else ())


def _gpu(gpu_id: str, memory: int | None) -> GpuType:
    return GpuType(
        id=gpu_id, name=gpu_id, manufacturer="NVIDIA", memory_gb=memory, secure=True,
        community=True, price_secure=1.0, price_community=None, max_count_secure=8,
        max_count_community=None,
    )  # fmt: skip


CATALOG = [_gpu("NVIDIA A40", 48), _gpu("NVIDIA GeForce RTX 4090", 24), _gpu("Mystery", None)]


def _target(**changes: Any) -> RunpodTarget:
    return RunpodTarget(**{"kind": "runpod", "max_hours": 1, **changes})


@pytest.mark.parametrize(
    ("changes", "catalog", "memory"),
    [
        (
            {"gpu_types": ["NVIDIA A40"]},
            CATALOG,
            GpuMemory(48, "NVIDIA A40 in Runpod's catalog"),
        ),
        (
            {"gpu_types": ["NVIDIA A40", "NVIDIA GeForce RTX 4090", "Mystery"]},
            CATALOG,
            GpuMemory(24, "NVIDIA GeForce RTX 4090 in Runpod's catalog, the smallest of gpu_types"),
        ),
        ({"gpu_types": ["Mystery", "Unknown"]}, CATALOG, None),
        ({"gpu_types": ["NVIDIA A40"]}, None, None),  # the catalog was not read
        (
            {"gpu_types": "auto", "min_vram_gb": 40},
            None,
            GpuMemory(40, "at least: min_vram_gb = 40"),
        ),
    ],
)
def test_one_gpus_memory_is_the_least_the_pod_may_have(
    changes: dict[str, Any], catalog: list[GpuType] | None, memory: GpuMemory | None
) -> None:
    assert gpu_memory_of(_target(**changes), catalog) == memory
