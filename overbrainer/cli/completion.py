"""Shell completion's answers: ``overbrainer __complete SHELL WORD… CURRENT``.

The completion scripts (``shells/``: bash, zsh, fish) hand over the words typed so far
and the word being completed; the answer is a first line saying how to complete it —
``:words`` (the candidates follow, one a line) or ``:dirs`` (the shell completes a
directory itself) — then the candidates: the commands and options of the command tree
below, target names from the project's ``overbrainer.toml`` and run IDs from its
``runs/``. The project is found from the current directory, or the one ``-C DIR`` names,
as every command finds it: there or in the nearest directory above.

A completion runs at every Tab, so this module imports nothing heavy: not the command
tree's modules nor cyclopts, only the plain declaration of the tree.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from overbrainer.cli.spec import HELP, SHELLS, TREE

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Literal

    from overbrainer.cli.spec import Arg, Command, Option, Shell, Source

    Mode = Literal["words", "dirs"]

# Plain classes, not dataclasses or pathlib: at every Tab, those imports alone would cost
# more than the answer.


def _options(command: Command, tree: Command) -> tuple[Option, ...]:
    """What completes after a dash: the command's options, and --help (the top level
    declares its own)."""
    return command.options if command is tree else (*command.options, HELP)


class Reply:
    """How to complete the current word: ``dirs`` (by the shell), or these candidates
    (value, description)."""

    __slots__ = ("candidates", "mode")

    def __init__(self, mode: Mode, candidates: tuple[tuple[str, str], ...] = ()) -> None:
        self.mode, self.candidates = mode, candidates

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reply) and (self.mode, self.candidates) == (
            other.mode,
            other.candidates,
        )

    def __repr__(self) -> str:
        return f"Reply({self.mode!r}, {self.candidates!r})"


def reply(
    words: Sequence[str], current: str, cwd: str | os.PathLike[str], tree: Command = TREE
) -> Reply:
    """What completes ``current`` after ``words`` (the words typed before it, the program's
    name left out), in the project at ``cwd`` or the one ``-C DIR`` names, by the command
    tree ``tree`` declares."""
    here = os.fspath(cwd)
    project = here
    node = tree
    expecting: Option | None = None
    positionals = 0
    used: set[str] = set()
    for word in words:
        if expecting is not None:
            if expecting.param == "project":
                project = os.path.join(here, os.path.expanduser(word))
            expecting = None
        elif node is tree and (joined := _joined_project(word, tree)) is not None:
            project = os.path.join(here, os.path.expanduser(joined))
        elif word.startswith("-"):
            option = next((o for o in _options(node, tree) if word in o.names), None)
            if option is not None:
                used.add(option.name)
                expecting = option if option.complete is not None else None
        elif node.command(word) is not None and positionals == 0:
            node = node.command(word) or node
            used = set()
        else:
            positionals += 1
    if expecting is not None:
        return _values(expecting, current, project)
    if current.startswith("-"):
        return _matching(
            ((o.name, o.brief) for o in _options(node, tree) if o.name not in used), current
        )
    if node.commands and positionals == 0:
        return _matching(((c.name, c.brief) for c in node.commands), current)
    if node.args and (positionals < len(node.args) or node.args[-1].many):
        return _values(node.args[min(positionals, len(node.args) - 1)], current, project)
    return Reply("words")


def _joined_project(word: str, tree: Command) -> str | None:
    """The directory ``word`` names when it is the tree's project option with its value
    joined (``-CDIR``), else None."""
    for option in tree.options:
        short = option.short
        if option.param == "project" and short is not None and word.startswith(short):
            return word[len(short) :] or None
    return None


def _matching(pairs: Iterable[tuple[str, str]], prefix: str) -> Reply:
    return Reply("words", tuple(p for p in pairs if p[0].startswith(prefix)))


def project_root(start: str) -> str:
    """The project a command started in ``start`` runs in, found as ``config/project.py``
    finds it (``start``, or the nearest directory above holding ``overbrainer.toml`` or
    ``.overbrainer/events.sqlite``), with ``os.path`` alone; ``start`` when there is none."""
    if not os.path.isdir(start) or os.path.isdir(os.path.join(start, ".overbrainer")):
        return start
    probe, here = start, os.path.realpath(start)
    while True:
        if os.path.isfile(os.path.join(probe, "overbrainer.toml")) or os.path.isfile(
            os.path.join(probe, ".overbrainer", "events.sqlite")
        ):
            return probe
        parent = os.path.dirname(here)
        if parent == here:
            return start
        probe = here = parent


def _values(what: Option | Arg, current: str, project: str) -> Reply:
    source: Source | None = what.complete
    if source == "dir":
        return Reply("dirs")
    if source in ("run", "target"):
        project = project_root(project)
    if source == "run":
        return _matching([(r, "") for r in run_ids(project)], current)
    if source == "target":
        return _matching(targets(project), current)
    if source == "shell":
        return _matching([(s, "") for s in SHELLS], current)
    return Reply("words")


_HEX = frozenset("0123456789abcdef")


def is_run_id(name: str) -> bool:
    """Whether ``name`` has the shape of a run ID, ``YYYYMMDD-HHMMSS-xxxx`` (the shape
    ``overbrainer.events.ids`` gives them, checked here without its imports)."""
    return (
        len(name) == 20
        and name[8] == "-" == name[15]
        and name[:8].isascii()
        and name[:8].isdigit()
        and name[9:15].isascii()
        and name[9:15].isdigit()
        and set(name[16:]) <= _HEX
    )


def run_ids(project: str) -> list[str]:
    """The run IDs of ``project``'s ``runs/`` directory, newest first."""
    try:
        with os.scandir(os.path.join(project, "runs")) as entries:
            found = [e.name for e in entries if is_run_id(e.name) and e.is_dir()]
    except OSError:
        return []
    return sorted(found, reverse=True)


