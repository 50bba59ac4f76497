"""The e2e suite: the real Axolotl, on the CPU, through the real ``overbrainer`` command.

It needs the environment and tiny model ``just e2e`` builds (``e2e/build.py``); without
them the run stops at once saying so — it never skips. ``--full`` runs every case on every
target; by default every case runs on ``local`` and a representative subset on ``ssh`` and
``runpod``. Each case's time is printed at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import build
from e2e.harness import CASES, WORLDS, World

# The cases outside --full: every case locally; on ssh and runpod, a training with its
# eval set and the Ctrl-C + attach case (adapters varied for coverage; merging, which
# starts Axolotl a second time, only locally).
DEFAULT = {("local", name) for name in CASES} | {
    ("ssh", "full"),
    ("ssh", "ctrl-c-attach"),
    ("runpod", "qlora"),
    ("runpod", "ctrl-c-attach"),
    ("runpod", "ddp-2"),
}
_timings: list[tuple[str, float]] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", help="every case on every target (much longer)")


def pytest_configure(config: pytest.Config) -> None:
    missing = [p for p in (build.env_dir(), build.model_dir()) if not build.is_built(p)]
    if missing:
        raise pytest.UsageError(
            "the e2e suite needs the CPU Axolotl environment and the tiny model, not built "
            f"yet ({', '.join(str(p) for p in missing)}): run `just e2e`, which builds them "
            "first"
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"kind", "case_name"} <= set(metafunc.fixturenames):
        full = metafunc.config.getoption("--full")
        pairs = [
            (kind, name) for kind in WORLDS for name in CASES if full or (kind, name) in DEFAULT
        ]
        metafunc.parametrize(
            ("kind", "case_name"), pairs, ids=[f"{kind}-{name}" for kind, name in pairs]
        )


@pytest.fixture(scope="session")
def built() -> build.Built:
    """The environment and the tiny model (already built: see pytest_configure)."""
    return build.build()


_worlds: dict[str, World] = {}


@pytest.fixture(scope="session")
def worlds(
    built: build.Built, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, World]]:
    """Each kind of target, started the first time a case needs it, stopped at the end."""
    try:
        yield _worlds
    finally:
        for world in _worlds.values():
            world.__exit__(None, None, None)
        _worlds.clear()


@pytest.fixture
def world(
    kind: str,
    worlds: dict[str, World],
    built: build.Built,
    tmp_path_factory: pytest.TempPathFactory,
) -> World:
    """The world of ``kind``."""
    if kind not in worlds:
        base: Path = tmp_path_factory.mktemp(f"world-{kind}")
        worlds[kind] = WORLDS[kind](built, base).__enter__()
    return worlds[kind]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    started = time.monotonic()
    yield
    _timings.append((item.name.removeprefix("test_train[").rstrip("]"), time.monotonic() - started))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _timings:
        return
    terminalreporter.section("e2e timings")
    for name, seconds in _timings:
        terminalreporter.write_line(f"{name:28} {seconds:6.1f} s")
    terminalreporter.write_line(f"{'all cases':28} {sum(s for _, s in _timings):6.1f} s")
