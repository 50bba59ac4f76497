"""Start-up and listing speed of the CLI on a big store (issue: foundation).

A store of 1,000 runs of 50 events each, plus one run of 10,000 events, then the median
wall time of `overbrainer --help`, `runs ls` (warm view and rebuilt view) and `events RUN`,
each beside `python -c pass` on the same machine.
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore

BIG_RUN = "20260101-000000-ffff"


def _build(project: Path, runs: int = 1000, per_run: int = 50, big: int = 10_000) -> None:
    store = RunStore(None, project, Actor.here("bench"))
    for i in range(runs):
        run_id = f"20250101-{i // 60:04d}{i % 60:02d}-{i:04x}"
        events: list[ev.Event] = [
            ev.RunCreated(
                run_id=run_id,
                target="here",
                kind="local",
                remote_dir=f"runs/{run_id}",
                settings_digest="d",
                base_model="m",
                adapter="lora",
            ),
            ev.JobStarted(job_dir=f"runs/{run_id}", pid=100 + i),
        ]
        events += [
            ev.NoteAdded(note=f"n{j}") if j % 2 else ev.NoteCleared() for j in range(per_run - 3)
        ]
        events.append(ev.RunEnded(state="succeeded", metrics={"step": 10, "max_steps": 10}))
        store.append(run_id, lambda _s, e=events: e)
    store.create(
        ev.RunCreated(
            run_id=BIG_RUN, target="here", kind="local", remote_dir="runs/x", settings_digest="d"
        )
    )
    done = 1
    while done < big:
        chunk = min(500, big - done)

        def decide(state: RunLog, n: int = chunk) -> list[ev.Event]:
            return [ev.NoteAdded(note=f"note {state.run.version + k}") for k in range(n)]

        store.append(BIG_RUN, decide)
        done += chunk
    store.close()


def _time(args: list[str], cwd: Path, repeat: int = 7) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            args, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run() -> list[tuple[str, str, str, str]]:
    """Build the store and time the commands; one row per figure."""
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        started = time.perf_counter()
        _build(project)
        built = time.perf_counter() - started
        ob = [sys.executable, "-m", "overbrainer"]
        floor = _time([sys.executable, "-c", "pass"], project)
        help_time = _time([*ob, "--help"], project)
        _time([*ob, "runs", "ls"], project, repeat=1)  # build the view once
        ls_warm = _time([*ob, "runs", "ls"], project)
        view = project / ".overbrainer" / "view.sqlite"
        cold = []
        for _ in range(3):
            view.unlink()
            cold.append(_time([*ob, "runs", "ls"], project, repeat=1))
        events_time = _time([*ob, "events", BIG_RUN], project, repeat=3)
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    floor_text = f"python -c pass {ms(floor)}"
    return [
        ("store: 1,000 runs x 50 events + 1 run x 10,000 (build)", f"{built:.1f} s", "", ""),
        ("overbrainer --help", ms(help_time), floor_text, "< 250 ms"),
        ("runs ls, 1,000 runs (view up to date)", ms(ls_warm), floor_text, "< 400 ms"),
        (
            "runs ls, 1,000 runs (view rebuilt: 60,000 events)",
            ms(statistics.median(cold)),
            floor_text,
            "",
        ),
        ("events RUN, 10,000 events", ms(events_time), floor_text, "< 1 s"),
    ]
