"""What ``pod gpus`` and ``pod datacenters`` show: Runpod's catalog filtered, ordered and
laid out, as pure functions (no I/O)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from overbrainer.runpod.models import Availability, DataCenter, GpuType

__all__ = [
    "GpuFilter",
    "center_json",
    "centers_table",
    "gpu_json",
    "gpu_rows",
    "gpus_table",
    "stock_of",
]

_IN_STOCK = frozenset({Availability.LOW, Availability.MEDIUM, Availability.HIGH})


@dataclass(frozen=True)
class GpuFilter:
    """The options of ``pod gpus``: ``min_vram`` GB per GPU, ``max_price`` USD/h per GPU on
    the secure cloud (where overbrainer creates pods), only types in stock, stock read in
    one data center."""

    min_vram: int | None = None
    max_price: float | None = None
    in_stock: bool = False
    data_center: str | None = None


def stock_of(gpu: GpuType, data_center: str | None) -> Availability | None:
    """The type's stock overall, or in ``data_center`` (not listed there: none); None when
    the catalog did not say."""
    if gpu.availability is None:
        return None
    if data_center is None:
        return gpu.availability
    for center in gpu.data_centers:
        if center.id == data_center:
            return center.availability
    return Availability.NONE


def gpu_rows(catalog: Sequence[GpuType], wanted: GpuFilter) -> list[GpuType]:
    """The types that pass ``wanted``, cheapest first on the secure cloud (types without a
    secure price last, by their community price), then by id."""
    rows = []
    for gpu in catalog:
        if wanted.min_vram is not None and (gpu.memory_gb or 0) < wanted.min_vram:
            continue
        if wanted.max_price is not None and (
            not gpu.price_secure or gpu.price_secure > wanted.max_price + 1e-9
        ):
            continue
        if wanted.in_stock and stock_of(gpu, wanted.data_center) not in _IN_STOCK:
            continue
        rows.append(gpu)
    inf = float("inf")
    return sorted(
        rows,
        key=lambda g: (g.price_secure or inf, g.price_community or inf, g.id),
    )


def _price(value: float | None) -> str:
    return f"${value:.2f}/h" if value else "-"


def gpus_table(rows: Sequence[GpuType], data_center: str | None) -> str:
    """The types as a table: id, name, memory, prices per GPU, most per pod, stock."""
    stock_head = f"STOCK {data_center}" if data_center else "STOCK"
    table = [("GPU TYPE", "NAME", "MEMORY", "SECURE", "COMMUNITY", "MAX", stock_head)]
    for gpu in rows:
        stock = stock_of(gpu, data_center)
        most = gpu.max_count(secure=True)
        table.append(
            (
                gpu.id,
                gpu.name,
                f"{gpu.memory_gb} GB" if gpu.memory_gb is not None else "-",
                _price(gpu.price_secure) if gpu.secure else "-",
                _price(gpu.price_community) if gpu.community else "-",
                str(most) if most else "-",
                stock.value.lower() if stock is not None else "-",
            )
        )
    return _layout(table, right={2, 3, 4, 5})


def gpu_json(gpu: GpuType, data_center: str | None) -> dict[str, Any]:
    """One type for ``pod gpus --json``."""
    stock = stock_of(gpu, data_center)
    return {
        "id": gpu.id,
        "name": gpu.name,
        "memory_gb": gpu.memory_gb,
        "secure": gpu.secure,
        "community": gpu.community,
        "price_secure": gpu.price_secure,
        "price_community": gpu.price_community,
        "max_count": gpu.max_count(secure=True),
        "stock": stock.value if stock is not None else None,
        "data_centers": {c.id: c.availability.value for c in gpu.data_centers},
    }


def centers_table(centers: Sequence[DataCenter]) -> str:
    """The data centers as a table: id, name, region, network volumes, compliance."""
    table = [("DATA CENTER", "NAME", "REGION", "VOLUMES", "COMPLIANCE")]
    for center in sorted(centers, key=lambda c: c.id):
        table.append(
            (
                center.id,
                center.name,
                center.region.lower().replace("_", " "),
                ",".join(v.lower().replace("_", " ") for v in center.volume_types) or "-",
                ",".join(center.compliance) or "-",
            )
        )
    return _layout(table)


def center_json(center: DataCenter) -> dict[str, Any]:
    """One data center for ``pod datacenters --json``."""
    return {
        "id": center.id,
        "name": center.name,
        "region": center.region,
        "global_network": center.global_network,
        "network_volume_types": list(center.volume_types),
        "compliance": list(center.compliance),
    }


def _layout(table: Sequence[Sequence[str]], right: set[int] | None = None) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [
            cell.rjust(widths[i]) if right and i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
