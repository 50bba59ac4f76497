"""How a job on this machine ended, read from its markers alone (nothing written)."""

import os
import subprocess
from pathlib import Path

from overbrainer.exec.markers import JobEnd, job_end


def _dead_group() -> int:
    """The pid of a process group that has ended (its leader reaped)."""
    leader = subprocess.Popen(["true"], start_new_session=True)
    leader.wait()
    return leader.pid


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_an_exit_code_is_read_with_the_time_it_was_written(tmp_path: Path) -> None:
    (tmp_path / "job.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "exit_code").write_text("3\n")
    os.utime(tmp_path / "exit_code", (1_767_268_800, 1_767_268_800))  # 2026-01-01 12:00 UTC
    before = _snapshot(tmp_path)
    end = job_end(tmp_path)
    assert end is not None and (end.how, end.exit_code) == ("exited", 3)
    assert end.text() == "exited with code 3 at 2026-01-01 12:00:00Z"
    assert end.to_json() == {"how": "exited", "exit_code": 3, "at": "2026-01-01T12:00:00Z"}
    assert _snapshot(tmp_path) == before


def test_cancelled_beats_an_exit_code_and_cancelling_is_not_an_end(tmp_path: Path) -> None:
    (tmp_path / "job.pid").write_text(f"{_dead_group()}\n")
    (tmp_path / "exit_code").write_text("143\n")
    (tmp_path / "cancelling").write_text("")
    assert job_end(tmp_path) is None
    (tmp_path / "cancelled").write_text("")
    found = job_end(tmp_path)
    assert found is not None and found.how == "cancelled"


def test_an_unreadable_exit_code_still_ends_the_job(tmp_path: Path) -> None:
    (tmp_path / "exit_code").write_text("?!\n")
    end = job_end(tmp_path)
    assert end is not None and (end.how, end.exit_code) == ("exited", None)
    assert end.text().startswith("exited with an unreadable code at ")


def test_a_running_job_has_no_end_and_a_vanished_one_is_lost(tmp_path: Path) -> None:
    assert job_end(tmp_path) is None  # nothing there: nothing to tell
    alive = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (tmp_path / "job.pid").write_text(f"{alive.pid}\n")
        assert job_end(tmp_path) is None
    finally:
        alive.kill()
        alive.wait()
    assert job_end(tmp_path) == JobEnd("lost")
    assert JobEnd("lost").text() == "is gone without an exit code"
