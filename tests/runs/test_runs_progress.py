"""Live progress of a run in progress in ``runs ls`` and ``runs show`` (step, percent, loss,
ETA) with no network: from a local job's own metrics file, from what the command following
a remote job saw, else from what the log recorded; ``runs ls --state`` and ``--last``."""

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from overbrainer.events.aggregate import RunLog, RunView
from overbrainer.projections.live import (
    PROGRESS_FILE,
    SEEN_FILE,
    LiveFiles,
    Standing,
    pace_eta,
    standing,
    standing_text,
)
from overbrainer.train.metrics import MetricsEvent, MetricsSummary
from tests.runs.conftest import Project
from tests.runs.ssh_project import SshProject, ssh_project

__all__ = ["ssh_project"]

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _log(step: int, time_: float, loss: float = 1.0, total: int = 100) -> MetricsEvent:
    return MetricsEvent(event="log", time=time_, step=step, max_steps=total, loss=loss)


@pytest.mark.parametrize(
    ("events", "eta"),
    [
        ([MetricsEvent(event="begin", time=0.0, max_steps=100), _log(10, 20.0)], 180.0),
        ([_log(10, 100.0), _log(30, 140.0)], 140.0),  # a tail without begin: its own pace
        ([_log(10, 100.0)], None),  # one point tells no pace
        ([_log(10, 100.0), _log(20, 90.0)], None),  # a clock going backwards
        ([_log(10, 0.0, total=0), _log(20, 10.0, total=0)], None),  # no maximum
        ([MetricsEvent(event="begin", time=0.0, max_steps=10), _log(10, 50.0, total=10)], 0.0),
    ],
)
def test_the_eta_is_the_pace_so_far(events: list[MetricsEvent], eta: float | None) -> None:
    assert pace_eta(events) == eta


def test_an_eta_counts_down_from_when_it_was_seen_and_a_stale_one_is_not_shown() -> None:
    summary = MetricsSummary().with_events([_log(30, 10.0, loss=1.2345)])
    seen = Standing(summary, eta_seconds=190.0, seen_at=NOW)
    assert seen.eta_at(NOW + timedelta(seconds=10)) == 180.0
    assert seen.eta_at(NOW + timedelta(seconds=400)) is None  # older than five minutes
    assert seen.eta_at(NOW + timedelta(hours=1)) is None
    assert standing_text(seen, NOW + timedelta(seconds=10)) == (
        "step 30/100 (30%), loss 1.234, ETA 3m00s (seen 10s ago)"
    )
    data = seen.to_json(NOW + timedelta(seconds=10))
    assert data == {
        "step": 30,
        "max_steps": 100,
        "percent": 30.0,
        "epoch": None,
        "loss": 1.2345,
        "eval_loss": None,
        "eta_seconds": 180,
        "seen_at": "2026-03-01T12:00:00Z",
    }


def _running(kind: str, metrics: dict[str, object] | None = None) -> RunLog:
    return RunLog(run=RunView(run_id="r1", state="running", kind=kind, metrics=metrics or {}))


def test_where_a_run_stands_comes_from_the_best_source_here(tmp_path: Path) -> None:
    # Only the log's recorded metrics (another checkout's run): no time, so no ETA.
    recorded = standing(_running("ssh", {"step": 3, "max_steps": 10}), tmp_path)
    assert recorded is not None and recorded.summary.step == 3 and recorded.seen_at is None
    # A remote job followed here: what the follower saw wins over the log.
    files = LiveFiles(tmp_path, mirror=True)
    begin = MetricsEvent(event="begin", time=1000.0, max_steps=10)
    files.saw([begin, _log(4, 1040.0, total=10)], MetricsSummary().with_events([begin]))
    summary = MetricsSummary().with_events([begin, _log(4, 1040.0, total=10)])
    files.saw([], summary)
    remote = standing(_running("ssh", {"step": 3, "max_steps": 10}), tmp_path)
    assert remote is not None and remote.summary.step == 4 and remote.eta_seconds == 60.0
    assert remote.seen_at is not None
    assert abs((datetime.now(UTC) - remote.seen_at).total_seconds()) < 60
    lines = (tmp_path / SEEN_FILE).read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["begin", "log"]
    # A second follower (attach) reads the file from its start: the copy starts afresh.
    LiveFiles(tmp_path, mirror=True).saw([begin], MetricsSummary().with_events([begin]))
    assert len((tmp_path / SEEN_FILE).read_text().splitlines()) == 1
    # A job on this machine: its own metrics file, whatever a follower wrote.
    (tmp_path / "metrics.jsonl").write_text(
        "".join(e.to_line() for e in [begin, _log(8, 1080.0, loss=0.5, total=10)])
    )
    local = standing(_running("local"), tmp_path)
    assert local is not None and local.summary.step == 8 and local.eta_seconds == 20.0
    # An ended run: what its log recorded.
    ended = RunLog(run=RunView(run_id="r1", state="succeeded", kind="local", metrics={"step": 10}))
    done = standing(ended, tmp_path)
    assert done is not None and done.summary.step == 10 and done.seen_at is None


