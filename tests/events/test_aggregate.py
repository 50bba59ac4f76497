"""The aggregate's fold refuses every event that cannot follow the run's state, one row per
rule: a command that re-decides after a concurrent append never records a transition
twice, nor one that contradicts the log."""

import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import InvalidTransition, RunLog, fold
from overbrainer.events.types import PodState, RunState

AT = "2026-01-01T00:00:00.000000Z"

CREATED = ev.RunCreated(
    run_id="20260101-000000-ab12",
    target="gpu",
    kind="runpod",
    remote_dir="runs/x",
    settings_digest="d",
)
STARTED = ev.JobStarted(job_dir="runs/x", pid=42)
FAILED = ev.RunEnded(state=RunState.failed, message="boom")
SENT = ev.AttemptSent(n=1, pod_name="overbrainer-x-1", gpu_type="A40")
POD = ev.PodCreated(pod_id="p1", gpu_type="A40")
CLUSTER = ev.ClusterCreated(cluster_id="c1", pod_id="p1", nodes=2, gpus_per_node=1)


@dataclass(frozen=True, kw_only=True)
class Unknown(ev.Event):
    """An event type the fold has no rule for."""

    name: ClassVar[str] = "test.Unknown"


def log(*events: ev.Event) -> RunLog:
    return fold((event, AT) for event in events)


@pytest.mark.parametrize(
    ("before", "event", "refusal"),
    [
        pytest.param((), STARTED, "run.JobStarted before run.Created", id="before-created"),
        pytest.param((CREATED,), CREATED, "already exists", id="created-twice"),
        pytest.param(
            (CREATED, STARTED), STARTED, "job started while the run is running", id="job-twice"
        ),
        pytest.param(
            (CREATED, FAILED), STARTED, "job started while the run is failed", id="job-after-end"
        ),
        pytest.param((CREATED, FAILED), FAILED, "run already failed", id="ended-twice"),
        pytest.param(
            (CREATED,),
            ev.RunEnded(state="running"),
            "running is not a final state",
            id="end-not-final",
        ),
        pytest.param(
            (CREATED,),
            ev.RunEnded(state="exploded"),
            "exploded is not a final state",
            id="end-unknown",
        ),
        pytest.param(
            (CREATED, STARTED),
            ev.Interrupted(stage="x"),
            "interrupted before the job, but the job had started",
            id="interrupted-after-start",
        ),
        pytest.param(
            (CREATED,),
            ev.Detached(),
            "detached from a run that is preparing",
            id="detached-preparing",
        ),
        pytest.param(
            (CREATED, STARTED, FAILED),
            ev.Detached(),
            "detached from a run that is failed",
            id="detached-ended",
        ),
        pytest.param(
            (CREATED, STARTED),
            SENT,
            "a pod is created only before the job starts",
            id="attempt-running",
        ),
        pytest.param(
            (CREATED, SENT),
            SENT,
            "attempt 1 while pod None is creating",
            id="attempt-while-creating",
        ),
        pytest.param(
            (CREATED, SENT, POD), SENT, "attempt 1 while pod p1 is created", id="attempt-while-pod"
        ),
        pytest.param(
            (CREATED,),
            ev.AttemptResolved(n=3, result="created"),
            "attempt 3 was never sent",
            id="resolved-unsent",
        ),
        pytest.param(
            (CREATED, SENT, POD),
            ev.EndpointSeen(pod_id="p2", host="h", port=22, user="root"),
            "endpoint for pod p2, not the run's pod p1",
            id="endpoint-other-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD),
            ev.PodReady(pod_id="p2", verdict="ready"),
            "ready for pod p2, not the run's pod p1",
            id="ready-other-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD, STARTED),
            ev.PodJobRunning(pod_id="p2"),
            "job running for pod p2, not the run's pod p1",
            id="job-running-other-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD, STARTED),
            ev.AwaitingRetrieval(pod_id="p2"),
            "awaiting retrieval for pod p2, not the run's pod p1",
            id="awaiting-other-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD, STARTED),
            ev.PodKept(pod_id="p2"),
            "kept for pod p2, not the run's pod p1",
            id="kept-other-pod",
        ),
        pytest.param(
            (CREATED,),
            ev.PodReady(pod_id="p1", verdict="ready"),
            "ready for pod p1, not the run's pod None",
            id="ready-no-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD, ev.PodDeleted(pod_id="p1", by="client")),
            ev.PodDeleting(pod_id="p1", reason="requested"),
            "pod p1 is already deleted",
            id="deleting-deleted",
        ),
        pytest.param(
            (CREATED, STARTED),
            ev.CheckpointPruned(step=5, path="output/checkpoint-5"),
            "checkpoint-5 pruned, but it was never home",
            id="pruned-never-home",
        ),
        pytest.param(
            (CREATED, SENT, POD, STARTED),
            ev.VolumeAttached(
                volume_id="v1", volume_name="cache", data_center="EU-RO-1", created=False
            ),
            "a network volume is attached only before the job starts",
            id="volume-after-job",
        ),
        pytest.param(
            (CREATED, SENT),
            ev.ClusterCreated(cluster_id="c1", pod_id="p1", nodes=2, gpus_per_node=1),
            "cluster c1 is recorded with its primary pod",
            id="cluster-without-pod",
        ),
        pytest.param(
            (CREATED, SENT, POD, CLUSTER),
            ev.ClusterRanked(cluster_id="c1", members=[{"pod_id": "p1", "rank": 0}]),
            "cluster c1 has 2 nodes, not 1",
            id="cluster-ranked-short",
        ),
        pytest.param(
            (CREATED, SENT, POD),
            ev.ClusterRanked(cluster_id="c1", members=[]),
            "cluster c1 is not the run's",
            id="ranked-not-the-runs",
        ),
        pytest.param((CREATED,), Unknown(), "no rule for test.Unknown", id="no-rule"),
    ],
)
def test_the_fold_refuses(before: tuple[ev.Event, ...], event: ev.Event, refusal: str) -> None:
    state = log(*before)
    unchanged = state.to_json()
    with pytest.raises(InvalidTransition, match=re.escape(refusal)):
        state.copy().apply(event, AT)
    assert state.to_json() == unchanged


