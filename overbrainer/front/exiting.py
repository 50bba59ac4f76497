"""Whether this process exits once its command ends: ``overbrainer``'s entry point says so
(:func:`exit_after_command`), a test calling the command line in its own process does not.

Then a stop signal after a command that a signal ended is counted, never acted on
(``interrupts.py`` keeps its counting handler): the command exits by the first signal's
code, its work already done, whenever the next one comes — a second Ctrl-C while its last
words print must not kill it by the signal. Kept apart from ``interrupts.py`` so that the
entry point imports nothing heavy (a command's ``--help`` imports no trio).
"""

__all__ = ["exit_after_command", "exits_after_command"]

_exits = False


def exit_after_command() -> None:
    """Say that this process exits once its command ends."""
    global _exits
    _exits = True


def exits_after_command() -> bool:
    """Whether this process exits once its command ends."""
    return _exits
