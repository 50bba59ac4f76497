"""The command tree is declared once, in ``overbrainer/cli/spec.py``: the cyclopts app
built from it (``app.py``, ``declare.py``) parses and documents exactly its commands,
arguments, options and help."""

import inspect
from typing import Any

from overbrainer.cli.app import app
from overbrainer.cli.spec import TREE, Command, walk

_OWN = ("--help", "-h", "--version")


def _summary(help: str | None) -> str:
    return " ".join(inspect.cleandoc(help or "").split("\n\n")[0].split())


def _declared(node: Any) -> dict[str, Any]:
    """What cyclopts declares of one command: its help, subcommands, arguments, options."""
    args: list[tuple[str, str, bool, str | None]] = []
    options: list[tuple[tuple[str, ...], str, bool, str | None]] = []
    if node.default_command is not None:
        for argument in node.assemble_argument_collection():
            if not argument.parse:
                continue
            kind = argument.field_info.kind
            name, help = argument.field_info.name, argument.parameter.help
            if kind is inspect.Parameter.KEYWORD_ONLY:
                flag = argument.hint is bool
                options.append((tuple(argument.names), name, flag, help))
            else:
                many = kind is inspect.Parameter.VAR_POSITIONAL
                args.append((argument.names[0].removeprefix("--").upper(), name, many, help))
    return {
        "help": _summary(node.help),
        "commands": sorted(n for n in node if n not in _OWN),
        "args": args,
        "options": options,
    }


def _ours(command: Command) -> dict[str, Any]:
    return {
        "help": command.help,
        "commands": sorted(c.name for c in command.commands),
        "args": [(a.name, a.param, a.many, a.help) for a in command.args],
        "options": [(o.names, o.param, o.takes == "flag", o.help) for o in command.options],
    }


def test_the_cyclopts_app_declares_the_specs_commands_arguments_options_and_help() -> None:
    for path, command in walk(TREE):
        if not path:
            continue
        node: Any = app
        for word in path:
            node = node[word]
        assert _declared(node) == _ours(command), path


def test_every_option_value_kind_names_its_choices_where_it_has_some() -> None:
    for path, command in walk(TREE):
        for option in command.options:
            assert bool(option.choices) == (option.takes in ("states", "choice")), path
            assert (option.complete is None) == (option.takes == "flag"), path
