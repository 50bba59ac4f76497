"""The command tree. Every command is registered by import path, so ``--help`` and tab
completion import none of the heavy modules (trio, httpx, asyncssh, eventsourcing)."""

from cyclopts import App

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

app.command("overbrainer.cli.init_cmd:init", name="init")
app.command("overbrainer.cli.config_cmd:app", name="config")
app.command("overbrainer.cli.train_cmd:app", name="train")
app.command("overbrainer.cli.runs_cmd:app", name="runs")
app.command("overbrainer.cli.events_cmd:events", name="events")
app.command("overbrainer.cli.pod_cmd:app", name="pod")
app.command("overbrainer.cli.store_cmd:app", name="store")
app.command("overbrainer.cli.completion_cmd:app", name="completion")
