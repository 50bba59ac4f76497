"""The first line of ``train attach``: the run, its target, and where it stands."""

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold

AT = "2026-01-01T10:00:00Z"
CREATED = ev.RunCreated(
    run_id="20260101-100000-abcd",
    target="box",
    kind="ssh",
    remote_dir="ob/runs/x",
    settings_digest="d",
)
STARTED = ev.JobStarted(job_dir="ob/runs/x", pid=4242)
DETACHED = ev.Detached(
    metrics={"step": 12, "max_steps": 32, "epoch": 0.375, "loss": 2.3456789, "lines": 14}
)


@pytest.mark.parametrize(
    ("events", "header"),
    [
        (
            [CREATED, STARTED],
            "attach: run 20260101-100000-abcd on target box (ssh): running; "
            f"job pid 4242 since {AT}",
        ),
        (
            [CREATED, STARTED, DETACHED],
            "attach: run 20260101-100000-abcd on target box (ssh): running; "
            f"job pid 4242 since {AT}; last recorded step 12/32, epoch 0.38, loss 2.346",
        ),
        (
            [CREATED, STARTED, ev.NoteAdded(note="artifacts not retrieved: connection lost")],
            "attach: run 20260101-100000-abcd on target box (ssh): running; "
            f"job pid 4242 since {AT}; results not home yet (connection lost)",
        ),
        (
            [CREATED, STARTED, ev.NoteAdded(note="some other note")],
            "attach: run 20260101-100000-abcd on target box (ssh): running; "
            f"job pid 4242 since {AT}; some other note",
        ),
        (
            [
                ev.RunCreated(
                    run_id="20260101-100000-abcd",
                    target="gpu",
                    kind="runpod",
                    remote_dir="/workspace/overbrainer/runs/x",
                    settings_digest="d",
                ),
                ev.PodCreated(pod_id="pod123", gpu_type="NVIDIA A40", cost_per_hour=0.4),
                STARTED,
            ],
            "attach: run 20260101-100000-abcd on target gpu (runpod): running; "
            f"job pid 4242 since {AT}; pod pod123 (booting)",
        ),
    ],
)
def test_attach_header(events: list[ev.Event], header: str) -> None:
    from overbrainer.projections.summary import attach_header

    assert attach_header(fold((event, AT) for event in events)) == header
