"""Reaching a run's pod again (``train attach``, ``train cancel``): a fresh look at it, its
endpoint (which a restart may change), and an SSH connection with its pinned host key.

A pod Runpod no longer shows — confirmed gone, or terminated — is recorded gone
(``pod.Deleted`` by ``found_gone``), and a run still going fails with it: its job went with
the pod — unless the caller recovers runs (``train attach`` with ``max_recoveries``): then
a pod lost under the running job is :class:`~overbrainer.lifecycle.target.TargetLost`.
A stopped pod, one with no endpoint yet, or one without a pinned host key is an
error naming the way out.
"""

import contextlib
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import ExecError, Executor, TargetUnreachable
from overbrainer.lifecycle.target import TargetLost
from overbrainer.runpod import messages
from overbrainer.runpod.cost_cap import bound_passed
from overbrainer.runpod.decide import connect_again_within, uptime_and_spend
from overbrainer.runpod.keys import client_key_path, write_ssh_config
from overbrainer.runpod.models import Pod, PodStatus, UnsafeSshEndpoint
from overbrainer.targets.runpod.delete import end_cluster_of_gone, forget_key_if_done
from overbrainer.targets.runpod.podrm import duration_text
from overbrainer.targets.runpod.pods import PodAccess, PodContext, confirm_gone, note_clock

__all__ = ["Reached", "connect", "lost_reason", "reach", "record_gone", "record_lost"]


@dataclass(frozen=True)
class Reached:
    """How to reach a run's pod now, and when its current boot began (Runpod's
    ``startedAt``; None when not shown)."""

    access: PodAccess
    started_at: datetime | None


async def reach(ctx: PodContext, state: RunLog, *, recovers: bool = False) -> Reached | None:
    """A fresh look at the run's pod: how to reach it now (its endpoint may have
    changed: recorded, and ``ssh/config`` rewritten) and since when it runs, or None
    when it is gone (recorded, and a running run failed). A stopped or unreachable pod
    is an error naming the way out.

    ``recovers``: the caller recovers a run whose pod was lost under its running job (a
    pod gone with no bound of its watchdog passed, or stopped: EXITED, ERROR); such a pod
    raises :class:`TargetLost` instead, the gone one recorded with its spend, the run not
    failed.
    """
    run_id = state.run.run_id
    pod = state.pod
    pod_id = pod.pod_id
    if pod_id is None or pod.deleted(pod_id):
        return None
    client = ctx.client
    remote = await client.get_pod(pod_id)
    await note_clock(ctx, run_id)
    if remote is None:
        if await confirm_gone(ctx, pod_id):
            if recovers and (why := await record_lost(ctx, state)) is not None:
                raise TargetLost(why)
            await record_gone(ctx, run_id, pod_id)
            return None
        remote = await client.get_pod(pod_id)
        if remote is None:
            raise OverbrainerError(
                f"Runpod answers inconsistently about pod {pod_id} of run {run_id}; try "
                f"`overbrainer train attach {run_id}` again later"
            )
    if remote.status is PodStatus.TERMINATED:
        if recovers and (why := await record_lost(ctx, state)) is not None:
            raise TargetLost(why)
        await record_gone(ctx, run_id, pod_id)
        return None
    status = remote.raw_status or remote.status.value
    lost = lost_reason(remote)
    if recovers and lost is not None and state.run.state == RunState.running:
        # Deleted by the recovery before anything else (it may bill while stopped).
        raise TargetLost(lost)
    if remote.status in (PodStatus.EXITED, PodStatus.ERROR):
        raise OverbrainerError(messages.stopped(pod, run_id, status))
    try:
        endpoint = remote.ssh_endpoint()
    except UnsafeSshEndpoint as error:
        raise OverbrainerError(
            f"{error}; not connecting. Delete the pod with `overbrainer pod rm {run_id}`"
        ) from None
    if endpoint is None or remote.status is not PodStatus.RUNNING:
        raise OverbrainerError(messages.not_reachable_yet(pod, run_id, status))
    if pod.host_public_key is None:
        raise OverbrainerError(
            f"run {run_id} has no pinned host key for pod {pod_id}: it cannot be reached "
            f"safely; delete it with `overbrainer pod rm {run_id}`"
        )
    seen = {"host": endpoint.host, "port": endpoint.port, "user": endpoint.username}
    ssh_dir = ctx.session.run_dir(run_id) / "ssh"
    if pod.endpoint != seen:
        fresh = ev.EndpointSeen(
            pod_id=pod_id, host=endpoint.host, port=endpoint.port, user=endpoint.username
        )
        # Decided on the fresh log: a second follower that saw the same endpoint first
        # has recorded it already.
        await ctx.session.journal.append(run_id, lambda s: decisions.endpoint_seen(s, fresh))
        try:
            write_ssh_config(ssh_dir, run_id, endpoint.host, endpoint.port, endpoint.username)
        except OSError as error:
            # Only `ssh -F` needs the file; this command reaches the pod without it.
            ctx.session.front.warn(
                f"cannot rewrite runs/{run_id}/ssh/config for pod {pod_id}'s new endpoint "
                f"({error.strerror or error}); `ssh -F` with it reaches the old one"
            )
    access = PodAccess(endpoint, client_key_path(ssh_dir), pod.host_public_key, ctx.root)
    return Reached(access, remote.started_at)


