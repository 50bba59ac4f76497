"""``runs rm RUN…`` and ``runs gc``: a finished run's files leave this machine, the removal
is recorded (``run.FilesRemoved``) and its events stay; a run not ended, or whose pod may
still exist, is refused with why and the command that changes that. Through the real
command on a local project with the stand-in trainer, and in-process on scripted logs (for
runs weeks old)."""

import json
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from overbrainer.cli import runs_rm
from overbrainer.cli.main import main
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.front.fault_injection import ENV as FAULT_PLAN_ENV
from overbrainer.lifecycle.run_files import REMOVING_PREFIX
from tests.runs.conftest import Project, job_pid, kill_group


def _train(project: Project) -> str:
    done = project.run("train", FAKE_AXOLOTL_STEPS="6", FAKE_AXOLOTL_SAVE_EVERY="3")
    assert done.returncode == 0, done.stderr
    return project.runs()[-1]


def test_rm_removes_a_finished_runs_files_records_it_and_ls_lists_it_only_with_all(
    project: Project,
) -> None:
    kept, gone = _train(project), _train(project)
    directory = project.path / "runs" / gone
    assert (directory / "output" / "adapter_model.safetensors").is_file()
    done = project.run("runs", "rm", gone)
    assert done.returncode == 0, done.stderr
    assert not directory.exists()
    line = done.stdout.strip()
    assert line.startswith(f"removed runs/{gone}/ (") and " freed); its events stay: " in line
    assert line.endswith(f"`overbrainer events {gone}`"), line
    # Recorded, the events before it kept.
    names = project.event_names(gone)
    assert names[-1] == "run.FilesRemoved" and "run.Ended" in names
    listed = project.run("runs", "ls")
    assert listed.returncode == 0
    assert kept in listed.stdout and gone not in listed.stdout
    every = project.run("runs", "ls", "--all")
    assert f"{gone}  succeeded (files removed)" in every.stdout, every.stdout
    # No checkpoint of it is home any more: none to resume from; no output, no job log.
    resumed = project.run("train", "--resume-from", gone)
    assert resumed.returncode == 1
    assert resumed.stderr.strip() == (
        f"error: run {gone} has no checkpoint to resume from: its files were removed from "
        "this machine (`overbrainer runs rm`); `overbrainer runs ls` lists the runs whose "
        "files are here"
    )
    assert len(project.runs()) == 1
    attach = project.run("train", "attach", gone)
    assert attach.returncode == 0, attach.stderr
    assert "output in" not in attach.stdout, attach.stdout
    logs = project.run("runs", "logs", gone)
    assert logs.returncode == 1
    assert f"the job's log of run {gone} was removed with its files" in logs.stderr
    # Its report still can be had, written beside the others, not in a directory made again.
    report = project.run("runs", "report", gone)
    assert report.returncode == 0, report.stderr
    assert report.stdout.strip() == f"wrote {project.path}/reports/{gone}.html"
    assert (project.path / "reports" / f"{gone}.html").is_file()
    assert not directory.exists()
    # Again: nothing to do, said so.
    again = project.run("runs", "rm", gone)
    assert again.returncode == 0, again.stderr
    assert f"run {gone}: its files were removed already" in again.stdout
    assert project.event_names(gone).count("run.FilesRemoved") == 1


def test_rm_refuses_a_running_run_naming_why_and_the_command_that_ends_it(
    project: Project,
) -> None:
    train = project.start("train", FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0.1")
    run_id = project.wait_for_state("running", timeout=60)
    try:
        refused = project.run("runs", "rm", run_id)
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            f"error: not removed: run {run_id} is running: its job or its follower may still "
            f"write into runs/{run_id}/; stop it with `overbrainer train cancel {run_id}` (or "
            f"follow it to its end with `overbrainer train attach {run_id}`), then remove it"
        )
        assert (project.path / "runs" / run_id / "axolotl.yaml").is_file()
        assert "run.FilesRemoved" not in project.event_names(run_id)
    finally:
        kill_group(job_pid(project, run_id))
        train.kill()
        train.communicate(timeout=60)


