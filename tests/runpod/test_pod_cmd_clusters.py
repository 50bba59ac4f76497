"""``pod ls`` and ``pod rm`` with clusters: each cluster listed with its members beneath it,
classified by the run its name carries; ``pod rm RUN`` deleting a run's cluster through the
delete module and waiting until none of its pods is listed. On trio's MockClock against the
fake API in-process (the real commands: ``test_pod_cmd.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.runpod.client import CreateCluster
from overbrainer.runpod.models import Cluster
from overbrainer.runpod.orphans import ClusterRow, Note, Row, member_rank
from overbrainer.runpod.pod_scripts import RUN_MARKER
from overbrainer.targets.runpod.delete import ClusterDeleteUnconfirmed, delete_cluster
from overbrainer.targets.runpod.podrm import (
    deleted_line,
    list_rows,
    member_refusal,
    remove_run_pods,
    row_json,
    table,
    warn_orphans,
)
from overbrainer.testing.fake_executor import PINNED_IMAGE, MachinePlan, PodRig
from overbrainer.testing.pod_training import JobScript, training

A40 = "NVIDIA A40"
ROOT = Path(__file__).resolve().parents[2]
STRANGER = "20250505-050505-beef"  # a run ID no store here knows
FOREVER = 10**9


def spec(run_id: str, nodes: int = 2, attempt: int = 1) -> CreateCluster:
    """A cluster named like run ``run_id``'s pods, its members carrying the run's marker."""
    return CreateCluster(
        name=f"overbrainer-{run_id}-{attempt}",
        image=PINNED_IMAGE,
        gpu_type=A40,
        gpus_per_pod=1,
        pod_count=nodes,
        disk_gb=20,
        env={RUN_MARKER: run_id},
    )


async def new_cluster(rig: PodRig, run_id: str, nodes: int = 2) -> Cluster:
    """A cluster of run ``run_id`` created behind the log's back (no machines for it)."""
    for index in range(len(rig.fake.pods), len(rig.fake.pods) + nodes):
        rig.plans[index] = MachinePlan(no_machine=True)
    return await rig.context.client.create_cluster(spec(run_id, nodes))


async def ended_run(rig: PodRig) -> str:
    run_id = await rig.new_run()
    await rig.journal.append(run_id, [ev.RunEnded(state="failed", message="boom")])
    return run_id


async def live_and_ended(rig: PodRig) -> tuple[str, Cluster, str, Cluster]:
    """A run in progress and an ended run, each with a 2-node cluster."""
    live, ended = await rig.new_run(), await ended_run(rig)
    return live, await new_cluster(rig, live), ended, await new_cluster(rig, ended)


async def stray_cluster(rig: PodRig) -> tuple[str, Cluster, list[str]]:
    """An ended run, its 2-node cluster left behind, and the members' ids by rank (assigned
    a minute on)."""
    ended = await ended_run(rig)
    cluster = await new_cluster(rig, ended)
    await trio.sleep(60)
    return ended, cluster, await members_of(rig, cluster)


async def members_of(rig: PodRig, cluster: Cluster) -> list[str]:
    """The cluster's member pods' ids, by rank."""
    members = await rig.context.client.cluster_pods(cluster.id)
    assert members is not None
    return [pod.id for pod in members]


async def listed_ids(rig: PodRig) -> set[str]:
    return {p.id for p in await rig.context.client.list_pods(include_cluster_pods=True)}


# --- pod ls ----------------------------------------------------------------------------


