"""The team store beside the local one.

On a throwaway PostgreSQL server started here (``overbrainer/testing/pg.py``) and on
SQLite, same machine: single-event appends per second, beside a bare commit of one row per
transaction on the same database (what no append can beat: each is one durable
transaction); `runs ls` over 1,000 runs (view up to date, and rebuilt); `store migrate` of
those runs; and `events --follow` latency from an append's return to its line on the
follower's stdout. ``--quick``: 50 runs, fewer rounds.
"""

import queue
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.testing.pg import PgCluster

ROOT = Path(__file__).resolve().parents[1]
FOLLOWED = "20260201-000000-f011"
ROW = b"x" * 300  # about the size of a stored event


@dataclass(frozen=True)
class Sizes:
    """How many appends, runs and rounds."""

    appends: int
    runs: int
    repeat: int
    after_append: int
    cold: int
    follow: int


FULL = Sizes(appends=500, runs=1000, repeat=9, after_append=5, cold=3, follow=20)
QUICK = Sizes(appends=50, runs=50, repeat=3, after_append=2, cold=1, follow=5)


def _run_id(i: int) -> str:
    return f"20250101-{i // 60:04d}{i % 60:02d}-{i:04x}"


def _appends_per_second(url: str | None, project: Path, env: dict[str, str], n: int) -> float:
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


def _bare_sqlite_commits(path: Path, n: int) -> float:
    """Commits per second of one row each into a SQLite file in WAL mode, as the store's."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, body BLOB)")
        started = time.perf_counter()
        for _ in range(n):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO rows (body) VALUES (?)", (ROW,))
            db.execute("COMMIT")
        return n / (time.perf_counter() - started)
    finally:
        db.close()


def _bare_pg_commits(cluster: PgCluster, n: int) -> float:
    """Commits per second of one row each into a table of a fresh database on the server."""
    import psycopg

    url = cluster.url(cluster.new_database())
    with psycopg.connect(url, password=cluster.password, autocommit=True) as db:
        db.execute("CREATE TABLE rows (id BIGSERIAL PRIMARY KEY, body BYTEA)")
        started = time.perf_counter()
        for _ in range(n):
            with db.transaction():
                db.execute("INSERT INTO rows (body) VALUES (%s)", (ROW,))
        return n / (time.perf_counter() - started)


def _build_runs(project: Path, runs: int, per_run: int = 10) -> int:
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


def _cold(project: Path, env: dict[str, str], repeat: int) -> float:
    """Median `runs ls` with the view rebuilt from the whole log."""
    cold = []
    for _ in range(repeat):
        (project / ".overbrainer" / "view.sqlite").unlink()
        cold.append(_time(_ls(project), ROOT, env, 1))
    return statistics.median(cold)


def _after_an_append(url: str, project: Path, env: dict[str, str], repeat: int) -> float:
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


def _follow_latency(url: str | None, project: Path, env: dict[str, str], n: int) -> list[float]:
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


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """Start a server, build both stores, time them; one row per figure (``quick``: small
    sizes)."""
    say = progress or (lambda _text: None)
    sizes = QUICK if quick else FULL
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    say("team: a PostgreSQL server")
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

            say("team: appends")
            sqlite_rate = _appends_per_second(None, base / "rate", env, sizes.appends)
            sqlite_floor = _bare_sqlite_commits(base / "bare.sqlite", sizes.appends)
            pg_url = cluster.url(cluster.new_database())
            pg_rate = _appends_per_second(pg_url, base / "rate", env, sizes.appends)
            pg_floor = _bare_pg_commits(cluster, sizes.appends)

            say(f"team: runs ls and store migrate, {sizes.runs:,} runs")
            events = _build_runs(local, sizes.runs)
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
                [[sys.executable, "-c", "pass"], _ls(local), _ls(team)], env, sizes.repeat
            )
            pg_append = _after_an_append(url, team, env, sizes.after_append)
            sqlite_cold = _cold(local, env, sizes.cold)
            pg_cold = _cold(team, env, sizes.cold)

            say("team: events --follow")
            sqlite_follow = _follow_latency(None, base / "follow", env, sizes.follow)
            pg_follow = _follow_latency(url, team, env, sizes.follow)
    finally:
        cluster.destroy()

    def follow(lat: list[float]) -> str:
        return f"median {ms(statistics.median(lat))}, max {ms(max(lat))}"

    floor_text = f"python -c pass {ms(floor)}"
    runs = f"{sizes.runs:,} runs"
    return [
        (
            "appends/s, one event per append (SQLite)",
            f"{sqlite_rate:.0f}",
            f"bare SQLite commits/s {sqlite_floor:.0f}",
            "",
        ),
        (
            "appends/s, one event per append (PostgreSQL, local)",
            f"{pg_rate:.0f}",
            f"bare PostgreSQL commits/s {pg_floor:.0f}",
            "",
        ),
        (
            f"store migrate, {runs} ({events:,} events) to PostgreSQL",
            f"{migrated:.2f} s",
            floor_text,
            "",
        ),
        (f"runs ls, {runs}, view up to date (SQLite)", ms(sqlite_warm), floor_text, "< 400 ms"),
        (
            f"runs ls, {runs}, view up to date (PostgreSQL)",
            ms(pg_warm),
            f"SQLite {ms(sqlite_warm)}",
            "< 400 ms",
        ),
        (
            f"runs ls, {runs}, another checkout appended 1 event (PostgreSQL)",
            ms(pg_append),
            f"view up to date {ms(pg_warm)}",
            "",
        ),
        (f"runs ls, {runs}, view rebuilt (SQLite)", ms(sqlite_cold), floor_text, ""),
        (
            f"runs ls, {runs}, view rebuilt (PostgreSQL)",
            ms(pg_cold),
            f"SQLite {ms(sqlite_cold)}",
            "",
        ),
        (
            "events --follow, append to print (SQLite)",
            follow(sqlite_follow),
            "polls every 0.2 s",
            "",
        ),
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