def test_a_ctrl_c_during_rm_finishes_the_run_in_hand_and_says_what_is_left(
    project: Project,
) -> None:
    first, second = _train(project), _train(project)
    # The signal lands as the first removal has just been recorded.
    plan = json.dumps({"at": "append-after run.FilesRemoved", "action": "sigint"})
    done = project.run("runs", "rm", first, second, **{FAULT_PLAN_ENV: plan})
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert not (project.path / "runs" / first).exists()
    assert (project.path / "runs" / second / "run.json").is_file()
    assert project.event_names(first)[-1] == "run.FilesRemoved"
    assert "run.FilesRemoved" not in project.event_names(second)
    assert (
        "stopped after Ctrl-C: removed the files of 1 of 2 runs (" in done.stderr
        and f"freed); `overbrainer runs rm {second}` removes the rest" in done.stderr
    ), done.stderr
    assert not [p for p in (project.path / "runs").iterdir() if p.name.startswith(".")]


# ---- in-process, on scripted logs ------------------------------------------------------

OLD = "20260101-100000-0001"  # succeeded, eval_loss 0.9, 2 MB
BEST = "20260102-100000-0002"  # succeeded, eval_loss 0.5, 1 MB
POD = "20260103-100000-0003"  # failed on Runpod, its pod not confirmed gone
STRAY = "20260104-100000-0004"  # a directory the log has no run of: left alone


@pytest.fixture
def scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project with three runs recorded and a stray directory, each with files; the
    clock of ``runs gc`` 40 days later."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "overbrainer.toml").write_text('[training]\ntarget = "here"\n')
    store = RunStore(None, project, Actor.here("test script"))
    try:
        for run_id, events in _runs().items():
            for event in events:
                store.append(run_id, lambda _s, e=event: [e])
    finally:
        store.close()
    for run_id, size in ((OLD, 2_000_000), (BEST, 1_000_000), (POD, 10), (STRAY, 10)):
        output = project / "runs" / run_id / "output"
        output.mkdir(parents=True)
        (output / "adapter_model.safetensors").write_bytes(b"\1" * size)
    # Every run's creation is its append time (now): 40 days on, all are 40 days old.
    later = datetime.now(UTC) + timedelta(days=40)
    monkeypatch.setattr(runs_rm, "clock", lambda: later)
    yield project


def _created(run_id: str, kind: str = "local") -> ev.RunCreated:
    return ev.RunCreated(
        run_id=run_id, target="here", kind=kind, remote_dir=f"runs/{run_id}", settings_digest="d"
    )


def _runs() -> dict[str, list[ev.Event]]:
    def ended(loss: float) -> list[ev.Event]:
        return [
            ev.JobStarted(job_dir="x", pid=9),
            ev.RunEnded(state="succeeded", exit_code=0, metrics={"step": 3, "eval_loss": loss}),
        ]

    return {
        OLD: [_created(OLD), *ended(0.9)],
        BEST: [_created(BEST), *ended(0.5)],
        POD: [
            _created(POD, "runpod"),
            ev.AttemptSent(n=1, pod_name=f"overbrainer-{POD}-1", gpu_type="A40"),
            ev.AttemptResolved(n=1, result="created", pod_id="k3x9"),
            ev.PodCreated(pod_id="k3x9", gpu_type="A40", cost_per_hour=0.5),
            ev.RunEnded(state="failed", message="the job exited with code 1"),
        ],
    }


