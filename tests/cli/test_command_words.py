"""The words that name a command (kept apart so the entry point knows them without loading
the command tree) are exactly the words of the command tree: an event appended by ``train
stop`` names ``train stop`` as its actor's command, not ``train``."""

from typing import Any

from overbrainer.cli.app import app
from overbrainer.cli.command_words import COMMAND_WORDS
from overbrainer.cli.main import command_name


def _words(command: Any) -> set[str]:
    found: set[str] = set()
    for name in command:
        if not name.startswith("-"):
            found |= {name} | _words(command[name])
    return found


def test_the_command_words_are_the_cyclopts_apps() -> None:
    assert set(COMMAND_WORDS) == _words(app)


def test_a_subcommand_is_named_whole() -> None:
    assert command_name(["train", "stop", "RUN"], COMMAND_WORDS) == "train stop"
    assert command_name(["pod", "billing", "RUN"], COMMAND_WORDS) == "pod billing"
    assert command_name(["train", "--target", "gpu"], COMMAND_WORDS) == "train"
