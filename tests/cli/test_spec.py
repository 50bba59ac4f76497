"""The command tree is declared once, in ``overbrainer/cli/spec.py``: the cyclopts app
built from it (``app.py``, ``declare.py``) parses and documents exactly its commands,
arguments, options and help."""

import ast
import inspect
import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from overbrainer.cli import declare, spec
from overbrainer.cli.app import app
from overbrainer.cli.command_words import words_of
from overbrainer.cli.completion import Reply, reply
from overbrainer.cli.fast_path import fast_commands, parse
from overbrainer.cli.main import main
from overbrainer.cli.spec import TREE, Command, Option, top_help, walk

_OWN = ("--help", "-h", "--version")


def _summary(help: str | None) -> str:
    return " ".join(inspect.cleandoc(help or "").split("\n\n")[0].split())


def _declared(node: Any) -> dict[str, Any]:
    """What cyclopts declares of one command: its help, subcommands, arguments, options."""
    args: list[tuple[str, str, bool, str | None]] = []
    options: list[tuple[tuple[str, ...], str, bool, str | None]] = []
    if node.default_command is not None:
        for argument in node.assemble_argument_collection():
            if not argument.parse:
                continue
            kind = argument.field_info.kind
            name, help = argument.field_info.name, argument.parameter.help
            if kind is inspect.Parameter.KEYWORD_ONLY:
                flag = argument.hint is bool
                options.append((tuple(argument.names), name, flag, help))
            else:
                many = kind is inspect.Parameter.VAR_POSITIONAL
                args.append((argument.names[0].removeprefix("--").upper(), name, many, help))
    return {
        "help": _summary(node.help),
        "commands": sorted(n for n in node if n not in _OWN),
        "args": args,
        "options": options,
    }


def _ours(command: Command) -> dict[str, Any]:
    return {
        "help": command.help,
        "commands": sorted(c.name for c in command.commands),
        "args": [(a.name, a.param, a.many, a.help) for a in command.args],
        "options": [(o.names, o.param, o.takes == "flag", o.help) for o in command.options],
    }


def test_the_cyclopts_app_declares_the_specs_commands_arguments_options_and_help() -> None:
    for path, command in walk(TREE):
        if not path:
            continue
        node: Any = app
        for word in path:
            node = node[word]
        assert _declared(node) == _ours(command), path


def test_every_option_value_kind_names_its_choices_where_it_has_some() -> None:
    for path, command in walk(TREE):
        for option in command.options:
            assert bool(option.choices) == (option.takes in ("states", "choice")), path
            assert (option.complete is None) == (option.takes == "flag"), path


# --- a new option, added in one place ------------------------------------------------------


def _fixture_tree(*extra: Option) -> Command:
    """A small command tree of the same shape as the real one: ``runs ls`` with ``--json``,
    served by the fast path, and ``extra`` options."""
    return Command(
        "overbrainer",
        "A fixture command line.",
        options=spec.GLOBAL_OPTIONS,
        commands=(
            Command(
                "runs",
                "This project's runs.",
                commands=(
                    Command(
                        "ls",
                        "One line per run.",
                        options=(spec.JSON, *extra),
                        fast="tests.cli.test_spec:listed",
                        overview=(("runs ls", "one line per run"),),
                    ),
                ),
            ),
        ),
    )


def listed(*, json: bool = False, newest: int | None = None) -> dict[str, object]:
    """The function that does the fixture's ``runs ls``: it hands back what it was given."""
    return {"json": json, "newest": newest}


NEWEST = Option(
    ("--newest", "-N"),
    "newest",
    "Only the N newest runs.",
    takes="count",
    brief="only the N newest runs",
)


