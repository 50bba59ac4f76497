"""The team store beside the local one (issue: the team store).

On a throwaway PostgreSQL server started here (``overbrainer/testing/pg.py``) and on
SQLite, same machine: single-event appends per second; `runs ls` over 1,000 runs (view up
to date, and rebuilt); `store migrate` of those runs; and `events --follow` latency from an
append's return to its line on the follower's stdout.
"""

import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.testing.pg import PgCluster

ROOT = Path(__file__).resolve().parents[1]
FOLLOWED = "20260201-000000-f011"


def _run_id(i: int) -> str:
    return f"20250101-{i // 60:04d}{i % 60:02d}-{i:04x}"


def _appends_per_second(url: str | None, project: Path, env: dict[str, str], n: int = 500) -> float:
    store = RunStore(url, project, Actor.here("bench"), environ=env)
    run_id = "20260101-000000-a0a0"
    store.create(
        ev.RunCreated(
            run_id=run_id, target="here", kind="local", remote_dir="r", settings_digest="d"
        )
    )
    started = time.perf_counter()
    for i in range(n):
        store.append(run_id, lambda _s, i=i: [ev.NoteAdded(note=f"n{i}")])
    elapsed = time.perf_counter() - started
    store.close()
    return n / elapsed


def _build_runs(project: Path, runs: int = 1000, per_run: int = 10) -> int:
    store = RunStore(None, project, Actor.here("bench"))
    total = 0
    for i in range(runs):
        run_id = _run_id(i)
        events: list[ev.Event] = [
            ev.RunCreated(
                run_id=run_id,
                target="here",
                kind="local",
                remote_dir=f"r/{run_id}",
                settings_digest="d",
                base_model="m",
                adapter="lora",
            ),
            ev.JobStarted(job_dir=f"r/{run_id}", pid=100 + i),
        ]
        events += [ev.NoteAdded(note=f"n{j}") for j in range(per_run - 3)]
        events.append(ev.RunEnded(state="succeeded", metrics={"step": 10, "max_steps": 10}))
        store.append(run_id, lambda _s, e=events: e)
        total += len(events)
    store.close()
    return total


