"""Which GPU types a run's pod is tried on, in which order, and for how long: pure functions
of Runpod's GPU catalog and the target's settings (no I/O, no clock, no trio).

``gpu_types = "auto"`` takes the catalog's types with at least ``min_vram_gb`` of memory
per GPU, offered on the secure cloud (where pods are created) for ``gpu_count`` GPUs, and
costing at most ``max_price_per_hour`` per GPU; the cheapest first, the ones the catalog
says are out of stock (in the allowed data centers) last. A list is tried as written.

``max_cost_usd`` then bounds each candidate: the whole ``max_hours`` at its list price
(× ``gpu_count`` × ``nodes``: every GPU of every node) within the cap keeps ``max_hours``;
less than that but at least one hour shortens the pod's bound to what the cap pays for;
not even one hour leaves the candidate out. Every type left out carries its reason, and a
plan with no candidate is a refusal naming the setting to change.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NoReturn

from overbrainer.runpod.models import Availability, GpuType

if TYPE_CHECKING:
    from overbrainer.config.model import RunpodTarget

__all__ = [
    "Candidate",
    "Chosen",
    "Left",
    "NoCandidate",
    "Wanted",
    "choose",
    "cost_bound",
    "hours_text",
    "price_text",
    "run_cost_bound",
    "shortened_text",
    "wanted_of",
]

Source = Literal["auto", "list"]


@dataclass(frozen=True)
class Wanted:
    """What a target asks of its pod's GPU (the settings of ``[targets.NAME]``).

    ``gpu_types`` is the list tried as written, or ``"auto"``; ``target`` names the target
    in the texts (``targets.gpu.max_price_per_hour``).
    """

    target: str
    gpu_types: Sequence[str] | Literal["auto"]
    gpu_count: int
    max_hours: float
    min_vram_gb: int | None = None
    max_price_per_hour: float | None = None
    # Pods of gpu_count GPUs each: 1, a pod; more, a cluster of that many (its stock is
    # the catalog's for clusters, and every rate counts every node).
    nodes: int = 1
    max_cost_usd: float | None = None
    data_center_ids: Sequence[str] = ()
    # How many new pods a run may get when one is lost: each may cost as much as the first
    # (without max_cost_usd, which bounds them all).
    max_recoveries: int = 0
    # The run's cost must be bounded (the project has a monthly budget): each candidate's
    # price is needed.
    priced: bool = False

    @property
    def auto(self) -> bool:
        """Whether the candidates come from the catalog."""
        return self.gpu_types == "auto"

    @property
    def product(self) -> Literal["POD", "CLUSTER"]:
        """Whose stock the catalog is read for: a pod's, or a cluster's nodes'."""
        return "CLUSTER" if self.nodes > 1 else "POD"

    @property
    def needs_catalog(self) -> bool:
        """Whether choosing needs Runpod's catalog: for ``"auto"``, and for a cost cap
        or a monthly budget (which need each candidate's price)."""
        return self.auto or self.max_cost_usd is not None or self.priced

    def key(self, name: str) -> str:
        """The setting's full key: ``targets.gpu.min_vram_gb``."""
        return f"targets.{self.target}.{name}"


def wanted_of(target: str, spec: "RunpodTarget", *, priced: bool = False) -> Wanted:
    """What target ``target`` of ``overbrainer.toml`` asks of its pod's GPU; ``priced``:
    the project has a monthly budget, so the candidates' prices are needed."""
    return Wanted(
        target=target,
        gpu_types="auto" if spec.gpu_types == "auto" else tuple(spec.gpu_types),
        gpu_count=spec.gpu_count,
        nodes=spec.nodes,
        max_hours=spec.max_hours,
        min_vram_gb=spec.min_vram_gb,
        max_price_per_hour=spec.max_price_per_hour,
        max_cost_usd=spec.max_cost_usd,
        # With a network volume, only where it lives: the stock is read there.
        data_center_ids=tuple(spec.pod_data_centers),
        max_recoveries=spec.max_recoveries,
        priced=priced,
    )


@dataclass(frozen=True)
class Candidate:
    """A GPU type the walk tries, in order.

    ``price_per_gpu`` is the catalog's secure-cloud list price for one GPU (None: the
    catalog was not needed or does not list it); ``rate`` that times ``gpu_count``
    times ``nodes``, what the pod (every pod of a cluster) is expected to bill per hour.
    ``max_hours`` is the bound the pod is created with: the target's, or shorter when
    ``max_cost_usd`` pays for less (``shortened``).
    """

    gpu_type: str
    max_hours: float
    price_per_gpu: float | None = None
    gpu_count: int = 1
    memory_gb: int | None = None
    stock: Availability | None = None
    shortened: bool = False
    nodes: int = 1

    @property
    def rate(self) -> float | None:
        """USD per hour for the pod, or every pod of the cluster (all their GPUs), when
        the price is known."""
        if self.price_per_gpu is None:
            return None
        return self.price_per_gpu * self.gpu_count * self.nodes

    @property
    def shape(self) -> str:
        """``2 × NVIDIA A40``, or ``4 nodes × 2 × NVIDIA A40`` for a cluster."""
        return _shape(self.nodes, self.gpu_count, self.gpu_type)


