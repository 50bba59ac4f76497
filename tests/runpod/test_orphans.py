"""Every pod of the account classified against the store's runs, with no I/O."""

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.runpod.models import parse_pod
from overbrainer.runpod.orphans import Note, classify, orphan_warnings, rows

RUN = "20260101-100000-aaaa"
T = "2026-01-01T10:00:00Z"


def _pod(pod_id: str, run: str | None = RUN, name: str | None = None, cost: float = 0.5):
    env = {"OVERBRAINER_RUN": run} if run else {}
    return parse_pod(
        {
            "id": pod_id,
            "name": name or f"overbrainer-{run}-1",
            "status": "RUNNING",
            "env": env,
            "costPerHr": cost,
            "cost": cost,
        }
    )


def _state(*events: ev.Event) -> RunLog:
    base: list[ev.Event] = [
        ev.RunCreated(run_id=RUN, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"),
        ev.AttemptSent(n=1, pod_name=f"overbrainer-{RUN}-1", gpu_type="A40", deadline=T),
        ev.AttemptResolved(n=1, result="created", pod_id="p1"),
        ev.PodCreated(pod_id="p1", gpu_type="A40", cost_per_hour=0.5),
    ]
    return fold((e, T) for e in [*base, *events])


def test_each_kind_of_pod_gets_its_note() -> None:
    starting = _state()
    running = _state(
        ev.PodReady(pod_id="p1", verdict="ready"),
        ev.JobStarted(job_dir="r", pid=5),
        ev.PodJobRunning(pod_id="p1"),
    )
    assert classify(_pod("p1"), starting) is Note.in_progress
    assert classify(_pod("p1"), running) is Note.in_progress
    ended = _state(ev.JobStarted(job_dir="r", pid=5), ev.RunEnded(state="succeeded"))
    assert classify(_pod("p1"), ended) is Note.ended_not_deleted
    kept = _state(
        ev.JobStarted(job_dir="r", pid=5),
        ev.PodJobRunning(pod_id="p1"),
        ev.RunEnded(state="succeeded"),
        ev.PodKept(pod_id="p1"),
    )
    assert classify(_pod("p1"), kept) is Note.kept
    waiting = _state(ev.JobStarted(job_dir="r", pid=5), ev.AwaitingRetrieval(pod_id="p1"))
    assert classify(_pod("p1"), waiting) is Note.awaiting_retrieval
    stray = _state(ev.StrayRecorded(pod_id="dup", reason="duplicate"))
    assert classify(_pod("dup"), stray) is Note.stray
    assert classify(_pod("unrecorded"), starting) is Note.stray
    deleted = _state(ev.PodDeleting(pod_id="p1", reason="retrieved"))
    assert classify(_pod("p1"), deleted) is Note.ended_not_deleted
    assert classify(_pod("p1"), None) is Note.not_in_store
    assert classify(_pod("x", run=None, name="overbrainer-foo"), None) is Note.no_marker


def test_rows_skip_foreign_pods_and_add_recorded_pods_the_listing_lacks() -> None:
    state = _state()
    foreign = parse_pod({"id": "mine", "name": "my-notebook", "status": "RUNNING", "env": {}})
    found = rows(
        [foreign, _pod("dup")], lambda run: state if run == RUN else None, recorded={RUN: state}
    )
    assert [(r.pod_id, r.note) for r in found] == [("dup", Note.stray), ("p1", Note.gone)]


def test_orphan_warnings_name_only_the_pods_nothing_will_delete() -> None:
    state = _state()
    found = rows(
        [_pod("p1"), _pod("dup"), _pod("x", run=None, name="overbrainer-x")],
        lambda run: state if run == RUN else None,
    )
    warnings = orphan_warnings(found)
    assert len(warnings) == 2
    assert warnings[0] == (
        f"pod dup of run {RUN} ($0.50/h) is stray: nothing will delete it; "
        f"remove it with `overbrainer pod rm {RUN} --force`"
    )
    assert "pod x named like overbrainer's" in warnings[1]
    assert "the Runpod console" in warnings[1]


def test_a_marker_that_is_not_a_run_id_counts_as_no_marker() -> None:
    hostile = _pod("h", run="../../etc")
    assert classify(hostile, None) is Note.no_marker
