"""Every command's ``--help`` without cyclopts: the texts cyclopts renders, kept in
``help_texts.py`` so ``overbrainer COMMAND --help`` answers as fast as Python starts.

After changing a command's docstring, parameters or registration, regenerate them:
``python -m overbrainer.cli.helps`` (a test compares them with what cyclopts renders now,
and fails until they match). A command without a kept text gets cyclopts' help as before.
The texts are Markdown to cyclopts: a placeholder in angle brackets is an HTML tag there
and vanishes, so write it as code (`` `runs/<id>/` ``); a test checks every rendered text
for that.
"""

import sys
from collections.abc import Sequence
from pathlib import Path

TEXTS = Path(__file__).with_name("help_texts.py")
# As cyclopts renders into a pipe: 80 columns, no colour.
WIDTH = 80


def kept_help(command: Sequence[str]) -> str | None:
    """The kept help of ``command`` (its words, as ``["runs", "ls"]``), if there is one and
    it fits: not when ``COLUMNS`` asks for another width, nor on a terminal narrower than
    the kept text (cyclopts renders those). A wider terminal gets the kept 80 columns."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns not in ("", str(WIDTH)):
        return None
    try:
        if os.isatty(1) and os.get_terminal_size(1).columns < WIDTH:
            return None
    except OSError:
        pass
    from overbrainer.cli.help_texts import HELP

    return HELP.get(" ".join(command))


def command_paths() -> list[str]:
    """Every command and sub-command of the tree, as ``"runs ls"``, in the tree's order."""
    from overbrainer.cli.app import app

    found: list[str] = []

    def walk(node: object, path: list[str]) -> None:
        for name in list(node):  # type: ignore[call-overload]
            if name.startswith("-"):
                continue
            found.append(" ".join([*path, name]))
            walk(node[name], [*path, name])  # type: ignore[index]

    walk(app, [])
    return found


def render(command: str) -> str:
    """What cyclopts prints for ``overbrainer COMMAND --help`` into a pipe."""
    import io

    from rich.console import Console

    from overbrainer.cli.app import app

    buffer = io.StringIO()
    console = Console(
        file=buffer, width=WIDTH, color_system=None, force_terminal=False, legacy_windows=False
    )
    app(
        [*command.split(), "--help"],
        console=console,
        exit_on_error=False,
        result_action="return_value",
    )
    return buffer.getvalue()


def source() -> str:
    """The text of ``help_texts.py`` for the tree as it is now."""
    lines = [
        '"""Every command\'s ``--help``, as cyclopts renders it: written by',
        '``python -m overbrainer.cli.helps``; do not edit by hand."""',
        "",
        "HELP: dict[str, str] = {",
    ]
    for command in command_paths():
        lines.append(f"    {_literal(command)}: (")
        for line in render(command).splitlines(keepends=True):
            lines.append(f"        {_literal(line)}")
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """``text`` as a double-quoted Python string literal (JSON's escapes are Python's)."""
    import json

    return json.dumps(text, ensure_ascii=False)


def main() -> int:
    """Write ``help_texts.py`` anew."""
    TEXTS.write_text(source(), encoding="utf-8")
    print(f"wrote {TEXTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
