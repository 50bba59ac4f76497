"""The command tree as cyclopts parses and documents it, built from ``spec.py``. Every
top-level command is registered by import path, so ``--help`` and tab completion import
none of the heavy modules (trio, httpx, asyncssh, eventsourcing)."""

from cyclopts import App

from overbrainer.cli import spec
from overbrainer.version import describe

# main() takes the global options before cyclopts sees the command line; the help says so.
_PROJECT = spec.GLOBAL_OPTIONS[0]

app = App(
    name="overbrainer",
    version=describe,
    backend="trio",
    # main() reports a Ctrl-C that comes before a command holds its SIGINT receiver.
    suppress_keyboard_interrupt=False,
    help=f"{spec.TREE.help} Global option: {_PROJECT.name} {_PROJECT.metavar}, {_PROJECT.help}.",
)

for _command in spec.TREE.commands:
    if _command.does is None:
        raise LookupError(f"spec.py does not say which module does {_command.name!r}")
    app.command(_command.does, name=_command.name)
