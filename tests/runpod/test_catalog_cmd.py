"""``pod gpus`` and ``pod datacenters``: the real commands against the fake Runpod API on
loopback (one read per command, a fresh copy reused, a bad copy never trusted), and the
cache and the view on their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from overbrainer.runpod.catalog_cache import MAX_AGE, cache_path, read_cached, write_cached
from overbrainer.runpod.catalog_view import GpuFilter, gpu_rows
from overbrainer.runpod.models import parse_gpu_type
from overbrainer.testing import runpod_schema
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.pod_training import write_project
from overbrainer.testing.runpod_api import FakeGpuType, FakeRunpod, serve_loopback

ROOT = Path(__file__).resolve().parents[2]
CATALOG = (
    FakeGpuType("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34),
    FakeGpuType("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.99, 2.69),
    FakeGpuType("NVIDIA L40S", "L40S", 48, 0.86),
    FakeGpuType("NVIDIA A40", "A40", 48, 0.40, 0.35, max_count=10),
    FakeGpuType("NVIDIA RTX 6000 Ada", "RTX 6000 Ada", 48, 0.77, 0.74, secure=False),
)


def _cli(project: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERBRAINER_")}
    env.update(
        OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
        OVERBRAINER_RUNPOD__BASE_URL=base_url,
        PYTHONPATH=str(ROOT),
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    return project


def _reads(fake: FakeRunpod, path: str) -> list[dict[str, str]]:
    return [r.query for r in fake.requests if r.path == path]


async def test_pod_gpus_lists_the_catalog_cheapest_first_and_reads_it_once(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    fake = FakeRunpod(gpu_types=CATALOG)
    fake.add_account(CANARY_KEY)
    fake.set_capacity("NVIDIA L40S", 0)
    fake.set_capacity("NVIDIA A40", 1, "US-TX-3")
    fake.set_capacity("NVIDIA A40", 0, "EU-RO-1")
    async with serve_loopback(fake) as base_url:
        shown = await _trio_cli(project, base_url, "pod", "gpus")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].split() == [
            "GPU", "TYPE", "NAME", "MEMORY", "SECURE", "COMMUNITY", "MAX", "STOCK"
        ]  # fmt: skip
        assert [line.split("  ")[0] for line in lines[1:]] == [
            "NVIDIA A40",
            "NVIDIA GeForce RTX 4090",
            "NVIDIA L40S",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA RTX 6000 Ada",  # no secure price: last
        ]
        assert lines[1].split()[-6:] == ["48", "GB", "$0.40/h", "$0.35/h", "10", "high"]
        assert lines[3].split()[-1] == "none"  # the L40S: out of stock
        # One read, with the stock, its query as published; then every command within a
        # minute reads the project's copy, whatever its options.
        (query,) = _reads(fake, "/catalog/gpus")
        assert query == {"include": "AVAILABILITY", "product": "POD", "cloud": "SECURE",
                         "count": "1"}  # fmt: skip
        assert all(r.status == 200 for r in fake.requests)
        filtered = await _trio_cli(
            project, base_url, "pod", "gpus", "--min-vram", "40", "--max-price", "1.5",
            "--in-stock", "--json",
        )  # fmt: skip
        assert filtered.returncode == 0, filtered.stderr
        rows = [json.loads(line) for line in filtered.stdout.splitlines()]
        assert [row["id"] for row in rows] == ["NVIDIA A40"]
        assert rows[0]["price_secure"] == 0.40 and rows[0]["memory_gb"] == 48
        assert rows[0]["stock"] == "HIGH" and rows[0]["data_centers"]["US-TX-3"] == "LOW"
        romania = await _trio_cli(
            project, base_url, "pod", "gpus", "--data-center", "EU-RO-1", "--in-stock"
        )
        assert romania.returncode == 0, romania.stderr
        assert "STOCK EU-RO-1" in romania.stdout
        assert "NVIDIA A40" not in romania.stdout and "NVIDIA GeForce RTX 4090" in romania.stdout
        assert len(_reads(fake, "/catalog/gpus")) == 1
        # The copy holds what Runpod listed, never the key.
        cached = cache_path(project, "gpus").read_text()
        assert CANARY_KEY not in cached and CANARY_KEY[:12] not in cached

        # A corrupt copy is not trusted: Runpod is read again, and the copy replaced.
        cache_path(project, "gpus").write_text('{"version": 1, "entries": [')
        again = await _trio_cli(project, base_url, "pod", "gpus", "--json")
        assert again.returncode == 0, again.stderr
        assert len(again.stdout.splitlines()) == len(CATALOG)
        assert len(_reads(fake, "/catalog/gpus")) == 2
        assert json.loads(cache_path(project, "gpus").read_text())["version"] == 1

        none = await _trio_cli(project, base_url, "pod", "gpus", "--min-vram", "500")
        assert none.returncode == 0 and none.stdout == ""
        assert "no GPU type of Runpod's catalog matches" in none.stderr
        bad = await _trio_cli(project, base_url, "pod", "gpus", "--min-vram", "0")
        assert bad.returncode == 2 and "--min-vram" in bad.stderr


async def test_pod_datacenters_lists_them_with_a_request_the_schema_allows(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    fake = FakeRunpod()
    fake.add_account(CANARY_KEY)
    async with serve_loopback(fake) as base_url:
        shown = await _trio_cli(project, base_url, "pod", "datacenters")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].split() == ["DATA", "CENTER", "NAME", "REGION", "VOLUMES", "COMPLIANCE"]
        assert [line.split()[0] for line in lines[1:]] == ["EU-RO-1", "US-KS-2", "US-TX-3"]
        assert "Europe Romania 1" in lines[1] and "europe" in lines[1]
        listed = await _trio_cli(project, base_url, "pod", "datacenters", "--json")
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert rows[0] == {
            "id": "EU-RO-1",
            "name": "Europe Romania 1",
            "region": "EUROPE",
            "global_network": True,
            "network_volume_types": ["STANDARD"],
            "compliance": ["GDPR"],
        }
        queries = _reads(fake, "/catalog/datacenters")
        assert len(queries) == 1  # the second command read the copy
        assert runpod_schema.query_errors("/catalog/datacenters", queries[0]) == []
        # An API that gives no answer: said, with the setting to check.
        gone = await _trio_cli(project, "http://127.0.0.1:9/v2", "pod", "datacenters")
        assert gone.returncode == 1
        assert "OVERBRAINER_RUNPOD__BASE_URL" in gone.stderr and CANARY_KEY not in gone.stderr


async def _trio_cli(project: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    import trio

    return await trio.to_thread.run_sync(lambda: _cli(project, base_url, *args))


# --- the cache ---------------------------------------------------------------------------

URL = "https://api.runpod.io/v2"
QUERY = {"include": "AVAILABILITY"}


def test_a_fresh_copy_is_used_only_for_the_same_api_and_query(tmp_path: Path) -> None:
    path = cache_path(tmp_path, "gpus")
    write_cached(path, URL, QUERY, [{"id": "NVIDIA A40"}])
    assert read_cached(path, URL, QUERY) == [{"id": "NVIDIA A40"}]
    assert read_cached(path, "http://127.0.0.1:8/v2", QUERY) is None
    assert read_cached(path, URL, {}) is None
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".catalog-")]


@pytest.mark.parametrize(
    "age",
    [MAX_AGE + 1, -30.0],  # stale; or written "in the future" (a clock that went back)
)
def test_a_copy_too_old_or_from_the_future_is_stale(tmp_path: Path, age: float) -> None:
    path = cache_path(tmp_path, "gpus")
    write_cached(path, URL, QUERY, [])
    data = json.loads(path.read_text())
    data["written_at"] = time.time() - age
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    assert read_cached(path, URL, QUERY) is None


@pytest.mark.parametrize(
    "damage",
    ["garbage", "not an object", "no entries", "entries not a list", "symlink", "group writable"],
)
def test_a_copy_that_is_not_ours_or_not_whole_is_ignored(tmp_path: Path, damage: str) -> None:
    path = cache_path(tmp_path, "gpus")
    write_cached(path, URL, QUERY, [{"id": "x"}])
    data = json.loads(path.read_text())
    if damage == "garbage":
        path.write_bytes(b"\xff\x00{")
    elif damage == "not an object":
        path.write_text("[1, 2]")
    elif damage == "no entries":
        del data["entries"]
        path.write_text(json.dumps(data))
    elif damage == "entries not a list":
        data["entries"] = {"id": "x"}
        path.write_text(json.dumps(data))
    elif damage == "symlink":
        real = tmp_path / "elsewhere.json"
        path.rename(real)
        path.symlink_to(real)
    else:
        path.chmod(0o664)
    assert read_cached(path, URL, QUERY) is None


def test_a_project_that_cannot_take_the_copy_only_goes_without(tmp_path: Path) -> None:
    (tmp_path / ".overbrainer").write_text("not a directory")
    write_cached(cache_path(tmp_path, "gpus"), URL, QUERY, [])  # no error
    assert read_cached(cache_path(tmp_path, "gpus"), URL, QUERY) is None


def test_the_view_filters_and_orders_by_the_secure_price() -> None:
    catalog = [parse_gpu_type(gpu.catalog_entry()) for gpu in CATALOG]
    ids = [g.id for g in gpu_rows(catalog, GpuFilter())]
    assert ids[0] == "NVIDIA A40" and ids[-1] == "NVIDIA RTX 6000 Ada"
    assert [g.id for g in gpu_rows(catalog, GpuFilter(min_vram=48, max_price=0.86))] == [
        "NVIDIA A40",
        "NVIDIA L40S",
    ]
    # Without stock in the catalog, --in-stock keeps nothing it cannot vouch for.
    assert gpu_rows(catalog, GpuFilter(in_stock=True)) == []


# --- offline, and outside a project --------------------------------------------------------

NOWHERE = "https://nonexistent.invalid/v2"  # RFC 6761: never resolves, on any network


def _env(tmp_path: Path, base_url: str, **more: str) -> dict[str, str]:
    """The environment of a user with the key exported and no project settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "XDG_"))}
    env.update(
        OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
        OVERBRAINER_RUNPOD__BASE_URL=base_url,
        PYTHONPATH=str(ROOT),
        COLUMNS="200",
        HOME=str(tmp_path / "home"),
    )
    env.update(more)
    return env


