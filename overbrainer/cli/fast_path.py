"""The read commands run most often — ``runs ls``, ``runs show RUN``, ``events RUN``,
``config check`` — parsed without cyclopts, whose import alone costs more than the
command's work.

:func:`parse` takes only what it understands completely: these commands with their own
options, each given as cyclopts binds it (``--last 3``, ``--last=3``, ``--state`` repeated,
``--`` before the run). Anything else — an unknown or repeated option, a value it would
have to convert as cyclopts does (``0x10``, ``-1``, ``=true``), a missing or extra word,
``--help`` — is None: cyclopts then parses the line, and refuses it in its own words.
The tests hold this parse against cyclopts' own over a table of command lines and random
ones, and its options against those cyclopts declares, so the two cannot drift apart.
"""

from collections.abc import Sequence
from typing import Any, Literal

# How an option takes its value: a flag none; a count a whole number in decimal digits; a
# text the token as it is; states a run state, repeated for several. (Plain classes, no
# enum or dataclass: this module is loaded before every read command.)
Kind = Literal["flag", "count", "text", "states"]

RUN_STATES = ("preparing", "running", "succeeded", "failed", "cancelled", "stopped")


class Command:
    """A command the fast path serves: its words, the function that does it (as
    ``module:function``), how many positional arguments it takes, and its options (each
    spelling to its parameter and kind)."""

    __slots__ = ("options", "positional", "target", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        target: str,
        positional: int,
        options: dict[str, tuple[str, Kind]],
    ) -> None:
        self.words = words
        self.target = target
        self.positional = positional
        self.options = options


_JSON: dict[str, tuple[str, Kind]] = {"--json": ("json", "flag")}

COMMANDS = (
    Command(
        ("runs", "ls"),
        "overbrainer.cli.runs_read:list_runs",
        0,
        {
            **_JSON,
            "--state": ("state", "states"),
            "--last": ("last", "count"),
            "--since": ("since", "text"),
            "--all": ("all_runs", "flag"),
        },
    ),
    Command(
        ("runs", "show"),
        "overbrainer.cli.runs_read:show_run",
        1,
        {**_JSON, "--no-plot": ("no_plot", "flag")},
    ),
    Command(
        ("events",),
        "overbrainer.cli.events_read:replay",
        1,
        {
            **_JSON,
            "--at": ("at", "count"),
            "--follow": ("follow", "flag"),
            "--verbose": ("verbose", "flag"),
            "-v": ("verbose", "flag"),
        },
    ),
    Command(("config", "check"), "overbrainer.cli.config_check:check_config", 0, _JSON),
)

# Answered by cyclopts wherever they stand.
_CYCLOPTS_OWN = frozenset({"--help", "-h", "--version"})


class Parsed:
    """A command line as cyclopts would bind it: the command, its positional arguments and
    the options given (the others keep their defaults)."""

    __slots__ = ("args", "command", "kwargs")

    def __init__(self, command: Command, args: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        self.command = command
        self.args = args
        self.kwargs = kwargs

    def run(self) -> Any:
        """Call the command's function with the arguments."""
        from importlib import import_module

        module, _, name = self.command.target.partition(":")
        function = getattr(import_module(module), name)
        return function(*self.args, **self.kwargs)


def _value(kind: Kind, text: str) -> Any:
    """The value of an option as cyclopts converts it, or None when this parse leaves it
    to cyclopts (empty, like an option, or a number not plainly in decimal)."""
    if not text or text.startswith("-"):
        return None
    if kind == "count":
        return int(text) if text.isascii() and text.isdigit() else None
    if kind == "states":
        return text if text in RUN_STATES else None
    return text


def parse(tokens: Sequence[str]) -> Parsed | None:
    """``tokens`` (after the global options) as cyclopts would bind them, when they name a
    command of :data:`COMMANDS` in a form this parse fully understands; None otherwise."""
    if any(word in _CYCLOPTS_OWN for word in tokens):
        return None
    for command in COMMANDS:
        if tuple(tokens[: len(command.words)]) == command.words:
            break
    else:
        return None
    rest = list(tokens[len(command.words) :])
    args: list[str] = []
    kwargs: dict[str, Any] = {}
    ended = False  # after ``--`` every word is positional
    while rest:
        word = rest.pop(0)
        if ended or not word.startswith("-"):
            args.append(word)
            continue
        if word == "--":
            ended = True
            continue
        name, equals, text = word.partition("=")
        if name not in command.options:
            return None
        key, kind = command.options[name]
        if kind == "flag":
            if equals or key in kwargs:
                return None
            kwargs[key] = True
            continue
        if not equals:
            if not rest:
                return None
            text = rest.pop(0)
        value = _value(kind, text)
        if value is None:
            return None
        if kind == "states":
            kwargs.setdefault(key, []).append(value)
        elif key in kwargs:
            return None
        else:
            kwargs[key] = value
    if len(args) != command.positional:
        return None
    return Parsed(command, tuple(args), kwargs)
