"""``volume ls``, ``volume du``, ``volume prune``, ``volume rm`` and the volumes' spend in
``runs ls --since``, through the REAL ``overbrainer`` command: the fake Runpod API on
loopback, fake pods running the real bootstrap and watchdog, and moto's S3 server standing
for the volume's S3 API."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from overbrainer.runpod.client import CreateCluster, CreatePod, RunpodClient
from overbrainer.runpod.s3 import VolumeS3
from overbrainer.testing.fake_executor import CANARY_KEY, PINNED_IMAGE
from overbrainer.testing.faketime import skewed
from tests.runpod.conftest import S3Server
from tests.runpod.test_train_loopback import world

VOLUME = {
    "OVERBRAINER_TARGETS__GPU__VOLUME": "cache",
    "OVERBRAINER_TARGETS__GPU__VOLUME_DATA_CENTER": "US-KS-2",
    "OVERBRAINER_TARGETS__GPU__VOLUME_SIZE_GB": "20",
}
UNKNOWN = "unknown (set OVERBRAINER_RUNPOD__S3_ACCESS_KEY/__S3_SECRET)"
STRANGER = "20250505-050505-beef"  # a run no store here knows


async def test_volume_rm_is_refused_while_a_run_uses_the_volume_and_deletes_it_after(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, steps=2000, step_seconds=0.05) as w:
        w.env.update(VOLUME)
        started = await w.run("train", "--detach")
        assert started.returncode == 0, started.stderr
        (run,) = w.runs()
        pod = str(w.pod_json(run)["pod_id"])
        (volume,) = w.fake.live_volumes(CANARY_KEY)
        listed = await w.run("volume", "ls")
        listed_json = await w.run("volume", "ls", "--json")
        refused = await w.run("volume", "rm", "cache", "--yes")
        deletes_while_used = [r for r in w.fake.requests if r.method == "DELETE"]

        cancelled = await w.run("train", "cancel", run, timeout=120)
        assert cancelled.returncode == 0, cancelled.stderr
        shown = await w.run("runs", "show", run, "--no-plot")
        not_asked = await w.run("volume", "rm", "cache")
        removed = await w.run("volume", "rm", "cache", "--yes")
        after = await w.run("volume", "ls")
        pod_json = w.pod_json(run)

    # What volume ls says: where it is, its size, its cost, what it holds (unknown without
    # the S3 API key), and the run that used it.
    assert listed.returncode == 0, listed.stderr
    head, row = listed.stdout.splitlines()
    assert head.split() == ["NAME", "ID", "DATA", "CENTER", "SIZE", "USED", "$/MONTH", "RUNS"]
    assert row.split("  ")[0] == "cache"
    for said in (volume.id, "US-KS-2", "20 GB", UNKNOWN, "$1.40", run):
        assert said in row
    assert json.loads(listed_json.stdout) == {
        "name": "cache",
        "id": volume.id,
        "data_center": "US-KS-2",
        "size_gb": 20,
        "used_bytes": None,
        "used_unknown": UNKNOWN,
        "monthly_usd": 1.4000000000000001,
        "runs": [run],
    }
    # Refused while the run uses it, naming the run, its pod and what ends it; nothing asked
    # of Runpod's deletes.
    assert refused.returncode == 1
    assert f"network volume cache ({volume.id}) is in use by run {run} (pod {pod})" in (
        refused.stderr
    )
    assert f"`overbrainer train cancel {run}`" in refused.stderr
    assert "`overbrainer volume rm cache` again. Nothing was deleted" in refused.stderr
    assert deletes_while_used == []
    # The run view says which volume the run used: runs show, and pod.json.
    assert f"volume     cache ({volume.id}, 20 GB) in US-KS-2, created by this run" in shown.stdout
    assert pod_json["volume"] == {
        "id": volume.id,
        "name": "cache",
        "data_center": "US-KS-2",
        "created": True,
        "size_gb": 20,
    }
    # Once the run ended: without a terminal to ask, nothing is deleted without --yes.
    assert not_asked.returncode == 2
    assert "Run `overbrainer volume rm cache --yes` to do it" in not_asked.stderr
    # With it: deleted, and confirmed gone.
    assert removed.returncode == 0, removed.stderr
    assert (
        f"volume rm: network volume cache ({volume.id}) deleted; Runpod no longer lists it"
        in removed.stdout
    )
    assert w.fake.live_volumes(CANARY_KEY) == []
    assert after.returncode == 0 and "no network volume" in after.stderr


async def test_volume_rm_is_refused_while_a_pod_or_a_cluster_mounts_the_volume(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        w.env.update(VOLUME)
        volume = w.fake.add_network_volume(CANARY_KEY, "cache", size=20, data_center="US-KS-2")
        # A pod not overbrainer's, made by hand, mounting the volume (no container runs in
        # it: no overbrainer bootstrap would end it).
        w.fake.on_running = None
        async with RunpodClient(CANARY_KEY, w.base_url) as client:
            made = await client.create_pod(
                CreatePod(
                    name="my-notebook",
                    image=PINNED_IMAGE,
                    gpu_type="NVIDIA A40",
                    gpu_count=1,
                    disk_gb=20,
                    data_center_ids=["US-KS-2"],
                    network_volume_id=volume.id,
                )
            )
            # And a cluster of two, made by hand, mounting it on every member.
            cluster = await client.create_cluster(
                CreateCluster(
                    name="my-cluster",
                    image=PINNED_IMAGE,
                    gpu_type="NVIDIA A40",
                    gpus_per_pod=1,
                    pod_count=2,
                    disk_gb=20,
                    data_center_ids=["US-KS-2"],
                    network_volume_id=volume.id,
                )
            )
        stranger = made.id
        refused = await w.run("volume", "rm", "cache", "--yes")
    assert refused.returncode == 1
    assert f"in use by pod {stranger} (not overbrainer's): delete pod {stranger} in Runpod's" in (
        refused.stderr
    )
    # The cluster is named once, whatever its members.
    told = f"cluster {cluster.id} (not overbrainer's): delete cluster {cluster.id} in Runpod's"
    assert refused.stderr.count(told) == 1, refused.stderr
    assert w.fake.live_volumes(CANARY_KEY) == [volume]


async def _fill(s3: S3Server, volume_id: str, run: str) -> None:
    """What a volume holds after runs: the model cache, prepared data, data from home, the
    checkpoints and output of ``run`` and of a run no store here knows, a user's file."""
    s3.make_bucket(volume_id, "US-KS-2")
    objects = {
        "overbrainer/hf/hub/models--m/model.safetensors": 3000,
        "overbrainer/prepared/abc/data.arrow": 500,
        f"overbrainer/blobs/sha256/{'a' * 64}": 700,
        f"overbrainer/runs/{run}/output/checkpoint-2/adapter.bin": 100,
        f"overbrainer/runs/{run}/output/checkpoint-4/adapter.bin": 200,
        f"overbrainer/runs/{run}/output/adapter_model.safetensors": 50,
        f"overbrainer/runs/{STRANGER}/output/checkpoint-1/adapter.bin": 10,
        f"overbrainer/runs/{STRANGER}/output/checkpoint-3/adapter.bin": 30,
        "notes.txt": 7,
    }
    async with VolumeS3(
        s3.credentials.access_key,
        s3.credentials.secret,
        volume_id,
        "US-KS-2",
        base_url=s3.url,
    ) as client:
        for key, size in objects.items():
            await client.put_bytes(key, b"x" * size)


