"""The stand-in torchrun's node form, run by the commands of a cluster node's job
(``trainer_commands(..., cluster_run=RUN)``): two nodes, two directories with no shared
disk, joined by the static rendezvous on loopback, each running two stand-in ranks."""

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from overbrainer.testing.sshd import free_port
from overbrainer.testing.stand_in import AXOLOTL
from overbrainer.train.axolotl import job_environment, prepare_run_dir, trainer_commands
from overbrainer.train.metrics import parse_metrics_lines
from tests.train.conftest import settings

NODES = 2
PER_NODE = 2


class Node:
    """One node's job, started in its own directory (its own session, as a machine)."""

    def __init__(self, run_dir: Path, rank: int, port: int, **knobs: str) -> None:
        self.run_dir = run_dir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
        env.update(job_environment())
        env.update(
            {
                "PRIMARY_ADDR": "127.0.0.1",
                "PRIMARY_PORT": str(port),
                "NODE_RANK": str(rank),
                "NUM_NODES": str(NODES),
                "NUM_TRAINERS": str(PER_NODE),
                "FAKE_AXOLOTL_STEP_SECONDS": "0.01",
                **knobs,
            }
        )
        commands = trainer_commands(settings(merge=True), str(AXOLOTL), "gpu", cluster_run="r-1")
        script = " && ".join(" ".join(_quote(word) for word in command) for command in commands)
        self.process = subprocess.Popen(
            ["sh", "-c", script],
            cwd=run_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.out = ""
        self.err = ""
        self.reader = threading.Thread(target=self._read)
        self.reader.start()

    def _read(self) -> None:
        self.out, self.err = self.process.communicate(timeout=60)

    def wait(self) -> int:
        self.reader.join(timeout=70)
        return self.process.returncode


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _nodes(tmp_path: Path, project: Path, **knobs: str) -> list[Node]:
    port = free_port()
    nodes = []
    for rank in range(NODES):
        run_dir = tmp_path / f"node{rank}"
        run_dir.mkdir()
        prepare_run_dir(run_dir, project, settings(merge=True))
        nodes.append(Node(run_dir, rank, port, **knobs))
    return nodes


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_two_nodes_train_as_one_job_each_holding_its_part_of_every_checkpoint(
    tmp_path: Path, project: Path
) -> None:
    nodes = _nodes(
        tmp_path,
        project,
        FAKE_AXOLOTL_STEPS="4",
        FAKE_AXOLOTL_SAVE_EVERY="2",
        FAKE_AXOLOTL_RANK_SAVE_SECONDS="0.3",
    )
    assert [node.wait() for node in nodes] == [0, 0], [node.err for node in nodes]
    zero, one = (node.run_dir / "output" for node in nodes)
    # Node 0: the result, the merge (node 0 only), its ranks' parts of each checkpoint.
    assert {"adapter_model.safetensors", "adapter_config.json", "merged"} <= _files(zero)
    # Node 1: its own ranks' parts (global ranks 2 and 3) of each checkpoint and, as
    # Axolotl's first rank of each node writes at the end, a copy of the result; no merge.
    assert _files(one) == {
        "checkpoint-2",
        "checkpoint-4",
        "adapter_model.safetensors",
        "adapter_config.json",
    }
    adapter = "adapter_model.safetensors"
    assert (one / adapter).read_bytes() == (zero / adapter).read_bytes()
    for step in (2, 4):
        held = _files(zero / f"checkpoint-{step}")
        assert {"trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= held
        assert not held & {"rng_state_2.pth", "rng_state_3.pth"}
        assert _files(one / f"checkpoint-{step}") == {"rng_state_2.pth", "rng_state_3.pth"}
    # Rank 0 announces a checkpoint only once every rank of every node wrote its part.
    events, _, _ = parse_metrics_lines((nodes[0].run_dir / "metrics.jsonl").read_bytes())
    saved = [event for event in events if event.event == "saved"]
    assert [event.step for event in saved] == [2, 4]
    for event in saved:
        parts = (one / f"checkpoint-{event.step}").glob("rng_state_*.pth")
        assert event.time >= max(part.stat().st_mtime for part in parts) - 0.01
    assert "node 1 skips the merge" in nodes[1].err
    # Each line prefixed by its worker's global rank.
    for node, ranks in zip(nodes, ({"0", "1"}, {"2", "3"}), strict=True):
        lines = (node.out + node.err).splitlines()
        prefixed = {line[5] for line in lines if line.startswith("[rank")}
        assert prefixed == ranks


def test_a_rank_failing_on_one_node_ends_the_job_of_every_node(
    tmp_path: Path, project: Path
) -> None:
    nodes = _nodes(
        tmp_path,
        project,
        FAKE_AXOLOTL_STEPS="4000",
        FAKE_AXOLOTL_FAIL_RANK="3",
        FAKE_AXOLOTL_FAIL_AFTER="0.5",
    )
    assert [node.wait() for node in nodes] == [1, 1]
    assert "rank 3 (local_rank 1) exitcode 3" in nodes[1].err
    assert "node 1 failed" in nodes[0].err
    assert not (nodes[0].run_dir / "output" / "adapter_config.json").exists()
    assert not (nodes[0].run_dir / "output" / "merged").exists()


def test_a_node_that_vanishes_ends_the_job_of_the_others(tmp_path: Path, project: Path) -> None:
    nodes = _nodes(tmp_path, project, FAKE_AXOLOTL_STEPS="4000")
    metrics = nodes[0].run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 30
    while b'"loss"' not in (metrics.read_bytes() if metrics.exists() else b""):
        assert time.monotonic() < deadline, nodes[0].err
        time.sleep(0.05)
    os.killpg(nodes[1].process.pid, signal.SIGKILL)  # the machine is gone, with its job
    assert nodes[0].wait() == 1
    assert "node 1 failed or left" in nodes[0].err
    assert not (nodes[0].run_dir / "output" / "adapter_config.json").exists()


def test_no_worker_starts_before_every_node_joined(tmp_path: Path, project: Path) -> None:
    run_dir = tmp_path / "node0"
    run_dir.mkdir()
    prepare_run_dir(run_dir, project, settings(merge=True))
    alone = Node(run_dir, 0, free_port(), FAKE_TORCHRUN_JOIN_SECONDS="0.5")
    assert alone.wait() == 1
    assert "rendezvous timed out" in alone.err and "1 of 2 nodes joined" in alone.err
    assert not (run_dir / "output").exists()
    assert not (run_dir / "metrics.jsonl").exists()