def test_a_follower_that_cannot_write_loses_only_its_cache(tmp_path: Path) -> None:
    (tmp_path / PROGRESS_FILE).mkdir()  # a directory where the file goes: every write fails
    files = LiveFiles(tmp_path / "missing", mirror=True)
    files.saw([_log(1, 1.0)], MetricsSummary().with_events([_log(1, 1.0)]))  # no error
    LiveFiles(tmp_path, mirror=False).saw(
        [_log(1, 1.0)], MetricsSummary().with_events([_log(1, 1.0)])
    )


def _wait(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _ls_rows(project: Project, *args: str) -> list[dict[str, object]]:
    done = project.run("runs", "ls", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_runs_ls_and_show_follow_a_local_run_in_progress(project: Project) -> None:
    first = project.run("train")
    assert first.returncode == 0, first.stderr
    failed = project.run("train", FAKE_AXOLOTL_EXIT="3")
    assert failed.returncode == 1
    train = project.start("train", FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0.05")
    try:
        run_id = project.wait_for_state("running")

        def some_steps() -> bool:
            rows = _ls_rows(project, "--state", "running")
            return bool(rows) and isinstance(rows[0]["step"], int) and rows[0]["step"] >= 3

        _wait(some_steps)
        (row,) = _ls_rows(project, "--state", "running")
        assert row["id"] == run_id and row["max_steps"] == 400
        assert isinstance(row["percent"], float) and 0 < row["percent"] < 100
        assert isinstance(row["loss"], float)
        assert isinstance(row["eta_seconds"], int) and 0 < row["eta_seconds"] < 60
        table = project.run("runs", "ls")
        assert table.stdout.splitlines()[0].split() == [
            "RUN", "STATE", "TARGET", "CREATED", "PROGRESS", "LOSS", "ETA", "POD", "SPEND",
        ]  # fmt: skip
        line = next(text for text in table.stdout.splitlines() if text.startswith(run_id))
        assert "/400 (" in line and "running" in line
        assert line.split()[-1].endswith("s")  # the ETA, as 41s or 1m05s
        shown = project.run("runs", "show", run_id[-4:])
        assert shown.returncode == 0, shown.stderr
        progress = shown.stdout.splitlines()[1]
        assert progress.startswith("  progress   step ") and "/400 (" in progress
        assert ", ETA " in progress and "ago)" in progress
        data = json.loads(project.run("runs", "show", run_id, "--json").stdout)
        assert data["progress"]["max_steps"] == 400
        # --state and --last
        states = [r["state"] for r in _ls_rows(project)]
        assert states == ["succeeded", "failed", "running"]
        assert [r["state"] for r in _ls_rows(project, "--last", "2")] == ["failed", "running"]
        assert [r["state"] for r in _ls_rows(project, "--state", "failed")] == ["failed"]
        both = _ls_rows(project, "--state", "failed", "--state", "succeeded")
        assert [r["state"] for r in both] == ["succeeded", "failed"]
        none = project.run("runs", "ls", "--state", "cancelled")
        assert none.stdout == "" and "no run matches" in none.stderr
        bad = project.run("runs", "ls", "--last", "0")
        assert bad.returncode == 2
    finally:
        train.kill()
        train.communicate(timeout=30)
    cancel = project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr


def test_runs_ls_shows_what_the_follower_of_a_remote_job_saw(ssh_project: SshProject) -> None:
    ssh_project.knobs(FAKE_AXOLOTL_STEPS="400", FAKE_AXOLOTL_STEP_SECONDS="0.05")
    train = ssh_project.start("train")
    try:
        run_id = ssh_project.wait_for_state("running")
        run_dir = ssh_project.path / "runs" / run_id

        def some_steps() -> bool:
            try:
                data = json.loads((run_dir / PROGRESS_FILE).read_text())
            except (OSError, ValueError):
                return False
            return int(data["summary"].get("step") or 0) >= 3

        _wait(some_steps)
        assert not (run_dir / "metrics.jsonl").exists()  # the job's own file is remote
        (row,) = _ls_rows(ssh_project, "--state", "running")
        assert isinstance(row["step"], int) and row["step"] >= 3 and row["max_steps"] == 400
        assert isinstance(row["eta_seconds"], int) and row["seen_at"]
        seen = [json.loads(line) for line in (run_dir / SEEN_FILE).read_text().splitlines()]
        assert seen[0]["event"] == "begin" and seen[-1]["step"] >= 3
    finally:
        train.kill()
        train.communicate(timeout=30)
    cancel = ssh_project.run("train", "cancel", run_id)
    assert cancel.returncode == 0, cancel.stderr
