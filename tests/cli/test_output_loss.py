"""Read commands whose output cannot be written: the real ``overbrainer`` with its stdout
into a pipe whose reader leaves (``| head -1``), a closed descriptor (``>&-``) or a full
device (``>/dev/full``). Each used to end in a ``BrokenPipeError`` (or ``AttributeError``)
traceback."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.session.journal import Journal

ROOT = Path(__file__).resolve().parents[2]
RUN = "20260101-100000-aaaa"
# Each event's line is a few hundred bytes: far more than a pipe holds (64 KiB), so the
# command is still writing when its reader leaves.
NOTES = 400


def _command(project: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "overbrainer", "-C", str(project), *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERBRAINER_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


async def _record(project: Path) -> None:
    store = RunStore(None, project, Actor.here("test script"))
    journal = Journal(store, project)
    try:
        await journal.create(
            ev.RunCreated(
                run_id=RUN,
                target="local",
                kind="local",
                remote_dir=f"runs/{RUN}",
                settings_digest="d1",
                base_model="Qwen/Qwen3-0.6B",
                adapter="lora",
            )
        )
        notes: list[ev.Event] = []
        for n in range(NOTES):
            notes += [ev.NoteAdded(note=f"note {n}: " + "x" * 100), ev.NoteCleared()]
        await journal.append(RUN, notes)
    finally:
        store.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A project with one run of many events, still preparing (a follower never ends)."""
    path = tmp_path_factory.mktemp("output") / "project"
    subprocess.run(_command(path, "init", str(path)), env=_env(), check=True, capture_output=True)
    trio.run(_record, path)
    yield path


def _head_1(project: Path, *args: str, timeout: float = 30) -> tuple[int, str, str]:
    """``overbrainer ARGS | head -1``: the first line, then the reader leaves."""
    process = subprocess.Popen(
        _command(project, *args),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline().decode()
    process.stdout.close()
    err = process.stderr.read().decode()
    return process.wait(timeout), first, err


def _into(project: Path, stdout: int, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        _command(project, *args), env=_env(), stdout=stdout, stderr=subprocess.PIPE, timeout=30
    )
    return done.returncode, done.stderr.decode()


def _reader_gone() -> int:
    reader, writer = os.pipe()
    os.close(reader)
    return writer


def _quiet(err: str) -> None:
    assert "Traceback" not in err
    assert "Exception ignored" not in err
    assert err == "", err


@pytest.mark.parametrize("json", [False, True], ids=["text", "json"])
def test_events_piped_into_head_ends_quietly(project: Path, json: bool) -> None:
    code, first, err = _head_1(project, "events", RUN, *(["--json"] if json else []))
    assert "run.Created" in first
    _quiet(err)
    assert code == 0


def test_events_follow_piped_into_head_ends_quietly_once_head_left(project: Path) -> None:
    # The run is still preparing: a follower with a reader would go on until it ends.
    started = time.monotonic()
    code, first, err = _head_1(project, "events", RUN, "--follow")
    assert "run.Created" in first
    _quiet(err)
    assert code == 0
    assert time.monotonic() - started < 20


def test_events_follow_notices_a_reader_gone_even_with_nothing_new_to_print(
    project: Path,
) -> None:
    # Everything fits in the pipe, then nothing new comes: only the follower's own look at
    # its stdout can tell that nobody reads any more.
    reader, writer = os.pipe()
    process = subprocess.Popen(
        _command(project, "events", RUN, "--follow", "--json"),
        env=_env(),
        stdout=writer,
        stderr=subprocess.PIPE,
    )
    os.close(writer)
    with os.fdopen(reader, "rb") as out:
        assert b"run.Created" in out.readline()
    assert process.stderr is not None
    err = process.stderr.read().decode()
    assert process.wait(20) == 0
    _quiet(err)


def test_config_check_piped_into_head_ends_quietly(project: Path) -> None:
    writer = _reader_gone()  # the reader left before the command wrote anything
    try:
        code, err = _into(project, writer, "config", "check")
    finally:
        os.close(writer)
    _quiet(err)
    assert code == 0


def test_runs_ls_with_stdout_closed_says_so_without_a_traceback(project: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *_command(project, "runs", "ls")],
        env=_env(),
        stderr=subprocess.PIPE,
        timeout=30,
    )
    err = done.stderr.decode()
    assert "Traceback" not in err
    assert err == "error: could not write the output of `overbrainer runs ls` (closed)\n"
    assert done.returncode == 1


def test_runs_ls_into_a_full_disk_says_so_without_a_traceback(project: Path) -> None:
    with open("/dev/full", "wb") as full:
        code, err = _into(project, full.fileno(), "runs", "ls", "--json")
    assert "Traceback" not in err
    assert err == (
        "error: could not write the output of `overbrainer runs ls` (No space left on device)\n"
    )
    assert code == 1


def test_runs_ls_with_stderr_closed_still_lists(project: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" 2>&-', "sh", *_command(project, "runs", "ls")],
        env=_env(),
        stdout=subprocess.PIPE,
        timeout=30,
    )
    assert done.returncode == 0
    assert RUN in done.stdout.decode()


def test_a_closed_descriptor_is_never_taken_by_a_file_the_command_opens(tmp_path: Path) -> None:
    # With fd 1 closed, the next file opened (the event store) would get it, and a child
    # writing to its stdout would write into that file.
    script = (
        "import os, sys\n"
        "from overbrainer.front import streams\n"
        "streams.install()\n"
        f"fd = os.open({str(tmp_path / 'store')!r}, os.O_WRONLY | os.O_CREAT)\n"
        "sys.stderr.write(f'{fd}\\n')\n"
    )
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&- <&-', "sh", sys.executable, "-c", script],
        env=_env(),
        stderr=subprocess.PIPE,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stderr.decode()) > 2