def _cli(capsys: pytest.CaptureFixture[str], project: Path, *args: str) -> tuple[int, str, str]:
    code = main(["-C", str(project), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_gc_is_a_dry_run_by_default_showing_what_it_frees_and_what_it_leaves(
    scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, scripted, "runs", "gc", "--older-than", "30d")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        "would remove the files of 2 runs created more than 30d ago (a dry run: nothing is "
        "removed):"
    )
    assert [line.split()[:2] for line in lines[2:4]] == [[OLD, "succeeded"], [BEST, "succeeded"]]
    assert lines[2].endswith(" 2.0 MB") and lines[3].endswith(" 1.0 MB"), lines
    assert lines[4].startswith(f"left {POD}: pod k3x9 (booting) of run {POD} may still exist")
    assert lines[4].endswith(
        f"`overbrainer pod rm {POD}` deletes it and waits until Runpod no longer shows it, "
        "then remove the run"
    )
    assert lines[5].startswith("would free 3.0 MB; `overbrainer runs gc --older-than 30d --delete`")
    for run_id in (OLD, BEST, POD):
        assert (scripted / "runs" / run_id / "output").is_dir()


def test_gc_delete_keeps_the_best_and_removes_the_rest_recording_each(
    scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (scripted / "runs" / f"{REMOVING_PREFIX}{STRAY}").mkdir()  # a removal cut short
    args = ("runs", "gc", "--older-than", "30d", "--keep-best", "1")
    code, out, _ = _cli(capsys, scripted, *args)
    assert f"left {BEST}: among the 1 best (--keep-best)" in out.splitlines()
    assert "--keep-best 1 --delete" in out
    code, out, err = _cli(capsys, scripted, *args, "--delete")
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"removed runs/{OLD}/ (2.0 MB freed)")
    assert out.splitlines()[-1] == (
        "freed 2.0 MB in 1 run; their events stay (`overbrainer runs ls --all` lists them)"
    )
    assert sorted(p.name for p in (scripted / "runs").iterdir()) == sorted([BEST, POD, STRAY])
    code, out, _ = _cli(capsys, scripted, "events", OLD, "--json")
    assert [json.loads(line)["event"] for line in out.splitlines()][-1] == "run.FilesRemoved"
    code, out, _ = _cli(capsys, scripted, "runs", "ls", "--json")
    assert [json.loads(line)["id"] for line in out.splitlines()] == [BEST, POD]
    code, out, _ = _cli(capsys, scripted, "runs", "ls", "--all", "--json")
    rows = {json.loads(line)["id"]: json.loads(line)["files_removed"] for line in out.splitlines()}
    assert rows == {OLD: True, BEST: False, POD: False}
    # Done: the next collection finds nothing more to remove but what it leaves.
    code, out, _ = _cli(capsys, scripted, *args, "--delete")
    assert "removed" not in out and f"left {BEST}" in out and f"left {POD}" in out
    assert out.splitlines()[-1] == (
        "no other run's files to remove: those created more than 30d ago are left"
    )
    code, out, _ = _cli(capsys, scripted, "runs", "gc", "--older-than", "100w")
    assert (code, out) == (
        0,
        "no run's files to remove: none whose files are here was created more than 100w ago\n",
    )


def test_rm_finishes_a_removal_cut_short_and_refuses_a_run_whose_pod_may_bill(
    scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A process killed between the record and the removal left the directory.
    store = RunStore(None, scripted, Actor.here("test script"))
    try:
        store.append(OLD, lambda _s: [ev.FilesRemoved(bytes=2_000_000)])
    finally:
        store.close()
    assert (scripted / "runs" / OLD).is_dir()
    code, out, err = _cli(capsys, scripted, "runs", "rm", OLD, POD)
    assert code == 1
    assert not (scripted / "runs" / OLD).exists()
    assert out.startswith(f"removed runs/{OLD}/ (") and "the rest of a removal cut short" in out
    assert err.strip().startswith(f"error: not removed: pod k3x9 (booting) of run {POD}")
    assert (scripted / "runs" / POD / "output").is_dir()
    code, out, err = _cli(capsys, scripted, "events", OLD, "--json")
    assert [json.loads(line)["event"] for line in out.splitlines()].count("run.FilesRemoved") == 1


def test_gc_refuses_a_span_it_cannot_read(
    scripted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, scripted, "runs", "gc", "--older-than", "soon")
    assert code == 2
    assert "--older-than takes a whole number of hours, days or weeks, like 12h, 7d or 30d" in err
