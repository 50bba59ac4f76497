"""Regressions of the disk faults and bad input users' machines produce, each named after
its scenario: a read-only or full ``.overbrainer/``, a damaged runs view, a log emptied or
replaced under its view, a secret that no HTTP header can carry, and read commands pointed
at a directory that is no project.

Every command here is the real ``overbrainer`` in its own process. A read-only project is
made ``a-w`` and the command runs with its root powers over permissions dropped
(``tests/fakes/confine.py``), so it is read-only for root too; a full disk is a file-size limit
of zero on the command (every write of a byte fails).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from reliability.world import CANARIES, MachineWorld, Project, base_env, case_project

CANARY_KEY = "rpa_CANARYsmartQUOTE0123456789"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MachineWorld]:
    """A local-target template project (the stand-in trainer)."""
    with MachineWorld("local", tmp_path_factory.mktemp("world")) as made:
        yield made


@pytest.fixture(scope="module")
def trained(world: MachineWorld) -> Iterator[Project]:
    """A project with two finished runs, trained for real; each test works on a copy."""
    with case_project(world, "trained") as project:
        for _ in range(2):
            done = project.run("train")
            assert done.code == 0, done.said()
        yield project


@pytest.fixture
def project(trained: Project, tmp_path: Path) -> Project:
    path = tmp_path / "project"
    shutil.copytree(trained.path, path, symlinks=True)
    return Project("copy", path, dict(trained.env), "local", path, trained.venv)


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def clean(self) -> bool:
        """No traceback, and no secret, in what the command printed."""
        said = self.out + self.err
        return "Traceback" not in said and not any(c in said for c in (*CANARIES, CANARY_KEY))


def run(
    project_dir: Path,
    *args: str,
    confine: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Ran:
    """``overbrainer -C PROJECT ARGS`` in its own process (``confine``: see above)."""
    command = [sys.executable, "-m", "overbrainer", "-C", str(project_dir), *args]
    if confine is not None:
        command = [sys.executable, "-m", "tests.fakes.confine", confine, "--", *command]
    done = subprocess.run(
        command,
        env=env if env is not None else base_env(),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes (directories as ``dir``)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink() or not path.is_file():
            found[key] = "dir" if path.is_dir() else "other"
        else:
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _settle(project: Project) -> None:
    """Let SQLite fold its write-ahead journals into the files and remove them, as after
    the last command of a day: the state a read-only copy is most often found in."""
    for name in ("events.sqlite", "view.sqlite"):
        path = project.path / ".overbrainer" / name
        if path.exists():
            db = sqlite3.connect(path)
            db.execute("SELECT count(*) FROM sqlite_master").fetchall()
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
    assert not list((project.path / ".overbrainer").glob("*-wal"))


@pytest.fixture
def read_only(project: Project) -> Iterator[Path]:
    """The whole project ``a-w`` (restored after the test); proven read-only for a
    confined command before the test relies on it."""
    _settle(project)
    modes = {path: path.stat().st_mode for path in [project.path, *project.path.rglob("*")]}
    for path, mode in sorted(modes.items(), reverse=True):
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(mode) & ~0o222)
    try:
        probe = project.path / ".overbrainer" / "probe"
        tried = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.fakes.confine",
                "read-only",
                "--",
                sys.executable,
                "-c",
                f"open({str(probe)!r}, 'w')",
            ],
            env=base_env(),
            capture_output=True,
            text=True,
        )
        if tried.returncode == 0 or probe.exists():
            pytest.fail(f"cannot make {project.path} read-only here: {tried.stderr[-300:]}")
        yield project.path
    finally:
        for path, mode in sorted(modes.items()):
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(mode))


def run_ids(project: Project) -> list[str]:
    """The project's runs, from ``runs/`` (reading the log here could write beside it), in
    the order ``runs ls`` lists them: by creation time (two runs created within one second
    share their ID's time, and their random suffixes order them by chance)."""

    def created(run_dir: Path) -> tuple[str, str]:
        return (json.loads((run_dir / "run.json").read_text())["created_at"], run_dir.name)

    return [p.name for p in sorted((project.path / "runs").iterdir(), key=created)]


def _listed(ran: Ran) -> list[tuple[str, str]]:
    return [(row["id"], row["state"]) for row in map(json.loads, ran.out.splitlines())]


# --- a read-only or full .overbrainer/ ------------------------------------------------------


def test_runs_and_events_read_a_read_only_project_and_train_says_how_to_fix_it(
    project: Project, read_only: Path
) -> None:
    # `events` could not open a read-only log at all, and `runs ls` took the failure to
    # open its view for damage, deleted the view, then crashed.
    runs = run_ids(project)
    assert len(runs) == 2
    before = _snapshot(project.path)
    listed = run(read_only, "runs", "ls", "--json", confine="read-only")
    assert listed.code == 0 and listed.clean(), listed.err
    assert _listed(listed) == [(run_id, "succeeded") for run_id in runs]
    table = run(read_only, "runs", "ls", confine="read-only")
    assert table.code == 0 and all(run_id in table.out for run_id in runs), table.err
    for args in (
        ("events", runs[0]),
        ("events", runs[1], "--json"),
        ("events", runs[0], "--at", "2"),
        ("runs", "show", runs[1]),
    ):
        ran = run(read_only, *args, confine="read-only")
        assert ran.code == 0 and ran.clean() and ran.out, (args, ran.err)
    replay = run(read_only, "events", runs[1], "--json", confine="read-only")
    names = [json.loads(line)["event"] for line in replay.out.splitlines()]
    # The worlds' trainer saves checkpoints: they came home as saved, before the results.
    assert names == [
        "run.Created",
        "run.JobStarted",
        "run.CheckpointRetrieved",
        "run.CheckpointRetrieved",
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]

    # A command that must write says which directory and how, and leaves everything.
    # With the project's trainer, so the preflight passes and the store is what fails.
    train = run(read_only, "train", confine="read-only", env=project.env)
    assert train.code == 1 and train.clean(), train.err
    assert train.err.startswith("error: ") and str(read_only / ".overbrainer") in train.err
    assert "chmod -R u+w" in train.err
    assert _snapshot(project.path) == before


@pytest.mark.parametrize("where", ["the project directory", "runs/"])
def test_a_project_whose_runs_cannot_be_written_is_refused_before_a_run_is_created(
    project: Project, where: str
) -> None:
    # A project read-only itself (its .overbrainer/ writable) recorded run.Created, then
    # failed on "could not prepare runs/<id>: Permission denied".
    from reliability.world import logged_runs

    runs = project.path / "runs"
    before = logged_runs(project.path)
    if where == "runs/":
        locked = runs
    else:
        shutil.rmtree(runs)
        locked = project.path
    mode = stat.S_IMODE(locked.stat().st_mode)
    locked.chmod(mode & ~0o222)
    try:
        train = run(project.path, "train", confine="read-only", env=project.env)
        check = run(project.path, "train", "--check", confine="read-only", env=project.env)
    finally:
        locked.chmod(mode)
    assert train.code == 1 and train.clean(), train.err
    lines = train.err.splitlines()
    assert lines[0] == "error: preflight found 1 problem; no run was created:"
    if where == "runs/":
        assert lines[1] == (
            f"  {runs} cannot be written (permission denied): each run keeps its files in "
            f"runs/<id>; make it writable: chmod -R u+w {runs}"
        )
    else:
        assert lines[1] == (
            f"  runs/ cannot be created in {project.path} (permission denied): each run keeps "
            f"its files in runs/<id>; make that directory writable (chmod u+w {project.path}) "
            "or create runs/ there yourself"
        )
    assert logged_runs(project.path) == before
    assert check.code == 1 and "PROBLEM  run files      1 problem" in check.out, check.out


def test_runs_and_events_read_a_project_whose_disk_is_full_and_keep_the_view(
    project: Project,
) -> None:
    # A full disk used to count as a damaged view: deleted, then a crash.
    assert run(project.path, "runs", "ls").code == 0  # the view, current
    _settle(project)
    runs = run_ids(project)
    view = project.path / ".overbrainer" / "view.sqlite"
    kept = view.read_bytes()
    listed = run(project.path, "runs", "ls", "--json", confine="full")
    assert listed.code == 0 and listed.clean(), listed.err
    assert _listed(listed) == [(run_id, "succeeded") for run_id in runs]
    assert view.read_bytes() == kept
    for args in (("events", runs[0]), ("runs", "show", runs[0])):
        ran = run(project.path, *args, confine="full")
        assert ran.code == 0 and ran.clean() and ran.out, (args, ran.err)
    train = run(project.path, "train", confine="full", env=project.env)  # trainer found
    assert train.code == 1 and train.clean(), train.err
    assert str(project.path / ".overbrainer" / "events.sqlite") in train.err
    assert "free some space" in train.err
    # Once there is room again, everything works as before.
    assert _listed(run(project.path, "runs", "ls", "--json")) == _listed(listed)


@pytest.mark.parametrize("damage", ["directory", "garbage", "unreadable"])
def test_runs_ls_lists_through_a_damaged_view_path(project: Project, damage: str) -> None:
    runs = run_ids(project)
    view = project.path / ".overbrainer" / "view.sqlite"
    for stale in view.parent.glob("view.sqlite*"):
        stale.unlink()
    if damage == "directory":
        view.mkdir()
    elif damage == "garbage":
        view.write_bytes(b"this is not a database\n" * 100)
    else:
        view.write_bytes(b"")
        view.chmod(0)
    listed = run(project.path, "runs", "ls", "--json", confine="read-only")
    assert listed.code == 0 and listed.clean(), listed.err
    assert _listed(listed) == [(run_id, "succeeded") for run_id in runs]
    if damage == "directory":
        assert view.is_dir()  # what is no file of ours is left alone
    if damage == "garbage":
        assert sqlite3.connect(view).execute("SELECT count(*) FROM runs").fetchone() == (2,)


# --- a view ahead of its log ------------------------------------------------------------------


def test_runs_ls_never_lists_runs_of_an_emptied_log(project: Project) -> None:
    runs = run_ids(project)
    assert _listed(run(project.path, "runs", "ls", "--json")) != []
    log = project.path / ".overbrainer" / "events.sqlite"
    for journal in log.parent.glob("events.sqlite-*"):
        journal.unlink()
    log.write_bytes(b"")
    listed = run(project.path, "runs", "ls", "--json")
    # Not "no runs" either: the runs' directories are still in runs/ (issue 25, item C).
    assert listed.code == 1 and listed.out == "", listed.err
    assert (
        f"the event log .overbrainer/events.sqlite holds no runs, yet runs/ holds {len(runs)} "
        "run directories"
    ) in listed.err
    events = run(project.path, "events", runs[0])
    assert events.code == 1 and f"no run {runs[0]}" in events.err
    assert "the log was emptied or replaced" in events.err


def test_runs_ls_follows_a_log_replaced_by_another(project: Project, tmp_path: Path) -> None:
    # Another project's log, longer than this one: the view's position exists in it, so
    # only the event found there shows that the view was built from another log.
    listed = _listed(run(project.path, "runs", "ls", "--json"))
    assert len(listed) == 2
    other = tmp_path / "other"
    store = RunStore(None, other, Actor.here("test"))
    theirs = [f"20250101-0000{n:02d}-beef" for n in range(40)]
    for run_id in theirs:
        store.create(
            ev.RunCreated(
                run_id=run_id, target="local", kind="local", remote_dir="r", settings_digest=""
            )
        )
    store.close()
    log = project.path / ".overbrainer" / "events.sqlite"
    for journal in log.parent.glob("events.sqlite-*"):
        journal.unlink()
    shutil.copy(other / ".overbrainer" / "events.sqlite", log)
    replaced = run(project.path, "runs", "ls", "--json")
    assert replaced.code == 0, replaced.err
    assert _listed(replaced) == [(run_id, "preparing") for run_id in theirs]


# --- secrets a header cannot carry ------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OVERBRAINER_RUNPOD__API_KEY", f"{CANARY_KEY}\u2019"),  # a pasted smart quote
        ("OVERBRAINER_RUNPOD__API_KEY", f"\u201c{CANARY_KEY}\u201d"),
        ("OVERBRAINER_HF_TOKEN", f"hf_{CANARY_KEY}\u2013x"),  # an en dash
        ("OVERBRAINER_HF_TOKEN", f"hf_{CANARY_KEY}\u00a0"),  # a no-break space
    ],
)
def test_a_secret_with_a_pasted_smart_quote_is_refused_naming_its_variable(
    project: Project, variable: str, value: str
) -> None:
    # It passed validation, then httpx raised UnicodeEncodeError with a traceback.
    before = run_ids(project)
    env = {
        **project.env,
        variable: value,
        "OVERBRAINER_RUNPOD__BASE_URL": "http://127.0.0.1:9",  # never reached
    }
    for args in (("pod", "ls"), ("config", "check"), ("train",)):
        ran = run(project.path, *args, env=env)
        assert ran.code == 1 and ran.clean(), (args, ran.err)
        assert variable in ran.err and "outside ASCII" in ran.err, (args, ran.err)
    assert run_ids(project) == before  # no run was started


