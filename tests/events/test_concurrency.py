"""Two processes appending to the same run at once lose no event and both finish."""

import subprocess
import sys
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore

RUN = "20260102-000000-abcd"
ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_appending_lose_nothing(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    store.create(
        ev.RunCreated(
            run_id=RUN, target="here", kind="local", remote_dir="runs/x", settings_digest="d"
        )
    )
    store.append(RUN, lambda _: [ev.JobStarted(job_dir="runs/x", pid=1)])
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.events.append_worker", str(tmp_path), RUN, tag, "150"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for tag in ("one", "two")
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "READY"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        assert out.strip() == "DONE"

    history = store.history(RUN)
    notes = [r.event.note for r in history if isinstance(r.event, ev.NoteAdded)]
    assert sorted(notes) == sorted([f"{t}-{i}" for t in ("one", "two") for i in range(150)])
    # Each worker's own appends stay in its order.
    for tag in ("one", "two"):
        mine = [n for n in notes if n.startswith(tag)]
        assert mine == [f"{tag}-{i}" for i in range(150)]
    assert [r.seq for r in history] == list(range(1, len(history) + 1))
    ends = [r for r in history if isinstance(r.event, ev.RunEnded)]
    assert len(ends) == 1, "the loser re-decided on the fresh state and appended nothing"
    assert {r.actor["command"] for r in history} == {"test", "worker one", "worker two"}
    store.close()


async def test_the_loser_of_a_race_is_told_what_the_other_process_did(tmp_path: Path) -> None:
    from overbrainer.session.journal import Journal

    first = RunStore(None, tmp_path, Actor.here("train cancel"))
    second = RunStore(None, tmp_path, Actor.here("train attach"))
    first.create(
        ev.RunCreated(run_id=RUN, target="here", kind="local", remote_dir="r", settings_digest="d")
    )
    told: list[str] = []
    journal = Journal(second, tmp_path, others=lambda r: told.append(r.event.name))
    await journal.state(RUN)  # the second process has read the run
    first.append(RUN, lambda _: [ev.JobStarted(job_dir="r", pid=1), ev.CancelRequested()])
    state = await journal.append(
        RUN, lambda s: [] if s.run.cancel_requested else [ev.NoteAdded(note="x")]
    )
    assert told == ["run.JobStarted", "run.CancelRequested"]
    assert state.run.note is None  # it re-decided on what the other wrote
    first.close()
    second.close()


async def test_an_append_that_no_longer_fits_the_run_is_a_plain_error_not_a_crash(
    tmp_path: Path,
) -> None:
    # Issue 12: a decision made before another command ended the run (a fixed list of
    # events) reached the user as an InvalidTransition traceback.
    import pytest

    from overbrainer.errors import OverbrainerError
    from overbrainer.session.journal import Journal

    store = RunStore(None, tmp_path, Actor.here("test"))
    store.create(
        ev.RunCreated(
            run_id=RUN, target="here", kind="local", remote_dir="runs/x", settings_digest="d"
        )
    )
    store.append(RUN, lambda _: [ev.RunEnded(state="failed", message="ended by another")])
    journal = Journal(store, tmp_path)
    with pytest.raises(OverbrainerError) as changed:
        await journal.append(RUN, [ev.JobStarted(job_dir="runs/x", pid=1)])
    assert str(changed.value) == (
        f"run {RUN} changed under this command (job started while the run is failed); nothing "
        f"was recorded by it: see `overbrainer events {RUN}`"
    )
    assert [r.event.name for r in store.history(RUN)] == ["run.Created", "run.Ended"]
    store.close()


def test_commands_opening_a_new_project_log_at_the_same_instant_all_open_it(
    tmp_path: Path,
) -> None:
    """Each opening creates the log's table in a transaction that reads, then writes; the
    one that commits second is refused at once by SQLite ("database is locked")."""
    import threading

    failures: list[BaseException] = []
    for round_ in range(80):
        project = tmp_path / f"p{round_}"
        project.mkdir()
        start = threading.Barrier(4)

        def open_it(project: Path = project, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                RunStore(None, project, Actor.here("test")).close()
            except BaseException as error:
                failures.append(error)

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == []


def _busy_error(tmp_path: Path) -> Exception:
    """What opening a log raises when SQLite finds another connection in the way: its
    error, wrapped as eventsourcing wraps it."""
    import sqlite3

    from eventsourcing.persistence import OperationalError

    holder = sqlite3.connect(tmp_path / "held.sqlite", isolation_level=None)
    holder.execute("CREATE TABLE t (a)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sqlite3.connect(tmp_path / "held.sqlite", timeout=0).execute("SELECT * FROM t")
    except sqlite3.OperationalError as error:
        wrapped = OperationalError(error)
        wrapped.__cause__ = error
        return wrapped
    finally:
        holder.close()
    raise AssertionError("the second connection was not refused")


class _Opening:
    """An opening that is refused ``refusals`` times, each taking ``seconds``."""

    def __init__(self, error: Exception, refusals: int, seconds: float = 0.0) -> None:
        self.error, self.refusals, self.seconds = error, refusals, seconds
        self.calls = 0
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self) -> str:
        self.calls += 1
        self.now += self.seconds
        if self.calls <= self.refusals:
            raise self.error
        return "log"


def test_an_opening_refused_at_once_as_busy_is_tried_again(tmp_path: Path) -> None:
    from overbrainer.events.store import open_sqlite

    opening = _Opening(_busy_error(tmp_path), refusals=2)
    assert open_sqlite(opening, clock=opening.clock) == "log"
    assert opening.calls == 3


def test_an_opening_busy_after_waiting_out_the_lock_timeout_is_not_tried_again(
    tmp_path: Path,
) -> None:
    import pytest
    from eventsourcing.persistence import OperationalError

    from overbrainer.events.store import open_sqlite

    opening = _Opening(_busy_error(tmp_path), refusals=1, seconds=30.0)
    with pytest.raises(OperationalError):
        open_sqlite(opening, clock=opening.clock)
    assert opening.calls == 1


def test_an_opening_that_fails_otherwise_is_not_tried_again() -> None:
    import pytest

    from overbrainer.events.store import open_sqlite

    opening = _Opening(PermissionError("read-only directory"), refusals=5)
    with pytest.raises(PermissionError):
        open_sqlite(opening, clock=opening.clock)
    assert opening.calls == 1


def test_an_opening_refused_every_time_gives_up_after_a_bounded_number_of_tries(
    tmp_path: Path,
) -> None:
    import pytest
    from eventsourcing.persistence import OperationalError

    from overbrainer.events.store import open_sqlite

    opening = _Opening(_busy_error(tmp_path), refusals=1000)
    with pytest.raises(OperationalError):
        open_sqlite(opening, clock=opening.clock)
    assert 1 < opening.calls <= 10