def targets(project: str) -> list[tuple[str, str]]:
    """The ``[targets.NAME]`` of ``project``'s ``overbrainer.toml``, each with its kind
    (none when the file cannot be read: completion never reports a problem)."""
    import tomllib

    try:
        with open(os.path.join(project, "overbrainer.toml"), "rb") as file:
            data = tomllib.load(file)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    declared = data.get("targets")
    if not isinstance(declared, dict):
        return []
    return [
        (name, str(spec.get("kind", "")) if isinstance(spec, dict) else "")
        for name, spec in declared.items()
    ]


# Control characters (a newline above all) would break the one-candidate-a-line answer.
_CONTROLS = {code: None for code in (*range(0x20), 0x7F)}
_CONTROLS_TO_SPACES = dict.fromkeys(_CONTROLS, " ")


def render(answer: Reply, shell: Shell) -> str:
    """``answer`` as the completion scripts read it: the mode line, then one candidate a
    line — bare for bash, ``value:description`` for zsh, ``value<TAB>description`` for fish."""
    lines = [f":{answer.mode}"]
    for value, description in answer.candidates:
        value, description = value.translate(_CONTROLS), description.translate(_CONTROLS_TO_SPACES)
        if shell == "zsh":
            escaped = value.replace("\\", "\\\\").replace(":", "\\:")
            lines.append(f"{escaped}:{description}" if description else escaped)
        elif shell == "fish" and description:
            lines.append(f"{value}\t{description}")
        else:
            lines.append(value)
    return "\n".join(lines) + "\n"


def complete(argv: Sequence[str]) -> int:
    """``overbrainer __complete SHELL WORD… CURRENT``: print the answer, exit 0 (2 when the
    call itself is malformed: a completion script of another version)."""
    import sys

    if len(argv) < 2 or argv[0] not in SHELLS:
        sys.stderr.write("usage: overbrainer __complete bash|zsh|fish WORD... CURRENT\n")
        return 2
    shell = next(s for s in SHELLS if s == argv[0])
    *words, current = argv[1:]
    try:
        cwd = os.getcwd()
    except OSError:  # the current directory was removed
        cwd = "/"
    try:
        sys.stdout.write(render(reply(words, current, cwd), shell))
        sys.stdout.flush()
    except OSError:  # the shell stopped reading (a second Tab, Ctrl-C): nothing to say
        pass
    return 0
