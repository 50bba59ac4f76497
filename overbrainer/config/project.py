"""What makes a directory an overbrainer project, how a command finds the one it runs in,
and what to say when there is none.

A project is a directory holding ``overbrainer.toml`` (what ``overbrainer init`` writes) or
an ``.overbrainer/`` log written by an earlier command (its history stays readable if the
file was lost). A command finds its project as git finds a repository: in the current
directory (or ``-C DIR``) or the nearest directory above it with ``overbrainer.toml`` or the
log ``.overbrainer/events.sqlite``. A store URL in the environment
alone does not make one: commands that only read (``runs``, ``events``) refuse elsewhere
rather than leave files in a directory that was never a project. Loaded by the fastest
commands: nothing heavy is imported here.
"""

import shlex
from pathlib import Path

from overbrainer.errors import OverbrainerError

PROJECT_FILE = "overbrainer.toml"
STATE_DIR = ".overbrainer"
LOG_FILE = f"{STATE_DIR}/events.sqlite"


class NotAProject(OverbrainerError):
    """The command was pointed at a directory that holds no overbrainer project."""


def is_project(directory: Path) -> bool:
    """Whether ``directory`` holds an overbrainer project (its file or its log)."""
    return (directory / PROJECT_FILE).is_file() or (directory / STATE_DIR).is_dir()


def _is_project_above(directory: Path) -> bool:
    """Whether ``directory``, above where a command started, is a project: its file, or
    the log an earlier command wrote there. A bare ``.overbrainer/`` (a cache, say) does not
    make a home directory the project of everything below it."""
    return (directory / PROJECT_FILE).is_file() or (directory / LOG_FILE).is_file()


def looked_at(start: Path) -> list[Path]:
    """The directories a search from ``start`` looks in, nearest first: ``start``, then each
    directory above it up to the root. A ``start`` that does not exist is looked at alone:
    a mistyped ``-C DIR`` inside a project must not land in that project."""
    try:
        if not start.is_dir():
            return [start]
        resolved = start.resolve()
    except (OSError, RuntimeError):
        return [start]
    return [start, *resolved.parents]


def find_project(start: Path) -> Path | None:
    """The project ``start`` is in: ``start`` itself (as given, so relative paths stay
    relative) when it is one, else the nearest directory above it that is; None when
    there is none."""
    try:
        if is_project(start):
            return start
    except OSError:
        # Cannot look (no permission): the command goes on there and its own reading of
        # the directory says what fails, rather than running in a project further up.
        return start
    for directory in looked_at(start)[1:]:
        try:
            if _is_project_above(directory):
                return directory
        except OSError:
            continue
    return None


def enclosing_project(directory: Path) -> Path | None:
    """The project that ``directory`` (which need not exist yet) lies inside, when it is not
    a project itself: the one a new project there would be nested in."""
    try:
        if is_project(directory):
            return None
        existing = directory.absolute()
        while not existing.is_dir() and existing != existing.parent:
            existing = existing.parent
    except OSError:
        return None
    return find_project(existing)


def reached_from_cwd(directory: Path) -> bool:
    """Whether a command run in the current directory, without ``-C``, finds the project
    ``directory`` (so hints need no ``-C``)."""
    try:
        found = find_project(Path.cwd())
        return found is not None and found.resolve() == directory.resolve()
    except OSError:
        return False


def not_a_project(directory: Path) -> str:
    """Why ``directory`` is no project (naming every directory looked in), and the command
    that makes it one."""
    try:
        here = directory.resolve() == Path.cwd().resolve()
    except OSError:
        here = False
    command = "overbrainer init" + ("" if here else " " + shlex.quote(str(directory)))
    searched = looked_at(directory)
    try:
        has_log = (directory / STATE_DIR).is_dir()
    except OSError:
        has_log = False
    if len(searched) == 1 or has_log:
        return (
            f"{directory / PROJECT_FILE} does not exist, so {directory} is not an overbrainer "
            f"project yet; create one with: {command}"
        )
    names = ", ".join(str(d) for d in searched)
    return (
        f"{directory} is not an overbrainer project yet, nor is any directory above it "
        f"(looked for {PROJECT_FILE} or {LOG_FILE} in {names}); create one with: {command}"
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
