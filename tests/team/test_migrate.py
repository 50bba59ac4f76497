"""``store migrate``: a checkout's SQLite history copied into the team store, each event
once, with its time and actor; a second migration is a no-op; the projections rebuilt
from the team store equal the SQLite ones."""

import json
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.projections.view import RunsView
from tests.events.scripted import EVERY_TYPE as SCRIPT
from tests.fakes.pg import Team

HOSTS = ("laptop-a", "workstation-b", "ci-runner")


def _run_id(i: int) -> str:
    return f"20250102-{i // 60:04d}{i % 60:02d}-{i:04x}"


def _history(i: int) -> list[ev.Event]:
    """Run ``i``'s events: local runs that ended, and Runpod runs with a pod that went."""
    run_id = _run_id(i)
    kind = "runpod" if i % 3 == 0 else "local"
    events: list[ev.Event] = [
        ev.RunCreated(
            run_id=run_id,
            target="gpu" if kind == "runpod" else "here",
            kind=kind,
            remote_dir=f"overbrainer/{run_id}",
            settings_digest=f"d{i}",
            base_model="m",
            adapter="lora",
        ),
    ]
    if kind == "runpod":
        pod = f"pod{i}"
        events += [
            ev.AttemptSent(
                n=1,
                pod_name=f"overbrainer-{run_id}-1",
                gpu_type="NVIDIA A40",
                deadline="2026-01-01T00:00:00Z",
            ),
            ev.AttemptResolved(n=1, result="created", pod_id=pod),
            ev.PodCreated(pod_id=pod, gpu_type="NVIDIA A40", cost_per_hour=0.5),
        ]
    events.append(ev.JobStarted(job_dir=f"overbrainer/{run_id}", pid=100 + i))
    events += [ev.NoteAdded(note=f"note {j} of {i}") for j in range(i % 4)]
    events.append(
        ev.RunEnded(
            state=("succeeded", "failed", "cancelled")[i % 3], metrics={"step": i, "max_steps": 100}
        )
    )
    if kind == "runpod":
        events += [
            ev.PodDeleting(pod_id=f"pod{i}", reason="retrieved"),
            ev.PodDeleted(pod_id=f"pod{i}", by="client", uptime_seconds=60.0 * i, spend=0.01 * i),
        ]
    return events


def _build(project: Path, runs: int) -> int:
    """A checkout's SQLite log: the scripted runs plus generated ones, from several hosts."""
    stores = {
        host: RunStore(
            None, project, Actor(command="train", user="u", host=host, pid=1, version="0.3.0")
        )
        for host in HOSTS
    }
    total = 0
    for run_id, event in SCRIPT:
        stores[HOSTS[0]].append(run_id, lambda _s, e=event: [e])
        total += 1
    for i in range(runs - len({run_id for run_id, _ in SCRIPT})):
        store = stores[HOSTS[i % len(HOSTS)]]
        for event in _history(i):  # one append per event, so runs interleave in the log
            store.append(_run_id(i), lambda _s, e=event: [e])
            total += 1
    for store in stores.values():
        store.close()
    return total


def _run_ids(store: RunStore) -> list[str]:
    return sorted({record.run_id for _, record in store.notifications(0, 100_000)})


def _view(store: RunStore, path: Path) -> list[dict[str, object]]:
    view = RunsView(path, str(store.url))
    try:
        view.catch_up(store)
        return [state.to_json() for state in view.runs()]
    finally:
        view.close()


