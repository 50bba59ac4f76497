"""``pod gpus`` and ``pod datacenters``: Runpod's catalog of GPU types (memory, prices, stock)
and of data centers, read once per command (or from a copy under a minute old), in a
project or outside one (the key then comes from the environment)."""

from typing import TYPE_CHECKING

from overbrainer.cli.context import current
from overbrainer.cli.declare import command

if TYPE_CHECKING:
    from pathlib import Path

    from overbrainer.runpod.client import RunpodClient
    from overbrainer.runpod.models import GpuType


async def _read(kind: str, query: dict[str, str], fetch: "_Fetch") -> list[object]:
    """The catalog's entries of ``kind``: the cached copy when it is fresh and answers the
    same API and query, else one read of Runpod (kept for the next command). In a project
    its settings and ``.env`` give the key and the copy lives in its ``.overbrainer/``;
    outside one (the catalog belongs to no project), the environment alone and the user's
    cache directory."""
    from overbrainer.errors import Interrupted, OverbrainerError
    from overbrainer.front.console import Front
    from overbrainer.front.interrupts import open_interrupts
    from overbrainer.runpod.catalog_cache import read_cached, write_cached
    from overbrainer.runpod.client import RunpodApiError, RunpodClient, RunpodUnreachable

    key, base, path = _where(kind)
    cached = read_cached(path, base, query)
    if cached is not None:
        return cached
    front = Front()
    async with (
        open_interrupts() as interrupts,
        RunpodClient(
            key, base, timeout=10.0, max_retry_seconds=10.0, on_wait=front.notice
        ) as client,
    ):
        try:
            got = await interrupts.race(lambda: fetch(client))
        except RunpodUnreachable as error:
            raise OverbrainerError(str(error)) from None  # it names the cause and the fix
        except RunpodApiError as error:
            if error.status is not None:
                raise
            raise OverbrainerError(
                f"{error}; check this machine's network connection and the Runpod API's "
                f"address ({base}: [runpod] base_url, or OVERBRAINER_RUNPOD__BASE_URL)"
            ) from None
        if got is None:
            raise Interrupted("interrupted: nothing was read")
        entries = got.value
    write_cached(path, base, query, entries)
    return entries


def _where(kind: str) -> "tuple[str, str, Path]":
    """The API key, the API's address and the cached copy's path of this invocation."""
    from overbrainer.config.load import load_runpod_environment, load_settings
    from overbrainer.config.model import ConfigError
    from overbrainer.config.project import is_project
    from overbrainer.runpod.catalog_cache import cache_path, user_cache_path

    invocation = current()
    try:
        in_project = is_project(invocation.project_dir)
    except OSError:
        in_project = True  # cannot look: reading the project says what is wrong there
    if in_project:
        settings = load_settings(invocation.project_dir, invocation.environ())
        key = settings.require_runpod_api_key()
        return key, settings.runpod.base_url, cache_path(invocation.project_dir, kind)
    environ = invocation.base_environ
    runpod = load_runpod_environment(environ)
    if runpod.api_key is None:
        raise ConfigError(
            [
                f"OVERBRAINER_RUNPOD__API_KEY: not set, and {invocation.project_dir} is in no "
                "overbrainer project whose .env could hold it; export it to read Runpod's "
                "catalog here (create a key at https://www.runpod.io/console/user/settings), "
                "or run the command in a project"
            ]
        )
    key = runpod.api_key.get_secret_value()
    return key, runpod.base_url, user_cache_path(environ, kind)


if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    _Fetch = Callable[[RunpodClient], Awaitable[list[object]]]


@command(None, "pod", "gpus")
async def gpus(
    *,
    min_vram: int | None = None,
    max_price: float | None = None,
    in_stock: bool = False,
    data_center: str | None = None,
    json: bool = False,
) -> int:
    import sys

    from overbrainer.cli.common import print_json
    from overbrainer.errors import UsageError
    from overbrainer.front.console import Front
    from overbrainer.runpod.catalog_view import GpuFilter, gpu_json, gpu_rows, gpus_table

    if min_vram is not None and min_vram < 1:
        raise UsageError(f"--min-vram must be a whole number of GB of at least 1, not {min_vram}")
    if max_price is not None and not (max_price > 0 and max_price < float("inf")):
        raise UsageError(f"--max-price must be a positive amount of USD per hour, not {max_price}")
    if data_center is not None and (
        not data_center or not data_center.isprintable() or any(c.isspace() for c in data_center)
    ):
        raise UsageError(
            f"--data-center {data_center!r} is not a data center id (like EU-RO-1); "
            "`overbrainer pod datacenters` lists them"
        )
    query = {"include": "AVAILABILITY", "product": "POD", "cloud": "SECURE", "count": "1"}

    async def fetch(client: "RunpodClient") -> list[object]:
        return await client.gpu_entries(availability=True, gpu_count=1)

    catalog = _gpu_types(await _read("gpus", query, fetch))
    wanted = GpuFilter(min_vram, max_price, in_stock, data_center)
    rows = gpu_rows(catalog, wanted)
    if data_center is not None and not any(
        c.id == data_center for gpu in catalog for c in gpu.data_centers
    ):
        print(
            f"warning: no GPU type of Runpod's catalog lists data center {data_center} now; "
            "`overbrainer pod datacenters` lists the data centers",
            file=sys.stderr,
        )
    if json:
        for gpu in rows:
            print_json(gpu_json(gpu, data_center))
        return 0
    if not rows:
        print("no GPU type of Runpod's catalog matches these options", file=sys.stderr)
        return 0
    Front().result(gpus_table(rows, data_center))
    return 0


def _gpu_types(entries: list[object]) -> list["GpuType"]:
    """The GPU types of the catalog's entries (one without a usable id is left out)."""
    from overbrainer.runpod.models import BadGpuData, parse_gpu_type

    found: dict[str, GpuType] = {}
    for entry in entries:
        try:
            gpu = parse_gpu_type(entry)
        except BadGpuData:
            continue
        found.setdefault(gpu.id, gpu)
    return list(found.values())


@command(None, "pod", "datacenters")
async def datacenters(*, json: bool = False) -> int:
    from overbrainer.cli.common import print_json
    from overbrainer.front.console import Front
    from overbrainer.runpod.catalog_view import center_json, centers_table
    from overbrainer.runpod.client import data_centers_of

    async def fetch(client: "RunpodClient") -> list[object]:
        return await client.data_center_entries()

    centers = data_centers_of(await _read("datacenters", {}, fetch))
    if json:
        for center in centers:
            print_json(center_json(center))
        return 0
    Front().result(centers_table(centers))
    return 0
