"""A run's pod, read for ``runs logs``: its job's log over SSH, and the pod's own log.

``runs logs RUN --pod`` reads the pod's own log through Runpod's API (``GET
/pods/{id}/logs``): the host's ``system`` source (the image pull, the container's start)
and the ``container`` source, so a pod still pulling its image is visible before anything
of ours runs on it. Reading never records anything in the run's log.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import TextIO

import trio

from overbrainer.config.model import Settings
from overbrainer.errors import OverbrainerError, UsageError
from overbrainer.events.aggregate import RunLog
from overbrainer.exec.base import ExecError, Executor
from overbrainer.front.streams import stdout_gone
from overbrainer.lifecycle.logs import LOG_FILE, POLL
from overbrainer.runpod.client import PodNotFound, RunpodApiError, RunpodClient
from overbrainer.runpod.pod_logs import LogLine, LogSource

QUIET_END = 2.0
"""Without ``--follow``, a pod's log stream is read until a line later than its opening
(Runpod streams the backfill first), or until it is quiet this long."""


@asynccontextmanager
async def reach_pod_to_read(
    project_dir: Path, settings: Settings, state: RunLog, node: int | None = None
) -> AsyncIterator[Executor]:
    """The run's pod, reached to read its job's log; ``node``: that node of its cluster."""
    api_key, base_url = settings.require_runpod_api_key(), settings.runpod.base_url
    async with (
        RunpodClient(api_key, base_url) as client,
        _pod_executor(project_dir, state, client, node) as executor,
    ):
        yield executor


@asynccontextmanager
async def _pod_executor(
    project_dir: Path, state: RunLog, client: RunpodClient, node: int | None = None
) -> AsyncIterator[Executor]:
    """The pinned SSH executor of the run's pod, at the endpoint Runpod shows now (read
    only: nothing is recorded)."""
    from overbrainer.runpod.keys import client_key_path
    from overbrainer.runpod.models import PodStatus, UnsafeSshEndpoint
    from overbrainer.targets.runpod.pods import PodAccess
    from overbrainer.targets.runpod.provision import pinned_ssh

    run, pod = state.run, state.pod
    logs = f"runs/{run.run_id}/{LOG_FILE}"
    pod_id = pod.pod_id if node is None else node_pod(state, node)
    if node is not None and (not pod.may_bill() or pod.host_public_key is None):
        raise OverbrainerError(
            f"run {run.run_id}'s cluster is gone, and with it node {node}'s job log (only "
            f"rank 0's comes home: `overbrainer runs logs {run.run_id}`)"
        )
    if pod_id is None or pod.host_public_key is None or not pod.may_bill():
        raise OverbrainerError(
            f"run {run.run_id} has no pod left to read its job log from, and its log is not "
            f"home ({logs}); `overbrainer runs logs {run.run_id} --pod` shows what Runpod kept"
        )
    remote = await client.get_pod(pod_id)
    if remote is None or remote.status is PodStatus.TERMINATED:
        raise OverbrainerError(
            f"pod {pod_id} of run {run.run_id} is gone, and the run's log is not home "
            f"({logs}); `overbrainer train attach {run.run_id}` settles the run"
        )
    try:
        endpoint = remote.ssh_endpoint()
    except UnsafeSshEndpoint as error:
        raise OverbrainerError(f"{error}; not connecting") from None
    if endpoint is None:
        status = remote.raw_status or remote.status.value
        raise OverbrainerError(
            f"pod {pod_id} of run {run.run_id} cannot be reached now ({status}, no SSH "
            f"endpoint); `overbrainer runs logs {run.run_id} --pod` shows its own log"
        )
    ssh_dir = project_dir / "runs" / run.run_id / "ssh"
    access = PodAccess(endpoint, client_key_path(ssh_dir), pod.host_public_key)
    try:
        async with pinned_ssh()(access) as executor:
            yield executor
    except ExecError as error:
        raise OverbrainerError(
            f"cannot read the job log of run {run.run_id} on pod {pod_id} ({error})"
        ) from error


def node_pod(state: RunLog, node: int) -> str:
    """The pod of node ``node`` of the run's cluster; an error naming the nodes there are
    when the run has no cluster or no such node."""
    run_id = state.run.run_id
    cluster = state.pod.cluster
    if cluster is None:
        raise UsageError(
            f"--node reads one node of a cluster's job; run {run_id} ran on one pod: "
            f"`overbrainer runs logs {run_id}` reads its job's log"
        )
    members = {int(m["rank"]): str(m["pod_id"]) for m in cluster["members"]}
    if node not in members:
        ranks = ", ".join(str(rank) for rank in sorted(members)) or "none ranked yet"
        raise UsageError(
            f"run {run_id}'s cluster {cluster['id']} has no node {node} (its nodes: {ranks})"
        )
    return members[node]


# --- a pod's own log -------------------------------------------------------------------


async def print_pod_log(
    client: RunpodClient,
    pod_id: str,
    out: TextIO,
    *,
    source: LogSource | None,
    tail: int | None,
    follow: bool,
    gone: Callable[[], Awaitable[bool]],
    quiet_end: float = QUIET_END,
) -> None:
    """Print the pod's log (``tail`` backfilled lines, Runpod's 100 by default); with
    ``follow``, go on, reconnecting after a drop where it left off, until the pod is gone
    (``gone``). Without, stop at the first line later than the stream's opening or once
    it is quiet for ``quiet_end`` seconds."""
    cursor: str | None = None
    with_source = source is None
    while True:
        try:
            async with client.pod_logs(
                pod_id, source=source, tail=tail, last_event_id=cursor
            ) as stream:
                opened = stream.opened_at
                while True:
                    batch: list[LogLine] | None = []
                    with trio.move_on_after(quiet_end if not follow else float("inf")):
                        batch = await stream.next_lines()
                    if batch is None:
                        break  # the stream ended (the pod is gone, or Runpod closed it)
                    if not batch and not follow:
                        return  # quiet: the backfill is over
                    for line in batch:
                        if not follow and _later(line.ts, opened):
                            return
                        out.write(line.text(with_source=with_source) + "\n")
                    out.flush()
                    if stdout_gone():
                        return
                    cursor = stream.cursor or cursor
        except PodNotFound:
            if cursor is None:
                raise OverbrainerError(
                    f"Runpod does not know pod {pod_id} (deleted): its own log is gone with it"
                ) from None
            return
        except RunpodApiError:
            if not follow or await gone():
                raise
            await trio.sleep(POLL)
            continue
        if not follow or await gone():
            return
        await trio.sleep(POLL)


def _later(ts: datetime | None, opened: datetime | None) -> bool:
    return ts is not None and opened is not None and ts > opened


async def print_own_log(
    settings: Settings,
    state: RunLog,
    out: TextIO,
    *,
    source: LogSource | None,
    tail: int | None,
    follow: bool,
) -> None:
    """``runs logs RUN --pod``: the own log of the run's pod, as Runpod keeps it."""
    pod_id = state.pod.pod_id
    if pod_id is None:
        raise OverbrainerError(f"run {state.run.run_id} has had no pod yet")
    async with RunpodClient(settings.require_runpod_api_key(), settings.runpod.base_url) as client:

        async def gone() -> bool:
            remote = await client.get_pod(pod_id)
            return remote is None or remote.status.value == "TERMINATED"

        await print_pod_log(client, pod_id, out, source=source, tail=tail, follow=follow, gone=gone)
