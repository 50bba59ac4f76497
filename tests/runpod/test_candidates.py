"""The choice of a run's GPU candidates and of each one's bound, as tables (no I/O)."""

from dataclasses import replace

import pytest

from overbrainer.config.model import RunpodTarget
from overbrainer.runpod.candidates import (
    Candidate,
    NoCandidate,
    Wanted,
    choose,
    cost_bound,
    run_cost_bound,
    shortened_text,
    wanted_of,
)
from overbrainer.runpod.models import Availability, DataCenterAvailability, GpuType
from overbrainer.testing.fake_executor import runpod_target


def gpu(
    gpu_id: str,
    memory: int | None,
    price: float | None,
    *,
    stock: Availability | None = None,
    secure: bool = True,
    max_count: int | None = 8,
    centers: tuple[tuple[str, Availability], ...] = (),
) -> GpuType:
    return GpuType(
        id=gpu_id,
        name=gpu_id.removeprefix("NVIDIA "),
        manufacturer="NVIDIA",
        memory_gb=memory,
        secure=secure,
        community=True,
        price_secure=price,
        price_community=None,
        max_count_secure=max_count,
        max_count_community=None,
        availability=stock,
        data_centers=tuple(DataCenterAvailability(dc, dc, level) for dc, level in centers),
    )


HIGH, LOW, NONE = Availability.HIGH, Availability.LOW, Availability.NONE
CATALOG = (
    gpu("NVIDIA GeForce RTX 4090", 24, 0.69, stock=HIGH),
    gpu("NVIDIA A40", 48, 0.40, stock=LOW),
    gpu("NVIDIA L40S", 48, 0.86, stock=HIGH),
    gpu("NVIDIA A100 80GB PCIe", 80, 1.19, stock=HIGH),
    gpu("NVIDIA H100 80GB HBM3", 80, 2.99, stock=HIGH),
    gpu("NVIDIA RTX 6000 Ada", 48, 0.77, stock=HIGH, secure=False),
)
AUTO = Wanted(
    target="gpu", gpu_types="auto", gpu_count=1, max_hours=4.0, min_vram_gb=40,
    max_price_per_hour=1.5,
)  # fmt: skip


def ids(wanted: Wanted, catalog: tuple[GpuType, ...] | None = CATALOG) -> list[str]:
    return [c.gpu_type for c in choose(wanted, catalog).candidates]


def test_auto_takes_the_qualifying_types_cheapest_first_and_says_why_others_are_left_out() -> None:
    chosen = choose(AUTO, CATALOG)
    assert chosen.source == "auto"
    assert [(c.gpu_type, c.price_per_gpu, c.max_hours, c.shortened) for c in chosen.candidates] == [
        ("NVIDIA A40", 0.40, 4.0, False),
        ("NVIDIA L40S", 0.86, 4.0, False),
        ("NVIDIA A100 80GB PCIe", 1.19, 4.0, False),
    ]
    assert {x.gpu_type: x.reason for x in chosen.left} == {
        "NVIDIA GeForce RTX 4090": "24 GB < min_vram_gb 40",
        "NVIDIA H100 80GB HBM3": "$2.99/h > max_price_per_hour $1.50",
        "NVIDIA RTX 6000 Ada": "not offered on the secure cloud",
    }


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # No price limit: every large enough type, cheapest first.
        (
            {"max_price_per_hour": None},
            ["NVIDIA A40", "NVIDIA L40S", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3"],
        ),
        # A price limit exactly at a price keeps that type.
        ({"max_price_per_hour": 0.86}, ["NVIDIA A40", "NVIDIA L40S"]),
        ({"min_vram_gb": 80}, ["NVIDIA A100 80GB PCIe"]),
        ({"min_vram_gb": 24, "max_price_per_hour": 0.7}, ["NVIDIA A40", "NVIDIA GeForce RTX 4090"]),
    ],
)
def test_auto_filters_by_memory_and_price(change: dict[str, object], expected: list[str]) -> None:
    assert ids(replace(AUTO, **change)) == expected  # type: ignore[arg-type]


