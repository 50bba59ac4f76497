"""One executor over the nodes of a job that spans many machines (a cluster's pods).

The job runs on every node at once, each node its own run directory: what a run sends
(its config and data) goes to every node; the job starts on every node; its files (the
metrics, the log and the output) are read from the first node, rank 0, where the trainer
saves them — and a checkpoint from every node that holds a part of it, each part against
its own node's manifest. The job's state is every node's: while rank 0 runs, a node
whose job ended without success is the job's end (its torchrun peers would only wait for
it until their collectives time out), so the others are cancelled and the state returned
is that node's, naming it (:attr:`JobState.node`).
"""

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from overbrainer.exec.base import Arrived, ExecError, Executor, JobHandle, JobState, JobStatus
from overbrainer.exec.manifest import CHECKPOINT_PREFIX


class NodesExecutor:
    """``nodes`` by node rank (rank 0 first), the job's nodes as one executor."""

    def __init__(self, nodes: Sequence[Executor], name: str) -> None:
        if not nodes:
            raise ValueError("a job spans at least one node")
        self.nodes = tuple(nodes)
        self.name = name

    @property
    def primary(self) -> Executor:
        """Rank 0, where the job's files are read."""
        return self.nodes[0]

    @property
    def location(self) -> str:
        return f"{self.name} ({len(self.nodes)} nodes)"

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                nursery.start_soon(node.upload, local_dir, remote_dir)

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Start the job on every node, the others before rank 0 (whose handle is
        returned); a node that cannot start it ends what the others started."""
        started: list[Executor] = []
        try:
            for node in (*self.nodes[1:], self.primary):
                handle = await node.spawn(
                    remote_dir, commands, env=env, secrets=secrets, container=container
                )
                started.append(node)
        except BaseException:
            with trio.CancelScope(shield=True):
                await _cancel_all(started, remote_dir)
            raise
        return handle

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        return await self.primary.read_file(path, offset, limit)

    async def file_size(self, path: str) -> int:
        return await self.primary.file_size(path)

    async def status(self, remote_dir: str) -> JobState:
        """Rank 0's state, unless another node's job ended the job: then, while rank 0
        still runs, the others are cancelled; the state is that node's, naming it."""
        primary = await self.primary.status(remote_dir)
        states = [primary]
        for node in self.nodes[1:]:
            try:
                states.append(await node.status(remote_dir))
            except ExecError:
                if not primary.ended:
                    raise  # rank 0 goes on: a node out of reach for now is looked at again
                # Rank 0's job ended and this node no longer answers: gone, for this job.
                states.append(JobState(JobStatus.lost))
        failed = failed_node(states)
        if failed is None:
            return primary
        said = await _last_lines(self.nodes[failed], f"{remote_dir}/{_LOG}")
        if not primary.ended:
            await self._cancel_others(remote_dir, failed)
        return JobState(states[failed].status, states[failed].exit_code, node=failed, said=said)

    async def _cancel_others(self, remote_dir: str, failed: int) -> None:
        others = [node for rank, node in enumerate(self.nodes) if rank != failed]
        await _cancel_all(others, remote_dir)

    async def cancel(self, remote_dir: str) -> JobState:
        """Cancel the job on every node; rank 0's final state."""
        states = [await node.cancel(remote_dir) for node in self.nodes]
        return states[0]

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        """Every node's files under ``paths``, each hashed on the node that holds it: rank
        0's, and what only another node holds (its ranks' parts of a checkpoint: with no
        shared disk, each node saves its own). A file on several nodes is rank 0's."""
        found = await self.primary.manifest(remote_dir, paths)
        for node in self.nodes[1:]:
            for name, digest in (await _held(node, remote_dir, paths)).items():
                found.setdefault(name, digest)
        return found

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived] | None:
        """``paths`` from rank 0, then from each other node the files under them that
        only it holds (see :meth:`manifest`). What arrived of every file, or None when
        some node's files were not hashed on the way (the caller reads them back)."""
        arrived = await self.primary.download(remote_dir, paths, local_dir)
        every: dict[str, Arrived] | None = None if arrived is None else dict(arrived)
        for node in self.nodes[1:]:
            held = await _held(node, remote_dir, paths)
            own = sorted(name for name in held if not (local_dir / name).exists())
            if not own:
                continue
            came = await node.download(remote_dir, own, local_dir)
            every = None if came is None or every is None else {**every, **came}
        return every

    async def touch(self, path: str) -> None:
        """On every node: a marker (the results retrieved) is for every node's watchdog."""
        for node in self.nodes:
            await node.touch(path)

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        """On every node (a set-up of the run directory is every node's); rank 0's stdout."""
        outputs = [await node.run_script(text, args, what=what) for node in self.nodes]
        return outputs[0]

    async def aclose(self) -> None:
        for node in self.nodes:
            await node.aclose()


_LOG = "job.log"  # the job's log in its run directory, on every node
_SAID_LINES = 3
_SAID_BYTES = 4096


async def _last_lines(node: Executor, path: str) -> tuple[str, ...]:
    """The last few lines of a node's log, printable (none when it cannot be read: the
    node may be gone with its log)."""
    try:
        size = await node.file_size(path)
        data = await node.read_file(path, max(0, size - _SAID_BYTES), _SAID_BYTES)
    except ExecError:
        return ()
    text = data.decode("utf-8", "replace")
    lines = [line.split("\r")[-1] for line in text.splitlines()]
    shown = ["".join(c for c in line if c.isprintable()).strip() for line in lines]
    return tuple(line for line in shown if line)[-_SAID_LINES:]


async def _held(node: Executor, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
    """What ``node`` holds under ``paths``. A node out of reach holds nothing of the job's
    results (rank 0 has them all), but a checkpoint is not whole without its part."""
    try:
        return await node.manifest(remote_dir, paths)
    except ExecError:
        if any(CHECKPOINT_PREFIX in path for path in paths):
            raise
        return {}


async def _cancel_all(nodes: Sequence[Executor], remote_dir: str) -> None:
    """Cancel the job on ``nodes``, as far as each answers: a node that does not is
    deleted with the others next, and its job ends with it."""
    for node in nodes:
        with contextlib.suppress(ExecError):
            await node.cancel(remote_dir)


def failed_node(states: Sequence[JobState]) -> int | None:
    """The node other than rank 0 that ended the job, if one did (None: rank 0's state
    speaks for the job). While rank 0 runs: the first other node whose job ended without
    success. Once rank 0's job failed too: a node whose job vanished (its machine gone),
    which its peers only failed after; a node that merely failed with them is not named."""
    first, others = states[0], list(enumerate(states[1:], start=1))
    if not first.ended:
        for rank, state in others:
            if state.status in (JobStatus.lost, JobStatus.cancelled):
                return rank
            if state.status is JobStatus.exited and state.exit_code != 0:
                return rank
        return None
    if first.status is JobStatus.exited and first.exit_code == 0:
        return None
    return next((rank for rank, state in others if state.status is JobStatus.lost), None)