def test_migrate_100_runs_once_with_times_and_actors(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "solo"
    project.mkdir()
    total = _build(project, 100)

    # --dry-run: what would move, run by run; nothing moves.
    assert (
        main(["-C", str(project), "store", "migrate", "--to", team.url, "--dry-run", "--json"]) == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 100 and sum(r["to_copy"] for r in rows) == total
    assert all(r["target_events"] == 0 and r["conflict"] is None for r in rows)
    assert main(["-C", str(project), "store", "migrate", "--to", team.url, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert f"would copy {total} events of 100 runs" in err and len(out.splitlines()) == 101
    target = RunStore(team.url, project, Actor.here("test"))
    assert target.max_position() == 0

    assert main(["-C", str(project), "store", "migrate", "--to", team.url]) == 0
    out, err = capsys.readouterr()
    assert f"copied {total} events of 100 runs" in out and "verified 100 runs" in out
    assert f'[store] url = "{team.url}"' in err

    source = RunStore(None, project, Actor.here("test"))
    # Every event once: as many rows as events, each run's sequence whole, and each event
    # identical to the original — payload, time and actor.
    assert len(target.notifications(0, 100_000)) == total
    run_ids = _run_ids(source)
    assert len(run_ids) == 100 and _run_ids(target) == run_ids
    for run_id in run_ids:
        assert target.history(run_id) == source.history(run_id)
    assert {r.actor["host"] for _, r in target.notifications(0, 100_000)} == set(HOSTS)
    # The log keeps the source's order across runs (not run after run).
    assert [(r.run_id, r.seq) for _, r in target.notifications(0, 100_000)] == [
        (r.run_id, r.seq) for _, r in source.notifications(0, 100_000)
    ]

    # A second migration copies nothing.
    position = target.max_position()
    assert main(["-C", str(project), "store", "migrate", "--to", team.url]) == 0
    out, _ = capsys.readouterr()
    assert f"nothing to copy: the 100 runs ({total} events)" in out
    assert target.max_position() == position

    # The projections from the team store equal those from SQLite.
    assert _view(target, tmp_path / "team-view.sqlite") == _view(source, tmp_path / "view.sqlite")
    other = team.checkout(tmp_path / "other")
    assert main(["-C", str(other), "runs", "ls", "--json"]) == 0
    from_team = capsys.readouterr().out
    assert main(["-C", str(project), "runs", "ls", "--json"]) == 0
    assert capsys.readouterr().out == from_team

    # Work continues here: the next migration copies only what is new.
    late = "20260105-000000-beef"
    source.append(_run_id(5), lambda _s: [ev.NoteAdded(note="after the migration")])
    source.create(
        ev.RunCreated(run_id=late, target="here", kind="local", remote_dir="r", settings_digest="d")
    )
    assert main(["-C", str(project), "store", "migrate", "--to", team.url]) == 0
    out, _ = capsys.readouterr()
    assert "copied 2 events of 2 runs" in out
    assert target.history(_run_id(5)) == source.history(_run_id(5))
    assert target.history(late) == source.history(late)
    source.close()
    target.close()


def test_a_run_that_differs_in_the_team_store_is_reported_and_left_alone(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "solo"
    project.mkdir()
    source = RunStore(None, project, Actor.here("test"))
    clash, fine = "20260106-000000-aaaa", "20260106-000000-bbbb"
    for run_id in (clash, fine):
        source.create(
            ev.RunCreated(
                run_id=run_id, target="here", kind="local", remote_dir="r", settings_digest="here"
            )
        )
    # Somebody else's run with the same ID already sits in the team store.
    target = RunStore(team.url, project, Actor.here("elsewhere"))
    target.create(
        ev.RunCreated(
            run_id=clash, target="there", kind="local", remote_dir="r", settings_digest="there"
        )
    )

    assert main(["-C", str(project), "store", "migrate", "--to", team.url]) == 1
    out, err = capsys.readouterr()
    assert "copied 1 event of 1 run from" in out
    assert f"error: run {clash} not copied: its event 1 differs in the team store" in err
    assert target.history(fine) == source.history(fine)
    assert target.history(clash)[0].event.settings_digest == "there"  # type: ignore[attr-defined]
    source.close()
    target.close()


def test_migrate_needs_a_local_history(
    team: Team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-C", str(tmp_path), "store", "migrate", "--to", team.url]) == 1
    assert "no SQLite event log" in capsys.readouterr().err
    assert not (tmp_path / ".overbrainer").exists()
    assert main(["-C", str(tmp_path), "store", "migrate", "--to", "sqlite:///x"]) == 2
