"""Every pod and cluster of the account classified against the store's runs, with no I/O."""

from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.runpod.models import Pod, parse_cluster, parse_pod
from overbrainer.runpod.orphans import (
    ClusterRow,
    Note,
    classify,
    cluster_rows,
    cluster_run,
    clusters_of_run,
    orphan_warnings,
    rows,
)

RUN = "20260101-100000-aaaa"
STRANGER = "20250505-050505-beef"
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


# --- clusters ---------------------------------------------------------------------------

OTHER = "20260202-100000-bbbb"


def _member(pod_id: str, cluster_id: str, rank: int | None, run: str | None = RUN) -> Pod:
    env = {"OVERBRAINER_RUN": run} if run else {}
    return parse_pod(
        {
            "id": pod_id,
            "name": f"overbrainer-{run}-1" if run else "my-own-cluster",
            "status": "RUNNING",
            "env": env,
            "cost": 0.4,
            "cluster": {"id": cluster_id, "rank": rank},
        }
    )


def _cluster(cluster_id: str, name: str):  # type: ignore[no-untyped-def]
    return parse_cluster({"id": cluster_id, "name": name, "type": "TRAINING"})


def test_a_clusters_run_is_the_one_its_name_carries() -> None:
    assert cluster_run(f"overbrainer-{RUN}-1") == RUN
    assert cluster_run(f"overbrainer-{RUN}-12") == RUN
    assert cluster_run(f"overbrainer-{RUN}") is None  # no attempt number
    assert cluster_run(f"overbrainer-{RUN}-x") is None
    assert cluster_run("overbrainer-handmade-1") is None
    assert cluster_run(f"mine-{RUN}-1") is None
    listed = [_cluster("c1", f"overbrainer-{RUN}-1"), _cluster("c2", f"overbrainer-{OTHER}-1")]
    assert [c.id for c in clusters_of_run(RUN, listed)] == ["c1"]
    assert clusters_of_run("20990101-000000-ffff", listed) == []


def test_a_clusters_members_show_under_it_by_rank_and_never_as_pods() -> None:
    ended = _state(ev.JobStarted(job_dir="r", pid=5), ev.RunEnded(state="failed"))
    running = _state()
    states = {RUN: ended, OTHER: running}.get
    members = [
        _member("m1", "c1", 1),
        _member("m0", "c1", 0),
        _member("n0", "c2", None, run=OTHER),
        _member("n1", "c2", 0, run=OTHER),
        _member("x0", "c3", 0),  # its cluster is not in the cluster listing
        _member("f0", "c4", 0, run=None),  # a cluster that is not overbrainer's
    ]
    clusters = [
        _cluster("c1", f"overbrainer-{RUN}-1"),
        _cluster("c2", f"overbrainer-{OTHER}-2"),
        _cluster("c4", "my-own-cluster"),
        _cluster("c5", "overbrainer-handmade"),
    ]
    # The pods' rows hold only the standalone pod; a member is no row of its own.
    listed_pods = [*members, _pod("p1")]
    assert [r.pod_id for r in rows(listed_pods, states)] == ["p1"]

    found = cluster_rows(clusters, listed_pods, states)
    by_id = {row.cluster_id: row for row in found}
    assert list(by_id) == ["c1", "c2", "c5", "c3"]
    assert [p.id for p in by_id["c1"].members] == ["m0", "m1"]
    assert [p.id for p in by_id["c2"].members] == ["n1", "n0"]  # not ranked yet: last
    assert by_id["c1"].note is Note.ended_not_deleted and by_id["c1"].run_id == RUN
    assert by_id["c2"].note is Note.in_progress and by_id["c2"].run_id == OTHER
    assert by_id["c5"].note is Note.no_marker and by_id["c5"].members == ()
    # Only its members were listed: its run from their marker, and its row all the same.
    assert by_id["c3"].cluster is None and by_id["c3"].note is Note.ended_not_deleted
    assert by_id["c1"].status == "RUNNING" and by_id["c5"].status == "-"
    assert by_id["c1"].cost_per_hour == 0.8
    assert by_id["c1"].subject == "cluster c1 (pods m0, m1)"
    assert cluster_rows([_cluster("c9", f"overbrainer-{STRANGER}-1")], [], states)[0].note is (
        Note.not_in_store
    )


def test_a_cluster_whose_members_differ_shows_how_many_are_in_each_status() -> None:
    exited = parse_pod(
        {"id": "m1", "name": "x", "status": "EXITED", "cluster": {"id": "c1", "rank": 1}}
    )
    row = ClusterRow(RUN, "c1", Note.in_progress, members=(_member("m0", "c1", 0), exited))
    assert row.status == "1 EXITED, 1 RUNNING"


def test_orphan_warnings_name_a_cluster_nothing_will_delete_with_its_pods() -> None:
    ended = _state(ev.JobStarted(job_dir="r", pid=5), ev.RunEnded(state="failed"))
    live = _state()
    members = [_member("m0", "c1", 0), _member("m1", "c1", 1)]
    stray = cluster_rows([_cluster("c1", f"overbrainer-{RUN}-1")], members, lambda _: ended)
    kept = cluster_rows([_cluster("c1", f"overbrainer-{RUN}-1")], members, lambda _: live)
    assert orphan_warnings(kept) == []
    assert orphan_warnings(stray) == [
        f"cluster c1 (pods m0, m1) of run {RUN} ($0.80/h) is ended but not deleted: nothing "
        f"will delete it; remove it with `overbrainer pod rm {RUN} --force`"
    ]
