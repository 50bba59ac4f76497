"""The errors a command reports to its user, each with its exit code."""


class OverbrainerError(Exception):
    """A failure the user can act on: printed as ``error: <message>``, exit code 1."""

    exit_code = 1


class UsageError(OverbrainerError):
    """The command line itself is wrong (exit code 2)."""

    exit_code = 2


class Interrupted(OverbrainerError):
    """The command stopped on Ctrl-C; the message says what was left and how to go on."""

    exit_code = 130