@dataclass(frozen=True)
class Left:
    """A GPU type left out, and why (one short clause)."""

    gpu_type: str
    reason: str


@dataclass(frozen=True)
class Chosen:
    """The candidates in the order the walk tries them, and the types left out."""

    source: Source
    candidates: tuple[Candidate, ...]
    left: tuple[Left, ...] = ()


class NoCandidate(ValueError):
    """No GPU type may be tried; the message names the setting to change (and how)."""


def price_text(amount: float) -> str:
    """``$1.50``: dollars to the cent, more digits only when the cents hide them."""
    text = f"{amount:.2f}"
    if float(text) != round(amount, 4):
        text = f"{amount:.4f}".rstrip("0")
    return f"${text}"


def hours_text(hours: float) -> str:
    """``2.5 h``, ``1.43 h``: hours with at most two decimals, no trailing zeros."""
    return f"{round(hours, 2):g} h"


def _shape(nodes: int, count: int, gpu_type: str) -> str:
    return f"{nodes} nodes × {count} × {gpu_type}" if nodes > 1 else f"{count} × {gpu_type}"


def _rate_of(nodes: int, count: int, gpu_type: str, price: float) -> str:
    return f"{_shape(nodes, count, gpu_type)} at {price_text(price * count * nodes)}/h"


# --- the catalog's candidates ----------------------------------------------------------------


def _stock(gpu: GpuType, data_center_ids: Sequence[str]) -> Availability | None:
    """The type's stock where the pod may be placed: the best level among the allowed data
    centers (every one when none is named); None when the catalog did not say."""
    if gpu.availability is None:
        return None
    if not data_center_ids:
        return gpu.availability
    wanted = set(data_center_ids)
    levels = [dc.availability for dc in gpu.data_centers if dc.id in wanted]
    if not levels:
        # The catalog lists the data centers that have the type: none of the allowed ones.
        return Availability.NONE
    return max(levels, key=_LEVELS.index)


_LEVELS = (
    Availability.NONE,
    Availability.UNKNOWN,
    Availability.LOW,
    Availability.MEDIUM,
    Availability.HIGH,
)


def _out_of_stock(stock: Availability | None) -> bool:
    return stock is Availability.NONE


def _qualifies(gpu: GpuType, wanted: Wanted) -> str | None:
    """Why ``gpu`` cannot serve the target whatever its price (None: it can)."""
    if not gpu.offered(secure=True):
        return "not offered on the secure cloud"
    if gpu.memory_gb is None:
        return "memory not listed"
    assert wanted.min_vram_gb is not None
    if gpu.memory_gb < wanted.min_vram_gb:
        return f"{gpu.memory_gb} GB < min_vram_gb {wanted.min_vram_gb}"
    most = gpu.max_count(secure=True)
    if most is not None and most < wanted.gpu_count:
        return f"at most {most} per pod < gpu_count {wanted.gpu_count}"
    if not gpu.price_secure:
        return "no secure-cloud price listed"
    return None


def _order(gpu: GpuType, stock: Availability | None) -> tuple[bool, float, str]:
    assert gpu.price_secure is not None
    return (_out_of_stock(stock), gpu.price_secure, gpu.id)


def _auto(wanted: Wanted, catalog: Sequence[GpuType]) -> Chosen:
    left: list[Left] = []
    fit: list[GpuType] = []
    for gpu in sorted(catalog, key=lambda g: g.id):
        reason = _qualifies(gpu, wanted)
        if reason is not None:
            left.append(Left(gpu.id, reason))
        else:
            fit.append(gpu)
    limit = wanted.max_price_per_hour
    chosen: list[GpuType] = []
    for gpu in fit:
        assert gpu.price_secure is not None
        if limit is not None and gpu.price_secure > limit + 1e-9:
            left.append(
                Left(
                    gpu.id,
                    f"{price_text(gpu.price_secure)}/h > max_price_per_hour {price_text(limit)}",
                )
            )
        else:
            chosen.append(gpu)
    if not chosen:
        raise NoCandidate(_none_qualifies(wanted, fit, catalog))
    stocks = {gpu.id: _stock(gpu, wanted.data_center_ids) for gpu in chosen}
    chosen.sort(key=lambda g: _order(g, stocks[g.id]))
    candidates = tuple(
        Candidate(
            gpu.id,
            wanted.max_hours,
            price_per_gpu=gpu.price_secure,
            gpu_count=wanted.gpu_count,
            memory_gb=gpu.memory_gb,
            stock=stocks[gpu.id],
            nodes=wanted.nodes,
        )
        for gpu in chosen
    )
    return Chosen("auto", candidates, tuple(left))


