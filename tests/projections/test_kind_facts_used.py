"""What the projections tell of a run by the facts of its recorded target kind: its first
phase, its ``pod.json``, what its job's directory is called."""

from pathlib import Path

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.events.store import Recorded
from overbrainer.projections.compare import RunFacts
from overbrainer.projections.curves import Curves
from overbrainer.projections.files import write_projections
from overbrainer.projections.report import phases
from overbrainer.projections.summary import job_dir_label

RUN = "20260101-100000-ab12"


def _events(kind: str) -> list[tuple[ev.Event, str]]:
    created = ev.RunCreated(run_id=RUN, target="t", kind=kind, remote_dir="r", settings_digest="d")
    return [
        (created, "2026-01-01T10:00:00Z"),
        (ev.JobStarted(job_dir="r", pid=5), "2026-01-01T10:02:00Z"),
        (ev.RunEnded(state="succeeded"), "2026-01-01T10:30:00Z"),
    ]


@pytest.mark.parametrize(
    ("kind", "first", "pod_json", "label"),
    [
        ("local", "starting", False, "job dir"),
        ("ssh", "starting", False, "remote dir"),
        ("runpod", "starting its pod", True, "remote dir"),
        ("cluster", "starting", False, "remote dir"),  # a kind of a newer version
    ],
)
def test_a_run_is_told_by_its_kinds_facts(
    tmp_path: Path, kind: str, first: str, pod_json: bool, label: str
) -> None:
    events = _events(kind)
    state = fold(events)
    records = tuple(
        Recorded(run_id=RUN, seq=i + 1, at=at, actor={}, event=e)
        for i, (e, at) in enumerate(events)
    )
    assert phases(RunFacts(state, records, Curves((), ()), {}))[0][0] == first
    write_projections(tmp_path, state)
    assert (tmp_path / "runs" / RUN / "run.json").is_file()
    assert (tmp_path / "runs" / RUN / "pod.json").is_file() == pod_json
    assert job_dir_label(kind) == label