async def test_pod_ls_shows_each_cluster_with_its_members_classified_by_its_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        live, running, ended, stray = await live_and_ended(rig)
        foreign = await new_cluster(rig, STRANGER)
        await trio.sleep(60)  # ranks assigned, every member running

        found = await list_rows(rig.context, await rig.journal.may_bill())
        # Every member shows under its cluster, never as a pod of its own.
        assert not [row for row in found if isinstance(row, Row)]
        clusters = {row.cluster_id: row for row in found if isinstance(row, ClusterRow)}
        assert {c: (row.run_id, row.note) for c, row in clusters.items()} == {
            running.id: (live, Note.in_progress),
            stray.id: (ended, Note.ended_not_deleted),
            foreign.id: (STRANGER, Note.not_in_store),
        }
        row = clusters[stray.id]
        assert [p.id for p in row.members] == await members_of(rig, stray)
        assert [member_rank(p) for p in row.members] == [0, 1]
        origin = rig.store.origin(ended)
        assert origin is not None
        assert row.started_by == f"{origin.actor['user']}@{origin.actor['host']}"
        assert clusters[foreign.id].started_by is None

        data = row_json(row)
        assert (data["run"], data["pod"], data["cluster"]) == (ended, None, stray.id)
        assert (data["gpu"], data["gpus_per_pod"], data["nodes"]) == (A40, 1, 2)
        assert data["status"] == "RUNNING" and data["note"] == "ended but not deleted"
        assert data["cost_per_hour"] == pytest.approx(0.80)
        assert isinstance(data["created"], str) and data["created"].endswith("Z")
        assert data["members"] == [
            {"pod": p.id, "rank": rank, "status": "RUNNING", "cost_per_hour": pytest.approx(0.4)}
            for rank, p in enumerate(row.members)
        ]
        json.dumps(data)  # printable as one JSON line

        text = table(found).splitlines()
        at = next(i for i, line in enumerate(text) if f"cluster {stray.id}" in line)
        assert text[at].startswith(f"{ended}  cluster {stray.id}  RUNNING  {A40}  0.80")
        assert text[at].endswith("ended but not deleted")
        for rank, pod in enumerate(row.members):
            member = text[at + 1 + rank]
            assert member.split() == [pod.id, "RUNNING", "0.40", "rank", str(rank)]
        # Listing deletes nothing.
        assert not [r for r in rig.fake.requests if r.method == "DELETE"]


