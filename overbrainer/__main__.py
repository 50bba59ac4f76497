"""Entry point: ``overbrainer`` and ``python -m overbrainer``."""

import sys


def main() -> int:
    """Run the command line (``overbrainer/cli/main.py``, which answers a shell's completion
    request before anything else is imported)."""
    from overbrainer.cli.main import main as command_line
    from overbrainer.front.exiting import exit_after_command

    exit_after_command()
    return command_line()


if __name__ == "__main__":
    sys.exit(main())
