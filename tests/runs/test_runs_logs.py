"""``runs logs RUN``: the job's log on this machine and over SSH, followed as it grows,
its last lines, read from home once the run ended; and the end of a failed run's output."""

import io
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from overbrainer.errors import OverbrainerError
from overbrainer.events.aggregate import RunLog, RunView
from overbrainer.exec.base import TargetUnreachable
from overbrainer.lifecycle.logs import (
    Printer,
    Reading,
    follow_onto_home,
    last_lines_start,
    shown_lines,
    where_to_read,
)
from tests.runs.conftest import Project
from tests.runs.ssh_project import SshProject, ssh_project

__all__ = ["ssh_project"]


@pytest.mark.parametrize(
    ("data", "count", "at_start", "start"),
    [
        (b"a\nb\nc\n", 2, True, 2),
        (b"a\nb\nc", 2, True, 2),  # an unfinished last line counts
        (b"a\nb\nc\n", 5, True, 0),
        (b"a\nb\nc\n", 5, False, None),  # read further back
        (b"x\nb\nc\n", 2, False, 2),
        (b"a\nb\n", 0, True, 4),
        (b"", 3, True, 0),
    ],
)
def test_the_last_lines_of_the_end_of_a_file(
    data: bytes, count: int, at_start: bool, start: int | None
) -> None:
    assert last_lines_start(data, count, at_start) == start


def test_lines_shown_as_a_terminal_would_leave_them_with_no_control_character() -> None:
    data = b"one\nprogress 10%\rprogress 50%\rprogress 100%\n\x1b[31mred\x1b[0m\ttab\n"
    assert shown_lines(data, 2) == ["progress 100%", "[31mred[0m\ttab"]


def _state(kind: str, state: str, job: bool) -> RunLog:
    return RunLog(
        run=RunView(
            run_id="r1",
            state=state,
            kind=kind,
            job={"pid": 2, "dir": "d"} if job else None,
            message="boom" if state == "failed" else None,
        )
    )


@pytest.mark.parametrize(
    ("kind", "state", "home", "where"),
    [
        ("local", "running", False, "here"),
        ("ssh", "running", False, "target"),
        ("ssh", "running", True, "target"),  # a partial copy is no reason not to read it there
        ("ssh", "succeeded", True, "here"),
        ("ssh", "failed", False, "target"),  # not retrieved: on the host
        ("runpod", "succeeded", True, "here"),
        ("runpod", "running", False, "target"),
    ],
)
def test_a_log_is_read_at_home_only_once_it_is_there_for_good(
    kind: str, state: str, home: bool, where: str
) -> None:
    assert where_to_read(_state(kind, state, True), home) == where


def test_a_run_without_a_job_has_no_log_and_says_why() -> None:
    with pytest.raises(OverbrainerError, match=r"never started a job \(failed: boom\)"):
        where_to_read(_state("ssh", "failed", False), False)
    with pytest.raises(OverbrainerError, match=r"--pod` shows its pod starting"):
        where_to_read(_state("runpod", "preparing", False), False)


def test_runs_logs_of_a_local_run_follows_it_to_its_end(project: Project) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="40", FAKE_AXOLOTL_STEP_SECONDS="0.05")
    try:
        run_id = project.wait_for_state("running")
        started = time.monotonic()
        followed = project.run("runs", "logs", run_id[-4:], "--follow")
        assert followed.returncode == 0, followed.stderr
        assert time.monotonic() - started < 30
        assert followed.stdout.startswith("[stand-in axolotl] ")
        assert "[stand-in axolotl] training done; model saved to output" in followed.stdout
    finally:
        train.communicate(timeout=60)
    log = (project.path / "runs" / run_id / "job.log").read_text()
    assert followed.stdout == log  # all of it, once, in order
    tail = project.run("runs", "logs", f"runs/{run_id}/", "--tail", "3")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout == "".join(log.splitlines(keepends=True)[-3:])
    assert project.run("runs", "logs", run_id, "-n", "0").stdout == ""
    pod = project.run("runs", "logs", run_id, "--pod")
    assert pod.returncode == 2 and "--pod reads a Runpod pod's own log" in pod.stderr
    source = project.run("runs", "logs", run_id, "--source", "system")
    assert source.returncode == 2 and "--source goes with --pod" in source.stderr


def test_a_failed_runs_output_ends_with_its_logs_last_lines_and_where_the_rest_is(
    project: Project,
) -> None:
    done = project.run("train", FAKE_AXOLOTL_EXIT="3", FAKE_AXOLOTL_STEPS="30")
    assert done.returncode == 1
    run_id = project.runs()[-1]
    log = (project.path / "runs" / run_id / "job.log").read_text().splitlines()
    assert len(log) > 20
    err = done.stderr.splitlines()
    assert err[-1] == (
        f"error: run {run_id} failed: the job exited with code 3; see runs/{run_id}/job.log"
    )
    assert err[-22] == (
        f"the last 20 lines of the job's log (all of it: runs/{run_id}/job.log, or "
        f"`overbrainer runs logs {run_id}`):"
    )
    assert err[-21:-1] == [f"  | {line}" for line in log[-20:]]
    assert err[-2] == "  | [stand-in axolotl] FAKE_AXOLOTL_EXIT=3: failing"


