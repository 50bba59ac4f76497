"""The fast path of ``runs ls``, ``runs show``, ``events`` and ``config check`` parses a
command line exactly as cyclopts does, or leaves it to cyclopts.

Every line below (and every random one hypothesis draws) is given to both parses: the fast
one either declines it or binds the same function arguments as ``App.parse_args``. The
options the fast path knows are compared with those cyclopts declares, so a new option of
these commands fails here until the fast path knows it too.
"""

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from overbrainer.cli import (
    config_check,
    config_cmd,
    events_cmd,
    events_read,
    runs_cmd,
    runs_read,
)
from overbrainer.cli.app import app
from overbrainer.cli.fast_path import COMMANDS, RUN_STATES, Parsed, parse
from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore

# The command cyclopts calls for each fast command, and the function the fast path calls.
DECLARED: dict[tuple[str, ...], Any] = {
    ("runs", "ls"): runs_cmd.ls,
    ("runs", "show"): runs_cmd.show,
    ("events",): events_cmd.events,
    ("config", "check"): config_cmd.check,
}
DONE_BY: dict[tuple[str, ...], Any] = {
    ("runs", "ls"): runs_read.list_runs,
    ("runs", "show"): runs_read.show_run,
    ("events",): events_read.replay,
    ("config", "check"): config_check.check_config,
}
RUN = "20260101-000000-5a0e"


def cyclopts_parse(tokens: list[str]) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """What cyclopts binds for ``tokens`` (None: it refuses them)."""
    from cyclopts import CycloptsError

    try:
        command, bound, _ = app.parse_args(tokens, exit_on_error=False, print_error=False)
    except CycloptsError:
        return None
    return command, tuple(bound.args), dict(bound.kwargs)


def assert_agrees(tokens: list[str]) -> Parsed | None:
    """The fast parse of ``tokens`` is None or exactly cyclopts' parse of them."""
    fast = parse(tokens)
    if fast is not None:
        found = cyclopts_parse(tokens)
        assert found is not None, f"cyclopts refuses {tokens}, the fast path took them"
        command, args, kwargs = found
        assert command is DECLARED[fast.command.words], tokens
        assert (fast.args, fast.kwargs) == (args, kwargs), tokens
    return fast


TAKEN = [
    "runs ls",
    "runs ls --json",
    "runs ls --state running",
    "runs ls --state=running",
    "runs ls --state running --state failed --state=stopped",
    "runs ls --last 3",
    "runs ls --last=3",
    "runs ls --last 010",
    "runs ls --last 0",
    "runs ls --since 7d",
    "runs ls --since=30d",
    "runs ls --since 7D",
    "runs ls --since nonsense",
    "runs ls --json --state succeeded --last 2 --since 2w",
    "runs ls --",
    f"runs show {RUN}",
    f"runs show {RUN} --json",
    f"runs show --json --no-plot {RUN}",
    "runs show 5a0e --no-plot",
    f"runs show -- {RUN}",
    "runs show -- --json",
    "runs show ünïcödé-ran",
    "runs show runs/20260101-000000-5a0e/",
    f"events {RUN}",
    f"events {RUN} --json",
    f"events -v {RUN}",
    f"events {RUN} --verbose",
    f"events {RUN} --at 3",
    f"events {RUN} --at=0",
    f"events --at 12 --json {RUN}",
    f"events {RUN} --follow --json -v",
    "events -- -5a0e",
    "events -- --",
    f"events {RUN} --",
    "events 运行",
    "events ls",
    "config check",
    "config check --json",
    "config check -- ",
]

LEFT_TO_CYCLOPTS = [
    # Unknown options, and near misses cyclopts names.
    "runs ls --jso",
    "runs ls --no-json",
    "runs ls --State running",
    "events RUN --since 7d",
    "runs show RUN --plot",
    "events --run RUN",
    # A flag with a value, or repeated.
    "runs ls --json=true",
    "runs ls --json=false",
    "runs ls --json --json",
    "events RUN -v --verbose",
    "events RUN -vv",
    "runs show RUN --no-plot=false",
    # Values cyclopts converts its own way, or refuses.
    "runs ls --last -1",
    "runs ls --last +3",
    "runs ls --last 0x10",
    "runs ls --last 1_0",
    "runs ls --last 3.0",
    "runs ls --last ٣",
    "runs ls --last abc",
    "runs ls --last=",
    "runs ls --last 3 --last 4",
    "runs ls --state bogus",
    "runs ls --state RUNNING",
    "runs ls --since -7d",
    "runs ls --since=",
    "runs ls --since 7d --since 2w",
    "events RUN --at -3",
    "events RUN --at x",
    "events RUN --at 3 --at 4",
    # Missing values and words, extra words.
    "runs ls --state",
    "runs ls --last",
    "events RUN --at",
    "runs ls extra",
    "runs ls -- extra",
    "runs show",
    "runs show RUN OTHER",
    "events",
    "events RUN OTHER",
    "events RUN -- --",
    "events -R",
    "events RUN -",
    # Help and version, anywhere.
    "runs ls --help",
    "runs ls -h --json",
    "events RUN --help",
    "runs show --version",
    "events -- --help",
    # Other commands, and these words elsewhere.
    "runs",
    "runs logs RUN",
    "runs compare A B",
    "runs --json ls",
    "config check --json=yes",
    "config check --json --json",
    "config check extra",
    "config check -h",
    "config --json check",
    "config",
    "train --check",
    "event RUN",
]


