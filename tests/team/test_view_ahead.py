"""A checkout's runs view ahead of the team's log — the log's table dropped, or emptied and
written again by other runs (a database restored, recreated, or pointed at anew): the view
is rebuilt, and ``runs ls`` never lists a run that ``events`` says does not exist."""

import json
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.pg import CHANNEL
from overbrainer.events.store import RunStore
from tests.fakes.pg import Team

RUN_A, RUN_B = "20260301-101500-a1b2", "20260301-111500-c3d4"
LATER = ["20260302-090000-c0c0", "20260302-090100-d0d0", "20260302-090200-e0e0"]
ELSEWHERE = Actor(command="train", user="bob", host="ci-box", pid=77, version="0.3.0")


def _created(run_id: str) -> ev.RunCreated:
    return ev.RunCreated(
        run_id=run_id, target="here", kind="local", remote_dir=f"r/{run_id}", settings_digest="d"
    )


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _ls(capsys: pytest.CaptureFixture[str], checkout: Path) -> list[str]:
    code, out, err = _cli(capsys, "-C", str(checkout), "runs", "ls", "--json")
    assert code == 0 and "Traceback" not in err, err
    return [json.loads(line)["id"] for line in out.splitlines()]


def _append_from_elsewhere(team: Team, tmp_path: Path, runs: list[str]) -> None:
    store = RunStore(team.url, team.checkout(tmp_path / "elsewhere"), ELSEWHERE)
    try:
        for run_id in runs:
            store.create(_created(run_id))
    finally:
        store.close()


def test_a_view_ahead_of_a_dropped_log_lists_nothing(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = team.checkout(tmp_path / "here")
    _append_from_elsewhere(team, tmp_path, [RUN_A, RUN_B])
    assert _ls(capsys, here) == [RUN_A, RUN_B]
    # Without its table the server cannot say the log's position: the store is opened
    # (and makes the table again), so the view must see for itself that it is ahead.
    team.cluster.psql(f'DROP TABLE "{CHANNEL}"', db=team.db)
    assert _ls(capsys, here) == []
    code, _, err = _cli(capsys, "-C", str(here), "events", RUN_A)
    assert code == 1 and f"no run {RUN_A}" in err


@pytest.mark.parametrize("written_again", [1, 3])
def test_a_view_ahead_of_an_emptied_log_follows_what_was_written_since(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str], written_again: int
) -> None:
    here = team.checkout(tmp_path / "here")
    _append_from_elsewhere(team, tmp_path, [RUN_A, RUN_B])
    assert _ls(capsys, here) == [RUN_A, RUN_B]
    team.cluster.psql(f'TRUNCATE "{CHANNEL}" RESTART IDENTITY', db=team.db)
    # Fewer events than the view folded (its position is past the log's newest), or more
    # (its position exists again, holding another event).
    _append_from_elsewhere(team, tmp_path, LATER[:written_again])
    assert _ls(capsys, here) == LATER[:written_again]
