"""The wheel works anywhere: ``python -m build`` makes an sdist and, from it, a wheel with
every file of the package; installed with pipx (and with ``uv tool``) outside the checkout,
the program runs from an empty directory — ``--version``, ``init``, ``config check``, a
whole local run with the stand-in trainer, and the Runpod demo against the fake world of
``overbrainer.testing`` — with nothing of the source tree."""

import json
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install.world import ROOT, check_demo_output, clean_env, fresh_clone, processes_under

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path
    version: str


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel of a fresh copy of the repository (the wheel built from the
    sdist, as ``python -m build`` does)."""
    base = tmp_path_factory.mktemp("dist")
    source = fresh_clone(base / "source")
    out = base / "out"
    done = subprocess.run(
        [str(BIN / "python"), "-m", "build", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("overbrainer-*-py3-none-any.whl")
    (sdist,) = out.glob("overbrainer-*.tar.gz")
    version = wheel.name.split("-")[1]
    return Dist(wheel, sdist, version)


def _package_files() -> set[str]:
    """Every file of the package in the repository, as a path below ``overbrainer/``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "overbrainer"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {name for name in listed if (ROOT / name).is_file()}


def test_the_sdist_and_the_wheel_carry_every_file_of_the_package(dist: Dist) -> None:
    files = _package_files()
    assert {"overbrainer/testing/axolotl", "overbrainer/runpod/scripts/watchdog.sh"} <= files
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = wheel.read(f"overbrainer-{dist.version}.dist-info/entry_points.txt")
        stand_in_mode = wheel.getinfo("overbrainer/testing/axolotl").external_attr >> 16
    assert files - names == set()
    assert {n for n in names if not n.startswith(f"overbrainer-{dist.version}.dist-info/")} == (
        files
    )
    assert f"overbrainer-{dist.version}.dist-info/licenses/LICENSE" in names
    assert "overbrainer = overbrainer.__main__:main" in entry_points.decode()
    assert "overbrainer-demo = overbrainer.testing.demo:main" in entry_points.decode()
    assert stand_in_mode & 0o111, "the stand-in trainer is executable once installed"
    with tarfile.open(dist.sdist) as sdist:
        inside = {m.name.split("/", 1)[1] for m in sdist.getmembers() if m.isfile()}
    assert files <= inside
    assert {"pyproject.toml", "README.md", "LICENSE"} <= inside
    assert not any(name.startswith(("tests/", "bench/", "reliability/", "e2e/")) for name in inside)


@dataclass(frozen=True)
class Installed:
    bin: Path  # where the tool's commands are
    python: Path  # the interpreter of the tool's own environment
    env: dict[str, str]
    scratch: Path  # the commands' temporary files


