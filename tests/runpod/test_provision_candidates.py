"""The walk on ``gpu_types = "auto"`` and under ``max_cost_usd``: the catalog read once before
any create, the candidates tried cheapest first, their bound shortened to the cap, and
refusals before any create (the fake Runpod API in-process, trio's MockClock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from overbrainer.config.model import RunpodTarget
from overbrainer.events import types as ev
from overbrainer.projections.timeline import describe
from overbrainer.runpod.pod_scripts import ENV_MAX_SECONDS
from overbrainer.targets.runpod.provision import NoGpuCandidate, provision
from overbrainer.testing.fake_executor import PINNED_IMAGE, PodRig, pod_rig, runpod_target
from overbrainer.testing.runpod_api import FakeGpuType, FakeRunpod

A40 = "NVIDIA A40"
L40S = "NVIDIA L40S"
A100 = "NVIDIA A100 80GB PCIe"
H100 = "NVIDIA H100 80GB HBM3"
RTX = "NVIDIA GeForce RTX 4090"
CATALOG = (
    FakeGpuType(RTX, "RTX 4090", 24, 0.69, 0.34),
    FakeGpuType(H100, "H100 SXM", 80, 2.99, 2.69),
    FakeGpuType(A100, "A100 PCIe", 80, 1.19),
    FakeGpuType(L40S, "L40S", 48, 0.86),
    FakeGpuType(A40, "A40", 48, 0.40, 0.35, max_count=10),
    FakeGpuType("NVIDIA RTX 6000 Ada", "RTX 6000 Ada", 48, 0.77, 0.74, secure=False),
)


@pytest.fixture
async def rig(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with pod_rig(tmp_path, fake=FakeRunpod(gpu_types=CATALOG)) as rig:
        yield rig


def auto(**settings: Any) -> RunpodTarget:
    values: dict[str, Any] = {
        "kind": "runpod",
        "gpu_types": "auto",
        "max_hours": 4.0,
        "image": PINNED_IMAGE,
        "min_vram_gb": 40,
        "max_price_per_hour": 1.5,
    }
    values.update(settings)
    return RunpodTarget.model_validate({k: v for k, v in values.items() if v is not None})


def create_gpus(rig: PodRig) -> list[str]:
    return [body["gpu"]["id"] for body in rig.creates()]  # type: ignore[index]


def catalog_reads(rig: PodRig) -> list[dict[str, str]]:
    return [r.query for r in rig.fake.requests if r.path.startswith("/catalog/")]


async def test_auto_tries_exactly_the_qualifying_types_cheapest_first(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    # Nothing is placeable: every qualifying type is tried, in order, and nothing else.
    for gpu in CATALOG:
        rig.fake.set_capacity(gpu.id, 0)
    with pytest.raises(Exception, match="got no pod"):
        await provision(rig.context, run_id, auto(), keep=False)
    assert create_gpus(rig) == [A40, L40S, A100]
    # One catalog read, with the stock for the pod's GPU count, before the first create.
    assert catalog_reads(rig) == [
        {"include": "AVAILABILITY", "product": "POD", "cloud": "SECURE", "count": "1"}
    ]
    first_create = min(r.time for r in rig.fake.create_requests())
    assert all(r.time <= first_create for r in rig.fake.requests if r.path == "/catalog/gpus")
    names = rig.names(run_id)
    assert names[:3] == ["run.Created", "pod.CandidatesChosen", "pod.KeysGenerated"]
    (chosen,) = rig.events(run_id, ev.CandidatesChosen)
    assert isinstance(chosen, ev.CandidatesChosen)
    assert chosen.source == "auto" and chosen.min_vram_gb == 40
    assert [(c["gpu_type"], c["price_per_hour"]) for c in chosen.candidates] == [
        (A40, 0.40),
        (L40S, 0.86),
        (A100, 1.19),
    ]
    assert {x["gpu_type"]: x["reason"] for x in chosen.left} == {
        RTX: "24 GB < min_vram_gb 40",
        H100: "$2.99/h > max_price_per_hour $1.50",
        "NVIDIA RTX 6000 Ada": "not offered on the secure cloud",
    }
    sent = rig.events(run_id, ev.AttemptSent)
    assert [(e.gpu_type, e.price_per_hour, e.max_hours) for e in sent] == [  # type: ignore[attr-defined]
        (A40, 0.40, 4.0),
        (L40S, 0.86, 4.0),
        (A100, 1.19, 4.0),
    ]
    assert describe(chosen) == (
        "GPU types to try, cheapest first: NVIDIA A40 $0.40/h, NVIDIA L40S $0.86/h, "
        "NVIDIA A100 80GB PCIe $1.19/h; 3 left out (events -v says why)"
    )


async def test_auto_takes_the_cheapest_in_stock_and_counts_the_gpus(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.set_capacity(A40, 1)  # not enough for a pod of two: out of stock, tried last
    ready = await provision(rig.context, run_id, auto(gpu_count=2), keep=False)
    assert create_gpus(rig) == [L40S]
    assert ready.gpu_type == L40S and ready.rate == pytest.approx(1.72)
    (sent,) = rig.events(run_id, ev.AttemptSent)
    assert sent.price_per_hour == pytest.approx(1.72)  # type: ignore[attr-defined]
    (chosen,) = rig.events(run_id, ev.CandidatesChosen)
    assert [c["gpu_type"] for c in chosen.candidates] == [L40S, A100, A40]  # type: ignore[attr-defined]
    assert "attempt 1: asking Runpod for pod" in rig.err.getvalue()
    assert "on NVIDIA L40S at $1.72/h (max_hours 4 from its creation)" in rig.err.getvalue()


async def test_none_qualifying_refuses_before_any_create_naming_the_cheapest_type(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    with pytest.raises(NoGpuCandidate) as caught:
        await provision(rig.context, run_id, auto(max_price_per_hour=0.3), keep=False)
    text = str(caught.value)
    assert "the cheapest that would qualify without that limit is NVIDIA A40" in text
    assert "set targets.gpu.max_price_per_hour = 0.4" in text
    assert rig.fake.create_requests() == []
    assert rig.names(run_id) == ["run.Created"]


async def test_a_cap_under_one_hour_of_the_cheapest_refuses_before_any_create(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    with pytest.raises(NoGpuCandidate) as caught:
        await provision(rig.context, run_id, auto(max_cost_usd=0.25), keep=False)
    text = str(caught.value)
    assert "the cheapest is 1 × NVIDIA A40 at $0.40/h" in text
    assert "set targets.gpu.max_cost_usd = 0.4 or more for one hour" in text
    assert rig.fake.create_requests() == []


async def test_the_cap_shortens_the_pods_bound_and_says_so(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("POST /pods", 400)  # the A40, in stock, cannot be placed after all
    spec = auto(max_cost_usd=2.15, gpu_count=1)
    ready = await provision(rig.context, run_id, spec, keep=False)
    assert create_gpus(rig) == [A40, L40S]
    bodies = rig.creates()
    # A40: 4 h × $0.40 fits; L40S: $2.15 pays 2.5 h at $0.86/h.
    assert bodies[0]["env"][ENV_MAX_SECONDS] == str(4 * 3600)  # type: ignore[index]
    assert bodies[1]["env"][ENV_MAX_SECONDS] == str(150 * 60)  # type: ignore[index]
    sent = rig.events(run_id, ev.AttemptSent)
    assert [(e.gpu_type, e.max_hours) for e in sent] == [(A40, 4.0), (L40S, 2.5)]  # type: ignore[attr-defined]
    created = rig.state(run_id).pod
    assert created.deadline is not None
    (made,) = rig.events(run_id, ev.PodCreated)
    assert made.deadline is not None and made.created_at is not None  # type: ignore[attr-defined]
    from overbrainer.runpod.decide import deadline
    from overbrainer.utc import parse_utc

    born = parse_utc(made.created_at)  # type: ignore[attr-defined]
    assert born is not None and made.deadline == deadline(born, 2.5).isoformat().replace(  # type: ignore[attr-defined]
        "+00:00", "Z"
    )
    assert ready.deadline == deadline(born, 2.5)
    out = rig.err.getvalue()
    assert (
        "pod deadline shortened to 2.5 h (from max_hours 4): 1 × NVIDIA L40S at $0.86/h "
        "stays within max_cost_usd $2.15"
    ) in out
    assert (
        "pod.CandidatesChosen: GPU types to try, cheapest first: NVIDIA A40 $0.40/h, "
        "NVIDIA L40S $0.86/h (deadline 2.5 h by max_cost_usd $2.15), NVIDIA A100 80GB PCIe "
        "$1.19/h (deadline 1.8 h by max_cost_usd $2.15); 3 left out"
    ) in out


async def test_an_explicit_list_under_a_cap_is_priced_from_the_catalog(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    spec = runpod_target([H100, "NVIDIA B200", A40], max_hours=4.0, max_cost_usd=3.0)
    await provision(rig.context, run_id, spec, keep=False)
    # The H100 is tried first, as listed, for the hour its price leaves; the B200 (no
    # price) is never sent.
    assert create_gpus(rig) == [H100]
    (sent,) = rig.events(run_id, ev.AttemptSent)
    assert sent.max_hours == 1.0 and sent.price_per_hour == pytest.approx(2.99)  # type: ignore[attr-defined]
    (chosen,) = rig.events(run_id, ev.CandidatesChosen)
    assert chosen.source == "list"  # type: ignore[attr-defined]
    assert [c["gpu_type"] for c in chosen.candidates] == [H100, A40]  # type: ignore[attr-defined]


async def test_a_cap_with_an_unreadable_catalog_creates_nothing(
    rig: PodRig, autojump_clock: trio.testing.MockClock
) -> None:
    run_id = await rig.new_run()
    rig.fake.fail_next("GET /catalog/gpus", 503, times=50)
    spec = runpod_target([A40], max_cost_usd=3.0)
    with pytest.raises(NoGpuCandidate, match="max_cost_usd needs each GPU type's price"):
        await provision(rig.context, run_id, spec, keep=False)
    assert rig.fake.create_requests() == []
    # Without a cap a plain list needs no catalog at all.
    await provision(rig.context, run_id, runpod_target([A40]), keep=False)
    assert create_gpus(rig) == [A40]
