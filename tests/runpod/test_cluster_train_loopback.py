"""A run across a cluster of pods through the real ``overbrainer`` command: the fake API
on loopback makes a TRAINING cluster whose members are living fake pods (their own SSH,
bootstrap and watchdog, Runpod's cluster variables), the job runs on every node (the
stand-in torchrun joins them by their static rendezvous), rank 0's results come home
verified, and the whole cluster is deleted — also when a node fails, on a Ctrl-C before
the job, and by a node's watchdog with the laptop gone."""

import json
import signal
from pathlib import Path

import trio

from tests.runpod.test_train_loopback import World, communicate, final_line, world


def _cluster_of(w: World, run_id: str) -> dict[str, object]:
    cluster = w.pod_json(run_id)["cluster"]
    assert isinstance(cluster, dict)
    return cluster


def _members(w: World, cluster_id: str) -> list[str]:
    return [pod.id for pod in w.fake.cluster_members(cluster_id)]


def _cluster_gone(w: World, cluster_id: str) -> bool:
    """Runpod shows neither the cluster nor any of its pods."""
    statuses = {w.fake.status(pod_id) for pod_id in _members(w, cluster_id)}
    live = {cluster.id for cluster in w.fake.live_clusters()}
    return statuses == {"TERMINATED"} and cluster_id not in live