def _installed(base: Path, how: str, dist: Dist) -> Installed:
    scratch = base / "tmp"
    scratch.mkdir()
    env = clean_env(scratch)
    env["HOME"] = str(base / "home")
    tools = base / "tools"
    env.update(
        PIPX_HOME=str(tools / "pipx"),
        PIPX_BIN_DIR=str(tools / "bin"),
        PIPX_MAN_DIR=str(tools / "man"),
        UV_TOOL_DIR=str(tools / "uv"),
        UV_TOOL_BIN_DIR=str(tools / "bin"),
        UV_CACHE_DIR=str(base / "uv-cache"),
    )
    requirement = f"{dist.wheel}[testing]"
    command = (
        [str(BIN / "pipx"), "install", requirement]
        if how == "pipx"
        else [str(BIN / "uv"), "tool", "install", requirement]
    )
    done = subprocess.run(
        command, env=env, cwd=base, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    env["PATH"] = f"{tools / 'bin'}:{env['PATH']}"
    python = (tools / "pipx" / "venvs" if how == "pipx" else tools / "uv") / "overbrainer"
    return Installed(tools / "bin", python / "bin" / "python", env, scratch)


@pytest.fixture(scope="module")
def pipx_installed(tmp_path_factory: pytest.TempPathFactory, dist: Dist) -> Installed:
    return _installed(tmp_path_factory.mktemp("pipx"), "pipx", dist)


def _empty(path: Path) -> Path:
    path.mkdir()
    return path


def _run(
    installed: Installed, cwd: Path, *argv: str, timeout: float = 120, **extra: str
) -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``cwd`` with the installed tool first on the PATH, as a user would."""
    return subprocess.run(
        list(argv),
        cwd=cwd,
        env={**installed.env, **extra},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_installed_wheel_runs_a_whole_local_run_from_an_empty_directory(
    pipx_installed: Installed, dist: Dist, tmp_path: Path
) -> None:
    tool = pipx_installed
    empty = _empty(tmp_path / "empty")
    assert {p.name for p in tool.bin.iterdir()} == {"overbrainer", "overbrainer-demo"}
    # The package the tool runs is its own copy, not the checkout.
    where = _run(
        tool, empty, str(tool.python), "-c", "import overbrainer; print(overbrainer.__file__)"
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(tool.python.parents[2])), where.stdout
    assert str(ROOT) not in where.stdout

    version = _run(tool, empty, "overbrainer", "--version")
    assert (version.returncode, version.stdout, version.stderr) == (
        0,
        f"overbrainer {dist.version}\n",
        "",
    )
    init = _run(tool, empty, "overbrainer", "init", "project")
    assert init.returncode == 0, init.stderr
    project = empty / "project"
    check = _run(tool, project, "overbrainer", "config", "check")
    assert check.returncode == 0, check.stdout + check.stderr

    # The stand-in trainer shipped in overbrainer.testing, linked as a venv's axolotl.
    stand_in = _run(
        tool,
        empty,
        str(tool.python),
        "-c",
        "from overbrainer.testing.stand_in import AXOLOTL; print(AXOLOTL)",
    ).stdout.strip()
    assert stand_in.startswith(str(tool.python.parents[2]))
    venv = tmp_path / "axolotl-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "axolotl").symlink_to(stand_in)
    train = _run(
        tool,
        project,
        "overbrainer",
        "train",
        OVERBRAINER_TARGETS__LOCAL__VENV=str(venv),
        FAKE_AXOLOTL_STEPS="4",
    )
    assert train.returncode == 0, train.stdout + train.stderr
    assert "Traceback" not in train.stdout + train.stderr
    (run_id,) = [p.name for p in (project / "runs").iterdir()]
    assert f"train: run {run_id} succeeded; step 4/4" in train.stdout
    assert (project / "runs" / run_id / "output" / "adapter_model.safetensors").is_file()
    listed = _run(tool, project, "overbrainer", "runs", "ls", "--json")
    assert [(row["id"], row["state"]) for row in map(json.loads, listed.stdout.splitlines())] == [
        (run_id, "succeeded")
    ]
    events = _run(tool, project, "overbrainer", "events", run_id, "--json")
    lines = [json.loads(line) for line in events.stdout.splitlines()]
    assert [line["event"] for line in lines][-1] == "run.Ended"
    # Every event records the installed package's version.
    assert {line["actor"]["version"] for line in lines} == {dist.version}


def test_the_installed_wheel_runs_the_runpod_demo(
    pipx_installed: Installed, tmp_path: Path
) -> None:
    tool = pipx_installed
    empty = _empty(tmp_path / "empty")
    done = _run(tool, empty, "overbrainer-demo", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    check_demo_output(done.stdout + done.stderr)
    # The fake server and its pods are gone, and so are the demo's files.
    assert processes_under(tool.scratch) == []
    assert list(tool.scratch.iterdir()) == []
    assert list(empty.iterdir()) == []


def test_uv_tool_installs_the_wheel_too(tmp_path: Path, dist: Dist) -> None:
    tool = _installed(tmp_path, "uv", dist)
    empty = _empty(tmp_path / "empty")
    version = _run(tool, empty, "overbrainer", "--version")
    assert version.stdout == f"overbrainer {dist.version}\n", version.stderr
    done = _run(tool, empty, "overbrainer-demo", "local", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded; step 20/20" in done.stdout
    assert list(empty.iterdir()) == []
    assert list(tool.scratch.iterdir()) == []
