"""``train --detach`` and ``supervise`` on this machine, through the real ``overbrainer``
command and the stand-in trainer: a run left running is followed to its end by the
supervisor, never by two processes at once, whichever of them starts or stops."""

import signal
import subprocess
import time

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.lifecycle.supervisor import needs_following
from tests.runs.conftest import Project, alive, job_pid

SLOW = {"FAKE_AXOLOTL_STEPS": "40", "FAKE_AXOLOTL_STEP_SECONDS": "0.1"}


def _detached(project: Project, **extra: str) -> str:
    """A run started with ``train --detach``: its ID, once the command exited."""
    done = project.run("train", "--detach", **{**SLOW, **extra})
    assert done.returncode == 0, done.stderr
    run_id = project.runs()[-1]
    assert (
        f"train: run {run_id} started on this machine and is left running: "
        f"`overbrainer supervise` follows it (or `overbrainer train attach {run_id}`)"
    ) in done.stdout
    return run_id


def _wait_for_event(project: Project, run_id: str, name: str, count: int = 1) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if project.event_names(run_id).count(name) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never had {count} {name}")


def _stop(process: "subprocess.Popen[str]", signum: int) -> tuple[str, str]:
    process.send_signal(signum)
    return process.communicate(timeout=30)


def test_train_detach_exits_once_the_job_runs_leaving_it_running(project: Project) -> None:
    run_id = _detached(project)
    assert project.run_json(run_id)["state"] == "running"
    assert alive(job_pid(project, run_id)), "the job must keep running"
    assert project.event_names(run_id) == ["run.Created", "run.JobStarted", "run.Detached"]
    story = project.run("events", run_id)
    assert "stopped following (left to the supervisor (train --detach))" in story.stdout


def test_supervise_once_follows_a_detached_run_to_its_end(project: Project) -> None:
    run_id = _detached(project)
    done = project.run("supervise", "--once", timeout=90)
    assert done.returncode == 0, done.stderr
    assert f"train: run {run_id} succeeded" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "supervise: followed 1 run"
    assert project.run_json(run_id)["state"] == "succeeded"
    assert project.event_names(run_id) == [
        "run.Created",
        "run.JobStarted",
        "run.Detached",
        "run.Followed",
        "run.ArtifactsRetrieved",
        "run.Ended",
    ]
    # Nothing is left: a second pass follows nothing.
    again = project.run("supervise", "--once")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "supervise: followed 0 runs"


def test_a_run_followed_by_a_live_train_attach_is_left_to_it(project: Project) -> None:
    run_id = _detached(project)
    attach = project.start("train", "attach", run_id)
    try:
        _wait_for_event(project, run_id, "run.Followed")
        done = project.run("supervise", "--once", timeout=90)
        assert done.returncode == 0, done.stderr
        assert (
            f"supervise: run {run_id} is followed by `overbrainer train attach` "
            f"(pid {attach.pid} on host "
        ) in done.stderr
        assert done.stdout.strip() == "supervise: followed 0 runs"
        # And the other way round: a second attach leaves it to the first, saying so.
        second = project.run("train", "attach", run_id)
        assert second.returncode == 1
        assert f"run {run_id} is followed by `overbrainer train attach` (pid {attach.pid}" in (
            second.stderr
        )
        out, err = attach.communicate(timeout=60)
    finally:
        if attach.poll() is None:
            attach.kill()
    assert attach.returncode == 0, err
    assert f"train: run {run_id} succeeded" in out
    names = project.event_names(run_id)
    assert names.count("run.Followed") == 1 and names.count("run.Ended") == 1