def test_out_of_stock_types_come_last_and_stock_is_read_in_the_allowed_data_centers() -> None:
    catalog = (
        gpu("A", 48, 0.40, stock=NONE),
        gpu("B", 48, 0.50, stock=HIGH, centers=(("US-TX-3", HIGH),)),
        gpu("C", 48, 0.60, stock=LOW, centers=(("EU-RO-1", LOW),)),
        gpu("D", 48, 0.70),  # the catalog did not say: not pushed back
    )
    assert ids(AUTO, catalog) == ["B", "C", "D", "A"]
    in_romania = replace(AUTO, data_center_ids=("EU-RO-1",))
    chosen = choose(in_romania, catalog)
    assert [(c.gpu_type, c.stock) for c in chosen.candidates] == [
        ("C", LOW),
        ("D", None),
        ("A", NONE),
        ("B", NONE),  # in stock elsewhere only
    ]


def test_auto_leaves_out_types_that_cannot_hold_the_gpu_count_or_have_no_price() -> None:
    catalog = (
        gpu("A", 48, 0.40, max_count=2),
        gpu("B", 48, None),
        gpu("C", 48, 0.0),
        gpu("D", None, 0.3),
        gpu("E", 48, 0.9),
    )
    chosen = choose(replace(AUTO, gpu_count=4), catalog)
    assert [c.gpu_type for c in chosen.candidates] == ["E"]
    assert chosen.candidates[0].rate == pytest.approx(3.6)
    assert {x.gpu_type: x.reason for x in chosen.left} == {
        "A": "at most 2 per pod < gpu_count 4",
        "B": "no secure-cloud price listed",
        "C": "no secure-cloud price listed",
        "D": "memory not listed",
    }


def test_none_qualifying_names_the_cheapest_type_without_the_price_limit() -> None:
    with pytest.raises(NoCandidate) as caught:
        choose(replace(AUTO, max_price_per_hour=0.35), CATALOG)
    text = str(caught.value)
    assert "the cheapest that would qualify without that limit is NVIDIA A40" in text
    assert "$0.40/h" in text
    assert "set targets.gpu.max_price_per_hour = 0.4" in text
    assert "no pod was created" in text


def test_none_large_enough_names_the_largest_type_and_the_setting() -> None:
    with pytest.raises(NoCandidate) as caught:
        choose(replace(AUTO, min_vram_gb=141), CATALOG)
    text = str(caught.value)
    assert "has at least 141 GB" in text
    assert "the largest is NVIDIA H100 80GB HBM3, 80 GB" in text
    assert "lower targets.gpu.min_vram_gb" in text


def test_a_catalog_that_could_not_be_read_refuses_only_where_it_is_needed() -> None:
    with pytest.raises(NoCandidate, match='gpu_types = "auto" chooses from it'):
        choose(AUTO, None)
    listed = Wanted(target="gpu", gpu_types=("NVIDIA A40",), gpu_count=1, max_hours=4.0)
    assert choose(listed, None).candidates == (Candidate("NVIDIA A40", 4.0),)
    with pytest.raises(NoCandidate, match="max_cost_usd needs each GPU type's price"):
        choose(replace(listed, max_cost_usd=10.0), None)
    with pytest.raises(NoCandidate, match=r"project\.monthly_budget_usd needs each GPU type"):
        choose(replace(listed, priced=True), None)


LISTED = Wanted(
    target="gpu", gpu_types=("NVIDIA A40", "NVIDIA L40S"), gpu_count=2, max_hours=4.0
)  # fmt: skip


@pytest.mark.parametrize(
    ("wanted", "catalog", "bound"),
    [
        # max_cost_usd bounds the run, whatever the candidates cost.
        (replace(LISTED, max_cost_usd=7.5), CATALOG, 7.5),
        (replace(AUTO, max_cost_usd=2.0), CATALOG, 2.0),
        # No cap: "auto"'s price bound × gpu_count × max_hours.
        (replace(AUTO, gpu_count=2), CATALOG, 1.5 * 2 * 4.0),
        # No price bound: the dearest candidate × gpu_count × max_hours.
        (LISTED, CATALOG, 0.86 * 2 * 4.0),
        (replace(AUTO, max_price_per_hour=None), CATALOG, 2.99 * 4.0),
        # A run may get a new pod per recovery, each as dear as its first...
        (replace(AUTO, gpu_count=2, max_recoveries=3), CATALOG, 1.5 * 2 * 4.0 * 4),
        (replace(LISTED, max_recoveries=1), CATALOG, 0.86 * 2 * 4.0 * 2),
        # ... unless max_cost_usd bounds them all.
        (replace(LISTED, max_recoveries=3, max_cost_usd=7.5), CATALOG, 7.5),
        # A candidate without a price: nothing bounds it.
        (replace(LISTED, gpu_types=("NVIDIA A40", "NVIDIA B200")), CATALOG, None),
        (LISTED, None, None),
    ],
)
def test_a_runs_cost_bound_is_its_cap_else_each_pods_price_bound_or_dearest_candidate(
    wanted: Wanted, catalog: tuple[GpuType, ...] | None, bound: float | None
) -> None:
    found = run_cost_bound(wanted, choose(wanted, catalog))
    assert found == (None if bound is None else pytest.approx(bound))


