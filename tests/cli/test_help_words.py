"""Every help text shows what its source means: no ``<id>`` eaten as markup (an empty
``<…>``, or ``runs//`` where it stood), nothing wider than 80 columns, and no entry that
stops mid-sentence."""

import re

import pytest

from overbrainer.cli.help_texts import HELP
from overbrainer.cli.helps import command_paths, render
from overbrainer.cli.main import main

WIDTH = 80
# Words an English sentence does not end on: an entry ending on one was cut.
_DANGLING = {
    *("a", "an", "the", "its", "their"),
    *("for", "of", "to", "with", "in", "on", "by", "from", "as", "than", "at", "into"),
    *("and", "or", "when", "where", "which", "whose"),
}


def _top_help() -> str:
    """What ``overbrainer --help`` prints."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--help"]) == 0
    return out.getvalue()


def _texts() -> list[tuple[str, str]]:
    return [("overbrainer --help", _top_help())] + [
        (f"overbrainer {command} --help", render(command)) for command in command_paths()
    ]


def _entries(text: str) -> list[str]:
    """The units of a help text: each paragraph, and each entry of a list or a panel with
    its continuation lines (those indented further than the entry's first line)."""
    units: list[list[str]] = []
    first_indent = -1
    for raw in text.splitlines():
        line = raw.strip("│").rstrip()
        if not line.strip() or raw.startswith(("╭", "╰")):
            first_indent = -1
            continue
        indent = len(line) - len(line.lstrip())
        if line.endswith(":"):  # a heading (``Commands:``): its entries are not its text
            first_indent = -1
            continue
        continues = first_indent >= 0 and (indent > first_indent or indent == first_indent == 0)
        if continues:
            units[-1].append(line.strip())
        else:
            units.append([line.strip()])
            first_indent = indent
    return [" ".join(" ".join(unit).split()) for unit in units]


def _problems(text: str) -> list[str]:
    found = [f"wider than {WIDTH}: {line!r}" for line in text.splitlines() if len(line) > WIDTH]
    found += [f"empty <…>: {m.group()!r}" for m in re.finditer(r".{0,20}<\s*>.{0,20}", text)]
    found += [f"doubled /: {m.group()!r}" for m in re.finditer(r".{0,20}(?<!:)//.{0,20}", text)]
    for entry in _entries(text):
        last = entry.split()[-1].lower()
        if last in _DANGLING or last.endswith("'s"):
            found.append(f"cut mid-sentence: {entry!r}")
    return found


def test_the_checks_catch_what_the_help_texts_used_to_show() -> None:
    eaten = "│ *  RUN  The run: its ID, or runs//.  │\n│ --out  Where (default: <>). │\n"
    assert len(_problems(eaten)) == 2
    cut = "Options:\n  -h, --help     this help; `overbrainer COMMAND --help` for a command's\n"
    assert _problems(cut) == [
        'cut mid-sentence: "-h, --help this help; `overbrainer COMMAND --help` for a command\'s"'
    ]
    assert _problems("x" * 81) == [f"wider than 80: {'x' * 81!r}"]
    assert _problems("│ --to  postgresql://USER@HOST/DB │\n") == []


@pytest.mark.parametrize(("name", "text"), _texts(), ids=[name for name, _ in _texts()])
def test_every_help_text_shows_its_paths_whole_within_80_columns_and_never_cut(
    name: str, text: str
) -> None:
    assert _problems(text) == [], name


def _words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def test_a_run_directory_is_named_with_its_id_placeholder_in_the_kept_helps() -> None:
    assert "or runs/<id>/." in _words(HELP["train attach"])
    report = _words(HELP["runs report"])
    assert "runs/<id>/report.html" in report
    assert "reports/compare-<id>-<id>….html" in report
    assert "or runs/<id>/ -h" in _words(_top_help())
