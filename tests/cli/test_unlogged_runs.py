"""A log emptied or replaced while runs/ holds run directories is never shown as "no runs
yet": read commands say what is wrong, name the file and what to do, and write nothing;
``train`` warns before appending to such a log. The real program, on real SQLite files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore

RUNS = ("20260101-000000-5a0e", "20260102-000000-aaaa")
LOG = Path(".overbrainer") / "events.sqlite"


def _run(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("OVERBRAINER_")}
    return subprocess.run(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _record(project: Path, *run_ids: str) -> None:
    store = RunStore(None, project, Actor.here("test"))
    for run_id in run_ids:
        store.create(
            ev.RunCreated(
                run_id=run_id,
                target="local",
                kind="local",
                remote_dir=f"runs/{run_id}",
                settings_digest="d",
            )
        )
        (project / "runs" / run_id).mkdir(parents=True, exist_ok=True)
    store.close()


def _log_files(project: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (project / ".overbrainer").glob("events.sqlite*")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose log held two runs, then was emptied to 0 bytes."""
    root = tmp_path / "project"
    assert _run(root, "init").returncode == 0
    _record(root, *RUNS)
    assert _run(root, "runs", "ls").returncode == 0  # the runs view knew them too
    for name, _ in _log_files(root).items():
        (root / ".overbrainer" / name).unlink()
    (root / LOG).write_bytes(b"")
    (root / "runs" / "notes").mkdir()  # not a run directory
    return root


_HOLDS_NONE = (
    "holds no runs, yet runs/ holds 2 run directories (20260101-000000-5a0e, "
    "20260102-000000-aaaa): the log was emptied or replaced since they were made; restore "
    ".overbrainer/events.sqlite from a backup, or point [store] url (overbrainer.toml or "
    "OVERBRAINER_STORE__URL) at the store that holds them"
)
EMPTIED = _HOLDS_NONE + "; nothing was written to the log\n"
# A listing also says how to start afresh (a run named is wanted, so not then).
LISTED = _HOLDS_NONE + " (or, to start afresh, move runs/ aside); nothing was written to the log\n"


@pytest.mark.parametrize(
    "args",
    [("runs", "ls"), ("runs", "ls", "--json"), ("runs", "ls", "--state", "running")],
    ids=" ".join,
)
def test_runs_ls_of_an_emptied_log_names_the_runs_directories_not_no_runs_yet(
    project: Path, args: tuple[str, ...]
) -> None:
    listed = _run(project, *args)
    assert listed.returncode == 1 and listed.stdout == ""
    assert "no runs yet" not in listed.stderr
    assert listed.stderr == f"error: the event log .overbrainer/events.sqlite {LISTED}"
    assert _log_files(project) == {"events.sqlite": 0}


@pytest.mark.parametrize(
    "args",
    [
        ("events", RUNS[0]),
        ("events", RUNS[0], "--json"),
        ("runs", "show", RUNS[0]),
        ("runs", "logs", RUNS[0]),
        ("train", "attach", RUNS[0]),
        ("train", "cancel", RUNS[0]),
        ("train", "stop", RUNS[0]),
        ("pod", "rm", RUNS[0]),
        ("pod", "billing", RUNS[0]),
    ],
    ids=" ".join,
)
def test_a_run_of_an_emptied_log_is_explained_and_the_file_stays_empty(
    project: Path, args: tuple[str, ...]
) -> None:
    # The commands that write (train attach…) read first: opening the 0-byte file to write
    # would make it a new, empty SQLite log.
    shown = _run(project, *args)
    assert shown.returncode == 1, shown.stderr
    assert shown.stderr == (
        f"error: no run {RUNS[0]} in .overbrainer/events.sqlite; the log {EMPTIED}"
    ), shown.stderr
    assert _log_files(project) == {"events.sqlite": 0}


def test_a_run_named_by_a_suffix_of_an_emptied_log_is_explained(project: Path) -> None:
    shown = _run(project, "runs", "show", "5a0e")
    assert shown.returncode == 1
    assert shown.stderr == f"error: the event log .overbrainer/events.sqlite {LISTED}"
    assert _log_files(project) == {"events.sqlite": 0}


def test_a_log_replaced_by_another_project_s_says_the_run_is_not_in_it(
    project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    assert _run(other, "init").returncode == 0
    _record(other, "20250101-000000-0000")
    (project / LOG).unlink()
    for name in _log_files(other):
        (other / ".overbrainer" / name).rename(project / ".overbrainer" / name)
    shown = _run(project, "events", RUNS[1])
    assert shown.returncode == 1
    assert shown.stderr == (
        f"error: no run {RUNS[1]} in .overbrainer/events.sqlite; the log holds other runs, "
        f"yet runs/{RUNS[1]}/ is here: the log was replaced since the run was made, or the "
        "directory came from another checkout; restore .overbrainer/events.sqlite from a "
        "backup, or point [store] url (overbrainer.toml or OVERBRAINER_STORE__URL) at the "
        "store that holds them; nothing was written to the log\n"
    )
    # The runs it holds are listed as they are.
    listed = _run(project, "runs", "ls")
    assert listed.returncode == 0 and "20250101-000000-0000" in listed.stdout


def test_train_warns_before_appending_to_an_emptied_log(project: Path) -> None:
    checked = _run(project, "train", "--check")
    assert (
        "warning: the event log .overbrainer/events.sqlite holds no runs, yet runs/ holds 2 "
        "run directories (20260101-000000-5a0e, 20260102-000000-aaaa): the log was emptied or "
        "replaced since they were made; a new run is recorded in it all the same (to have "
        "their history back: restore .overbrainer/events.sqlite from a backup, or point "
        "[store] url (overbrainer.toml or OVERBRAINER_STORE__URL) at the store that holds "
        "them)\n"
    ) in checked.stderr, checked.stderr
    assert _log_files(project) == {"events.sqlite": 0}


def test_a_project_without_runs_still_has_no_runs_yet(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    assert _run(root, "init").returncode == 0
    (root / "runs" / "notes").mkdir(parents=True)
    listed = _run(root, "runs", "ls")
    assert listed.returncode == 0
    assert listed.stderr == "no runs yet: start one with `overbrainer train`\n"
    checked = _run(root, "train", "--check")
    assert "emptied" not in checked.stderr


def test_resuming_from_a_run_of_an_emptied_log_is_explained_and_writes_nothing(
    project: Path,
) -> None:
    for args in (
        ("train", "--resume-from", RUNS[0]),
        ("train", "--check", "--resume-from", "aaaa"),
    ):
        ran = _run(project, *args)
        assert ran.returncode == 1
        said = ran.stdout + ran.stderr
        assert "the log was emptied or replaced since they were made" in said, said
        assert _log_files(project) == {"events.sqlite": 0}