def test_checkpoints_home_the_last_is_the_highest_step_and_pruned_ones_leave() -> None:
    def home(step: int) -> ev.CheckpointRetrieved:
        return ev.CheckpointRetrieved(step=step, path=f"output/checkpoint-{step}")

    # Fetched the newest first: the last checkpoint is the highest step, not the last event.
    state = log(CREATED, STARTED, home(20), home(10))
    assert (state.run.checkpoint or {})["step"] == 20
    assert state.run.checkpoints == [10, 20]
    state = log(
        CREATED,
        STARTED,
        home(20),
        home(10),
        home(30),
        ev.CheckpointPruned(step=10, path="output/checkpoint-10"),
    )
    assert (state.run.checkpoints, state.run.pruned) == ([20, 30], [10])
    assert (state.run.checkpoint or {})["step"] == 30


def test_states_are_enums_and_survive_json() -> None:
    state = log(CREATED, SENT, POD, STARTED, ev.PodDeleting(pod_id="p1", reason="requested"))
    assert state.run.state is RunState.running
    assert state.pod.status is PodState.deleting
    assert state.pod.pods == {"p1": PodState.deleting}
    back = RunLog.from_json(state.to_json())
    assert back == state
    assert back.run.state is RunState.running and back.pod.pods["p1"] is PodState.deleting


@pytest.mark.parametrize(
    ("half", "key", "value"),
    [("run", "state", "exploded"), ("pod", "status", "on fire"), ("pod", "pods", {"p1": "?"})],
)
def test_an_unknown_state_in_json_is_refused(half: str, key: str, value: object) -> None:
    data = log(CREATED).to_json()
    data[half][key] = value
    with pytest.raises(ValueError, match="is not a valid"):
        RunLog.from_json(data)


def _bare_state_comparisons(source: str) -> list[int]:
    """Lines comparing a run's state or a pod's status with a bare string."""
    import ast

    words = {s.value for s in RunState} | {s.value for s in PodState}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        strings = [
            c
            for side in sides
            for c in (side.elts if isinstance(side, ast.Tuple | ast.Set | ast.List) else [side])
            if isinstance(c, ast.Constant) and c.value in words
        ]
        subjects = [
            side
            for side in sides
            if (isinstance(side, ast.Attribute) and side.attr in ("state", "status"))
            or (
                isinstance(side, ast.Call)
                and isinstance(side.func, ast.Attribute)
                and isinstance(side.func.value, ast.Attribute)
                and side.func.value.attr == "pods"
            )
        ]
        if strings and subjects:
            found.append(node.lineno)
    return found


