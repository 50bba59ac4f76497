"""A project is found from any directory inside it, as git finds its repository: every
command looks in the current directory (or -C DIR) and then upward, in the real program."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore

RUN = "20260101-000000-5a0e"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("OVERBRAINER_")}
    env["NO_COLOR"] = "1"
    return env


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "overbrainer", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """``overbrainer init my-project`` with one run in its log and a data/ to stand in."""
    made = _run(tmp_path, "init", "my-project")
    assert made.returncode == 0, made.stderr
    root = tmp_path / "my-project"
    store = RunStore(None, root, Actor.here("test"))
    store.create(
        ev.RunCreated(
            run_id=RUN, target="local", kind="local", remote_dir=f"runs/{RUN}", settings_digest="d"
        )
    )
    store.close()
    (root / "data" / "deep").mkdir(parents=True)
    return root


def test_runs_ls_from_the_project_s_data_directory_lists_its_runs(project: Path) -> None:
    # It said ".../data is not an overbrainer project yet; create one with: overbrainer init".
    listed = _run(project / "data", "runs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [RUN]
    table = _run(project / "data" / "deep", "runs", "ls")
    assert table.returncode == 0 and RUN in table.stdout, table.stderr
    # Nothing of a project was left in the directory the command ran in.
    assert sorted(p.name for p in (project / "data").iterdir()) == [
        "deep",
        "eval.jsonl",
        "train.jsonl",
    ]


def test_every_read_command_finds_the_project_upward(project: Path) -> None:
    inside = project / "data" / "deep"
    shown = _run(inside, "runs", "show", RUN[-4:], "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    # The run's files are named where they are, in the project, not under data/deep.
    assert Path(data["files"]) == project.resolve() / "runs" / RUN
    events = _run(inside, "events", RUN)
    assert events.returncode == 0 and "run.Created" in events.stdout, events.stderr
    # A command the fast path leaves to cyclopts too.
    report = project.parent / "report.html"
    reported = _run(inside, "runs", "report", RUN, "-o", str(report))
    assert reported.returncode == 0 and RUN in report.read_text(), reported.stderr
    checked = _run(inside, "config", "check", "--json")
    assert checked.returncode == 0, checked.stderr


def test_c_dir_finds_the_project_above_dir(project: Path) -> None:
    listed = _run(project.parent, "-C", "my-project/data", "runs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [RUN]


def test_a_hint_from_inside_the_project_needs_no_c(project: Path) -> None:
    (project / "overbrainer.toml").write_text("[training]\nepochs = 'many'\n")
    attached = _run(project / "data", "train", "attach", RUN)
    assert attached.returncode != 0
    assert "check them all with: overbrainer config check\n" in attached.stderr, attached.stderr


def test_no_project_upward_names_every_directory_looked_in(tmp_path: Path) -> None:
    nowhere = tmp_path / "a" / "b"
    nowhere.mkdir(parents=True)
    refused = _run(nowhere, "runs", "ls")
    assert refused.returncode == 1
    looked = ", ".join(map(str, [nowhere.resolve(), *nowhere.resolve().parents]))
    assert (
        f"{nowhere.resolve()} is not an overbrainer project yet, nor is any directory above it "
        f"(looked for overbrainer.toml or .overbrainer/events.sqlite in {looked}); "
        "create one with: overbrainer init\n"
    ) in refused.stderr, refused.stderr
    assert list(nowhere.iterdir()) == []


def test_init_inside_a_project_refuses_naming_it(project: Path) -> None:
    for cwd, args in (
        (project / "data", ()),
        (project / "data", ("sub",)),
        (project, ("nested",)),
    ):
        refused = _run(cwd, "init", *args)
        assert refused.returncode == 1
        target = cwd.resolve() / args[0] if args else cwd.resolve()
        assert (
            f"{target} is inside the overbrainer project {project.resolve()}, so init made no "
            "project there"
        ) in refused.stderr.replace(str(cwd) + "/", str(cwd.resolve()) + "/").replace(
            str(cwd) + " ", str(cwd.resolve()) + " "
        ), refused.stderr
    assert not (project / "data" / "overbrainer.toml").exists()
    assert not (project / "data" / "sub").exists() and not (project / "nested").exists()
    # The project itself may be initialised again: it keeps every file.
    again = _run(project, "init")
    assert again.returncode == 0 and "kept" in again.stdout, again.stderr


def test_above_a_bare_overbrainer_directory_is_no_project_but_a_log_is(tmp_path: Path) -> None:
    # A cache directory in a home directory must not make it the project of all below it.
    (tmp_path / ".overbrainer" / "cache").mkdir(parents=True)
    below = tmp_path / "work"
    below.mkdir()
    refused = _run(below, "runs", "ls")
    assert refused.returncode == 1 and "is not an overbrainer project yet" in refused.stderr
    # A project that lost its overbrainer.toml keeps its log: it is still found upward.
    store = RunStore(None, tmp_path, Actor.here("test"))
    store.create(
        ev.RunCreated(
            run_id=RUN, target="local", kind="local", remote_dir=f"runs/{RUN}", settings_digest="d"
        )
    )
    store.close()
    listed = _run(below, "runs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [RUN]
