"""A job across many nodes through one executor: every node gets the run's files and the
job; rank 0's files are the job's; a node whose job fails first ends the job, named."""

from pathlib import Path

import pytest
import trio

from overbrainer.exec.base import JobAlreadyRunning, JobState, JobStatus
from overbrainer.exec.local import LocalExecutor
from overbrainer.exec.nodes import NodesExecutor, failed_node
from overbrainer.lifecycle.outcome import judge
from overbrainer.train.metrics import MetricsSummary

RUN = "runs/r1"
# Each node tells itself apart by its directory, as a cluster's node by its NODE_RANK.
BY_NODE = (
    'case "$PWD" in */node1/*) {node1} ;; *) {node0} ;; esac; '
    "while [ ! -e go ]; do sleep 0.02; done"
)


def _nodes(tmp_path: Path, count: int = 2) -> NodesExecutor:
    return NodesExecutor(
        [LocalExecutor(tmp_path / f"node{k}", cancel_grace=2) for k in range(count)], "cluster c1"
    )


def _job(node0: str = "true", node1: str = "true") -> list[list[str]]:
    return [["sh", "-c", BY_NODE.format(node0=node0, node1=node1)]]


async def _until(nodes: NodesExecutor, *wanted: JobStatus) -> JobState:
    with trio.fail_after(15):
        while True:
            state = await nodes.status(RUN)
            if state.status in wanted:
                return state
            await trio.sleep(0.02)


async def test_every_node_gets_the_files_and_the_job_and_rank_0s_files_are_read(
    tmp_path: Path, reap: list[int]
) -> None:
    nodes = _nodes(tmp_path)
    sent = tmp_path / "home"
    sent.mkdir()
    (sent / "config.yml").write_text("base_model: tiny\n")
    await nodes.upload(sent, RUN)
    handle = await nodes.spawn(
        RUN, _job(node0="echo zero > who", node1="echo one > who"), env={}, secrets={}
    )
    reap.append(handle.pid)
    for k in (0, 1):
        assert (tmp_path / f"node{k}" / RUN / "config.yml").read_text() == "base_model: tiny\n"
    assert (await _until(nodes, JobStatus.running)).node is None
    await nodes.touch(f"{RUN}/go")
    state = await _until(nodes, JobStatus.exited)
    assert (state.exit_code, state.node) == (0, None)
    assert await nodes.read_file(f"{RUN}/who", 0, 100) == b"zero\n"
    assert (tmp_path / "node1" / RUN / "who").read_text() == "one\n"


async def test_a_node_whose_job_fails_ends_the_job_and_is_named(
    tmp_path: Path, reap: list[int]
) -> None:
    nodes = _nodes(tmp_path, 3)
    handle = await nodes.spawn(
        RUN, _job(node1="echo loading; echo 'RuntimeError: boom'; exit 3"), env={}, secrets={}
    )
    reap.append(handle.pid)
    state = await _until(nodes, JobStatus.exited, JobStatus.cancelled)
    assert (state.status, state.exit_code, state.node) == (JobStatus.exited, 3, 1)
    # The others were stopped: rank 0's job no longer waits for its peer.
    assert (await nodes.nodes[0].status(RUN)).status is JobStatus.cancelled
    assert (await nodes.nodes[2].status(RUN)).status is JobStatus.cancelled
    verdict = judge(state, MetricsSummary(), has_output=False, run_id="r1")
    assert (
        verdict.message == "the job on node 1 exited with code 3 (its log ends: loading | "
        "RuntimeError: boom); the other nodes' jobs were stopped"
    )