@pytest.mark.parametrize(
    ("max_hours", "rate", "cap", "bound"),
    [
        (4.0, 1.5, 100.0, 4.0),  # all of max_hours fits
        (4.0, 1.5, 6.0, 4.0),  # exactly
        (4.0, 1.5, 3.75, 2.5),  # shortened to what the cap pays for
        (4.0, 0.69, 1.0, 86 / 60),  # whole minutes, rounded down (1.449 h)
        (4.0, 1.5, 1.5, 1.0),  # exactly one hour
        (4.0, 1.5, 1.49, None),  # not even one hour: skipped
        (0.5, 1.5, 0.75, 0.5),  # a max_hours under one hour that fits
        (0.5, 1.5, 0.5, None),
    ],
)
def test_the_cost_cap_keeps_shortens_or_skips(
    max_hours: float, rate: float, cap: float, bound: float | None
) -> None:
    found = cost_bound(max_hours, rate, cap)
    if bound is None:
        assert found is None
    else:
        assert found == pytest.approx(bound)
        assert found * rate <= cap + 1e-9


def test_the_cost_cap_applies_to_each_candidate_and_says_which() -> None:
    wanted = replace(AUTO, max_price_per_hour=None, max_cost_usd=3.75, gpu_count=2)
    chosen = choose(wanted, CATALOG)
    rows = [(c.gpu_type, c.rate, round(c.max_hours, 4), c.shortened) for c in chosen.candidates]
    assert rows == [
        ("NVIDIA A40", 0.80, 4.0, False),  # 4 h × $0.80 = $3.20
        ("NVIDIA L40S", 1.72, round(130 / 60, 4), True),  # $3.75 pays 2 h 10 min
        ("NVIDIA A100 80GB PCIe", 2.38, round(94 / 60, 4), True),  # 1 h 34 min
    ]
    reasons = {x.gpu_type: x.reason for x in chosen.left}
    assert reasons["NVIDIA H100 80GB HBM3"] == "one hour at $5.98/h exceeds max_cost_usd $3.75"
    text = shortened_text(chosen.candidates[1], 4.0, 3.75)
    assert text == (
        "pod deadline shortened to 2.17 h (from max_hours 4): 2 × NVIDIA L40S at $1.72/h "
        "stays within max_cost_usd $3.75"
    )


def test_a_cap_under_one_hour_of_every_candidate_refuses_naming_the_cheapest() -> None:
    with pytest.raises(NoCandidate) as caught:
        choose(replace(AUTO, max_cost_usd=0.30), CATALOG)
    text = str(caught.value)
    assert "does not pay for one hour" in text
    assert "the cheapest is 1 × NVIDIA A40 at $0.40/h" in text
    assert (
        "set targets.gpu.max_cost_usd = 0.4 or more for one hour (1.6 for all of max_hours 4)"
        in text
    )


def test_an_explicit_list_keeps_its_order_and_is_priced_from_the_catalog() -> None:
    listed = Wanted(
        target="gpu",
        gpu_types=("NVIDIA H100 80GB HBM3", "NVIDIA A40", "NVIDIA B200"),
        gpu_count=1,
        max_hours=2.0,
        max_cost_usd=4.0,
    )
    chosen = choose(listed, CATALOG)
    assert chosen.source == "list"
    assert [(c.gpu_type, c.max_hours, c.shortened) for c in chosen.candidates] == [
        ("NVIDIA H100 80GB HBM3", 80 / 60, True),
        ("NVIDIA A40", 2.0, False),
    ]
    assert [(x.gpu_type, x.reason) for x in chosen.left] == [
        ("NVIDIA B200", "no price in Runpod's catalog, so max_cost_usd cannot bound its cost")
    ]
    # Without a cap nothing is left out and the prices are only information.
    free = choose(replace(listed, max_cost_usd=None), CATALOG)
    assert [c.gpu_type for c in free.candidates] == list(listed.gpu_types)
    assert [c.price_per_gpu for c in free.candidates] == [2.99, 0.40, None]