def test_runs_logs_reads_the_log_on_the_ssh_host_then_at_home(ssh_project: SshProject) -> None:
    ssh_project.knobs(FAKE_AXOLOTL_STEPS="120", FAKE_AXOLOTL_STEP_SECONDS="0.05")
    train = ssh_project.start("train")
    try:
        run_id = ssh_project.wait_for_state("running")
        remote_log = ssh_project.remote_run(run_id) / "job.log"
        ssh_project.wait_for_file(remote_log)
        before = len(ssh_project.sshd.commands())
        read = ssh_project.run("runs", "logs", run_id, "--tail", "1")
        assert read.returncode == 0, read.stderr
        assert read.stdout.count("\n") == 1 and read.stdout in remote_log.read_text()
        assert len(ssh_project.sshd.commands()) > before  # read over SSH
        assert not (ssh_project.path / "runs" / run_id / "job.log").exists()
        # --follow prints what comes until the job ends.
        follow = ssh_project.run("runs", "logs", run_id, "--follow")
        assert follow.returncode == 0, follow.stderr
        assert follow.stdout.startswith("[stand-in axolotl] ")
        assert follow.stdout.endswith("[stand-in axolotl] training done; model saved to output\n")
        assert follow.stdout == remote_log.read_text()
    finally:
        train.communicate(timeout=60)
    assert train.returncode == 0
    # Ended and home: read here, not over SSH.
    before = len(ssh_project.sshd.commands())
    home = ssh_project.run("runs", "logs", run_id, "--tail", "1")
    assert home.returncode == 0, home.stderr
    assert home.stdout == "[stand-in axolotl] training done; model saved to output\n"
    assert len(ssh_project.sshd.commands()) == before


# --- a follow that loses its target once the log is home ---------------------------------

_LOG = "step 1\nstep 2 ünïcode\nstep 3\ntraining done\n".encode()


def _home(tmp_path: Path, data: bytes | None) -> Path:
    directory = tmp_path / "runs" / "r1"
    directory.mkdir(parents=True)
    if data is not None:
        (directory / "job.log").write_bytes(data)
    return directory / "job.log"


def _lost_after(printed: int, reading: Reading) -> Callable[[], Awaitable[None]]:
    """A follow on the target that printed ``printed`` bytes (cutting a character in two),
    then lost the target (its pod deleted as the run ended)."""

    async def remote() -> None:
        reading.printer.write(_LOG[:printed])
        reading.offset = printed
        raise TargetUnreachable(
            "lost the connection to pod p1 while reading the job's status", host="p1"
        )

    return remote


@pytest.mark.parametrize("printed", [0, 9, len("step 1\nstep 2 ü"), len(_LOG)])
async def test_a_follow_that_loses_the_pod_goes_on_from_the_log_at_home(
    tmp_path: Path, printed: int
) -> None:
    home = _home(tmp_path, _LOG)
    out = io.StringIO()
    reading = Reading(Printer(out))
    state = _state("runpod", "succeeded", True)
    await follow_onto_home(
        _lost_after(printed, reading), tmp_path, state, reading, follow=True, home_log=home
    )
    assert out.getvalue() == _LOG.decode()  # every byte once, none lost or repeated


@pytest.mark.parametrize(
    ("follow", "home", "started"),
    [
        (True, False, True),  # the log is not home: the target is really lost
        (False, True, True),  # not following: the error is the answer
        (True, True, False),  # lost before anything was read: said as it is
    ],
)
async def test_a_lost_target_is_an_error_unless_the_follow_can_go_on_at_home(
    tmp_path: Path, follow: bool, home: bool, started: bool
) -> None:
    log = _home(tmp_path, _LOG if home else None)
    reading = Reading(Printer(io.StringIO()))

    async def remote() -> None:
        if started:
            reading.offset = 3
        raise TargetUnreachable("lost the connection to pod p1", host="p1")

    with pytest.raises(TargetUnreachable):
        await follow_onto_home(
            remote,
            tmp_path,
            _state("runpod", "running", True),
            reading,
            follow=follow,
            home_log=log,
        )


@pytest.mark.parametrize(
    ("chunks", "printed"),
    [
        ([b"[rank0]:a\n[rank1]:b\n[rank0]:c\n"], "b\n"),
        ([b"[rank0]:a\n[ra", b"nk1]:b\nplain\n[rank1]:c"], "b\nc"),
        ([b"[rank1]:\xc3", b"\xa9t\xc3\xa9\n[rank10]:x\n"], "\u00e9t\u00e9\n"),
        ([b"launcher line\n", b""], ""),
    ],
)
def test_a_rank_filter_prints_one_process_lines_without_their_mark(
    chunks: list[bytes], printed: str
) -> None:
    out = io.StringIO()
    printer = Printer(out, only=b"[rank1]:")
    for chunk in chunks:
        printer.write(chunk)
    printer.write(b"", final=True)
    assert out.getvalue() == printed


@pytest.mark.parametrize(
    ("count", "start"),
    [(1, 20), (2, 0), (3, 0)],
)
def test_the_tail_of_one_rank_counts_only_its_lines(count: int, start: int) -> None:
    data = b"[rank1]:a\n[rank0]:b\n[rank1]:c\n[rank0]:d\n"
    assert last_lines_start(data, count, True, b"[rank1]:") == start