@pytest.mark.parametrize(
    ("states", "failed"),
    [
        ([JobState(JobStatus.running), JobState(JobStatus.running)], None),
        ([JobState(JobStatus.running), JobState(JobStatus.exited, 0)], None),
        ([JobState(JobStatus.running), JobState(JobStatus.exited, 1)], 1),
        ([JobState(JobStatus.running), JobState(JobStatus.exited, None)], 1),
        ([JobState(JobStatus.running), JobState(JobStatus.running), JobState(JobStatus.lost)], 2),
        ([JobState(JobStatus.running), JobState(JobStatus.cancelled)], 1),
        # Rank 0 failed too: a node whose job vanished (its machine gone) ended the job...
        ([JobState(JobStatus.exited, 1), JobState(JobStatus.lost)], 1),
        ([JobState(JobStatus.lost), JobState(JobStatus.exited, 0), JobState(JobStatus.lost)], 2),
        # ... a node that failed with it did not: rank 0's end speaks for the job.
        ([JobState(JobStatus.exited, 1), JobState(JobStatus.exited, 1)], None),
        ([JobState(JobStatus.cancelled), JobState(JobStatus.exited, 1)], None),
        # Rank 0 succeeded: the job did.
        ([JobState(JobStatus.exited, 0), JobState(JobStatus.lost)], None),
    ],
)
def test_which_node_ends_the_job(states: list[JobState], failed: int | None) -> None:
    assert failed_node(states) == failed


async def test_a_node_that_cannot_start_the_job_ends_what_the_others_started(
    tmp_path: Path, reap: list[int]
) -> None:
    nodes = _nodes(tmp_path)
    first = await nodes.nodes[0].spawn(RUN, _job(), env={}, secrets={})
    reap.append(first.pid)
    # Rank 0 already runs a job there: starting the job across the nodes fails on it, and
    # the job node 1 started is cancelled.
    with pytest.raises(JobAlreadyRunning, match="node0"):
        await nodes.spawn(RUN, _job(), env={}, secrets={})
    assert (await nodes.nodes[1].status(RUN)).status is JobStatus.cancelled


async def test_a_checkpoint_spread_over_nodes_comes_home_whole_each_part_from_its_node(
    tmp_path: Path,
) -> None:
    from overbrainer.exec.manifest import verify

    nodes = _nodes(tmp_path)
    parts = {
        0: {"trainer_state.json": b"{}", "rng_state_0.pth": b"zero", "adapter.bin": b"A"},
        # Node 1 saved its rank's part, and a copy of what rank 0 saved too (another copy).
        1: {"rng_state_1.pth": b"one", "adapter.bin": b"B"},
    }
    for rank, files in parts.items():
        folder = tmp_path / f"node{rank}" / RUN / "output" / "checkpoint-2"
        folder.mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    path = "output/checkpoint-2"
    expected = await nodes.manifest(RUN, [path])
    assert sorted(expected) == [
        f"{path}/adapter.bin",
        f"{path}/rng_state_0.pth",
        f"{path}/rng_state_1.pth",
        f"{path}/trainer_state.json",
    ]
    home = tmp_path / "home"
    home.mkdir()
    arrived = await nodes.download(RUN, [path], home)
    assert verify(expected, home, [path], arrived) == []
    assert (home / path / "rng_state_1.pth").read_bytes() == b"one"
    assert (home / path / "adapter.bin").read_bytes() == b"A"  # rank 0's, where both hold it


async def test_a_node_out_of_reach_leaves_the_results_to_rank_0_but_no_checkpoint_whole(
    tmp_path: Path,
) -> None:
    from overbrainer.exec.base import ExecError
    from overbrainer.targets.runpod.cluster_nodes import LostNode

    nodes = NodesExecutor(
        [LocalExecutor(tmp_path / "node0"), LostNode(1, "pod1", "its machine is gone")], "c1"
    )
    output = tmp_path / "node0" / RUN / "output"
    (output / "checkpoint-2").mkdir(parents=True)
    (output / "adapter.bin").write_bytes(b"A")
    (output / "checkpoint-2" / "rng_state_0.pth").write_bytes(b"zero")
    assert sorted(await nodes.manifest(RUN, ["output"])) == ["output/adapter.bin"]
    home = tmp_path / "home"
    home.mkdir()
    await nodes.download(RUN, ["output"], home)
    assert (home / "output" / "adapter.bin").read_bytes() == b"A"
    with pytest.raises(ExecError, match="node 1 \\(pod pod1\\) is lost"):
        await nodes.manifest(RUN, ["output/checkpoint-2"])
