"""Every command's ``--help`` answers from the kept texts, which are exactly what cyclopts
renders for the command tree as it is now."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.cli.help_texts import HELP
from overbrainer.cli.helps import command_paths, render, source

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_has_its_help_kept_as_cyclopts_renders_it() -> None:
    commands = command_paths()
    assert {"init", "train attach", "runs ls", "events", "store migrate"} <= set(commands)
    stale = [c for c in commands if HELP.get(c) != render(c)]
    gone = sorted(set(HELP) - set(commands))
    assert (stale, gone) == ([], []), "run `python -m overbrainer.cli.helps` to renew them"
    assert (ROOT / "overbrainer/cli/help_texts.py").read_text(encoding="utf-8") == source()


def _overbrainer(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "overbrainer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"},
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "ls", "--help"),
        ("train", "attach", "-h"),
        ("-C", "somewhere", "events", "--help"),
        ("-Csomewhere", "config", "check", "--help"),
    ],
)
def test_a_command_help_prints_the_kept_text_and_imports_no_cli_library(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    words = [a for a in args[:-1] if not a.startswith("-C") and a != "somewhere"]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['overbrainer', *{list(args)!r}]\n"
        "try:\n"
        "    runpy.run_module('overbrainer', run_name='__main__')\n"
        "except SystemExit as end:\n"
        "    assert end.code == 0, end.code\n"
        "heavy = ('cyclopts', 'rich', 'trio', 'eventsourcing')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # the width cyclopts kept
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    )
    assert done.stdout == HELP[" ".join(words)]
    assert done.stderr == "[]\n"


def test_a_help_of_another_width_is_cyclopts_own(tmp_path: Path) -> None:
    wide = subprocess.run(
        [sys.executable, "-m", "overbrainer", "runs", "ls", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "300"},
        check=True,
    )
    assert wide.stdout != HELP["runs ls"]
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    assert wide.stdout.startswith("Usage: overbrainer runs ls")


def test_a_help_among_other_options_is_still_cyclopts_own(tmp_path: Path) -> None:
    done = _overbrainer("train", "--target", "gpu", "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == HELP["train"]
    unknown = _overbrainer("no-such-command", "--help", cwd=tmp_path)
    assert unknown.returncode == 2
    assert 'unknown command "no-such-command"' in unknown.stderr
