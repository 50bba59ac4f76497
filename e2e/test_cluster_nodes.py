"""The job of each node of a cluster, with the real torchrun and the real Axolotl: two
"nodes" (two directories, as two machines with no shared disk), each running the commands
``trainer_commands(..., cluster_run=RUN)`` builds with the variables a cluster gives a
member, join by torchrun's static rendezvous on loopback and train one model together (DDP
over gloo): both exit 0, node 0 holds the result, its checkpoints and the merge, node 1 its
own part of every checkpoint (its rank's RNG state) and a copy of the result (Axolotl saves
it from the first rank of each node), as on GPUs.

``ACCELERATE_USE_CPU=true``: without it, on a machine with no GPU, accelerate sees no
distributed setup (``DistributedType.NO``) although torchrun formed the process group
(transformers warns "parallel_mode != ParallelMode.DISTRIBUTED"), and each rank trains its
own copy alone, saving whole checkpoints of its own on each node. ``job_environment(
device="cpu")`` does not set it (yet): the test sets it itself."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path

from e2e import build
from e2e.harness import TRAIN, base_env
from overbrainer.config.model import TrainingSettings
from overbrainer.testing.sshd import free_port
from overbrainer.train.axolotl import job_environment, prepare_run_dir, trainer_commands
from overbrainer.train.parallelism import Choice

NODES = 2


def _run_node(commands: list[list[str]], run_dir: Path, env: dict[str, str]) -> int:
    """The node's job: its commands in order in its run directory, the log in job.log."""
    with (run_dir / "job.log").open("wb") as log:
        for command in commands:
            code = subprocess.run(
                command, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600
            ).returncode
            if code:
                return code
    return 0


def test_two_nodes_train_together_by_the_static_rendezvous(tmp_path: Path) -> None:
    built = build.build()
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRAIN))
    training = TrainingSettings(
        target="local",
        base_model=str(built.model),
        adapter="lora",
        merge=True,
        epochs=1,
        learning_rate=1e-3,
        sequence_len=256,
        micro_batch_size=1,
        sample_packing=False,
        lora_r=4,
        lora_alpha=8,
    )
    # One process per node: a DDP job of two processes, on the CPU (gloo).
    choice = Choice(NODES, "ddp", "two nodes")
    axolotl = str(built.env / "bin" / "axolotl")
    commands = trainer_commands(training, axolotl, 1, cluster_run="run-e2e")
    port = str(free_port())
    codes: dict[int, int] = {}
    threads = []
    run_dirs = []
    for node in range(NODES):
        run_dir = tmp_path / f"node{node}"
        run_dir.mkdir()
        prepare_run_dir(run_dir, project, training, device="cpu", choice=choice)
        run_dirs.append(run_dir)
        env = {
            **base_env(),
            **job_environment(training, device="cpu"),
            "HF_HOME": str(tmp_path / f"hf-{node}"),
            "ACCELERATE_USE_CPU": "true",  # DDP on the CPU (the module's docstring)
            # What a cluster gives each member (the fake world's, on loopback).
            "PRIMARY_ADDR": "127.0.0.1",
            "PRIMARY_PORT": port,
            "NODE_RANK": str(node),
            "NUM_NODES": str(NODES),
            "NUM_TRAINERS": "1",
            "WORLD_SIZE": str(NODES),
        }

        def run(node: int = node, run_dir: Path = run_dir, env: dict[str, str] = env) -> None:
            codes[node] = _run_node(commands, run_dir, env)

        threads.append(threading.Thread(target=run))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    logs = [(d / "job.log").read_text(errors="replace") for d in run_dirs]
    assert codes == {0: 0, 1: 0}, "\n\n".join(log[-4000:] for log in logs)
    node0, node1 = (d / "output" for d in run_dirs)
    # Node 0 holds the result, its checkpoints and, after the training, the merge.
    assert (node0 / "adapter_model.safetensors").is_file()
    assert (node0 / "adapter_config.json").is_file()
    assert (node0 / "merged" / "model.safetensors").is_file()
    checkpoints = sorted(p.name for p in node0.glob("checkpoint-*"))
    assert checkpoints
    for name in checkpoints:
        held = {p.name for p in (node0 / name).iterdir()}
        assert {"trainer_state.json", "optimizer.pt", "rng_state_0.pth"} <= held
        assert "rng_state_1.pth" not in held
    # Node 1, no shared disk, holds its own part of every checkpoint; the merge is node 0's.
    assert sorted(p.name for p in node1.glob("checkpoint-*")) == checkpoints
    for name in checkpoints:
        held = {p.name for p in (node1 / name).iterdir()}
        assert "rng_state_1.pth" in held
        assert not held & {"trainer_state.json", "optimizer.pt", "adapter_model.safetensors"}
    # Axolotl's end: the first rank of every node saves the trained adapter where it runs.
    assert (node1 / "adapter_model.safetensors").is_file()
    assert not (node1 / "merged").exists()
    assert "node 1 skips the merge" in logs[1]
    # The static rendezvous gave node 1's worker global rank 1 of a real DDP job: every
    # line the workers printed is prefixed by the global rank (`runs logs --rank K`).
    for node, log in enumerate(logs):
        prefixes = set(re.findall(r"^\[rank(\d+)\]:", log, re.MULTILINE))
        assert prefixes == {str(node)}, (node, prefixes)
        assert "parallel_mode != ParallelMode.DISTRIBUTED" not in log
    lines = (run_dirs[0] / "metrics.jsonl").read_text().splitlines()
    assert any("loss" in json.loads(line) for line in lines)