async def test_trains_warning_counts_a_stray_cluster_from_a_listing_without_members(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        _, _, ended, stray = await live_and_ended(rig)
        await trio.sleep(60)
        a, b = await members_of(rig, stray)

        # As train's preflight lists: the account's pods, without clusters' members.
        await warn_orphans(rig.context, await rig.context.client.list_pods())
        warnings = [line for line in rig.err.getvalue().splitlines() if "warning:" in line]
        assert warnings == [
            f"warning: cluster {stray.id} (pods {a}, {b}) of run {ended} ($0.80/h) is ended but "
            f"not deleted: nothing will delete it; remove it with `overbrainer pod rm {ended} "
            "--force`"
        ]


# --- the delete --------------------------------------------------------------------------


async def test_pod_rm_deletes_the_runs_cluster_and_waits_until_none_of_its_pods_is_listed(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        _, running, ended, stray = await live_and_ended(rig)
        await trio.sleep(3600)
        members = await members_of(rig, stray)
        rig.fake.linger_next_cluster_delete(4)  # its members still listed for a few reads
        start = trio.current_time()

        removal = await remove_run_pods(rig.context, ended, force=False)
        assert removal.deleted == () and removal.problems() == []
        (gone,) = removal.clusters
        assert (gone.cluster_id, gone.pod_ids, gone.gone_already) == (
            stray.id,
            tuple(members),
            False,
        )
        assert gone.uptime_seconds is not None and 3600 <= gone.uptime_seconds < 3700
        assert gone.spend == pytest.approx(2 * 0.40 * gone.uptime_seconds / 3600, rel=1e-3)
        assert deleted_line(ended, gone) == (
            f"pod rm: deleted cluster {stray.id} of run {ended} (pods {', '.join(members)}) "
            "after 1h00m, spend $0.80"
        )
        # It waited until no member was listed, and not much longer.
        assert not set(members) & await listed_ids(rig)
        assert trio.current_time() - start < 60
        assert [c.id for c in rig.fake.live_clusters()] == [running.id]
        # One DELETE /clusters/{id}, as published: no body, no query, answered 204; no
        # member deleted through the pod endpoints (Runpod refuses it).
        (sent,) = [r for r in rig.fake.requests if r.method == "DELETE"]
        assert (sent.path, sent.json, sent.query, sent.status) == (
            f"/clusters/{stray.id}",
            None,
            {},
            204,
        )
        assert [r.query for r in rig.fake.requests if r.path == "/pods" and r.time > sent.time][
            -1
        ] == {"includeClusterPods": "true"}

        found = await list_rows(rig.context, await rig.journal.may_bill())
        assert [row.cluster_id for row in found if isinstance(row, ClusterRow)] == [running.id]
        again = await remove_run_pods(rig.context, ended, force=False)
        assert again.removed == () and again.problems() == []


async def test_a_cluster_delete_never_confirmed_fails_naming_the_cluster_its_pods_and_the_fix(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        ended, stray, (a, b) = await stray_cluster(rig)
        rig.fake.linger_next_cluster_delete(FOREVER)
        start = trio.current_time()

        with pytest.raises(ClusterDeleteUnconfirmed) as caught:
            await delete_cluster(rig.context, ended, stray.id)
        assert 60 <= trio.current_time() - start < 70
        assert str(caught.value) == (
            f"cluster {stray.id} of run {ended} (pods {a}, {b}) ($0.80/h) was deleted, but "
            f"Runpod still showed its pods {a}, {b} 60 s later; it may still bill: check "
            f"`overbrainer pod ls` and remove it with `overbrainer pod rm {ended}`"
        )
        assert caught.value.cluster_id == stray.id and caught.value.pod_ids == (a, b)
        assert caught.value.run_id == ended


async def test_pod_rm_says_so_when_runpod_keeps_showing_the_cluster_or_refuses_its_delete(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        ended, stray, (a, b) = await stray_cluster(rig)

        # Accepted, yet nothing deleted: the cluster itself still answers.
        rig.fake.fail_next("DELETE /clusters/{id}", 204)
        removal = await remove_run_pods(rig.context, ended, force=False)
        assert removal.clusters == ()
        assert removal.problems() == [
            f"cluster {stray.id} of run {ended} (pods {a}, {b}) ($0.80/h) was deleted, but "
            f"Runpod still showed the cluster and its pods {a}, {b} 60 s later; it may still "
            f"bill: check `overbrainer pod ls` and remove it with `overbrainer pod rm {ended}`"
        ]

        rig.fake.fail_next("DELETE /clusters/{id}", 500, times=50)
        removal = await remove_run_pods(rig.context, ended, force=False)
        (problem,) = removal.problems()
        assert problem.startswith(f"cannot delete cluster {stray.id} of run {ended} (pods {a}, ")
        assert problem.endswith(f"`overbrainer pod rm {ended}`")
        assert [c.id for c in rig.fake.live_clusters()] == [stray.id]

        rig.fake.faults.clear()  # the failures the client's retries left unused
        removal = await remove_run_pods(rig.context, ended, force=False)
        assert [c.cluster_id for c in removal.clusters] == [stray.id]
        assert rig.fake.live_clusters() == []


async def test_pod_rm_keeps_the_cluster_of_a_run_in_progress_unless_forced(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=600))
        pod_id = t.pod_id(run_id)
        cluster = await new_cluster(t.rig, run_id)

        removal = await remove_run_pods(t.rig.context, run_id, force=False)
        assert removal.kept_clusters == (cluster.id,) and removal.clusters == ()
        assert removal.problems() == [
            f"run {run_id} is in progress on pod {pod_id} ($0.40/h) and cluster {cluster.id}: "
            f"kept them (its other pods deleted: none). Stop the run with `overbrainer train "
            f"cancel {run_id}`, or delete its pod anyway with `overbrainer pod rm {run_id} "
            "--force`"
        ]
        assert [c.id for c in t.rig.fake.live_clusters()] == [cluster.id]

        removal = await remove_run_pods(t.rig.context, run_id, force=True)
        assert [c.cluster_id for c in removal.clusters] == [cluster.id]
        assert [d.pod_id for d in removal.deleted] == [pod_id]
        assert t.rig.fake.live_clusters() == []


async def test_pod_rm_force_of_a_run_not_in_the_store_deletes_its_cluster(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        cluster = await new_cluster(t.rig, STRANGER)
        with pytest.raises(OverbrainerError, match="is not in this store"):
            await remove_run_pods(t.rig.context, STRANGER, force=False)
        assert [c.id for c in t.rig.fake.live_clusters()] == [cluster.id]
        removal = await remove_run_pods(t.rig.context, STRANGER, force=True)
        assert [c.cluster_id for c in removal.clusters] == [cluster.id]
        assert t.rig.fake.live_clusters() == []


async def test_a_members_pod_id_is_refused_naming_its_cluster_and_the_command(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        rig = t.rig
        ended = await ended_run(rig)
        cluster = await new_cluster(rig, ended)
        member, _ = await members_of(rig, cluster)
        assert await member_refusal(rig.context, member) == (
            f"pod {member} is a member of cluster {cluster.id} of run {ended}: a cluster's "
            f"pods are deleted only with their cluster; delete the cluster with `overbrainer "
            f"pod rm {ended}`"
        )
        rig.plans[len(rig.fake.pods)] = MachinePlan(no_machine=True)
        alone = await rig.create_pod(f"overbrainer-{ended}-2", ended)
        assert await member_refusal(rig.context, alone.id) is None
        assert await member_refusal(rig.context, "nosuchpod") is None
