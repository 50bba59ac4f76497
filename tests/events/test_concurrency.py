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
