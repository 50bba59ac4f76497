"""A team store without psycopg says which extra to install; any other import failure of
the store's own code is not disguised as a missing driver."""

import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from tests.fakes.pg import Team

_PROBE = """
import sys
{block}
from overbrainer.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    with (project / "overbrainer.toml").open("a") as toml:
        toml.write('\n[store]\nurl = "postgresql://someone@127.0.0.1:1/runs"\n')
    return project


# Both ways a read command reaches the server: opening the store, and runs ls's question
# for the log's newest position before it trusts its view.
COMMANDS = [("events", "20260101-000000-aaaa"), ("runs", "ls")]


def _run(
    project: Path, block: str, words: tuple[str, ...], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE.format(block=block), "-C", str(project), *words],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("missing", ["psycopg", "psycopg_pool"])
def test_a_team_store_without_psycopg_names_the_extra_to_install(
    tmp_path: Path, words: tuple[str, ...], missing: str
) -> None:
    done = _run(_project(tmp_path), f"sys.modules[{missing!r}] = None", words)
    assert done.returncode != 0
    assert "needs psycopg" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_a_broken_store_module_is_not_reported_as_a_missing_driver(
    tmp_path: Path, team: Team, words: tuple[str, ...]
) -> None:
    # Our own module failing to import is a defect to see, not advice to install psycopg.
    project = team.checkout(tmp_path / "project")
    assert main(["-C", str(project), "runs", "ls"]) == 0  # the store is there and answers
    env = {**team.env, "PATH": "/usr/bin:/bin"}
    done = _run(project, "sys.modules['overbrainer.events.pg_recorder'] = None", words, env)
    assert done.returncode != 0
    assert "needs psycopg" not in done.stderr, done.stderr
    assert "overbrainer.events.pg_recorder" in done.stderr