async def test_a_run_on_two_nodes_trains_on_both_brings_rank_0s_output_home_and_ends_the_cluster(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=8, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        done = await w.run("train", timeout=120)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        assert final_line(done.stdout).startswith(f"train: run {run_id} succeeded; step 8/8")
        cluster = _cluster_of(w, run_id)
        cluster_id = str(cluster["id"])
        members = cluster["members"]
        assert isinstance(members, list)
        assert [m["rank"] for m in members] == [0, 1]
        assert members[0]["pod_id"] == w.pod_json(run_id)["pod_id"]
        # The job ran on both nodes, joined as one: each node's log has its rank's lines.
        for member in members:
            log = (w.pod_run_dir(str(member["pod_id"]), run_id) / "job.log").read_text()
            assert f"[rank{member['rank']}]:" in log
        output = w.project / "runs" / run_id / "output"
        assert (output / "adapter_model.safetensors").is_file()
        assert _cluster_gone(w, cluster_id)
        deletes = [r for r in w.fake.requests if r.method == "DELETE"]
        assert [r.path for r in deletes] == [f"/clusters/{cluster_id}"]
        assert all(not r.schema_errors for r in w.fake.requests)
        names = await w.events(run_id)
        assert names[:7] == [
            "run.Created",
            "pod.KeysGenerated",
            "pod.AttemptSent",
            "pod.AttemptResolved",
            "pod.Created",
            "pod.ClusterCreated",
            "pod.EndpointSeen",
        ]
        assert "pod.ClusterRanked" in names and names[-1] == "pod.Billed"
        billed = [r for r in w.fake.requests if r.path == "/billing/clusters"]
        assert billed and billed[-1].query.get("clusterId") == cluster_id
        shown = await w.run("runs", "show", run_id, "--no-plot")
        assert f"  cluster    {cluster_id}: 2 nodes of 1 GPU" in shown.stdout.splitlines()
        # Node 1's log went with the cluster: said, with where rank 0's is.
        second = await w.run("runs", "logs", run_id, "--node", "1")
        assert second.returncode == 1
        assert "cluster is gone, and with it node 1's job log" in second.stderr


async def test_a_node_failing_mid_training_fails_the_run_naming_it_and_deletes_every_node(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=400, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        process = await w.start("train")
        run_id = await w.wait_for("job_running", timeout=60)
        cluster_id = str(_cluster_of(w, run_id)["id"])
        metrics = w.pod_run_dir(str(w.pod_json(run_id)["pod_id"]), run_id) / "metrics.jsonl"
        with trio.fail_after(30):
            while metrics.stat().st_size == 0 if metrics.exists() else True:
                await trio.sleep(0.05)
        await w.fake.fail_member(cluster_id, 1)
        out, err = await communicate(process, 120)
        assert process.returncode == 1, out + err
        assert w.run_json(run_id)["state"] == "failed"
        message = str(w.run_json(run_id)["message"])
        assert message.startswith("the job on node 1 "), message
        assert "node 1" in err
        assert _cluster_gone(w, cluster_id)


async def test_a_node_lost_once_every_node_was_ready_fails_the_run_naming_that_node(
    tmp_path: Path,
) -> None:
    # `train` held just after the nodes were recorded ranked (and ready), node 1's container
    # exits: the job's connection to it fails, and the run says which node it was.
    async with world(tmp_path, steps=8, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        paused = tmp_path / "paused"
        plan = {
            "at": "append-after pod.ClusterRanked",
            "action": "pause",
            "pause_file": str(paused),
        }
        w.env["OVERBRAINER_FAULT_PLAN"] = json.dumps(plan)
        process = await w.start("train")
        with trio.fail_after(60):
            while not paused.exists():
                await trio.sleep(0.02)
        (cluster_id,) = list(w.fake.clusters)
        await w.fake.fail_member(cluster_id, 1)
        paused.unlink()
        _out, err = await communicate(process, 120)
        assert process.returncode == 1, err
        (run_id,) = w.runs()
        message = str(w.run_json(run_id)["message"])
        assert f"node 1 of cluster {cluster_id} (primary pod " in message, message
        assert "could not be reached again" in message and "the cluster was deleted" in message
        assert f"node 1 of cluster {cluster_id}" in err
        assert _cluster_gone(w, cluster_id)


async def test_ctrl_c_before_the_job_deletes_the_whole_cluster(tmp_path: Path) -> None:
    async with world(tmp_path, provisioning_seconds=2.0) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        process = await w.start("train")
        with trio.fail_after(60):
            while not w.fake.clusters:
                await trio.sleep(0.02)
        (cluster_id,) = list(w.fake.clusters)
        process.send_signal(signal.SIGINT)
        _out, err = await communicate(process, 120)
        assert process.returncode == 130, err
        (run_id,) = w.runs()
        assert w.run_json(run_id)["state"] == "failed"
        assert _cluster_gone(w, cluster_id)
        assert [r.path for r in w.fake.requests if r.method == "DELETE"] == [
            f"/clusters/{cluster_id}"
        ]


async def test_with_the_laptop_gone_a_nodes_watchdog_deletes_the_cluster_at_its_deadline(
    tmp_path: Path,
) -> None:
    # max_hours 0.003 h = 10.8 s from the cluster's creation; the job would run far longer.
    async with world(
        tmp_path, steps=4000, step_seconds=0.05, max_hours=0.003,
        overrides={"OVERBRAINER_INTERVAL": "0.2"},
    ) as w:  # fmt: skip
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        w.env["OVERBRAINER_TARGETS__GPU__SAVE_BEFORE_DEADLINE_MINUTES"] = "0"
        process = await w.start("train", output=False)
        run_id = await w.wait_for("job_running", timeout=60)
        cluster_id = str(_cluster_of(w, run_id)["id"])
        process.kill()  # the laptop is gone: nothing of overbrainer's runs here
        await process.wait()
        with trio.fail_after(40):
            while not _cluster_gone(w, cluster_id):
                await trio.sleep(0.1)
        deletes = [r for r in w.fake.requests if r.method == "DELETE"]
        assert [r.path for r in deletes] == [f"/clusters/{cluster_id}"]
        assert deletes[0].auth != "account"  # a pod's own key: a node's watchdog
        logs = [
            (w.pod_run_dir(pod_id, run_id) / ".pod" / "watchdog.log").read_text()
            for pod_id in _members(w, cluster_id)
        ]
        assert any("deadline" in log for log in logs)


async def test_a_resume_from_a_checkpoint_of_another_shape_is_refused_before_any_cluster(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=4, step_seconds=0.05, knobs="FAKE_AXOLOTL_SAVE_EVERY=2") as w:
        done = await w.run("train", timeout=120)
        assert done.returncode == 0, done.stderr
        (source,) = w.runs()
        creates = len(w.fake.create_requests())
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        refused = await w.run("train", "--resume-from", source)
        assert refused.returncode == 1
        assert "the job would run 2 processes" in refused.stderr, refused.stderr
        assert "saved by a job of 1 process" in refused.stderr
        assert "gpu_count × nodes" in refused.stderr
        assert len(w.fake.create_requests()) == creates and not w.fake.clusters
        assert w.runs() == [source]
