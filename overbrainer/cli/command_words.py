"""The words of the command tree, known without loading it."""

from overbrainer.cli.spec import TREE, walk

# Words that name a command, so the actor of an event can say which command appended it.
COMMAND_WORDS = frozenset(command.name for path, command in walk(TREE) if path)
