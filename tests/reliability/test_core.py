"""The campaign runner: a case whose harness timed out runs once more, alone; only a second
time-out counts as a violation, and any other failure counts at once."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from reliability import core, world
from reliability.core import Case, run_cases
from reliability.world import case_dir


def test_a_harness_time_out_runs_again_alone_and_only_a_second_one_counts() -> None:
    tries: dict[str, int] = {}

    def flaky() -> list[str]:
        tries["flaky"] = tries.get("flaky", 0) + 1
        if tries["flaky"] == 1:
            raise TimeoutError("a running run did not happen in 90 s")
        return []

    def hung() -> list[str]:
        tries["hung"] = tries.get("hung", 0) + 1
        raise TimeoutError("a running run did not happen in 90 s")

    def broken() -> list[str]:
        tries["broken"] = tries.get("broken", 0) + 1
        return ["pod k3x9 bills and nothing guards it"]

    core.RERUN.clear()
    cases = [
        Case("ctrl-c", name, fn)
        for name, fn in (("flaky", flaky), ("hung", hung), ("broken", broken))
    ]
    results = {r.name: r for r in run_cases(cases, jobs=2)}
    assert tries == {"flaky": 2, "hung": 2, "broken": 1}
    assert results["flaky"].violations == []
    assert [v.split(":")[:2] for v in results["hung"].violations] == [["harness", " TimeoutError"]]
    assert results["broken"].violations == ["pod k3x9 bills and nothing guards it"]
    assert sorted(core.RERUN) == ["flaky", "hung"]
    core.RERUN.clear()


def test_a_case_run_again_gets_a_fresh_directory_beside_the_first(tmp_path: Path) -> None:
    first = case_dir(tmp_path, "local-train-sigint-05")
    first.mkdir(parents=True)
    (first / "left").write_text("as it was")
    second = case_dir(tmp_path, "local-train-sigint-05")
    assert second == tmp_path / "cases" / "local-train-sigint-05-try2"
    assert not second.exists() and (first / "left").read_text() == "as it was"


def test_commands_run_the_sources_as_they_were_when_the_campaigns_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A helper's campaign once found 115 cases "did not reach their checkpoint": its sources
    # were edited while it ran, moving the lines the traced checkpoints are keyed by.
    monkeypatch.setattr(world, "SOURCE", world.SOURCE)
    copy = world.snapshot_sources(tmp_path / "src")
    env = world.base_env()
    assert env["PYTHONPATH"] == str(copy)
    imported = subprocess.run(
        [
            *world.Project("x", tmp_path, env, "local", tmp_path, tmp_path).command()[:2],
            "-c",
            "import overbrainer.cli.train_cmd as m; print(m.__file__)",
        ],
        env=env,
        cwd=world.ROOT,  # where `just reliability` runs
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert imported == str(copy / "overbrainer" / "cli" / "train_cmd.py")
    edited = world.ROOT / "overbrainer" / "cli" / "train_cmd.py"
    assert (copy / "overbrainer" / "cli" / "train_cmd.py").read_text() == edited.read_text()


def test_the_commands_get_the_stop_signals_the_campaigns_were_started_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Started as a background job of a script, the campaigns ignore SIGINT: so would every
    # command (an ignored signal stays ignored), and a Ctrl-C case would test nothing.
    from reliability.__main__ import unignore_stop_signals

    monkeypatch.setattr(signal, "getsignal", lambda _s: signal.SIG_IGN)
    installed: dict[int, object] = {}
    monkeypatch.setattr(signal, "signal", lambda s, h: installed.setdefault(s, h))
    unignore_stop_signals()
    assert set(installed) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    assert all(callable(h) for h in installed.values())
    monkeypatch.undo()
    # And for real: a child of a process that ignored SIGINT, once un-ignored, takes it.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import signal, subprocess, sys\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from reliability.__main__ import unignore_stop_signals\n"
            "unignore_stop_signals()\n"
            "print(subprocess.run(['grep', 'SigIgn', '/proc/self/status'],"
            " capture_output=True, text=True).stdout)",
        ],
        cwd=world.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ignored = int(child.split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), child