@pytest.mark.parametrize("line", TAKEN)
def test_the_fast_path_takes_these_lines_as_cyclopts_binds_them(line: str) -> None:
    assert assert_agrees(line.split()) is not None


@pytest.mark.parametrize("line", LEFT_TO_CYCLOPTS)
def test_the_fast_path_leaves_these_lines_to_cyclopts(line: str) -> None:
    assert assert_agrees(line.split()) is None


def test_empty_values_and_spaces_in_values_agree_too() -> None:
    for tokens in (
        ["events", ""],
        ["runs", "show", " "],
        ["runs", "ls", "--since", " 7d"],
        ["runs", "ls", "--since", ""],
        ["runs", "ls", "--last", " 3"],
        ["events", "a b"],
    ):
        assert_agrees(tokens)
    assert assert_agrees(["runs", "ls", "--since", " 7d"]) is not None


_WORDS = [
    "runs",
    "ls",
    "show",
    "events",
    "--json",
    "--json=true",
    "--state",
    "--state=failed",
    *RUN_STATES,
    "Running",
    "--last",
    "--last=2",
    "--since",
    "--since=7d",
    "--at",
    "--at=1",
    "--follow",
    "--verbose",
    "-v",
    "-vv",
    "--no-plot",
    "--no-json",
    "--",
    "-",
    "",
    " ",
    "0",
    "3",
    "-1",
    "0x10",
    "٣",
    "7d",
    RUN,
    "5a0e",
    "ünï",
    "--help",
    "-h",
    "--version",
]


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([["runs", "ls"], ["runs", "show"], ["events"], ["config", "check"]]),
    st.lists(st.sampled_from(_WORDS), max_size=6),
)
def test_any_line_of_these_words_is_parsed_as_cyclopts_does_or_left_to_it(
    head: list[str], tail: list[str]
) -> None:
    assert_agrees(head + tail)


def test_the_fast_path_knows_every_option_cyclopts_declares_and_no_other() -> None:
    for command in COMMANDS:
        declared = app
        for word in command.words:
            declared = declared[word]
        options: set[str] = set()
        positional = 0
        for argument in declared.assemble_argument_collection():
            if argument.field_info.kind is inspect.Parameter.POSITIONAL_ONLY:
                positional += 1
            else:
                options.update(argument.names)
                options.update(argument.negatives)
        assert set(command.options) == options, command.words
        assert command.positional == positional, command.words


def test_the_declared_commands_and_the_fast_ones_take_the_same_parameters() -> None:
    # The commands cyclopts calls hand their arguments on: names, kinds and defaults match.
    for words, declared in DECLARED.items():
        ours = inspect.signature(DONE_BY[words]).parameters
        theirs = inspect.signature(declared).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == [
            (p.name, p.kind, p.default) for p in theirs.values()
        ], words
        fast = next(c for c in COMMANDS if c.words == words)
        module, _, name = fast.target.partition(":")
        assert DONE_BY[words] is getattr(sys.modules[module], name)


# --- the same command, either way --------------------------------------------------------


def _project(tmp_path: Path) -> Path:
    store = RunStore(None, tmp_path, Actor.here("test"))
    store.create(
        ev.RunCreated(run_id=RUN, target="t", kind="local", remote_dir="r", settings_digest="d")
    )
    store.append(RUN, lambda _s: [ev.NoteAdded(note="first")])
    store.close()
    return tmp_path