def test_the_guard_finds_bare_state_strings() -> None:
    source = (
        'a = run.state == "running"\n'
        'b = pod.pods.get(x) in ("deleting", "deleted")\n'
        "c = run.state == RunState.running\n"
        'd = words[0] in ("running", "lost")\n'
    )
    assert _bare_state_comparisons(source) == [1, 2]


def test_no_run_state_or_pod_status_is_compared_as_a_bare_string() -> None:
    from pathlib import Path

    import overbrainer

    package = Path(overbrainer.__file__).parent
    wrong = [
        f"{path.relative_to(package)}:{line}"
        for path in sorted(package.rglob("*.py"))
        for line in _bare_state_comparisons(path.read_text())
    ]
    assert wrong == []


def test_a_recovery_puts_the_run_back_to_starting_a_pod_and_keeps_every_pod() -> None:
    at = "2026-01-01T00:00:00.000000Z"
    events: list[ev.Event] = [
        ev.RunCreated(run_id="r", target="gpu", kind="runpod", remote_dir="d", settings_digest="s"),
        ev.AttemptSent(n=1, pod_name="a-1", gpu_type="A40"),
        ev.PodCreated(pod_id="p1", gpu_type="A40", cost_per_hour=0.5),
        ev.JobStarted(job_dir="d", pid=1),
        ev.PodDeleted(pod_id="p1", by="found_gone", spend=0.1),
        ev.Recovering(reason="gone", attempt=1, max_recoveries=2, pod_id="p1", last_step=7),
    ]
    state = fold((e, at) for e in events)
    assert (state.run.state, state.run.job, state.run.max_recoveries) == (
        RunState.preparing,
        None,
        2,
    )
    assert state.run.recoveries[0]["lost_pod"] == "p1"
    # Only the next attempt, and only on a running run.
    with pytest.raises(InvalidTransition):
        state.copy().apply(ev.Recovering(reason="x", attempt=2, max_recoveries=2), at)
    for event in (
        ev.AttemptSent(n=2, pod_name="a-2", gpu_type="A40"),
        ev.PodCreated(pod_id="p2", gpu_type="A40", cost_per_hour=0.7),
        ev.JobStarted(job_dir="d", pid=2),
        ev.Recovered(attempt=1, pod_id="p2", resumed_step=5, lost_steps=2),
    ):
        state.apply(event, at)
    assert state.run.state == RunState.running
    assert state.pod.pod_id == "p2"  # the current pod; the lost one stays in the costs
    assert set(state.pod.costs) == {"p1", "p2"}
    assert state.run.recoveries[0] | {"at": None, "recovered_at": None} == {
        "attempt": 1,
        "reason": "gone",
        "lost_pod": "p1",
        "last_step": 7,
        "at": None,
        "pod_id": "p2",
        "resumed_step": 5,
        "lost_steps": 2,
        "recovered_at": None,
        "from_volume": False,
    }
    # A Recovered for another pod than the current one, or twice, is refused.
    with pytest.raises(InvalidTransition):
        state.copy().apply(ev.Recovered(attempt=1, pod_id="p2", resumed_step=5), at)


def test_a_cluster_is_the_runs_pods_until_a_new_pod_is_created() -> None:
    ranked = ev.ClusterRanked(
        cluster_id="c1",
        members=[{"pod_id": "p1", "rank": 0, "ip": None}, {"pod_id": "p2", "rank": 1, "ip": None}],
    )
    state = log(CREATED, SENT, POD, CLUSTER, ranked)
    assert state.pod.cluster == {
        "id": "c1",
        "nodes": 2,
        "gpus_per_node": 1,
        "members": [
            {"pod_id": "p1", "rank": 0, "ip": None},
            {"pod_id": "p2", "rank": 1, "ip": None},
        ],
    }
    gone = ev.PodDeleted(pod_id="p1", by="client")
    again = ev.AttemptSent(n=2, pod_name="overbrainer-x-2", gpu_type="A40")
    state.apply(gone, AT)
    state.apply(again, AT)
    state.apply(ev.PodCreated(pod_id="p3", gpu_type="A40"), AT)
    assert state.pod.cluster is None
