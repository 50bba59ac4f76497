"""What a new user meets first: usage errors in the one ``error: …`` style, a run named by
any unique part of its ID or by its directory, and a description for every option."""

import re
from pathlib import Path

import pytest

from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.ids import matching_runs, run_ref
from overbrainer.events.store import RunStore

RUNS = ["20260101-120000-ab12", "20260101-130000-cd34", "20260102-090000-ab99"]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "overbrainer.toml").write_text("")
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        for run_id in RUNS:
            store.create(
                ev.RunCreated(
                    run_id=run_id,
                    target="here",
                    kind="local",
                    remote_dir=f"runs/{run_id}",
                    settings_digest="d",
                )
            )
    finally:
        store.close()
    return tmp_path


@pytest.mark.parametrize(
    ("ref", "found"),
    [
        ("20260101-120000-ab12", ["20260101-120000-ab12"]),
        ("cd34", ["20260101-130000-cd34"]),
        ("20260102", ["20260102-090000-ab99"]),
        ("20260101", ["20260101-120000-ab12", "20260101-130000-cd34"]),
        ("ab", []),  # neither a prefix nor a suffix of any
        ("9", ["20260102-090000-ab99"]),
    ],
)
def test_a_run_is_named_by_its_id_or_a_prefix_or_a_suffix(ref: str, found: list[str]) -> None:
    assert matching_runs(ref, RUNS) == found


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("runs/20260101-120000-ab12/", "20260101-120000-ab12"),
        ("runs/20260101-120000-ab12", "20260101-120000-ab12"),
        ("./runs/cd34/", "cd34"),
        ("/home/me/p q/runs/20260101-120000-ab12/", "20260101-120000-ab12"),
        ("ab12/", "ab12"),
        ("ab12", "ab12"),
        ("x/y", "x/y"),  # not a run's directory: refused as an ID later
    ],
)
def test_a_runs_directory_names_the_run(text: str, ref: str) -> None:
    assert run_ref(text) == ref


def test_runs_show_events_and_train_attach_take_a_suffix_prefix_or_directory(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for ref in ("cd34", "20260101-13", "runs/20260101-130000-cd34/"):
        code, out, err = _cli(capsys, "-C", str(project), "runs", "show", ref)
        assert code == 0, err
        assert out.startswith("run 20260101-130000-cd34: preparing")
        code, out, err = _cli(capsys, "-C", str(project), "events", ref)
        assert code == 0, err
        assert "created run 20260101-130000-cd34" in out


def test_an_ambiguous_prefix_lists_the_candidates_and_changes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "-C", str(project), "runs", "show", "20260101")
    assert code == 2
    assert out == ""
    assert err == (
        "error: '20260101' names 2 runs: 20260101-120000-ab12, 20260101-130000-cd34; give "
        "more of the run's ID\n"
    )
    code, _, err = _cli(capsys, "-C", str(project), "train", "attach", "20260101")
    assert code == 2
    assert "names 2 runs: 20260101-120000-ab12, 20260101-130000-cd34" in err
    code, _, err = _cli(capsys, "-C", str(project), "events", "zz99")
    assert code == 1
    assert err.startswith("error: no run of this project has an ID that is, starts or ends with")
    assert "`overbrainer runs ls`" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["bogus"],
            'error: unknown command "bogus"; the commands are init, config, train, supervise, '
            "runs, ",
        ),
        (["events"], "error: `overbrainer events` needs RUN; see `overbrainer events --help`"),
        (["runs", "show"], "error: `overbrainer runs show` needs RUN; see `overbrainer runs"),
        (["train", "attach"], "error: `overbrainer train attach` needs RUN; see"),
        (["runs", "ls", "--jsn"], "error: unknown option: --jsn (did you mean --json?); see"),
        (["events", "a", "b"], "error: `overbrainer events` takes no further argument 'b'"),
        (["events", "x", "--at", "abc"], "error: invalid value for --at: unable to convert"),
    ],
)
def test_usage_errors_are_one_error_line_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    code, out, err = _cli(capsys, "-C", str(tmp_path), *argv)
    assert code == 2
    assert out == ""
    assert err.startswith(expected), err
    assert err.count("\n") == 1 and "╭" not in err and "--run" not in err


def _commands(app: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path] if path else []
    for name in app:  # type: ignore[attr-defined]
        if not name.startswith("-"):
            found += _commands(app[name], (*path, name))  # type: ignore[index]
    return found


_ROW = re.compile(
    r"│ (?:\* )?\s*((?:-[-\w]+|[A-Z][A-Z_]*)(?: [A-Z][A-Z_.]*)?(?: --?[-\w]+)*)\s*(.*?)\s*│"
)


def test_every_option_of_every_command_has_a_description(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from overbrainer.cli.app import app

    monkeypatch.setenv("COLUMNS", "300")
    commands = _commands(app)
    assert ("runs", "show") in commands and ("train", "cancel") in commands
    undescribed = []
    for command in commands:
        code, out, _ = _cli(capsys, "-C", str(tmp_path), *command, "--help")
        assert code == 0
        panel = None
        for text in out.splitlines():
            if text.startswith("╭─"):
                panel = text.strip("╭─ ").split(" ")[0]
                continue
            if panel not in ("Parameters", "Arguments") or not text.startswith("│"):
                continue
            match = _ROW.match(text)
            assert match, text
            description = re.sub(r"\[(default|required|choices)[^\]]*\]", "", match.group(2))
            if not description.strip():
                undescribed.append(f"{' '.join(command)} {match.group(1)}")
    assert undescribed == []