def test_the_wanted_settings_come_from_the_target() -> None:
    spec = RunpodTarget.model_validate(
        {"kind": "runpod", "gpu_types": "auto", "max_hours": 2.0} | SETTINGS
    )
    wanted = wanted_of("gpu", spec)
    assert wanted == Wanted(
        target="gpu",
        gpu_types="auto",
        gpu_count=1,
        max_hours=2.0,
        min_vram_gb=40,
        max_price_per_hour=1.5,
        max_cost_usd=3.0,
        data_center_ids=("EU-RO-1",),
        max_recoveries=3,
    )
    assert wanted.needs_catalog
    listed = wanted_of("gpu", runpod_target(["NVIDIA A40"]))
    assert listed.gpu_types == ("NVIDIA A40",) and not listed.needs_catalog


SETTINGS: dict[str, object] = dict(
    min_vram_gb=40,
    max_price_per_hour=1.5,
    max_cost_usd=3.0,
    data_center_ids=["EU-RO-1"],
)


def test_a_cluster_counts_every_gpu_of_every_node_in_its_rate_cap_and_bound() -> None:
    wanted = replace(AUTO, max_price_per_hour=None, max_cost_usd=3.75, gpu_count=1, nodes=2)
    chosen = choose(wanted, CATALOG)
    rows = [(c.gpu_type, c.rate, round(c.max_hours, 4), c.shortened) for c in chosen.candidates]
    # The same table as two GPUs on one pod: a cluster's two nodes bill as two GPUs.
    assert rows == [
        ("NVIDIA A40", 0.80, 4.0, False),
        ("NVIDIA L40S", 1.72, round(130 / 60, 4), True),
        ("NVIDIA A100 80GB PCIe", 2.38, round(94 / 60, 4), True),
    ]
    assert shortened_text(chosen.candidates[1], 4.0, 3.75) == (
        "pod deadline shortened to 2.17 h (from max_hours 4): 2 nodes × 1 × NVIDIA L40S at "
        "$1.72/h stays within max_cost_usd $3.75"
    )
    priced = replace(AUTO, gpu_count=2, nodes=4, max_recoveries=0)
    assert run_cost_bound(priced, choose(priced, CATALOG)) == pytest.approx(1.5 * 8 * 4.0)


def test_a_cap_that_pays_for_one_node_but_not_every_node_refuses_naming_the_shape() -> None:
    with pytest.raises(NoCandidate) as caught:
        choose(replace(AUTO, max_cost_usd=0.50, nodes=2), CATALOG)
    assert "the cheapest is 2 nodes × 1 × NVIDIA A40 at $0.80/h" in str(caught.value)


def test_the_nodes_of_a_target_reach_its_wanted_settings() -> None:
    spec = RunpodTarget(kind="runpod", gpu_types=["NVIDIA A40"], max_hours=2, nodes=3)
    assert wanted_of("gpu", spec).nodes == 3
    assert wanted_of("gpu", runpod_target(["NVIDIA A40"])).nodes == 1


def test_with_a_network_volume_the_stock_is_read_only_where_the_volume_lives() -> None:
    spec = RunpodTarget.model_validate(
        {
            "kind": "runpod",
            "gpu_types": "auto",
            "max_hours": 2.0,
            "min_vram_gb": 40,
            "data_center_ids": ["EU-RO-1", "US-KS-2"],
            "volume": "cache",
            "volume_data_center": "US-KS-2",
        }
    )
    assert wanted_of("gpu", spec).data_center_ids == ("US-KS-2",)
    without = spec.model_copy(update={"volume": None, "volume_data_center": None})
    assert wanted_of("gpu", without).data_center_ids == ("EU-RO-1", "US-KS-2")
