"""Start-up and listing speed of the CLI on a big store.

A store of 1,000 runs of 50 events each, plus one run of 10,000 events (50 runs of 10 and
one of 500 with ``--quick``), then the median wall time of `overbrainer --help`, `runs ls`
(warm view and rebuilt view) and `events RUN`, each beside `python -c pass` on the same
machine: the start of a Python process, which no command can beat.
"""

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore

BIG_RUN = "20260101-000000-ffff"


@dataclass(frozen=True)
class Sizes:
    """The store's size and how many times each command is timed."""

    runs: int
    per_run: int
    big: int
    repeat: int
    cold: int


FULL = Sizes(runs=1000, per_run=50, big=10_000, repeat=7, cold=3)
QUICK = Sizes(runs=50, per_run=10, big=500, repeat=2, cold=1)


def _build(project: Path, runs: int, per_run: int, big: int) -> None:
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


def _time(args: list[str], cwd: Path, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            args, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """Build the store and time the commands; one row per figure (``quick``: small sizes)."""
    say = progress or (lambda _text: None)
    sizes = QUICK if quick else FULL
    runs = f"{sizes.runs:,} runs"
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        started = time.perf_counter()
        _build(project, sizes.runs, sizes.per_run, sizes.big)
        say(
            f"cli: store of {runs} x {sizes.per_run} events + 1 run x {sizes.big:,} built "
            f"in {time.perf_counter() - started:.1f} s"
        )
        ob = [sys.executable, "-m", "overbrainer"]
        floor = _time([sys.executable, "-c", "pass"], project, sizes.repeat)
        help_time = _time([*ob, "--help"], project, sizes.repeat)
        _time([*ob, "runs", "ls"], project, repeat=1)  # build the view once
        ls_warm = _time([*ob, "runs", "ls"], project, sizes.repeat)
        view = project / ".overbrainer" / "view.sqlite"
        cold = []
        for _ in range(sizes.cold):
            view.unlink()
            cold.append(_time([*ob, "runs", "ls"], project, repeat=1))
        events_time = _time([*ob, "events", BIG_RUN], project, repeat=sizes.cold)
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    floor_text = f"python -c pass {ms(floor)}"
    rebuilt = sizes.runs * sizes.per_run + sizes.big
    return [
        ("overbrainer --help", ms(help_time), floor_text, "< 120 ms"),
        (f"runs ls, {runs} (view up to date)", ms(ls_warm), floor_text, "< 200 ms"),
        (
            f"runs ls, {runs} (view rebuilt: {rebuilt:,} events)",
            ms(statistics.median(cold)),
            floor_text,
            "",
        ),
        (f"events RUN, {sizes.big:,} events", ms(events_time), floor_text, "< 400 ms"),
    ]