async def _keys(s3: S3Server, volume_id: str) -> list[str]:
    async with VolumeS3(
        s3.credentials.access_key,
        s3.credentials.secret,
        volume_id,
        "US-KS-2",
        base_url=s3.url,
    ) as client:
        return sorted(o.key for o in await client.list_objects())


async def test_what_a_volume_holds_its_pruning_and_its_spend_in_runs_ls(
    tmp_path: Path, open_s3: S3Server
) -> None:
    async with world(tmp_path, steps=4) as w:
        w.env.update(VOLUME)
        # The volume exists since ten days: the run finds it, and Runpod billed it since.
        volume = w.fake.add_network_volume(CANARY_KEY, "cache", size=20, data_center="US-KS-2")
        volume.created_at = trio.current_time() - 10 * 86400
        trained = await w.run("train")
        assert trained.returncode == 0, trained.stderr
        (run,) = w.runs()
        await _fill(open_s3, volume.id, run)
        keyless = await w.run("volume", "du", "cache")
        s3_env = {
            "OVERBRAINER_RUNPOD__S3_ACCESS_KEY": open_s3.credentials.access_key,
            "OVERBRAINER_RUNPOD__S3_SECRET": open_s3.credentials.secret,
            "OVERBRAINER_RUNPOD__S3_BASE_URL": open_s3.url,
        }
        listed = await w.run("volume", "ls", "--json", env=s3_env)
        du = await w.run("volume", "du", "cache", env=s3_env)
        du_json = await w.run("volume", "du", "cache", "--json", env=s3_env)
        young = await w.run(
            "volume", "prune", "cache", "--checkpoints-older-than", "30d", "--yes", env=s3_env
        )
        # Forty days on, the same checkpoints are old.
        later = {**s3_env, **skewed("+40d")}
        not_asked = await w.run(
            "volume", "prune", "cache", "--checkpoints-older-than", "30d", env=later
        )
        pruned = await w.run(
            "volume", "prune", "cache", "--checkpoints-older-than", "30d", "--yes", env=later
        )
        left = await _keys(open_s3, volume.id)
        spend = await w.run("runs", "ls", "--since", "7d")
        closed = {"OVERBRAINER_RUNPOD__BASE_URL": "http://127.0.0.1:9/v2"}
        unreachable = await w.run("runs", "ls", "--since", "7d", env=closed)

    total = 3000 + 500 + 700 + 100 + 200 + 50 + 10 + 30 + 7
    assert keyless.returncode == 1
    assert "no S3 API key is configured" in keyless.stderr
    assert "set OVERBRAINER_RUNPOD__S3_ACCESS_KEY/__S3_SECRET in .env" in keyless.stderr
    assert listed.returncode == 0, listed.stderr
    row = json.loads(listed.stdout)
    assert (row["used_bytes"], row["used_unknown"], row["runs"]) == (total, None, [run])
    # What takes the space, part by part, and each run's checkpoints.
    assert du.returncode == 0, du.stderr
    lines = du.stdout.splitlines()
    assert lines[0] == f"network volume cache ({volume.id}) in US-KS-2: 4.6 kB used of 20 GB"
    told = {line.split("  ")[1].strip(): line.split()[-1] for line in lines[1:]}
    assert told == {
        "model cache": "overbrainer/hf",
        "prepared data": "overbrainer/prepared",
        "data from home": "overbrainer/blobs/sha256",
        f"run {STRANGER}, 2 checkpoints": f"overbrainer/runs/{STRANGER}/output",
        f"run {run}, 2 checkpoints": f"overbrainer/runs/{run}/output",
        "not overbrainer's": "overbrainer/",
    }
    assert json.loads(du_json.stdout) == {
        "name": "cache",
        "id": volume.id,
        "data_center": "US-KS-2",
        "size_gb": 20,
        "used_bytes": total,
        "cache_bytes": 3000,
        "prepared_bytes": 500,
        "data_bytes": 700,
        "other_bytes": 7,
        "runs": {
            STRANGER: {"bytes": 40, "checkpoints": [1, 3]},
            run: {"bytes": 350, "checkpoints": [2, 4]},
        },
    }
    # Nothing is old enough yet.
    assert young.returncode == 0, young.stderr
    assert "nothing deleted" in young.stdout
    # Forty days on: without a terminal to answer, nothing goes without --yes.
    assert not_asked.returncode == 2
    assert "--checkpoints-older-than 30d --yes` to do it" in not_asked.stderr
    # With it: the finished run's checkpoints go (its output stays); of the run this store
    # does not know, the newest stays (a resume may need it).
    assert pruned.returncode == 0, pruned.stderr
    assert f"keeping checkpoint-3 of run {STRANGER} (30 bytes): the newest" in pruned.stderr
    assert (
        f"volume prune: deleted 3 checkpoints from network volume cache ({volume.id}), "
        "310 bytes freed" in pruned.stdout
    )
    assert left == sorted(
        [
            "notes.txt",
            f"overbrainer/blobs/sha256/{'a' * 64}",
            "overbrainer/hf/hub/models--m/model.safetensors",
            "overbrainer/prepared/abc/data.arrow",
            f"overbrainer/runs/{STRANGER}/output/checkpoint-3/adapter.bin",
            f"overbrainer/runs/{run}/output/adapter_model.safetensors",
        ]
    )
    # runs ls --since: the volume's spend beside the runs' (20 GB at $0.07 a month, 7 days).
    assert spend.returncode == 0, spend.stderr
    last = spend.stdout.splitlines()[-1]
    assert "; network volume cache: $0.33 as Runpod billed it since " in last, last
    assert last.endswith(" UTC ($0.33 with the runs)")
    # Runpod out of reach: the listing is still made, the volumes' cost said unknown.
    assert unreachable.returncode == 0, unreachable.stderr
    last = unreachable.stdout.splitlines()[-1]
    assert "; what network volume cache cost is unknown (cannot reach Runpod" in last, last