def test_a_supervisor_killed_mid_run_is_taken_over_by_the_next_without_duplicates(
    project: Project,
) -> None:
    run_id = _detached(project)
    first = project.start("supervise", "--poll", "0.5")
    try:
        _wait_for_event(project, run_id, "run.Followed")
        first.kill()  # no detach recorded: its claim stays, by a process now gone
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert project.event_names(run_id)[-1] != "run.Detached"
    assert alive(job_pid(project, run_id)), "the job must keep running"
    done = project.run("supervise", "--once", timeout=90)
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} was followed by `overbrainer supervise` (pid {first.pid}" in (done.stderr)
    assert "which is gone" in done.stderr
    assert project.run_json(run_id)["state"] == "succeeded"
    names = project.event_names(run_id)
    assert names.count("run.Followed") == 2
    assert names.count("run.ArtifactsRetrieved") == 1 and names.count("run.Ended") == 1


def test_sigterm_stops_the_supervisor_cleanly_and_a_second_one_waits_for_it(
    project: Project,
) -> None:
    run_id = _detached(project, FAKE_AXOLOTL_STEPS="100")
    supervisor = project.start("supervise", "--poll", "0.5")
    try:
        _wait_for_event(project, run_id, "run.Followed")
        # Two supervisors never both follow a run: the second says which one does.
        other = project.run("supervise", "--once", timeout=90)
        assert other.returncode == 0, other.stderr
        assert (
            f"supervise: run {run_id} is followed by `overbrainer supervise` "
            f"(pid {supervisor.pid} on host "
        ) in other.stderr
        out, err = _stop(supervisor, signal.SIGTERM)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert supervisor.returncode == 0, err
    assert "Traceback" not in err
    assert "supervise: stopped" in out
    assert project.event_names(run_id)[-1] == "run.Detached"
    assert alive(job_pid(project, run_id)), "the job must keep running"
    assert project.run_json(run_id)["state"] == "running"


def test_a_supervisor_follows_runs_started_after_it(project: Project) -> None:
    supervisor = project.start("supervise", "--poll", "0.3")
    try:
        run_id = _detached(project, FAKE_AXOLOTL_STEPS="5")
        deadline = time.monotonic() + 60
        while project.run_json(run_id)["state"] != "succeeded":
            assert time.monotonic() < deadline, "the supervisor never finished the run"
            time.sleep(0.1)
        out, err = _stop(supervisor, signal.SIGINT)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert supervisor.returncode == 0, err
    assert f"train: run {run_id} succeeded" in out


def test_a_run_its_train_still_follows_is_left_to_it(project: Project) -> None:
    train = project.start("train", **SLOW)
    try:
        run_id = project.wait_for_state("running")
        done = project.run("supervise", "--once", timeout=90)
        assert done.returncode == 0, done.stderr
        assert (
            f"supervise: run {run_id} is followed by `overbrainer train` (pid {train.pid} on host "
        ) in done.stderr
        _out, err = train.communicate(timeout=60)
    finally:
        if train.poll() is None:
            train.kill()
    assert train.returncode == 0, err
    assert "run.Followed" not in project.event_names(run_id)


CREATED = ev.RunCreated(
    run_id="20260102-000000-abcd", target="here", kind="local", remote_dir="x", settings_digest="d"
)
STARTED = ev.JobStarted(job_dir="runs/x", pid=5)
HOME = ev.ArtifactsRetrieved(files=1, bytes=1, manifest_digest="m")
DONE = ev.RunEnded(state="succeeded", exit_code=0)


@pytest.mark.parametrize(
    ("events", "followed"),
    [
        ([CREATED], True),  # left starting: its start is settled
        ([CREATED, STARTED], True),
        ([CREATED, STARTED, ev.Detached()], True),
        ([CREATED, STARTED, HOME, DONE], False),  # nothing left to do
        ([CREATED, STARTED, DONE], True),  # ended, its results not home
        ([CREATED, STARTED, DONE, ev.NoteAdded(note="not retrieved")], True),
        ([CREATED, ev.RunEnded(state="failed", message="no job")], False),
        ([CREATED, STARTED, DONE, ev.FilesRemoved(bytes=1)], False),  # not here any more
    ],
)
def test_which_runs_a_supervisor_follows(events: list[ev.Event], followed: bool) -> None:
    state = fold((event, "2026-01-02T00:00:00Z") for event in events)
    assert needs_following(state) is followed
