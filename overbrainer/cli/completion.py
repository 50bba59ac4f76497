"""Shell completion's answers: ``overbrainer __complete SHELL WORD… CURRENT``.

The completion scripts (``shells/``: bash, zsh, fish) hand over the words typed so far
and the word being completed; the answer is a first line saying how to complete it —
``:words`` (the candidates follow, one a line) or ``:dirs`` (the shell completes a
directory itself) — then the candidates: the commands and options of the command tree
below, target names from the project's ``overbrainer.toml`` and run IDs from its
``runs/``. The project is found from the current directory, or the one ``-C DIR`` names,
as every command finds it: there or in the nearest directory above.

A completion runs at every Tab, so this module imports nothing heavy: not the command
tree's modules nor cyclopts. Their commands and options are written out in :data:`TREE`,
and the test suite checks it against the real command tree, so it cannot drift.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Literal

    Value = Literal["run", "runs", "target", "dir", "shell", "text"]
    """What a positional argument or an option's value is, for completion (``runs``: any
    number of run IDs)."""
    Shell = Literal["bash", "zsh", "fish"]
    Mode = Literal["words", "dirs"]

# Plain classes, not dataclasses or pathlib: at every Tab, those imports alone would cost
# more than the answer.

SHELLS: tuple[Shell, ...] = ("bash", "zsh", "fish")


class Option:
    """An option of a command; ``value`` None for a flag."""

    __slots__ = ("help", "name", "value")

    def __init__(self, name: str, help: str, value: Value | None = None) -> None:
        self.name, self.help, self.value = name, help, value


class Command:
    """A command: its options, what its positional argument is, its subcommands."""

    __slots__ = ("help", "options", "positional", "subcommands")

    def __init__(
        self,
        help: str,
        options: tuple[Option, ...] = (),
        positional: Value | None = None,
        subcommands: dict[str, Command] | None = None,
    ) -> None:
        self.help, self.options, self.positional = help, options, positional
        self.subcommands = subcommands or {}

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


_HELP = Option("--help", "show this command's help")
_JSON = Option("--json", "one JSON object per line")

TREE = Command(
    help="overbrainer",
    options=(
        Option("-C", "the project directory", "dir"),
        Option("--help", "overbrainer's help"),
        Option("--version", "overbrainer's version"),
    ),
    subcommands={
        "init": Command("write a new project", (_HELP,), positional="dir"),
        "config": Command(
            "the project's configuration",
            (_HELP,),
            subcommands={
                "check": Command("the resolved configuration, or every problem", (_JSON, _HELP))
            },
        ),
        "train": Command(
            "check, create a run, train, bring the results home",
            (
                Option("--target", "the target to train on", "target"),
                Option("--keep-pod", "Runpod: keep the pod once the job started"),
                Option("--check", "only the preflight checks; create nothing"),
                Option("--resume-from", "go on from a run's checkpoint (RUN[:STEP])", "run"),
                _HELP,
            ),
            subcommands={
                "attach": Command("follow a started run again", (_HELP,), positional="run"),
                "cancel": Command(
                    "stop a run's job, collect it, end its pod", (_HELP,), positional="run"
                ),
                "stop": Command(
                    "have a run's job save a checkpoint and stop; collect it",
                    (_HELP,),
                    positional="run",
                ),
            },
        ),
        "runs": Command(
            "this project's runs",
            (_HELP,),
            subcommands={
                "ls": Command(
                    "one line per run",
                    (
                        _JSON,
                        Option("--state", "only runs in this state", "text"),
                        Option("--last", "only the N newest runs", "text"),
                        Option("--since", "only runs created in 12h, 7d, 30d…; the total", "text"),
                        Option("--all", "also the runs whose files were removed"),
                        _HELP,
                    ),
                ),
                "show": Command(
                    "a run's record, progress, pod, files and loss curves",
                    (_JSON, Option("--no-plot", "leave out the loss curves"), _HELP),
                    positional="run",
                ),
                "logs": Command(
                    "the job's log, or the pod's own",
                    (
                        Option("--follow", "keep printing as it grows"),
                        Option("--tail", "only the last N lines", "text"),
                        Option("--pod", "Runpod: the pod's own log"),
                        Option("--source", "with --pod: system or container", "text"),
                        _HELP,
                    ),
                    positional="run",
                ),
                "compare": Command(
                    "runs side by side",
                    (_JSON, Option("--no-plot", "leave out the loss curves"), _HELP),
                    positional="runs",
                ),
                "report": Command(
                    "one self-contained HTML page",
                    (Option("--output", "the file to write", "text"), _HELP),
                    positional="runs",
                ),
                "rm": Command(
                    "remove finished runs' files (their events stay)",
                    (_HELP,),
                    positional="runs",
                ),
                "gc": Command(
                    "remove the files of runs older than a span",
                    (
                        Option("--older-than", "runs created more than 12h, 7d, 30d… ago", "text"),
                        Option("--keep-best", "keep the N runs of lowest final loss", "text"),
                        Option("--delete", "remove them (default: a dry run)"),
                        _JSON,
                        _HELP,
                    ),
                ),
            },
        ),
        "events": Command(
            "a run's audit log",
            (
                _JSON,
                Option("--at", "the run and pod after event N", "text"),
                Option("--follow", "keep printing new events"),
                Option("--verbose", "each event's fields and actor too"),
                _HELP,
            ),
            positional="run",
        ),
        "pod": Command(
            "the account's overbrainer pods and Runpod's catalog",
            (_HELP,),
            subcommands={
                "ls": Command("the pods, each classified", (_JSON, _HELP)),
                "rm": Command(
                    "delete every pod of a run",
                    (Option("--force", "whatever the run's state"), _HELP),
                    positional="run",
                ),
                "gpus": Command(
                    "Runpod's GPU types, cheapest first",
                    (
                        Option("--min-vram", "at least this many GB per GPU", "text"),
                        Option("--max-price", "at most this many USD per GPU-hour", "text"),
                        Option("--in-stock", "only types in stock now"),
                        Option("--data-center", "the stock in this data center", "text"),
                        _JSON,
                        _HELP,
                    ),
                ),
                "datacenters": Command("Runpod's data centers", (_JSON, _HELP)),
                "billing": Command(
                    "what Runpod billed for gone pods",
                    (_JSON, _HELP),
                    positional="runs",
                ),
            },
        ),
        "store": Command(
            "the event store",
            (_HELP,),
            subcommands={
                "migrate": Command(
                    "copy this history into a team store",
                    (
                        Option("--to", "the team store's postgresql:// URL", "text"),
                        Option("--dry-run", "show what would be copied"),
                        _JSON,
                        _HELP,
                    ),
                )
            },
        ),
        "completion": Command(
            "shell completion",
            (_HELP,),
            subcommands={
                **{
                    shell: Command(f"print the {shell} completion script", (_HELP,))
                    for shell in SHELLS
                },
                "install": Command(
                    "install completion for your shell",
                    (Option("--shell", "bash, zsh or fish", "shell"), _HELP),
                ),
            },
        ),
    },
)


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


def reply(words: Sequence[str], current: str, cwd: str | os.PathLike[str]) -> Reply:
    """What completes ``current`` after ``words`` (the words typed before it, the program's
    name left out), in the project at ``cwd`` or the one ``-C DIR`` names."""
    here = os.fspath(cwd)
    project = here
    node = TREE
    expecting: Option | None = None
    positionals = 0
    used: set[str] = set()
    for word in words:
        if expecting is not None:
            if expecting.name == "-C":
                project = os.path.join(here, os.path.expanduser(word))
            expecting = None
        elif node is TREE and word.startswith("-C") and len(word) > 2:
            project = os.path.join(here, os.path.expanduser(word[2:]))
        elif word.startswith("-"):
            option = node.option(word) or (node.option("-C") if word == "--project" else None)
            if option is not None:
                used.add(option.name)
                expecting = option if option.value is not None else None
        elif word in node.subcommands and positionals == 0:
            node = node.subcommands[word]
            used = set()
        else:
            positionals += 1
    if expecting is not None:
        return _values(expecting.value, current, project)
    if current.startswith("-"):
        return _matching(((o.name, o.help) for o in node.options if o.name not in used), current)
    if node.subcommands and positionals == 0:
        return _matching(((n, c.help) for n, c in node.subcommands.items()), current)
    if node.positional is not None and (positionals == 0 or node.positional == "runs"):
        return _values(node.positional, current, project)
    return Reply("words")


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


def _values(value: Value | None, current: str, project: str) -> Reply:
    if value == "dir":
        return Reply("dirs")
    if value in ("run", "runs", "target"):
        project = project_root(project)
    if value in ("run", "runs"):
        return _matching([(r, "") for r in run_ids(project)], current)
    if value == "target":
        return _matching(targets(project), current)
    if value == "shell":
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