def _none_qualifies(wanted: Wanted, fit: Sequence[GpuType], catalog: Sequence[GpuType]) -> str:
    head = (
        f"no GPU type of Runpod's catalog qualifies for target {wanted.target} "
        '(gpu_types = "auto")'
    )
    if fit:
        cheapest = min(fit, key=lambda g: (g.price_secure or 0.0, g.id))
        assert cheapest.price_secure is not None and wanted.max_price_per_hour is not None
        return (
            f"{head}: every type with at least {wanted.min_vram_gb} GB costs more than "
            f"max_price_per_hour {price_text(wanted.max_price_per_hour)}; the cheapest that "
            f"would qualify without that limit is {cheapest.id} ({cheapest.memory_gb} GB, "
            f"{price_text(cheapest.price_secure)}/h per GPU): set "
            f"{wanted.key('max_price_per_hour')} = {_ceil_cents(cheapest.price_secure):g} "
            "(or remove it), no pod was created; `overbrainer pod gpus` lists the types"
        )
    sized = [g for g in catalog if g.offered(secure=True) and g.memory_gb is not None]
    if not sized:
        return (
            f"{head}: the catalog lists no type offered on the secure cloud with its memory; "
            "name the types in gpu_types instead, no pod was created"
        )
    largest = max(sized, key=lambda g: (g.memory_gb or 0, g.id))
    return (
        f"{head}: no type offered on the secure cloud for {wanted.gpu_count} GPU(s) has at "
        f"least {wanted.min_vram_gb} GB (the largest is {largest.id}, {largest.memory_gb} GB): "
        f"lower {wanted.key('min_vram_gb')} or gpu_count, no pod was created; `overbrainer "
        "pod gpus` lists the types"
    )


def _ceil_cents(price: float) -> float:
    return math.ceil(round(price * 100, 6)) / 100


def _listed(wanted: Wanted, catalog: Sequence[GpuType] | None) -> Chosen:
    by_id = {gpu.id: gpu for gpu in catalog or ()}
    assert wanted.gpu_types != "auto"
    candidates = []
    for gpu_type in wanted.gpu_types:
        gpu = by_id.get(gpu_type)
        candidates.append(
            Candidate(
                gpu_type,
                wanted.max_hours,
                price_per_gpu=(gpu.price_secure or None) if gpu is not None else None,
                gpu_count=wanted.gpu_count,
                memory_gb=gpu.memory_gb if gpu is not None else None,
                stock=_stock(gpu, wanted.data_center_ids) if gpu is not None else None,
                nodes=wanted.nodes,
            )
        )
    return Chosen("list", tuple(candidates))


# --- the cost cap ----------------------------------------------------------------------------


def cost_bound(max_hours: float, rate: float, cap: float) -> float | None:
    """The bound a pod billing ``rate`` USD/h is created with under a cap of ``cap`` USD:
    ``max_hours`` when all of it fits, else the whole minutes the cap pays for when that is
    at least one hour (or all of a ``max_hours`` under one hour); None when it is not."""
    if rate <= 0:
        return max_hours
    paid = cap / rate
    if paid >= max_hours - 1e-9:
        return max_hours
    minutes = math.floor(round(paid * 60, 6))
    hours = minutes / 60
    if hours < 1.0:
        return None
    return hours


