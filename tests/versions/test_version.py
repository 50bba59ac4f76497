"""The version: one number, pyproject's, read from the installed package's metadata by
``--version``, every event's actor and the Runpod client's agent."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.events.actor import Actor
from overbrainer.version import UNKNOWN, installed, is_newer, release

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def fresh_cache() -> object:
    installed.cache_clear()
    yield None
    installed.cache_clear()


def test_the_version_is_the_installed_metadata() -> None:
    assert installed() == importlib.metadata.version("overbrainer") != UNKNOWN
    assert Actor.here("train").version == installed()


def test_version_prints_the_installed_metadata() -> None:
    for argv in (["--version"], ["train", "--version"]):
        done = subprocess.run(
            [str(BIN / "overbrainer"), *argv], capture_output=True, text=True, check=False
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            0,
            f"overbrainer {importlib.metadata.version('overbrainer')}\n",
            "",
        )


def _dist(where: Path, name: str, version: str) -> None:
    meta = where / name
    meta.mkdir(parents=True)
    file = "METADATA" if name.endswith("dist-info") else "PKG-INFO"
    (meta / file).write_text(
        f"Metadata-Version: 2.1\nName: overbrainer\nVersion: {version}\n\nVersion: 0.0.0\n"
    )


def test_another_install_s_metadata_is_what_the_process_records(tmp_path: Path) -> None:
    """Metadata found first on the path (as an installed copy's would be) is the version
    that ``--version`` prints and an appended event's actor records."""
    _dist(tmp_path / "site", "overbrainer-7.2.1.dist-info", "7.2.1")
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(BIN / "overbrainer"), "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.stdout == "overbrainer 7.2.1\n"
    script = (
        "import sys; from pathlib import Path\n"
        "from overbrainer.events.actor import Actor\n"
        "from overbrainer.events.store import RunStore\n"
        "from overbrainer.events import types as ev\n"
        "store = RunStore(None, Path(sys.argv[1]), Actor.here('train'))\n"
        "store.create(ev.RunCreated(run_id='20260301-090000-abcd', target='t', kind='local',"
        " remote_dir='x', settings_digest='d'))\n"
        "print(store.history('20260301-090000-abcd')[0].actor['version'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "project")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout, whose own metadata `python -c` would find first
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "7.2.1\n", "")


@pytest.mark.usefixtures("fresh_cache")
@pytest.mark.parametrize(
    "names, expected",
    [
        ([("overbrainer-1.4.0.dist-info", "1.4.0")], "1.4.0"),
        ([("overbrainer.egg-info", "2.0.1")], "2.0.1"),
        ([("overbrainer-2.0.1-py3.11.egg-info", "2.0.1")], "2.0.1"),
        (
            [("overbrainer_extras-9.0.dist-info", "9.0"), ("overbrainer-1.0.dist-info", "1.0")],
            "1.0",
        ),
        ([("other-9.0.dist-info", "9.0")], UNKNOWN),
        ([], UNKNOWN),
    ],
)
def test_the_metadata_is_found_in_the_path_s_first_entry_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: list[tuple[str, str]], expected: str
) -> None:
    for name, version in names:
        _dist(tmp_path / "second", name, version)
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "overbrainer-5.0.dist-info").mkdir()  # no METADATA: not a dist
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second")])
    assert installed() == expected


@pytest.mark.parametrize(
    "version, than, newer",
    [
        ("0.4.0", "0.3.0", True),
        ("0.3.0", "0.3.0", False),
        ("0.3", "0.3.0", False),
        ("0.3.1", "0.3", True),
        ("0.10.0", "0.9.9", True),
        ("1.0.0rc1", "0.99", True),
        ("0.2.9", "0.3.0", False),
        ("0+unknown", "0.3.0", False),
        ("99.1.0", UNKNOWN, True),
        ("?", "0.3.0", False),
        ("0.4.0", "?", False),
    ],
)
def test_which_version_is_newer(version: str, than: str, newer: bool) -> None:
    assert is_newer(version, than) is newer


def test_release_numbers() -> None:
    assert release("v1.2.0") == (1, 2)
    assert release("0.3.0.post1") == (0, 3)
    assert release("x") is None
