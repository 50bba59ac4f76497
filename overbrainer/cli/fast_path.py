"""The read commands run most often — ``runs ls``, ``runs show RUN``, ``events RUN``,
``config check`` — parsed without cyclopts, whose import alone costs more than the
command's work.

:func:`parse` takes only what it understands completely: these commands with their own
options, each given as cyclopts binds it (``--last 3``, ``--last=3``, ``--state`` repeated,
``--`` before the run). Anything else — an unknown or repeated option, a value it would
have to convert as cyclopts does (``0x10``, ``-1``, ``=true``), a missing or extra word,
``--help`` — is None: cyclopts then parses the line, and refuses it in its own words.
The commands, their options and what each option's value is come from the declaration of
the command tree (``spec.py``); the tests hold this parse against cyclopts' own over a
table of command lines and random ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from overbrainer.cli import spec
from overbrainer.cli.spec import RUN_STATES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from overbrainer.cli.spec import Takes

__all__ = ["COMMANDS", "RUN_STATES", "Command", "Parsed", "fast_commands", "parse"]


class Command:
    """A command the fast path serves (one of ``spec.py`` with a ``fast`` function): its
    words, the function that does it (as ``module:function``), how many positional
    arguments it takes, and its options (each spelling to its parameter and kind)."""

    __slots__ = ("options", "positional", "target", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        target: str,
        positional: int,
        options: dict[str, tuple[str, Takes]],
    ) -> None:
        self.words = words
        self.target = target
        self.positional = positional
        self.options = options


def fast_commands(tree: spec.Command) -> tuple[Command, ...]:
    """The commands of ``tree`` the fast path serves: those with a ``fast`` function and a
    fixed number of positional arguments."""
    return tuple(
        Command(
            words,
            declared.fast,
            len(declared.args),
            {name: (o.param, o.takes) for o in declared.options for name in o.names},
        )
        for words, declared in spec.walk(tree)
        if declared.fast is not None and not any(a.many for a in declared.args)
    )


COMMANDS = fast_commands(spec.TREE)

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


def _value(kind: Takes, text: str) -> Any:
    """The value of an option as cyclopts converts it, or None when this parse leaves it
    to cyclopts (empty, like an option, a number not plainly in decimal, or a kind of value
    this parse does not convert)."""
    if not text or text.startswith("-"):
        return None
    if kind == "count":
        return int(text) if text.isascii() and text.isdigit() else None
    if kind == "states":
        return text if text in RUN_STATES else None
    return text if kind == "text" else None


def parse(tokens: Sequence[str], commands: Sequence[Command] = COMMANDS) -> Parsed | None:
    """``tokens`` (after the global options) as cyclopts would bind them, when they name a
    command of ``commands`` in a form this parse fully understands; None otherwise."""
    if any(word in _CYCLOPTS_OWN for word in tokens):
        return None
    for command in commands:
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