def _capped(wanted: Wanted, chosen: Chosen) -> Chosen:
    cap = wanted.max_cost_usd
    if cap is None:
        return chosen
    kept: list[Candidate] = []
    left = list(chosen.left)
    for candidate in chosen.candidates:
        rate = candidate.rate
        if rate is None:
            left.append(
                Left(
                    candidate.gpu_type,
                    "no price in Runpod's catalog, so max_cost_usd cannot bound its cost",
                )
            )
            continue
        bound = cost_bound(wanted.max_hours, rate, cap)
        if bound is None:
            left.append(
                Left(
                    candidate.gpu_type,
                    f"one hour at {price_text(rate)}/h exceeds max_cost_usd {price_text(cap)}",
                )
            )
            continue
        shortened = bound < wanted.max_hours
        kept.append(
            Candidate(
                candidate.gpu_type,
                bound,
                price_per_gpu=candidate.price_per_gpu,
                gpu_count=candidate.gpu_count,
                memory_gb=candidate.memory_gb,
                stock=candidate.stock,
                shortened=shortened,
                nodes=candidate.nodes,
            )
        )
    if kept:
        return Chosen(chosen.source, tuple(kept), tuple(left))
    priced = [c for c in chosen.candidates if c.price_per_gpu is not None]
    if not priced:
        raise NoCandidate(
            f"target {wanted.target} sets max_cost_usd {price_text(cap)}, and Runpod's catalog "
            f"lists no price for {', '.join(c.gpu_type for c in chosen.candidates)}: the cost "
            f"of a pod cannot be bounded; choose listed GPU types (`overbrainer pod gpus`) or "
            f"remove {wanted.key('max_cost_usd')}, no pod was created"
        )
    cheapest = min(priced, key=lambda c: (c.rate or 0.0, c.gpu_type))
    assert cheapest.price_per_gpu is not None and cheapest.rate is not None
    _refuse_cap(wanted, cap, cheapest)


def _refuse_cap(wanted: Wanted, cap: float, cheapest: Candidate) -> NoReturn:
    assert cheapest.price_per_gpu is not None and cheapest.rate is not None
    raise NoCandidate(
        f"max_cost_usd {price_text(cap)} of target {wanted.target} does not pay for one hour "
        f"of any GPU type it may use: the cheapest is "
        f"{_rate_of(wanted.nodes, wanted.gpu_count, cheapest.gpu_type, cheapest.price_per_gpu)}; "
        f"set "
        f"{wanted.key('max_cost_usd')} = {_ceil_cents(cheapest.rate):g} or more for one hour "
        f"({_ceil_cents(cheapest.rate * wanted.max_hours):g} for all of max_hours "
        f"{wanted.max_hours:g}), no pod was created"
    )


def choose(wanted: Wanted, catalog: Sequence[GpuType] | None) -> Chosen:
    """The candidates for ``wanted`` from ``catalog`` (None: not read, or unreadable).

    Raises :class:`NoCandidate` when none may be tried: no catalog where one is needed,
    no type qualifying for ``"auto"``, or a cost cap that pays for no hour of any.
    """
    if catalog is None and wanted.needs_catalog:
        if wanted.auto:
            why = 'gpu_types = "auto" chooses from it'
        elif wanted.max_cost_usd is not None:
            why = "max_cost_usd needs each GPU type's price to bound the pod's cost"
        else:
            why = "project.monthly_budget_usd needs each GPU type's price to bound the run's cost"

        raise NoCandidate(
            f"Runpod's GPU catalog could not be read for target {wanted.target}, and {why}; "
            "no pod was created. Run the command again once the API answers"
        )
    chosen = _auto(wanted, catalog or ()) if wanted.auto else _listed(wanted, catalog)
    return _capped(wanted, chosen)


def run_cost_bound(wanted: Wanted, chosen: Chosen) -> float | None:
    """The most a run may cost, in USD: ``max_cost_usd`` (it bounds every pod of the run);
    else what one pod may cost times the pods the run may have (its first and one per
    recovery, ``max_recoveries``). One pod (or cluster) may cost ``max_price_per_hour`` ×
    ``gpu_count`` × ``nodes`` × ``max_hours``; else the dearest candidate's list rate × its
    bound (the walk may end on any of them). None when a candidate has no known price:
    nothing bounds it."""
    if wanted.max_cost_usd is not None:
        return wanted.max_cost_usd
    pods = 1 + wanted.max_recoveries
    if wanted.max_price_per_hour is not None:
        gpus = wanted.gpu_count * wanted.nodes
        return wanted.max_price_per_hour * gpus * wanted.max_hours * pods
    costs = [None if c.rate is None else c.rate * c.max_hours for c in chosen.candidates]
    if not costs or any(cost is None for cost in costs):
        return None
    return max(cost for cost in costs if cost is not None) * pods


def shortened_text(candidate: Candidate, wanted_hours: float, cap: float) -> str:
    """``pod deadline shortened to 2.5 h: 1 × NVIDIA A40 at $1.50/h stays within
    max_cost_usd $3.75``."""
    assert candidate.price_per_gpu is not None
    rate = _rate_of(
        candidate.nodes, candidate.gpu_count, candidate.gpu_type, candidate.price_per_gpu
    )
    return (
        f"pod deadline shortened to {hours_text(candidate.max_hours)} (from max_hours "
        f"{wanted_hours:g}): {rate} "
        f"stays within max_cost_usd {price_text(cap)}"
    )
