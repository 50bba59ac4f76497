"""Reaching every node of a run's cluster again (``train attach``, a follower that lost its
connections): rank 0 is the run's pod, reached as any pod; each other node is looked up
afresh (its endpoint may have changed) and connected with the run's pinned key. A node
Runpod no longer runs is a node lost: the job across the nodes cannot go on, and the run
fails naming it (:class:`LostNode` answers its state as ``lost``)."""

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from overbrainer.events.aggregate import RunLog
from overbrainer.exec.base import (
    Arrived,
    ExecError,
    Executor,
    HostKeyRefused,
    JobHandle,
    JobState,
    JobStatus,
    LoginRefused,
)
from overbrainer.exec.nodes import NodesExecutor
from overbrainer.runpod.keys import client_key_path
from overbrainer.runpod.models import PodStatus, UnsafeSshEndpoint
from overbrainer.targets.runpod.pods import PodAccess, PodContext
from overbrainer.targets.runpod.reach import lost_reason


class LostNode:
    """A node of the job that Runpod no longer runs: its job's state is ``lost``; nothing
    else can be done on it."""

    def __init__(self, rank: int, pod_id: str, why: str) -> None:
        self.rank = rank
        self.pod_id = pod_id
        self.why = why

    @property
    def location(self) -> str:
        return f"node {self.rank} (pod {self.pod_id})"

    def _gone(self) -> ExecError:
        return ExecError(f"{self.location} is lost: {self.why}")

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        raise self._gone()

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        raise self._gone()

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        raise self._gone()

    async def file_size(self, path: str) -> int:
        raise self._gone()

    async def status(self, remote_dir: str) -> JobState:
        return JobState(JobStatus.lost)

    async def cancel(self, remote_dir: str) -> JobState:
        return JobState(JobStatus.lost)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        raise self._gone()

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived] | None:
        raise self._gone()

    async def touch(self, path: str) -> None:
        raise self._gone()

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        raise self._gone()

    async def aclose(self) -> None:
        return None


async def nodes_of(
    ctx: PodContext, stack: contextlib.AsyncExitStack, state: RunLog, primary: Executor
) -> Executor:
    """The run's job across its cluster's nodes, ``primary`` (rank 0's connection) first;
    the run's pod alone when it has no cluster."""
    cluster = state.pod.cluster
    if cluster is None:
        return primary
    assert ctx.connect is not None
    run_id = state.run.run_id
    key = state.pod.host_public_key
    assert key is not None  # rank 0 was reached with it
    ssh_dir = ctx.session.run_dir(run_id) / "ssh"
    nodes: list[Executor] = [primary]
    for member in cluster["members"][1:]:
        rank, pod_id = int(member["rank"]), str(member["pod_id"])
        remote = await ctx.client.get_pod(pod_id)
        why: str | None
        if remote is None or remote.status is PodStatus.TERMINATED:
            why = f"pod {pod_id} no longer exists"
        else:
            why = lost_reason(remote)
        if why is None:
            try:
                endpoint = remote.ssh_endpoint() if remote is not None else None
            except UnsafeSshEndpoint as error:
                endpoint, why = None, str(error)
            if endpoint is None and why is None:
                why = f"pod {pod_id} shows no SSH endpoint ({remote.raw_status if remote else ''})"
        if why is not None or endpoint is None:
            nodes.append(LostNode(rank, pod_id, why or "unreachable"))
            continue
        access = PodAccess(endpoint, client_key_path(ssh_dir), key, ctx.root)
        try:
            nodes.append(await stack.enter_async_context(ctx.connect(access)))
        except (HostKeyRefused, LoginRefused) as error:
            # Not the node the run pinned: never trusted, so it can take no part.
            nodes.append(LostNode(rank, pod_id, f"SSH at {endpoint.host}:{endpoint.port}: {error}"))
        # A node that does not answer yet raises: the follower looks again, as for rank 0.
    return NodesExecutor(nodes, f"cluster {cluster['id']}")
