"""``overbrainer completion``: print a shell's completion script, or install it.

``completion install`` is the one command a user runs: it writes the script for their shell
(``$SHELL``, or ``--shell``) where that shell finds it, and for bash and zsh adds one line
to the shell's startup file that loads it (once: running it again changes nothing but the
script). The scripts ask ``overbrainer __complete`` (``completion.py``) at each Tab.
"""

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from overbrainer.cli.declare import command, group
from overbrainer.errors import OverbrainerError, UsageError

app = group("completion")

ShellName = Literal["bash", "zsh", "fish"]

MARK = "# overbrainer completion"
"""Ends the line ``install`` adds to a startup file, so a reader knows what added it."""


def script_text(shell: ShellName) -> str:
    """The completion script for ``shell``, shipped with the package."""
    return (
        resources.files("overbrainer.cli")
        .joinpath("shells", f"overbrainer.{shell}")
        .read_text("utf-8")
    )


@dataclass(frozen=True)
class Installation:
    """Where ``install`` puts a shell's script, and the startup file line that loads it."""

    shell: ShellName
    script: Path
    startup: Path | None = None  # None: the shell loads the script by itself (fish)
    line: str = ""


def installation(shell: ShellName, environ: Mapping[str, str]) -> Installation:
    """Where ``shell``'s completion goes for the user whose environment is ``environ``."""
    home = Path(environ.get("HOME") or Path.home())
    data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    if shell == "fish":
        config = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        return Installation(shell, config / "fish" / "completions" / "overbrainer.fish")
    if shell == "bash":
        # bash-completion's own directory: with bash-completion, bash also finds it there.
        script = data / "bash-completion" / "completions" / "overbrainer"
        quoted = shlex.quote(str(script))
        return Installation(
            shell, script, home / ".bashrc", f"[ -f {quoted} ] && . {quoted}  {MARK}"
        )
    script = data / "overbrainer" / "completion.zsh"
    quoted = shlex.quote(str(script))
    startup = Path(environ.get("ZDOTDIR") or home) / ".zshrc"
    return Installation(shell, script, startup, f"[ -f {quoted} ] && source {quoted}  {MARK}")


def shell_of(environ: Mapping[str, str]) -> ShellName:
    """The user's shell, from ``$SHELL``."""
    name = Path(environ.get("SHELL", "")).name
    for shell in ("bash", "zsh", "fish"):
        if name == shell:
            return shell
    raise UsageError(
        f"cannot tell your shell from SHELL={environ.get('SHELL', '')!r}; name it: "
        "overbrainer completion install --shell bash (or zsh, fish)"
    )


def _write(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a half-written script would break every Tab)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _add_line(startup: Path, line: str) -> bool:
    """Append ``line`` to ``startup`` unless it holds it already; whether it was added."""
    try:
        existing = startup.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        existing = ""
    if line in existing.splitlines():
        return False
    separator = "" if not existing or existing.endswith("\n") else "\n"
    with startup.open("a", encoding="utf-8") as file:
        file.write(f"{separator}{line}\n")
    return True


def install_completion(plan: Installation) -> list[str]:
    """Carry out ``plan``; what was done, one sentence a line."""
    done: list[str] = []
    try:
        _write(plan.script, script_text(plan.shell))
        done.append(f"wrote {plan.script}")
        if plan.startup is not None:
            if _add_line(plan.startup, plan.line):
                done.append(f"added to {plan.startup}: {plan.line}")
            else:
                done.append(f"{plan.startup} already loads it")
    except OSError as error:
        where = error.filename or plan.script
        raise OverbrainerError(
            f"cannot install {plan.shell} completion: {where}: "
            f"{error.strerror or type(error).__name__}; fix that, or print the script "
            f"with `overbrainer completion {plan.shell}` and load it yourself"
        ) from None
    if plan.startup is not None:
        load = ". " if plan.shell == "bash" else "source "
        done.append(
            f"{plan.shell} completes overbrainer in new shells; in this one run: "
            f"{load}{shlex.quote(str(plan.script))}"
        )
    else:
        done.append("fish completes overbrainer from now on, in every fish")
    return done


@command(app, "completion", "install")
def install(
    *,
    shell: ShellName | None = None,
) -> int:
    environ = os.environ
    for sentence in install_completion(installation(shell or shell_of(environ), environ)):
        print(sentence)
    return 0


@command(app, "completion", "bash")
def bash() -> int:
    sys.stdout.write(script_text("bash"))
    return 0


@command(app, "completion", "zsh")
def zsh() -> int:
    sys.stdout.write(script_text("zsh"))
    return 0


@command(app, "completion", "fish")
def fish() -> int:
    sys.stdout.write(script_text("fish"))
    return 0
