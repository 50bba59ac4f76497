"""What makes a directory an overbrainer project, and what to say when it is not one.

A project is a directory holding ``overbrainer.toml`` (what ``overbrainer init`` writes) or
an ``.overbrainer/`` log written by an earlier command (its history stays readable if the
file was lost). A store URL in the environment alone does not make one: commands that only
read (``runs``, ``events``) refuse elsewhere rather than leave files in a directory that
was never a project. Loaded by the fastest commands: nothing heavy is imported here.
"""

import shlex
from pathlib import Path

from overbrainer.errors import OverbrainerError

PROJECT_FILE = "overbrainer.toml"
STATE_DIR = ".overbrainer"


class NotAProject(OverbrainerError):
    """The command was pointed at a directory that holds no overbrainer project."""


def is_project(directory: Path) -> bool:
    """Whether ``directory`` holds an overbrainer project (its file or its log)."""
    return (directory / PROJECT_FILE).is_file() or (directory / STATE_DIR).is_dir()


def not_a_project(directory: Path) -> str:
    """Why ``directory`` is no project, and the command that makes it one."""
    here = directory.resolve() == Path.cwd().resolve()
    command = "overbrainer init" + ("" if here else " " + shlex.quote(str(directory)))
    return (
        f"{directory / PROJECT_FILE} does not exist, so {directory} is not an overbrainer "
        f"project yet; create one with: {command}"
    )


def require_project(directory: Path) -> None:
    """Refuse, naming the directory and the fix, when ``directory`` is no project."""
    try:
        found = is_project(directory)
    except OSError:
        # Cannot look (no permission): the command goes on and its own reading of the
        # directory says what fails there, rather than calling it no project.
        found = True
    if not found:
        raise NotAProject(not_a_project(directory))