def _time(args: list[str], cwd: Path, env: dict[str, str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(
            args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _ls(project: Path) -> list[str]:
    return [sys.executable, "-m", "overbrainer", "-C", str(project), "runs", "ls"]


def _interleaved(commands: list[list[str]], env: dict[str, str], repeat: int) -> list[float]:
    """Median time of each command, run in turns (so a change of load on a shared machine
    weighs on all of them alike), after one untimed run each."""
    for args in commands:
        _time(args, ROOT, env, 1)
    samples: list[list[float]] = [[] for _ in commands]
    for _ in range(repeat):
        for args, taken in zip(commands, samples, strict=True):
            taken.append(_time(args, ROOT, env, 1))
    return [statistics.median(taken) for taken in samples]


def _cold(project: Path, env: dict[str, str]) -> float:
    """Median `runs ls` with the view rebuilt from the whole log."""
    cold = []
    for _ in range(3):
        (project / ".overbrainer" / "view.sqlite").unlink()
        cold.append(_time(_ls(project), ROOT, env, 1))
    return statistics.median(cold)


def _after_an_append(url: str, project: Path, env: dict[str, str], repeat: int = 5) -> float:
    """Median `runs ls` when another checkout appended one event since the last listing
    (the view catches up through the store)."""
    store = RunStore(url, project.parent / "elsewhere", Actor.here("bench"), environ=env)
    run_id = _run_id(0)
    samples = []
    try:
        for i in range(repeat):
            store.append(run_id, lambda _s, i=i: [ev.NoteAdded(note=f"elsewhere {i}")])
            samples.append(_time(_ls(project), ROOT, env, 1))
    finally:
        store.close()
    return statistics.median(samples)


def _follow_latency(
    url: str | None, project: Path, env: dict[str, str], n: int = 20
) -> list[float]:
    store = RunStore(url, project, Actor.here("bench"), environ=env)
    store.create(
        ev.RunCreated(
            run_id=FOLLOWED, target="here", kind="local", remote_dir="r", settings_digest="d"
        )
    )
    follower = subprocess.Popen(
        [sys.executable, "-m", "overbrainer", "-C", str(project), "events", FOLLOWED, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=env,
    )
    lines: queue.Queue[float] = queue.Queue()

    def pump() -> None:
        assert follower.stdout is not None
        for _ in follower.stdout:
            lines.put(time.perf_counter())

    threading.Thread(target=pump, daemon=True).start()
    latencies = []
    try:
        lines.get(timeout=30)  # run.Created
        time.sleep(0.5)
        for i in range(n):
            store.append(FOLLOWED, lambda _s, i=i: [ev.NoteAdded(note=f"n{i}")])
            appended = time.perf_counter()
            latencies.append(lines.get(timeout=10) - appended)
            time.sleep(0.037)  # not in step with SQLite's 0.2 s poll
        store.append(FOLLOWED, lambda _s: [ev.RunEnded(state="cancelled")])
        follower.wait(timeout=10)
    finally:
        follower.kill()
        follower.wait()
        store.close()
    return latencies


def run() -> list[tuple[str, str, str, str]]:
    """Start a server, build both stores, time them; one row per figure."""
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    cluster = PgCluster().start()
    try:
        env = cluster.client_env()
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            local, team = base / "local", base / "team"
            local.mkdir()
            team.mkdir()
            url = cluster.url(cluster.new_database())
            (team / "overbrainer.toml").write_text(f'[store]\nurl = "{url}"\n')

            sqlite_rate = _appends_per_second(None, base / "rate", env)
            pg_rate = _appends_per_second(cluster.url(cluster.new_database()), base / "rate", env)

            events = _build_runs(local)
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "overbrainer",
                    "-C",
                    str(local),
                    "store",
                    "migrate",
                    "--to",
                    url,
                ],
                cwd=ROOT,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            migrated = time.perf_counter() - started

            # Timed as an installed package runs: from its compiled modules.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            floor, sqlite_warm, pg_warm = _interleaved(
                [[sys.executable, "-c", "pass"], _ls(local), _ls(team)], env, 9
            )
            pg_append = _after_an_append(url, team, env)
            sqlite_cold, pg_cold = _cold(local, env), _cold(team, env)

            sqlite_follow = _follow_latency(None, base / "follow", env)
            pg_follow = _follow_latency(url, team, env)
    finally:
        cluster.destroy()

    def follow(lat: list[float]) -> str:
        return f"median {ms(statistics.median(lat))}, max {ms(max(lat))}"

    floor_text = f"python -c pass {ms(floor)}"
    return [
        ("appends/s, one event per append (SQLite)", f"{sqlite_rate:.0f}", "", ""),
        (
            "appends/s, one event per append (PostgreSQL, local)",
            f"{pg_rate:.0f}",
            f"SQLite {sqlite_rate:.0f}",
            "",
        ),
        (
            f"store migrate, 1,000 runs ({events:,} events) to PostgreSQL",
            f"{migrated:.2f} s",
            floor_text,
            "",
        ),
        ("runs ls, 1,000 runs, view up to date (SQLite)", ms(sqlite_warm), floor_text, "< 400 ms"),
        (
            "runs ls, 1,000 runs, view up to date (PostgreSQL)",
            ms(pg_warm),
            f"SQLite {ms(sqlite_warm)}",
            "< 400 ms",
        ),
        (
            "runs ls, 1,000 runs, another checkout appended 1 event (PostgreSQL)",
            ms(pg_append),
            f"view up to date {ms(pg_warm)}",
            "",
        ),
        ("runs ls, 1,000 runs, view rebuilt (SQLite)", ms(sqlite_cold), floor_text, ""),
        (
            "runs ls, 1,000 runs, view rebuilt (PostgreSQL)",
            ms(pg_cold),
            f"SQLite {ms(sqlite_cold)}",
            "",
        ),
        ("events --follow, append to print (SQLite, polls 0.2 s)", follow(sqlite_follow), "", ""),
        (
            "events --follow, append to print (PostgreSQL, LISTEN/NOTIFY)",
            follow(pg_follow),
            f"SQLite {ms(statistics.median(sqlite_follow))}",
            "< 200 ms",
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(" | ".join(row))
