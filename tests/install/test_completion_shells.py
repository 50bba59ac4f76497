"""Completion in the real shells, installed by the one documented command
(``overbrainer completion install``): bash and zsh typed into on a terminal, fish asked with
``complete -C``; each lists a project's run IDs after ``overbrainer events``."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.install.terminal import Terminal

BIN = Path(sys.executable).parent
RUNS = ["20260101-100000-abcd", "20260102-093000-ab12", "20260102-100000-9f00"]
CONFIG = """\
[training]
target = "box"

[targets.box]
kind = "local"

[targets.gpu]
kind = "runpod"
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    for run in RUNS:
        (project / "runs" / run).mkdir(parents=True)
    (project / "overbrainer.toml").write_text(CONFIG)
    return project


def user_env(home: Path, shell: str) -> dict[str, str]:
    """A user whose home is ``home``, whose shell is ``shell``, with overbrainer on the PATH."""
    assert shutil.which(shell), (
        f"{shell} is not installed; the suite drives it for real: run the suite with "
        "`./dev test`, which installs what .ci/system-packages lists"
    )
    keep = ("LANG", "LC_ALL", "LC_CTYPE")
    env = {k: v for k, v in os.environ.items() if k in keep}
    return {
        **env,
        "HOME": str(home),
        "SHELL": shutil.which(shell) or shell,
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "TERM": "xterm",
    }


def install(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        [str(BIN / "overbrainer"), "completion", "install", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_bash_completes_run_ids_after_events_once_installed(home: Path, project: Path) -> None:
    env = user_env(home, "bash")
    (home / ".bashrc").write_text("PS1='READY> '")  # no newline at its end
    said = install(env)
    script = home / ".local" / "share" / "bash-completion" / "completions" / "overbrainer"
    assert said.splitlines()[0] == f"wrote {script}"
    line = f"[ -f {script} ] && . {script}  # overbrainer completion"
    assert said.splitlines()[1] == f"added to {home / '.bashrc'}: {line}"
    assert (home / ".bashrc").read_text() == f"PS1='READY> '\n{line}\n"
    # Once: again, the script is refreshed and the line not added twice.
    assert install(env).splitlines()[1] == f"{home / '.bashrc'} already loads it"
    assert (home / ".bashrc").read_text() == f"PS1='READY> '\n{line}\n"

    terminal = Terminal(["bash", "-i"], env, project)
    try:
        terminal.read_until("READY> ")
        terminal.type("overbrainer ev\t")
        terminal.read_until("overbrainer events $")
        terminal.type("\t")
        terminal.read_until("overbrainer events 2026010$")  # the runs' common prefix
        terminal.type("\t\t")  # readline lists the candidates at the second Tab
        screen = terminal.read_until(RUNS[-1])
        assert all(run in screen for run in RUNS), screen
        terminal.type("\x15")  # clear the line
        terminal.type("overbrainer -C . train --target g\t")
        terminal.read_until("--target gpu $")
    finally:
        terminal.close()


def test_bash_completion_function_answers(project: Path, home: Path) -> None:
    """The script's function, called as bash's completion calls it."""
    env = user_env(home, "bash")
    script = subprocess.run(
        [str(BIN / "overbrainer"), "completion", "bash"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (home / "completion.bash").write_text(script)
    elsewhere = project.parent
    cases = [
        ("overbrainer events ''", project, RUNS),
        ("overbrainer events ''", elsewhere, []),  # not a project: no runs
        ("overbrainer -C project events ''", elsewhere, RUNS),
        ("overbrainer train --target ''", project, ["box", "gpu"]),
        (f"{BIN / 'overbrainer'} pod rm 202601", project, RUNS),
        ("overbrainer init pro", elsewhere, ["project"]),  # directories, by bash
        ("overbrainer events --", project, ["--json", "--at", "--follow", "--verbose", "--help"]),
        ("overbrainer runs ls ''", project, []),
    ]
    for typed, cwd, expected in cases:
        program = (
            f". {home / 'completion.bash'}; COMP_WORDS=({typed}); "
            "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _overbrainer; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(
            ["bash", "--norc", "--noprofile", "-c", program],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), typed
        got = [line for line in done.stdout.splitlines() if line]
        assert sorted(got) == sorted(expected), typed


def test_zsh_completes_run_ids_and_targets_once_installed(home: Path, project: Path) -> None:
    env = user_env(home, "zsh")
    (home / ".zshrc").write_text("PS1='READY> '\n")
    said = install(env)
    script = home / ".local" / "share" / "overbrainer" / "completion.zsh"
    assert said.splitlines()[0] == f"wrote {script}"
    assert (home / ".zshrc").read_text().splitlines()[-1] == (
        f"[ -f {script} ] && source {script}  # overbrainer completion"
    )
    terminal = Terminal(["zsh", "-i"], env, project)
    try:
        terminal.read_until("READY> ")
        terminal.type("overbrainer events \t")
        terminal.read_until("overbrainer events 2026010")  # the runs' common prefix
        terminal.type("\t")
        screen = terminal.read_until(r"20260102-100000-9f00")
        assert all(run in screen for run in RUNS), screen
        terminal.type("\x15")
        terminal.type("overbrainer train --target \t")
        screen = terminal.read_until(r"gpu\s+--\s+runpod")
        assert "box" in screen
    finally:
        terminal.close()


def test_fish_completes_run_ids_once_installed(home: Path, project: Path) -> None:
    env = user_env(home, "fish")
    said = install(env)
    script = home / ".config" / "fish" / "completions" / "overbrainer.fish"
    assert said.splitlines() == [
        f"wrote {script}",
        "fish completes overbrainer from now on, in every fish",
    ]

    def ask(typed: str) -> list[str]:
        done = subprocess.run(
            [
                "fish",
                "--no-config",
                "-c",
                f"set fish_complete_path {script.parent}; complete -C '{typed}'",
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert sorted(ask("overbrainer events ")) == sorted(RUNS)
    assert ask("overbrainer train --target ") == ["box\tlocal", "gpu\trunpod"]
    assert "events\ta run's audit log" in ask("overbrainer ")
    # Where fish itself looks, with the user's own configuration read.
    done = subprocess.run(
        ["fish", "-c", "complete -C 'overbrainer events 2026010'"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert sorted(done.stdout.splitlines()) == sorted(RUNS)
