"""``runs show``'s lines of a run's recoveries: one under way, one done."""

from overbrainer.events import types as ev
from overbrainer.events.aggregate import fold
from overbrainer.projections.summary import recovery_lines

AT = "2026-01-01T00:00:00.000000Z"
HEAD: list[ev.Event] = [
    ev.RunCreated(run_id="r", target="gpu", kind="runpod", remote_dir="d", settings_digest="s"),
    ev.AttemptSent(n=1, pod_name="a-1", gpu_type="A40"),
    ev.PodCreated(pod_id="p1", gpu_type="A40", cost_per_hour=0.5),
    ev.JobStarted(job_dir="d", pid=1),
    ev.PodDeleted(pod_id="p1", by="found_gone"),
    ev.Recovering(reason="pod p1 no longer exists", attempt=1, max_recoveries=3, pod_id="p1"),
]


def test_a_recovery_under_way_says_it_starts_a_new_pod() -> None:
    state = fold((e, AT) for e in HEAD)
    assert recovery_lines(state) == [
        "  recovery   1/3: pod p1 no longer exists; starting a new pod"
    ]


def test_a_recovery_done_names_its_pod_its_step_and_the_training_lost() -> None:
    tail: list[ev.Event] = [
        ev.AttemptSent(n=2, pod_name="a-2", gpu_type="A40"),
        ev.PodCreated(pod_id="p2", gpu_type="A40", cost_per_hour=0.5),
        ev.JobStarted(job_dir="d", pid=2),
        ev.Recovered(attempt=1, pod_id="p2", resumed_step=0, lost_steps=1),
    ]
    state = fold((e, AT) for e in [*HEAD, *tail])
    assert recovery_lines(state) == [
        "  recovery   1/3: pod p1 no longer exists; on pod p2 from the start, "
        "1 step of training lost"
    ]