def test_an_option_added_to_the_spec_alone_is_parsed_documented_and_completed(
    tmp_path: Path,
) -> None:
    before, after = _fixture_tree(), _fixture_tree(NEWEST)

    # Completion offers it, with its brief description, and knows it takes a value.
    assert reply(["runs", "ls"], "--", tmp_path, tree=before).candidates == (
        ("--json", "one JSON object per line"),
        ("--help", "show this command's help"),
    )
    assert reply(["runs", "ls"], "--n", tmp_path, tree=after).candidates == (
        ("--newest", "only the N newest runs"),
    )
    assert reply(["runs", "ls", "--newest"], "", tmp_path, tree=after) == Reply("words")

    # The fast path parses both spellings, as a whole number.
    assert parse(["runs", "ls", "--newest", "3"], fast_commands(before)) is None
    fast = parse(["runs", "ls", "-N", "3", "--json"], fast_commands(after))
    assert fast is not None and fast.run() == {"json": True, "newest": 3}

    # The cyclopts app built from it parses it and documents it in the command's --help.
    app = declare.group("runs", tree=after)
    declare.command(app, "runs", "ls", tree=after)(listed)
    result = app(["ls", "--newest=2"], exit_on_error=False, result_action="return_value")
    assert result == {"json": False, "newest": 2}
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None, force_terminal=False)
    app(["ls", "--help"], console=console, exit_on_error=False, result_action="return_value")
    assert re.search(r"--newest\s+-N\s+INT\s+Only the N newest runs\.", out.getvalue())

    # The words that name a command and the top-level help come from the same tree.
    assert words_of(after) == words_of(before) == {"runs", "ls"}
    assert "  runs ls" in top_help(after) and "A fixture command line." in top_help(after)


def test_only_the_builders_of_the_cyclopts_app_make_its_apps_and_parameters() -> None:
    # Names and help of commands and options come from spec.py alone: no command module
    # declares its own (an App or a Parameter of cyclopts).
    builders = {"declare.py", "app.py"}
    found: list[str] = []
    for path in sorted(Path(spec.__file__).parent.glob("*.py")):
        if path.name in builders:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("App", "Parameter")
            ):
                found.append(f"{path.name}:{node.lineno} {node.func.id}(…)")
    assert found == []


# --- the global option, named in one place -------------------------------------------------

PLACE = Option(
    ("-P", "--place"),
    "project",
    "where the project is",
    takes="path",
    complete="dir",
    metavar="WHERE",
    brief="the project directory",
)


def test_the_project_option_is_spelled_only_as_the_spec_declares_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Renamed in spec.py alone: main takes the new spellings, the messages name them,
    # completion follows them, and -C is no longer the project option.
    monkeypatch.setattr(spec, "PROJECT", PLACE)
    monkeypatch.setattr(spec, "GLOBAL_OPTIONS", (PLACE, *spec.GLOBAL_OPTIONS[1:]))
    tree = Command("overbrainer", TREE.help, options=spec.GLOBAL_OPTIONS, commands=TREE.commands)

    for given in (["-P", "d"], [f"-P{tmp_path}"], ["--place", "d"]):
        assert main([*given, "runs", "ls", "--help"]) == 0
        assert capsys.readouterr().out.startswith("Usage: overbrainer runs ls")
    assert main(["-P"]) == 2
    assert capsys.readouterr().err == "error: -P needs a directory: overbrainer -P WHERE COMMAND\n"
    assert main(["-P", str(tmp_path), "runs", "ls", "--place", "x"]) == 2
    assert capsys.readouterr().err == (
        "error: --place WHERE goes before the command: `overbrainer -P x runs ls`\n"
    )
    assert main(["--plac"]) == 2
    assert "(did you mean --place?)" in capsys.readouterr().err

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "overbrainer.toml").write_text('[targets.box]\nkind = "ssh"\n')
    assert reply(["-P"], "", elsewhere, tree=tree).mode == "dirs"
    assert ("-P", "the project directory") in reply([], "-", elsewhere, tree=tree).candidates
    target = ["train", "--target"]
    assert reply([f"-P{project}", *target], "", elsewhere, tree=tree).candidates[0][0] == "box"
    assert reply([f"-C{project}", *target], "", elsewhere, tree=tree).candidates == ()
    assert top_help(tree).startswith("Usage: overbrainer [-P WHERE] COMMAND [ARGS]")
