"""The benchmarks' entry point: groups by name, a usage error for an unknown one, and a
quick group run whole (CI runs every group with ``python -m bench --quick``)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main, table

ROOT = Path(__file__).resolve().parent.parent


def test_an_unknown_group_is_a_usage_error_naming_the_groups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--quick", "pods"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: no benchmark group 'pods'; the groups are cli, reads, completion, pod, cache, "
        "ssh, team, train (for example `python -m bench --quick cli pod`)\n"
    )


def test_the_table_puts_each_figure_beside_its_floor() -> None:
    assert table([("a", "1 s", "floor 0.5 s", ""), ("longer what", "2", "3", "< 4")]) == (
        "| what        | figure | floor       | aim |\n"
        "|-------------|--------|-------------|-----|\n"
        "| a           | 1 s    | floor 0.5 s |     |\n"
        "| longer what | 2      | 3           | < 4 |"
    )


def test_the_pod_group_runs_whole_and_every_figure_has_a_floor() -> None:
    # The pod group is on the MockClock (seconds of real time); it drives the Runpod
    # lifecycle, so a change there that breaks the benchmark fails here, not only in CI.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "pod"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()[2:]]
    assert [row[0].strip() for row in rows] == [
        "pod: billed beyond a 1 h job",
        "pod: API calls per run",
    ]
    assert all(row[1].strip() and row[2].strip() for row in rows)


def test_the_cache_group_runs_whole_and_says_each_case_beside_the_boot() -> None:
    # Real processes on the real clock (the fake Runpod API on loopback, fake pods): its
    # quick sizes take about 20 s.
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    (row,) = [line.split("|")[1:-1] for line in done.stdout.splitlines()[2:]]
    assert row[0].strip().startswith("pod: billed seconds before the first training step")
    assert re.fullmatch(
        r"cold volume \d+\.\d s, warm volume \d+\.\d s, no volume \d+\.\d s", row[1].strip()
    )
    assert re.fullmatch(r"boot \d+\.\d s", row[2].strip())
