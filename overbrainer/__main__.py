"""Entry point: ``overbrainer`` and ``python -m overbrainer``."""

import sys


def main() -> int:
    """Run the command line. A shell's completion request (at every Tab) is answered
    before the command line's own modules are imported."""
    if sys.argv[1:2] == ["__complete"]:
        from overbrainer.cli.completion import complete

        return complete(sys.argv[2:])
    from overbrainer.cli.main import main as command_line

    return command_line()


if __name__ == "__main__":
    sys.exit(main())
