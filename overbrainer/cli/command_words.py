"""The words of the command tree, known without loading it."""

# Words that name a command, so the actor of an event can say which command appended it
# (the test suite holds them equal to the words of the command tree).
COMMAND_WORDS = frozenset(
    {
        "init",
        "config",
        "check",
        "train",
        "attach",
        "cancel",
        "stop",
        "runs",
        "ls",
        "show",
        "logs",
        "compare",
        "report",
        "events",
        "pod",
        "rm",
        "gc",
        "gpus",
        "datacenters",
        "billing",
        "store",
        "migrate",
        "completion",
        "install",
        "bash",
        "zsh",
        "fish",
    }
)
