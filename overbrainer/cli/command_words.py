"""The words of the command tree, known without loading it."""

from overbrainer.cli.spec import TREE, Command, walk


def words_of(tree: Command) -> frozenset[str]:
    """The words that name a command of ``tree``."""
    return frozenset(command.name for path, command in walk(tree) if path)


# Words that name a command, so the actor of an event can say which command appended it.
COMMAND_WORDS = words_of(TREE)
