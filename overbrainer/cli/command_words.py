"""The words of the command tree, known without loading it."""

# Words that name a command, so the actor of an event can say which command appended it.
COMMAND_WORDS = frozenset(
    {
        "init",
        "config",
        "check",
        "train",
        "attach",
        "cancel",
        "runs",
        "ls",
        "show",
        "logs",
        "compare",
        "report",
        "events",
        "pod",
        "rm",
        "gpus",
        "datacenters",
        "store",
        "migrate",
        "completion",
        "install",
    }
)
