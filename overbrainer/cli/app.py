"""The command tree as cyclopts parses and documents it, built from ``spec.py``. Every
top-level command is registered by import path, so ``--help`` and tab completion import
none of the heavy modules (trio, httpx, asyncssh, eventsourcing)."""

from cyclopts import App

from overbrainer.cli import spec
from overbrainer.version import describe

app = App(
    name="overbrainer",
    version=describe,
    backend="trio",
    # main() reports a Ctrl-C that comes before a command holds its SIGINT receiver.
    suppress_keyboard_interrupt=False,
    help=(
        "Fine-tune language models with Axolotl on this machine, over SSH, or on a Runpod "
        "pod that is deleted once its results are home. Global option: -C DIR says where to "
        "find the project (default: here; it is found there or in the nearest directory above)."
    ),
)

for _command in spec.TREE.commands:
    if _command.does is None:
        raise LookupError(f"spec.py does not say which module does {_command.name!r}")
    app.command(_command.does, name=_command.name)
