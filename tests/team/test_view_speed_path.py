"""``runs ls`` on a team store trusts its view after one short question to the server (the
log's newest position, ``pg_recorder.latest_position``) and opens the store only when another
checkout appended since. The view must still catch up with every append, and every failure
must read as it does when the store is opened."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from overbrainer.cli import listing
from overbrainer.cli.main import main
from overbrainer.events import pg, pg_recorder
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from tests.fakes.pg import Team

RUN_A = "20260301-101500-a1b2"
RUN_B = "20260301-111500-c3d4"
RUN_C = "20260301-121500-e5f6"
ROOT = Path(__file__).resolve().parents[2]
ELSEWHERE = Actor(command="train", user="bob", host="ci-box", pid=77, version="0.3.0")


def _created(run_id: str) -> ev.RunCreated:
    return ev.RunCreated(
        run_id=run_id, target="here", kind="local", remote_dir=f"r/{run_id}", settings_digest="d"
    )


def _ls(capsys: pytest.CaptureFixture[str], checkout: Path) -> list[tuple[str, str]]:
    code = main(["-C", str(checkout), "runs", "ls", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [(row["id"], row["state"]) for row in map(json.loads, out.splitlines())]


def _count_store_opens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    opened: list[int] = []
    real: Callable[..., Any] = listing.open_store

    def counting(invocation: Any, **options: Any) -> Any:
        opened.append(1)
        return real(invocation, **options)

    monkeypatch.setattr(listing, "open_store", counting)
    return opened


def test_the_check_reads_the_log_the_store_writes(team: Team, tmp_path: Path) -> None:
    target = pg.parse_url(team.url)
    assert pg_recorder.latest_position(target) is None  # no table yet: the store must create it
    store = RunStore(team.url, tmp_path, ELSEWHERE)
    try:
        # The table and schema the check reads are the ones eventsourcing writes.
        assert (store.recorder.events_table_name, store.recorder.datastore.schema) == (
            pg.CHANNEL,
            pg.SCHEMA,
        )
        assert pg_recorder.latest_position(target) == 0 == store.max_position()
        store.create(_created(RUN_A))
        store.append(RUN_A, lambda _s: [ev.JobStarted(job_dir="x", pid=7)])
        assert pg_recorder.latest_position(target) == store.max_position() == 2
    finally:
        store.close()


def test_a_log_table_eventsourcing_cannot_read_reads_as_cannot_tell(team: Team) -> None:
    # A table of the log's name that is not eventsourcing's (or not of the layout this
    # eventsourcing writes): the check must answer "cannot tell" (the listing then opens the
    # store, which says what is wrong), never a wrong position.
    team.cluster.psql(f"CREATE TABLE {pg.SCHEMA}.{pg.CHANNEL} (position bigint)", db=team.db)
    team.cluster.psql(f"INSERT INTO {pg.SCHEMA}.{pg.CHANNEL} VALUES (7)", db=team.db)
    assert pg_recorder.latest_position(pg.parse_url(team.url)) is None


def test_an_up_to_date_view_is_listed_without_the_store_and_catches_up_with_other_checkouts(
    team: Team,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    here = team.checkout(tmp_path / "here")
    opened = _count_store_opens(monkeypatch)
    assert _ls(capsys, here) == []
    assert len(opened) == 1  # no table yet: the store creates it
    assert _ls(capsys, here) == [] and len(opened) == 1
    other = RunStore(team.url, team.checkout(tmp_path / "other"), ELSEWHERE)
    try:
        other.create(_created(RUN_A))
        assert _ls(capsys, here) == [(RUN_A, "preparing")] and len(opened) == 2
        assert _ls(capsys, here) == [(RUN_A, "preparing")] and len(opened) == 2

        # Another checkout appends to a listed run and starts a new one.
        other.append(RUN_A, lambda _s: [ev.JobStarted(job_dir="x", pid=7)])
        other.create(_created(RUN_B))
        assert _ls(capsys, here) == [(RUN_A, "running"), (RUN_B, "preparing")]
        assert len(opened) == 3
        other.append(RUN_B, lambda _s: [ev.RunEnded(state="cancelled")])
        assert _ls(capsys, here) == [(RUN_A, "running"), (RUN_B, "cancelled")]
        assert len(opened) == 4
        assert _ls(capsys, here) == [(RUN_A, "running"), (RUN_B, "cancelled")]
        assert len(opened) == 4
    finally:
        other.close()


_PROBE = """
import json, sys
from overbrainer.cli.main import main
code = main(["-C", sys.argv[1], "runs", "ls", "--json"])
opened = "overbrainer.events.store" in sys.modules  # where the store is opened
print(json.dumps({"code": code, "opened": opened}), file=sys.stderr)
"""


def _ls_process(team: Team, checkout: Path) -> tuple[list[str], bool]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(checkout)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=team.env,
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.splitlines()[-1])
    assert report["code"] == 0, done.stderr
    return [json.loads(line)["id"] for line in done.stdout.splitlines()], report["opened"]


def test_a_command_line_listing_opens_the_store_only_when_another_checkout_appended(
    team: Team, tmp_path: Path
) -> None:
    here = team.checkout(tmp_path / "here")
    other = RunStore(team.url, team.checkout(tmp_path / "other"), ELSEWHERE)
    try:
        other.create(_created(RUN_A))
        assert _ls_process(team, here) == ([RUN_A], True)
        assert _ls_process(team, here) == ([RUN_A], False)
        other.create(_created(RUN_B))
        assert _ls_process(team, here) == ([RUN_A, RUN_B], True)
        assert _ls_process(team, here) == ([RUN_A, RUN_B], False)
    finally:
        other.close()


def test_a_stopped_server_reads_as_when_the_store_is_opened(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = team.checkout(tmp_path / "here")
    other = RunStore(team.url, tmp_path / "other", ELSEWHERE)
    other.create(_created(RUN_A))
    other.close()
    assert _ls(capsys, here) == [(RUN_A, "preparing")]
    view = here / ".overbrainer" / "view.sqlite"
    before = view.read_bytes()
    where = f"127.0.0.1:{team.cluster.port}/{team.db}"
    team.cluster.stop()
    try:
        with pytest.raises(pg.StoreUnavailable) as opening:
            RunStore(team.url, tmp_path / "other", ELSEWHERE)
        started = time.monotonic()
        code = main(["-C", str(here), "runs", "ls"])
        out, err = capsys.readouterr()
        assert time.monotonic() - started < 3, "a stopped server is reported at once"
        assert code == 1 and out == ""
        assert err == f"error: {opening.value}\n"
        assert err.startswith("error: cannot reach the event store") and where in err
        assert "refused the connection" in err and team.cluster.password not in err
        assert view.read_bytes() == before
    finally:
        team.cluster.start()
    assert _ls(capsys, here) == [(RUN_A, "preparing")]


@pytest.mark.parametrize("case", ["wrong password", "no password", "no database", "ssl"])
def test_refusals_read_as_when_the_store_is_opened(
    team: Team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    url = team.url
    if case == "wrong password":
        monkeypatch.setenv("PGPASSWORD", "pw-canary-wrong")
    elif case == "no password":
        monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-passfile"))
    elif case == "no database":
        url = team.cluster.url("nodb")
    else:
        url += "?sslmode=require"  # the test server has no SSL
    target = pg.parse_url(url)
    with pytest.raises(pg.StoreUnavailable) as checked:
        pg_recorder.latest_position(target)
    with pytest.raises(pg.StoreUnavailable) as opening:
        RunStore(url, tmp_path, ELSEWHERE)
    message = str(checked.value)
    assert message == str(opening.value)
    assert "pw-canary" not in message and team.cluster.password not in message


def test_a_server_that_never_answers_fails_at_the_deadline(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg, "CONNECT_TIMEOUT", 1)
    with socket.socket() as mute:  # accepts connections (the kernel does) and says nothing
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        port = mute.getsockname()[1]
        target = pg.parse_url(f"postgresql://postgres@127.0.0.1:{port}/{team.db}")
        started = time.monotonic()
        with pytest.raises(pg.StoreUnavailable) as failure:
            pg_recorder.latest_position(target)
        assert 0.9 < time.monotonic() - started < 3
    assert f"127.0.0.1:{port}/{team.db}: it did not answer within 1 s" in str(failure.value)


def test_ctrl_c_is_not_held_up_while_the_server_is_silent(team: Team) -> None:
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        port = mute.getsockname()[1]
        target = pg.parse_url(f"postgresql://postgres@127.0.0.1:{port}/{team.db}")
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                pg_recorder.latest_position(target)
        finally:
            timer.cancel()
        assert time.monotonic() - started < 2, f"the connect timeout is {pg.CONNECT_TIMEOUT} s"


def test_a_log_behind_the_view_is_another_log_and_the_view_is_rebuilt(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = team.checkout(tmp_path / "here")
    store = RunStore(team.url, tmp_path / "other", ELSEWHERE)
    store.create(_created(RUN_A))
    store.create(_created(RUN_B))
    store.close()
    assert _ls(capsys, here) == [(RUN_A, "preparing"), (RUN_B, "preparing")]
    # The database is dropped and created again under the same name: a new, shorter log.
    team.cluster.psql(f"DROP DATABASE {team.db} WITH (FORCE)")
    team.cluster.psql(f"CREATE DATABASE {team.db}")
    store = RunStore(team.url, tmp_path / "other", ELSEWHERE)
    store.create(_created(RUN_C))
    store.close()
    assert _ls(capsys, here) == [(RUN_C, "preparing")]


def test_a_damaged_row_is_rebuilt_from_the_log_not_listed(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    here = team.checkout(tmp_path / "here")
    store = RunStore(team.url, tmp_path / "other", ELSEWHERE)
    store.create(_created(RUN_A))
    store.append(RUN_A, lambda _s: [ev.RunEnded(state="cancelled")])
    store.close()
    assert _ls(capsys, here) == [(RUN_A, "cancelled")]
    db = sqlite3.connect(here / ".overbrainer" / "view.sqlite")
    with db:
        db.execute('UPDATE runs SET state=\'{"not": "a run"}\'')
    db.close()
    assert _ls(capsys, here) == [(RUN_A, "cancelled")]