@pytest.mark.parametrize(
    "line",
    [
        "runs ls",
        "runs ls --json --state preparing",
        "runs ls --last 0",
        "runs ls --since 3x",
        "runs show 5a0e --no-plot",
        "runs show nosuchrun",
        "events 5a0e -v",
        "events 5a0e --at 1 --json",
        "events 5a0e --at 9",
    ],
)
def test_a_line_gives_the_same_output_and_exit_code_fast_or_through_cyclopts(
    tmp_path: Path, line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path)
    tokens = ["-C", str(project), *line.split()]
    assert parse(line.split()) is not None
    fast = (main(tokens), *capsys.readouterr())
    monkeypatch.setattr("overbrainer.cli.fast_path.parse", lambda _tokens: None)
    slow = (main(tokens), *capsys.readouterr())
    assert fast == slow


_PROBE = """
import json, sys
from overbrainer.cli.main import main
code = main(sys.argv[1:])
# eventsourcing is how the log is read (its public API), so a read command loads it.
heavy = ("cyclopts", "pydantic", "rich", "trio", "httpx", "yaml")
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(heavy))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "line", ["runs ls", "runs ls --json --last 1", f"runs show {RUN}", f"events {RUN} -v"]
)
def test_the_read_commands_start_without_cyclopts_or_any_heavy_library(
    tmp_path: Path, line: str
) -> None:
    project = _project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "-C", str(project), *line.split()],
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(done.stderr.splitlines()[-1]) == {"code": 0, "loaded": []}, done.stderr


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ("runs ls", 0),
        ("runs ls --json", 0),
        (f"events {RUN}", 1),
        (f"runs show {RUN}", 1),
        ("events 5a0e", 1),
    ],
)
def test_a_project_with_no_log_yet_is_read_as_empty_without_a_new_log(
    tmp_path: Path, line: str, code: int
) -> None:
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    log = project / ".overbrainer" / "events.sqlite"
    assert not log.exists()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "-C", str(project), *line.split()],
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(done.stderr.splitlines()[-1]) == {"code": code, "loaded": []}, done.stderr
    assert not log.exists()
    if code:
        assert done.stderr.startswith("error: no run "), done.stderr


_MODULES = """
import json, sys
from overbrainer.events import recorded
built = []
class Counted(recorded.Recorded):
    def __init__(self, *args, **kwargs):
        built.append(1)
        super().__init__(*args, **kwargs)
recorded.Recorded = Counted
from overbrainer.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules), "built": len(built)}),
      file=sys.stderr)
"""


def test_runs_ls_on_a_view_up_to_date_builds_only_the_event_at_its_mark(tmp_path: Path) -> None:
    # The runs view holds every run's state: of the log, only the event at the view's mark
    # is read (to know the view is up to date), and the socket module (for this machine's
    # name) is not needed.
    project = _project(tmp_path)
    found = []
    for _ in range(2):  # the first run builds the view
        done = subprocess.run(
            [sys.executable, "-c", _MODULES, "-C", str(project), "runs", "ls"],
            capture_output=True,
            text=True,
            check=False,
        )
        found.append(json.loads(done.stderr.splitlines()[-1]))
        assert found[-1]["code"] == 0, done.stderr
        assert RUN in done.stdout
    assert found[0]["built"] > 0  # the count sees the events the view is built from
    assert found[1]["built"] <= 1
    assert "socket" not in found[1]["modules"]


def test_config_check_starts_without_cyclopts_and_says_the_same_either_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    assert main(["init", str(project)]) == 0
    capsys.readouterr()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "-C", str(project), "config", "check"],
        capture_output=True,
        text=True,
        check=False,
    )
    # pydantic checks the settings; nothing else heavy is loaded.
    assert json.loads(done.stderr.splitlines()[-1]) == {"code": 0, "loaded": ["pydantic"]}
    (project / "overbrainer.toml").write_text("[training]\nepochs = 0\n")
    for line in (["config", "check"], ["config", "check", "--json"]):
        fast = (main(["-C", str(project), *line]), *capsys.readouterr())
        with monkeypatch.context() as patch:
            patch.setattr("overbrainer.cli.fast_path.parse", lambda _tokens: None)
            slow = (main(["-C", str(project), *line]), *capsys.readouterr())
        assert fast == slow and fast[0] == 1


def test_a_line_the_fast_path_leaves_is_refused_in_cyclopts_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(tmp_path)
    assert main(["-C", str(project), "runs", "ls", "--lst", "2"]) == 2
    assert capsys.readouterr().err == (
        "error: unknown option: --lst (did you mean --last?); see `overbrainer runs ls --help`\n"
    )
    assert main(["-C", str(project), "events", RUN, "--at", "x"]) == 2
    assert "--at" in capsys.readouterr().err
    # A value cyclopts converts its own way is still taken: 0x1 is one run.
    assert main(["-C", str(project), "runs", "ls", "--json", "--last", "0x1"]) == 0
    assert [json.loads(row)["id"] for row in capsys.readouterr().out.splitlines()] == [RUN]
