"""``runs show``'s spend line: what Runpod billed once final, else overbrainer's estimate,
marked ``~`` as ``runs ls`` marks it."""

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.projections.summary import summary_lines

CREATED = ev.RunCreated(
    run_id="20260101-100000-aaaa",
    target="gpu",
    kind="runpod",
    remote_dir="r",
    settings_digest="d",
    base_model="m",
    adapter="lora",
)
POD = [
    ev.AttemptSent(n=1, pod_name="overbrainer-a-1", gpu_type="NVIDIA A40", max_hours=2.0),
    ev.AttemptResolved(n=1, result="created", pod_id="p1"),
    ev.PodCreated(
        pod_id="p1", gpu_type="NVIDIA A40", cost_per_hour=0.4, created_at="2026-01-01T10:00:00Z"
    ),
    ev.PodDeleting(pod_id="p1", reason="retrieved"),
    ev.PodDeleted(pod_id="p1", by="client", uptime_seconds=3600.0, spend=0.4),
]


def _spend_line(*billed: ev.PodBilled) -> str:
    events = [CREATED, *POD, *billed]
    state = fold([(e, "2026-01-01T10:00:00Z") for e in events])
    (line,) = [text for text in summary_lines(state) if text.strip().startswith("spend")]
    return line.split(None, 1)[1]


def test_an_estimate_is_marked_until_runpod_billed_it_final() -> None:
    assert _spend_line() == "~$0.40 over 1h00m"
    partial = ev.PodBilled(
        pod_id="p1",
        amount=0.3,
        period_start="2026-01-01T10:00:00Z",
        period_end="2026-01-01T12:00:00Z",
        final=False,
    )
    assert _spend_line(partial).startswith("~$")
    final = ev.PodBilled(
        pod_id="p1",
        amount=0.4133,
        period_start="2026-01-01T10:00:00Z",
        period_end="2026-01-01T12:00:00Z",
        final=True,
    )
    assert _spend_line(final) == "$0.41 over 1h00m"
