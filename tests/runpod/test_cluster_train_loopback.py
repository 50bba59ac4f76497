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


async def _train_until_the_job_runs(
    w: World, *, output: bool = True
) -> tuple[trio.Process, str, str]:
    """``train`` on two nodes, left running once its job runs; the run and its cluster."""
    w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
    process = await w.start("train", output=output)
    run_id = await w.wait_for("job_running", timeout=60)
    return process, run_id, str(_cluster_of(w, run_id)["id"])


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
    async with world(tmp_path, steps=8, step_seconds=0.1, knobs="FAKE_AXOLOTL_SAVE_EVERY=4") as w:
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
        # Each checkpoint came home whole: node 1's part of it from node 1.
        for step in (4, 8):
            checkpoint = output / f"checkpoint-{step}"
            held = sorted(p.name for p in checkpoint.iterdir() if p.name.startswith("rng"))
            assert held == ["rng_state_0.pth", "rng_state_1.pth"], (step, held)
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
        process, run_id, cluster_id = await _train_until_the_job_runs(w)
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
        assert _cluster_gone(w, cluster_id), (
            [(pod.id, w.fake.status(pod.id)) for pod in w.fake.cluster_members(cluster_id)],
            err[-3000:],
        )


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
        process, run_id, cluster_id = await _train_until_the_job_runs(w, output=False)
        process.kill()  # the laptop is gone: nothing of overbrainer's runs here
        await process.wait()
        with trio.fail_after(40):
            while not _cluster_gone(w, cluster_id):
                await trio.sleep(0.1)
        deletes = [r for r in w.fake.requests if r.method == "DELETE"]
        # Every node's watchdog meets the same deadline: one or both may send the delete.
        assert deletes and {r.path for r in deletes} == {f"/clusters/{cluster_id}"}
        assert all(r.auth.startswith("pod:") for r in deletes)  # a node watchdog's own key
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


async def test_with_a_network_volume_every_node_saves_its_parts_there_and_they_come_home_once(
    tmp_path: Path,
) -> None:
    from tests.runpod.test_volume_checkpoints_loopback import volume_output_of
    from tests.runpod.test_volume_loopback import VOLUME

    async with world(tmp_path, steps=8, step_seconds=0.1, knobs="FAKE_AXOLOTL_SAVE_EVERY=4") as w:
        env = VOLUME | {"OVERBRAINER_TARGETS__GPU__NODES": "2"}
        done = await w.run("train", env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        cluster_id = str(_cluster_of(w, run_id)["id"])
        # Every node's output is the volume's folder of the run: rank 0's checkpoint and
        # node 1's part of it lie there together.
        on_volume = volume_output_of(w, run_id)
        for step in (4, 8):
            held = sorted(p.name for p in (on_volume / f"checkpoint-{step}").glob("rng_state_*"))
            assert held == ["rng_state_0.pth", "rng_state_1.pth"], (step, held)
        recorded = w.run_json(run_id)["volume_checkpoints"]
        assert isinstance(recorded, list)
        assert [int(c["step"]) for c in recorded] == [4, 8]
        # The last checkpoint came home whole (checkpoints_home "last" with a volume).
        home = w.project / "runs" / run_id / "output" / "checkpoint-8"
        assert sorted(p.name for p in home.glob("rng_state_*")) == [
            "rng_state_0.pth",
            "rng_state_1.pth",
        ]
        assert _cluster_gone(w, cluster_id)


async def test_a_signal_once_the_job_runs_detaches_and_attach_ends_the_cluster(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=60, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        process, run_id, cluster_id = await _train_until_the_job_runs(w)
        process.send_signal(signal.SIGTERM)
        _out, err = await communicate(process, 60)
        assert process.returncode == 143, err
        assert f"overbrainer train attach {run_id}" in err
        # Detached: the job goes on, on every node, and nothing was deleted.
        assert not _cluster_gone(w, cluster_id)
        assert [r for r in w.fake.requests if r.method == "DELETE"] == []
        # Node 1's own log, read on node 1: its rank's lines only.
        second = await w.run("runs", "logs", run_id, "--node", "1")
        assert second.returncode == 0, second.stderr
        assert "[rank1]:" in second.stdout and "[rank0]:" not in second.stdout
        attached = await w.run("train", "attach", run_id, timeout=120)
        assert attached.returncode == 0, attached.stderr
        assert w.run_json(run_id)["state"] == "succeeded"
        assert _cluster_gone(w, cluster_id)


async def test_pod_rm_of_a_detached_cluster_run_deletes_every_node(tmp_path: Path) -> None:
    async with world(tmp_path, steps=4000, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        process, run_id, cluster_id = await _train_until_the_job_runs(w)
        process.send_signal(signal.SIGINT)
        await communicate(process, 60)
        listed = await w.run("pod", "ls")
        assert cluster_id in listed.stdout, listed.stdout
        removed = await w.run("pod", "rm", run_id, "--force", timeout=120)
        assert removed.returncode == 0, removed.stderr
        assert _cluster_gone(w, cluster_id)
        assert w.pod_json(run_id)["status"] == "deleted"
        assert [r.path for r in w.fake.requests if r.method == "DELETE"] == [
            f"/clusters/{cluster_id}"
        ]


async def test_a_lost_primary_takes_its_cluster_and_the_run_recovers_on_a_new_cluster(
    tmp_path: Path,
) -> None:
    async with world(
        tmp_path, steps=400, step_seconds=0.05, knobs="FAKE_AXOLOTL_SAVE_EVERY=10"
    ) as w:
        process, run_id, first = await _train_until_the_job_runs(w)
        home = w.project / "runs" / run_id / "output"
        with trio.fail_after(60):
            while not list(home.glob("checkpoint-*")):
                await trio.sleep(0.05)
        primary = w.fake.member(first, 0)
        w.fake.vanish(primary.id)  # its machine is gone: everything in it ends
        await w.pods.on_deleted(primary)
        _out, err = await communicate(process, 180)
        assert process.returncode == 0, err
        second = str(_cluster_of(w, run_id)["id"])
        assert second != first
        # The lost primary's cluster went whole: its other node bills no more.
        assert _cluster_gone(w, first) and _cluster_gone(w, second)
        assert w.fake.live_clusters() == []
        names = await w.events(run_id)
        assert names.count("pod.ClusterCreated") == 2 and "run.Recovered" in names
        assert w.run_json(run_id)["state"] == "succeeded"


async def test_an_ambiguous_cluster_create_adopts_the_cluster_it_made(tmp_path: Path) -> None:
    async with world(tmp_path, steps=4, step_seconds=0.05) as w:
        w.env["OVERBRAINER_TARGETS__GPU__NODES"] = "2"
        # Runpod makes the cluster, but its answer is lost (a 502 from a proxy).
        w.fake.fail_next("POST /clusters", 502, succeed=True)
        done = await w.run("train", timeout=120)
        assert done.returncode == 0, done.stderr
        (run_id,) = w.runs()
        # The one cluster made was adopted, not made again nor left billing.
        (made,) = list(w.fake.clusters)
        assert str(_cluster_of(w, run_id)["id"]) == made
        assert len([r for r in w.fake.requests if r.method == "POST"]) == 1
        assert _cluster_gone(w, made)
        attempts = w.pod_json(run_id)["attempts"]
        assert isinstance(attempts, list) and attempts[0]["result"] == "created"
        assert "adopted after an ambiguous create" in attempts[0]["detail"]
