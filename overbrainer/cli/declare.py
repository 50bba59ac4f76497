"""The cyclopts side of the command tree: each group's app and each command's parameters,
names, help and registration come from ``spec.py``; a command's function declares only
its parameters' Python names, types and defaults."""

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from cyclopts import App, Parameter

from overbrainer.cli import spec

F = TypeVar("F", bound=Callable[..., Any])


def declared(words: tuple[str, ...], tree: spec.Command = spec.TREE) -> spec.Command:
    """The declaration of the command ``words`` names (``("runs", "ls")``) in ``tree``."""
    found = dict(spec.walk(tree)).get(words)
    if found is None:
        raise LookupError(f"spec.py declares no command {' '.join(words)!r}")
    return found


def text(command: spec.Command) -> str:
    """A command's help as cyclopts reads a docstring: its first paragraph, then the rest."""
    return f"{command.help}\n\n{command.more}" if command.more else command.help


def group(*words: str, tree: spec.Command = spec.TREE) -> App:
    """The cyclopts app of a command with subcommands."""
    command = declared(words, tree)
    return App(name=command.name, help=text(command))


def command(app: App | None, *words: str, tree: spec.Command = spec.TREE) -> Callable[[F], F]:
    """Give a command's function its options' and arguments' names and help, and its own
    help, from the declaration of ``words``; register it in ``app`` (as its default when
    the command has subcommands). ``app`` None: the top level loads it by its path."""

    def apply(function: F) -> F:
        command = declared(words, tree)
        hints = function.__annotations__
        for option in command.options:
            # No --no-FLAG nor --empty-LIST: an option is given or left out.
            shape = Parameter(name=list(option.names), help=option.help, negative=())
            hints[option.param] = Annotated[hints[option.param], shape]
        for arg in command.args:
            hints[arg.param] = Annotated[hints[arg.param], Parameter(help=arg.help)]
        function.__doc__ = text(command)
        if app is not None:
            if command.commands:
                app.default(function)
            else:
                app.command(function, name=command.name)
        return function

    return apply
