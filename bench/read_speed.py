"""The read commands and every help beside Python's own start-up.

Each figure is the median wall time of the command, its fastest run (what a busy machine
leaves least changed) and the CPU time it used, timed in turns with ``python -c pass`` (so a
change of load on a shared machine weighs on both alike), as an installed package
runs: from compiled modules (``PYTHONDONTWRITEBYTECODE`` is dropped and the package is
compiled first). The stores: a small project (5 runs of 10 events and one of 30) and a big
one (1,000 runs of 50 events and one of 10,000; 50 of 10 and one of 500 with ``--quick``).
"""

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import cli_speed
from overbrainer.cli.helps import command_paths

Row = tuple[str, str, str, str]
ROOT = Path(__file__).resolve().parents[1]
BIG_RUN = cli_speed.BIG_RUN


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERBRAINER_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@dataclass(frozen=True)
class Timing:
    """A command's median wall time, its fastest, and the median CPU time (user + system)
    it used: on a busy machine the median grows with the load, the fastest run and the CPU
    time much less."""

    wall: float
    cpu: float
    least: float

    def __lt__(self, other: "Timing") -> bool:
        return self.wall < other.wall


def _once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        args, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def _in_turns(commands: list[list[str]], env: dict[str, str], repeat: int) -> list[Timing]:
    """Each command's timing, all run in turns, after one untimed run each."""
    for args in commands:
        _once(args, env)
    samples: list[list[tuple[float, float]]] = [[] for _ in commands]
    for _ in range(repeat):
        for args, taken in zip(commands, samples, strict=True):
            taken.append(_once(args, env))
    return [
        Timing(
            statistics.median(w for w, _ in taken),
            statistics.median(c for _, c in taken),
            min(w for w, _ in taken),
        )
        for taken in samples
    ]


def _ms(timing: Timing) -> str:
    return (
        f"{timing.wall * 1000:.0f} ms (fastest {timing.least * 1000:.0f} ms, "
        f"cpu {timing.cpu * 1000:.0f} ms)"
    )


def run(progress: Callable[[str], None] | None = None, *, quick: bool = False) -> list[Row]:
    """Build both stores, time every command; one row per figure."""
    say = progress or (lambda _text: None)
    env = _environment()
    compileall.compile_dir(ROOT / "overbrainer", quiet=1)
    ob = [sys.executable, "-m", "overbrainer"]
    floor_args = [sys.executable, "-c", "pass"]
    repeat = 3 if quick else 9
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        small, big, config = tmp / "small", tmp / "big", tmp / "config"
        for path in (small, big):
            path.mkdir()
        cli_speed._build(small, 5, 10, 30)
        say("reads: building the big store")
        if quick:
            cli_speed._build(big, 50, 10, 500)
        else:
            cli_speed._build(big, 1000, 50, 10_000)
        subprocess.run([*ob, "init", str(config)], env=env, check=True, capture_output=True)

        say("reads: every command's --help")
        helps = [[*ob, *command.split(), "--help"] for command in command_paths()]
        floor, *taken = _in_turns([floor_args, *helps], env, repeat)
        floor_text = f"python -c pass {_ms(floor)}"
        worst = max(range(len(taken)), key=taken.__getitem__)
        median = Timing(
            statistics.median(t.wall for t in taken),
            statistics.median(t.cpu for t in taken),
            statistics.median(t.least for t in taken),
        )
        rows.append(
            (
                f"`<command> --help`, each of {len(taken)} (slowest: {command_paths()[worst]})",
                f"median {_ms(median)}, max {_ms(taken[worst])}",
                floor_text,
                "< 120 ms",
            )
        )

        say("reads: a small project, config check")
        reads = [
            [*ob, "-C", str(small), "runs", "ls"],
            [*ob, "-C", str(small), "events", BIG_RUN],
            [*ob, "-C", str(small), "runs", "show", BIG_RUN],
            [*ob, "-C", str(config), "config", "check"],
        ]
        floor, ls, events, show, check = _in_turns([floor_args, *reads], env, repeat)
        floor_text = f"python -c pass {_ms(floor)}"
        rows += [
            ("runs ls, a small project", _ms(ls), floor_text, "< 120 ms"),
            ("events RUN, a small project (30 events)", _ms(events), floor_text, "< 120 ms"),
            ("runs show RUN, a small project", _ms(show), floor_text, "< 120 ms"),
            ("config check (a new project)", _ms(check), floor_text, "< 150 ms"),
        ]

        say("reads: the big store")
        runs = "50 runs" if quick else "1,000 runs"
        count = "500" if quick else "10,000"
        bigs = [
            [*ob, "-C", str(big), "runs", "ls"],
            [*ob, "-C", str(big), "events", BIG_RUN],
        ]
        floor, ls, events = _in_turns([floor_args, *bigs], env, max(3, repeat // 2))
        floor_text = f"python -c pass {_ms(floor)}"
        rows += [
            (f"runs ls, {runs} (view up to date)", _ms(ls), floor_text, "< 200 ms"),
            (f"events RUN, {count} events", _ms(events), floor_text, "< 400 ms"),
        ]
    return rows


if __name__ == "__main__":
    for row in run(lambda text: print(text, file=sys.stderr)):
        print(" | ".join(row))