async def connect(
    ctx: PodContext, stack: contextlib.AsyncExitStack, reached: Reached, state: RunLog
) -> Executor:
    """The SSH connection to the run's pod. One that refuses (a pod just restarted, its
    sshd not up yet) is tried again, every ``poll``, for as long as a booting pod is
    given from its start (a pod up for longer: a few times); a signal stops waiting."""
    assert ctx.connect is not None
    run_id = state.run.run_id
    access = reached.access
    timing = ctx.timing
    try:
        try:
            return await stack.enter_async_context(ctx.connect(access))
        except TargetUnreachable as refused:
            within = connect_again_within(
                reached.started_at,
                ctx.server_now(),
                timing.ssh_within,
                timing.connect_attempts * timing.poll,
            )
            ctx.session.front.info(
                f"pod {state.pod.pod_id} of run {run_id} does not answer SSH at "
                f"{access.endpoint.host}:{access.endpoint.port} yet ({refused}); it may "
                f"be starting: trying again for up to {duration_text(within)}"
            )
            deadline = trio.current_time() + within
            while True:
                slept = await ctx.session.interrupts.race(partial(trio.sleep, timing.poll))
                if slept is None:
                    raise Interrupted(
                        f"interrupted while pod {state.pod.pod_id} of run {run_id} did not "
                        f"answer SSH yet: its job keeps running; "
                        f"`overbrainer train attach {run_id}` reaches it again"
                    ) from None
                try:
                    return await stack.enter_async_context(ctx.connect(access))
                except TargetUnreachable:
                    if trio.current_time() >= deadline:
                        raise
    except ExecError as error:
        raise OverbrainerError(
            f"cannot reach pod {state.pod.pod_id} of run {run_id} at "
            f"{access.endpoint.host}:{access.endpoint.port} ({error}); try "
            f"`overbrainer train attach {run_id}` again, or delete the pod with "
            f"`overbrainer pod rm {run_id}`"
        ) from error


def lost_reason(remote: Pod) -> str | None:
    """Why a pod Runpod still shows can no longer run its job — stopped (EXITED, ERROR),
    or restarted with none of its GPUs — or None."""
    if remote.status in (PodStatus.EXITED, PodStatus.ERROR):
        status = remote.raw_status or remote.status.value
        return f"pod {remote.id} is {status} (stopped) without the job's end"
    if remote.without_gpus:
        return (
            f"pod {remote.id} restarted with no GPU (it was created with {remote.gpu_count}): "
            "its job ended with the restart and cannot train there"
        )
    return None


async def record_lost(ctx: PodContext, state: RunLog) -> str | None:
    """The run's pod, confirmed gone under its running job with no bound of its watchdog
    passed, recorded gone with what it cost until now (Runpod's clock) and the run not
    failed: why it was lost, for the run to be recovered. None when the run is not running
    or a bound had passed (a new pod would meet the same bound): nothing recorded."""
    pod = state.pod
    pod_id = pod.pod_id
    now = ctx.server_now()
    if pod_id is None or state.run.state != RunState.running or bound_passed(pod, now):
        return None
    await end_cluster_of_gone(ctx, state, pod_id)
    uptime, spend = uptime_and_spend(pod.created_at, now, pod.cost_per_hour)
    await ctx.session.journal.append(
        state.run.run_id, lambda s: decisions.pod_lost(s, pod_id, uptime, spend)
    )
    return f"pod {pod_id} no longer exists"


async def record_gone(ctx: PodContext, run_id: str, pod_id: str) -> RunLog:
    """Record the run's pod found gone; a run still running fails with it (its job went
    with the pod)."""

    now = ctx.server_now()

    def gone(state: RunLog) -> list[ev.Event]:
        pod = state.pod
        if pod.pod_id != pod_id:
            return decisions.pod_gone(state, pod_id)
        # The watchdog's bound that had passed, if one had, is why it went; otherwise it is
        # counted until it was found gone (an upper bound: when it went is not known).
        passed = bound_passed(pod, now)
        if passed is not None:
            return decisions.pod_gone(state, pod_id, passed.value)
        uptime, spend = uptime_and_spend(pod.created_at, now, pod.cost_per_hour)
        return decisions.pod_gone(state, pod_id, uptime_seconds=uptime, spend=spend)

    async def work() -> RunLog:
        await end_cluster_of_gone(ctx, await ctx.session.journal.state(run_id), pod_id)
        return await ctx.session.journal.append(run_id, gone)

    # A cluster's primary gone: the rest of its cluster is deleted first.
    limit = 60.0 + ctx.timing.delete_limit
    state = await ctx.session.interrupts.shield(f"recording that pod {pod_id} is gone", limit, work)
    forget_key_if_done(ctx, run_id, state)
    return state