_TIMED = """
import json, sys, time
from overbrainer.cli.main import main
first = main(sys.argv[1:])  # loads every module the command needs
started = time.monotonic()
second = main(sys.argv[1:])
print(json.dumps({"first": first, "second": second, "took": time.monotonic() - started}))
"""


@pytest.mark.parametrize("what", ["gpus", "datacenters"])
def test_offline_the_catalog_fails_within_a_second_saying_the_name_does_not_resolve(
    tmp_path: Path, what: str
) -> None:
    project = _project(tmp_path)
    said = (
        "error: cannot reach Runpod (nonexistent.invalid does not resolve): check the network "
        f"and the Runpod API's address ({NOWHERE}: [runpod] base_url, or "
        "OVERBRAINER_RUNPOD__BASE_URL)\n"
    )
    # The real command: one line, the reason, no retry (no wait said, no "after N attempts").
    started = time.monotonic()
    failed = _cli(project, NOWHERE, "pod", what)
    assert time.monotonic() - started < 20  # was 6 to 10 s of retries, on an idle machine
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr == said
    # The command's own work, its modules loaded (the machine may be busy: the bound is
    # generous against the first retry's pause alone, 0.5 to 1 s, and 4 more after it).
    timed = subprocess.run(
        [sys.executable, "-c", _TIMED, "-C", str(project), "pod", what],
        env=_env(tmp_path, NOWHERE),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    result = json.loads(timed.stdout)
    assert result["first"] == result["second"] == 1
    assert timed.stderr == said * 2
    assert result["took"] < 1.0, result


async def test_the_catalog_works_outside_a_project_with_the_key_in_the_environment(
    tmp_path: Path,
) -> None:
    import trio

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake = FakeRunpod(gpu_types=CATALOG)
    fake.add_account(CANARY_KEY)

    def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "overbrainer", *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    async with serve_loopback(fake) as base_url:
        env = _env(tmp_path, base_url)
        shown = await trio.to_thread.run_sync(lambda: run(env, "pod", "gpus"))
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[1].startswith("NVIDIA A40")
        again = await trio.to_thread.run_sync(lambda: run(env, "pod", "gpus", "--json"))
        assert again.returncode == 0 and len(again.stdout.splitlines()) == len(CATALOG)
        # The copy is the user's (~/.cache, private): read once for both commands.
        assert len(_reads(fake, "/catalog/gpus")) == 1
        copy = tmp_path / "home" / ".cache" / "overbrainer" / "catalog-gpus.json"
        assert copy.stat().st_mode & 0o777 == 0o600
        assert copy.parent.stat().st_mode & 0o777 == 0o700
        assert CANARY_KEY not in copy.read_text()
        centers = await trio.to_thread.run_sync(lambda: run(env, "pod", "datacenters"))
        assert centers.returncode == 0, centers.stderr
        assert [line.split()[0] for line in centers.stdout.splitlines()[1:]] == [
            "EU-RO-1", "US-KS-2", "US-TX-3"
        ]  # fmt: skip
        # XDG_CACHE_HOME is where the user keeps caches, when set.
        xdg = _env(tmp_path, base_url, XDG_CACHE_HOME=str(tmp_path / "xdg"))
        moved = await trio.to_thread.run_sync(lambda: run(xdg, "pod", "datacenters"))
        assert moved.returncode == 0, moved.stderr
        assert (tmp_path / "xdg" / "overbrainer" / "catalog-datacenters.json").is_file()
        # Without the key: said, with where to put it; nothing asked of Runpod.
        keyless = {k: v for k, v in env.items() if k != "OVERBRAINER_RUNPOD__API_KEY"}
        asked = len(fake.requests)
        refused = await trio.to_thread.run_sync(lambda: run(keyless, "pod", "gpus"))
        assert refused.returncode != 0 and refused.stdout == ""
        assert refused.stderr.startswith(
            f"error: OVERBRAINER_RUNPOD__API_KEY: not set, and {elsewhere} is in no "
            "overbrainer project"
        ), refused.stderr
        assert len(fake.requests) == asked
    # Nothing of a project was made where the commands ran.
    assert list(elsewhere.iterdir()) == []


async def test_a_catalog_read_that_waits_says_what_it_waits_for(tmp_path: Path) -> None:
    project = _project(tmp_path)
    fake = FakeRunpod(gpu_types=CATALOG)
    fake.add_account(CANARY_KEY)
    fake.fail_next("GET /catalog/gpus", 429, retry_after=2)
    async with serve_loopback(fake) as base_url:
        shown = await _trio_cli(project, base_url, "pod", "gpus")
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == (
        "waiting for Runpod (rate limited, HTTP 429): trying again in 2 s to read Runpod's "
        "GPU catalog (attempt 2 of 5)\n"
    )
    assert len(_reads(fake, "/catalog/gpus")) == 2
