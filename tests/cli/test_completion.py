"""Shell completion's answers (``overbrainer __complete``): commands and options as the real
command tree has them, target names from overbrainer.toml, run IDs from runs/, the project
that ``-C`` names — and nothing heavy imported to answer."""

import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.cli.app import app
from overbrainer.cli.completion import Reply, complete, is_run_id, render, reply
from overbrainer.cli.main import main
from overbrainer.cli.spec import TREE, Command
from overbrainer.events.ids import BadRunId, check_run_id, looks_like_run_id

RUNS = ["20260101-100000-abcd", "20260102-093000-ab12", "20251231-235959-0000"]
CONFIG = """\
[training]
target = "box"

[targets.box]
kind = "ssh"

[targets.gpu]
kind = "runpod"
gpu_types = ["NVIDIA A40"]
max_hours = 1

[targets."my laptop"]
kind = "local"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "overbrainer.toml").write_text(CONFIG)
    for run in RUNS:
        (tmp_path / "runs" / run).mkdir(parents=True)
    (tmp_path / "runs" / "notes").mkdir()  # not a run
    (tmp_path / "runs" / "20260103-000000-ffff").write_text("")  # a file, not a run
    return tmp_path


def values(answer: Reply) -> list[str]:
    assert answer.mode == "words"
    return [value for value, _ in answer.candidates]


NEWEST_FIRST = sorted(RUNS, reverse=True)


@pytest.mark.parametrize(
    "words, current, expected",
    [
        (
            [],
            "",
            [
                "init",
                "config",
                "train",
                "supervise",
                "runs",
                "events",
                "pod",
                "volume",
                "store",
                "completion",
            ],
        ),
        ([], "r", ["runs"]),
        ([], "-", ["-C", "--help", "--version"]),
        (["events"], "", NEWEST_FIRST),
        (["events"], "202601", ["20260102-093000-ab12", "20260101-100000-abcd"]),
        (["events"], "2026010", ["20260102-093000-ab12", "20260101-100000-abcd"]),
        (["events"], "2027", []),
        (["events", RUNS[0]], "", []),  # its one run is given
        (["events", "--json"], "", NEWEST_FIRST),
        (["events"], "--", ["--json", "--at", "--follow", "--verbose", "--help"]),
        (["events", "--json"], "--", ["--at", "--follow", "--verbose", "--help"]),
        (["events", "--at"], "", []),
        (["train"], "", ["attach", "cancel", "stop"]),
        (
            ["train"],
            "--",
            ["--target", "--keep-pod", "--check", "--resume-from", "--detach", "--help"],
        ),
        (["train", "--resume-from"], "2025", ["20251231-235959-0000"]),
        (["train", "stop"], "2025", ["20251231-235959-0000"]),
        (["train", "--target"], "", ["box", "gpu", "my laptop"]),
        (["train", "--target"], "g", ["gpu"]),
        (["train", "--check", "--target"], "", ["box", "gpu", "my laptop"]),
        (["train", "attach"], "", NEWEST_FIRST),
        (["train", "cancel"], "2025", ["20251231-235959-0000"]),
        (["runs"], "", ["ls", "show", "logs", "compare", "report", "rm", "gc"]),
        (["runs", "rm", RUNS[0]], "", NEWEST_FIRST),  # any number of runs
        (["runs", "gc"], "--", ["--older-than", "--keep-best", "--delete", "--json", "--help"]),
        (["runs", "show"], "", NEWEST_FIRST),
        (["runs", "logs", "--tail", "5"], "", NEWEST_FIRST),
        (["runs", "logs", RUNS[0]], "", []),  # its one run is given
        (["runs", "compare", RUNS[0]], "", NEWEST_FIRST),  # any number of runs
        (
            ["runs", "report", RUNS[0], RUNS[1], "--output", "x.html"],
            "2025",
            ["20251231-235959-0000"],
        ),
        (["runs", "ls"], "", []),
        (["pod", "rm"], "", NEWEST_FIRST),
        (["pod", "rm"], "-", ["--force", "--help"]),
        (["config"], "", ["check"]),
        (["store", "migrate"], "--", ["--to", "--dry-run", "--json", "--help"]),
        (["volume"], "", ["ls", "du", "prune", "rm"]),
        (
            ["volume", "prune", "cache"],
            "--",
            ["--checkpoints-older-than", "--yes", "--help"],
        ),
        (["completion"], "", ["bash", "zsh", "fish", "install"]),
        (["completion", "install", "--shell"], "", ["bash", "zsh", "fish"]),
        (["nonsense"], "", []),
    ],
)
def test_what_completes_the_current_word(
    project: Path, words: list[str], current: str, expected: list[str]
) -> None:
    assert values(reply(words, current, project)) == expected


def test_directories_are_left_to_the_shell(project: Path) -> None:
    assert reply(["init"], "", project).mode == "dirs"
    assert reply(["-C"], "", project).mode == "dirs"
    assert reply(["--project"], "pro", project).mode == "dirs"


def test_the_project_is_the_one_c_names(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # beside the project, not inside it
    assert values(reply(["events"], "", elsewhere)) == []
    assert values(reply(["-C", str(project), "events"], "", elsewhere)) == NEWEST_FIRST
    assert values(reply([f"-C{project}", "events"], "", elsewhere)) == NEWEST_FIRST
    assert values(reply(["--project", str(project), "events"], "", elsewhere)) == NEWEST_FIRST
    # Relative to the current directory, and ~ as the shell would read it.
    assert values(reply(["-C", f"../{project.name}", "events"], "", elsewhere)) == NEWEST_FIRST
    monkeypatch.setenv("HOME", str(project.parent))
    assert values(reply(["-C", f"~/{project.name}", "train", "--target"], "b", elsewhere)) == [
        "box"
    ]


def test_the_project_is_found_from_any_directory_inside_it(project: Path) -> None:
    inside = project / "data" / "deep"
    inside.mkdir(parents=True)
    assert values(reply(["events"], "", inside)) == NEWEST_FIRST
    assert values(reply(["-C", "data", "train", "--target"], "b", project)) == ["box"]


@pytest.mark.parametrize(
    "config",
    ["", "[targets\nkind = 1", "targets = 3", "\xff\xfe"],
    ids=["empty", "not TOML", "targets not a table", "not UTF-8"],
)
def test_a_config_that_cannot_be_read_gives_no_target_and_no_error(
    tmp_path: Path, config: str
) -> None:
    (tmp_path / "overbrainer.toml").write_bytes(config.encode("latin-1"))
    assert values(reply(["train", "--target"], "", tmp_path)) == []


def test_targets_carry_their_kind(project: Path) -> None:
    assert reply(["train", "--target"], "", project).candidates == (
        ("box", "ssh"),
        ("gpu", "runpod"),
        ("my laptop", "local"),
    )


def test_each_shell_reads_its_own_form() -> None:
    answer = Reply("words", (("gpu", "runpod"), ("a:b", "odd\nname"), ("20260101-100000-abcd", "")))
    assert render(answer, "bash") == ":words\ngpu\na:b\n20260101-100000-abcd\n"
    assert render(answer, "zsh") == ":words\ngpu:runpod\na\\:b:odd name\n20260101-100000-abcd\n"
    assert render(answer, "fish") == ":words\ngpu\trunpod\na:b\todd name\n20260101-100000-abcd\n"
    assert render(Reply("dirs"), "fish") == ":dirs\n"
    # Nothing a name holds can start a line of its own or forge the mode line.
    assert render(Reply("words", (("x\n:dirs", ""),)), "bash") == ":words\nx:dirs\n"


def test_a_malformed_call_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert complete(["tcsh", "events", ""]) == 2
    assert complete(["bash"]) == 2
    assert "usage: overbrainer __complete" in capsys.readouterr().err


def _cyclopts_tree(command: object, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict]:
    """Every command of the real command tree: its subcommands, options (and whether each
    takes a value) and positional argument."""
    found: dict[tuple[str, ...], dict] = {}
    subcommands = sorted(n for n in command if n not in ("--help", "-h", "--version"))  # type: ignore[attr-defined]
    entry: dict = {"subcommands": subcommands, "options": {}, "positional": None}
    if command.default_command is not None:  # type: ignore[attr-defined]
        for argument in command.assemble_argument_collection():  # type: ignore[attr-defined]
            if not argument.parse:
                continue
            if argument.field_info.kind == argument.field_info.KEYWORD_ONLY:
                takes_value = argument.hint is not bool
                entry["options"][argument.names[0]] = takes_value
            else:
                entry["positional"] = argument.names[0].removeprefix("--")
    entry["options"]["--help"] = False
    found[path] = entry
    for name in subcommands:
        found.update(_cyclopts_tree(command[name], (*path, name)))  # type: ignore[index]
    return found


def _completion_tree(command: Command, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict]:
    """What completion offers of every command of the declared tree: its subcommands,
    options (and whether each takes a value) and positional argument."""
    positional = None
    if command.args:
        positional = "runs" if command.args[-1].many else command.args[0].complete
    options = {o.name: o.complete is not None for o in command.options}
    found = {
        path: {
            "subcommands": sorted(c.name for c in command.commands),
            "options": options if command is TREE else {**options, "--help": False},
            "positional": positional,
        }
    }
    for sub in command.commands:
        found.update(_completion_tree(sub, (*path, sub.name)))
    return found


def test_completion_knows_every_command_and_option_of_the_real_command_tree() -> None:
    real = _cyclopts_tree(app)
    ours = _completion_tree(TREE)
    # The global options come from main(), not cyclopts.
    assert ours[()].pop("options") == {"-C": True, "--help": False, "--version": False}
    real[()].pop("options")
    # Positional arguments by what they are: a run ID, run IDs, a directory, or a name
    # (a network volume's) that nothing completes.
    kinds = {"run": "run", "RUN": "run", "RUNS": "runs", "directory": "dir", "NAME": "text"}
    for entry in real.values():
        if entry["positional"] is not None:
            entry["positional"] = kinds[entry["positional"]]
    assert ours == real


def test_a_completion_imports_nothing_heavy(project: Path) -> None:
    heavy = ["trio", "httpx", "asyncssh", "eventsourcing", "cyclopts", "pydantic", "rich", "yaml"]
    script = (
        "import sys\n"
        "from overbrainer.cli.main import main\n"
        "code = main(['__complete', 'bash', 'train', '--target', ''])\n"
        "code += main(['__complete', 'bash', 'events', ''])\n"
        f"print(code, sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=project, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []"
    assert done.stdout.splitlines()[:4] == [":words", "box", "gpu", "my laptop"]


@pytest.mark.parametrize(
    "name",
    [
        "20260101-100000-abcd",
        "20260101-100000-ABCD",
        "20260101-100000-abc",
        "20260101-100000-abcde",
        "2026010a-100000-abcd",
        "20260101_100000-abcd",
        "20260101-100000_abcd",
        "２０２６0101-100000-abcd",  # full-width digits
        "20260101-10000０-abcd",
        "20260101-100000-abcg",
        "",
        "notes",
    ],
)
def test_completion_s_run_id_shape_is_the_store_s(name: str) -> None:
    try:
        check_run_id(name)
    except BadRunId:
        expected = False
    else:
        expected = looks_like_run_id(name)
    assert is_run_id(name) is expected


def test_install_without_a_known_shell_asks_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHELL", "/bin/tcsh")
    assert main(["completion", "install"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: cannot tell your shell from SHELL='/bin/tcsh'; name it: "
        "overbrainer completion install --shell bash (or zsh, fish)\n"
    )
    assert list(tmp_path.iterdir()) == []
    assert main(["completion", "install", "--shell", "tcsh"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_install_where_nothing_can_be_written_says_what_and_how_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.write_text("a file, not a directory")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert main(["completion", "install", "--shell", "bash"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: cannot install bash completion: {home}")
    assert err.endswith(
        "print the script with `overbrainer completion bash` and load it yourself\n"
    )


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_script_is_printed_as_shipped(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    shipped = Path(__file__).resolve().parents[2] / "overbrainer" / "cli" / "shells"
    assert text == (shipped / f"overbrainer.{shell}").read_text()
    assert "__complete " + shell in text
