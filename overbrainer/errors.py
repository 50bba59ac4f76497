"""The errors a command reports to its user, each with its exit code."""


class OverbrainerError(Exception):
    """A failure the user can act on: printed as ``error: <message>``, exit code 1."""

    exit_code = 1


class UsageError(OverbrainerError):
    """The command line itself is wrong (exit code 2)."""

    exit_code = 2


class Interrupted(OverbrainerError):
    """The command stopped on Ctrl-C (or SIGTERM, SIGHUP); the message says what was left and
    how to go on.

    Its exit code is the signal's conventional one (128 + its number: 130 for Ctrl-C, 143
    for SIGTERM, 129 for SIGHUP), set by :meth:`by` once the command knows which signal it
    was; a message beginning ``interrupted`` then names any signal but Ctrl-C.
    """

    exit_code = 130
    signal_label = "Ctrl-C"

    def by(self, label: str, exit_code: int) -> "Interrupted":
        """Say that the signal ``label`` (``"SIGTERM"``) interrupted the command."""
        self.signal_label = label
        self.exit_code = exit_code
        return self

    def __str__(self) -> str:
        text = super().__str__()
        if (
            self.signal_label != "Ctrl-C"
            and text.startswith("interrupted")
            and not text.startswith("interrupted by")
        ):
            return f"interrupted by {self.signal_label}{text[len('interrupted') :]}"
        return text