# --- read commands outside a project ----------------------------------------------------------


OUTSIDE_A_PROJECT = [
    ("runs", "ls"),
    ("runs", "ls", "--json"),
    ("runs", "show", "20260101-000000-abcd"),
    ("events", "20260101-000000-abcd"),
    ("events", "20260101-000000-abcd", "--follow"),
    ("pod", "ls"),
    ("config", "check"),
    # and those that would write
    ("train",),
    ("train", "attach", "20260101-000000-abcd"),
    ("train", "cancel", "20260101-000000-abcd"),
    ("pod", "rm", "20260101-000000-abcd"),
]


@pytest.mark.parametrize("args", OUTSIDE_A_PROJECT, ids=" ".join)
def test_commands_outside_a_project_refuse_and_create_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # They created .overbrainer/ (and every missing directory), printed "no runs yet" and
    # exited 0.
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "no" / "such" / "dir"
    log = tmp_path / "elsewhere.sqlite"
    for where, env in (
        (empty, base_env()),
        (missing, base_env()),
        # A store named by the environment alone does not make a project either.
        (empty, {**base_env(), "OVERBRAINER_STORE__URL": f"sqlite:///{log}"}),
    ):
        ran = run(where, *args, env=env, cwd=tmp_path)
        assert ran.code == 1 and ran.clean(), ran.err
        assert f"{where} is not an overbrainer project" in ran.err, ran.err
        assert f"overbrainer init {where}" in ran.err, ran.err
        assert list(empty.iterdir()) == [] and not (tmp_path / "no").exists()
        assert not log.exists()
    here = run(empty, *args, cwd=empty)
    assert here.code == 1 and "create one with: overbrainer init\n" in here.err


def test_a_project_that_lost_its_file_still_shows_its_history(project: Project) -> None:
    runs = run_ids(project)
    (project.path / "overbrainer.toml").unlink()
    listed = run(project.path, "runs", "ls", "--json")
    assert listed.code == 0, listed.err
    assert _listed(listed) == [(run_id, "succeeded") for run_id in runs]
    train = run(project.path, "train")
    assert train.code == 1 and "overbrainer init" in train.err
