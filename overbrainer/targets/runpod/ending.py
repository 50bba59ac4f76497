"""Ending a run's pod once its job ended: deleted once its results are home and verified,
kept, or left to its watchdog while results wait to be collected.

First the watchdog's log comes home (``runs/<id>/watchdog.log``), so what guarded the pod
can be read after the pod is gone. Then:

- a ``--keep-pod`` pod is marked kept (``pod.Kept``): from the job's start nothing but
  ``pod rm`` deletes it, whatever became of the results;
- results retrieved: ``.pod/retrieved`` is touched on the pod *first*, so its watchdog
  deletes it at its next check even if our delete fails; then the pod is deleted and
  waited for until Runpod no longer shows it (``delete.delete_pod``: ``pod.Deleting`` before
  the request, ``pod.Deleted`` with uptime and spend after);
- results not retrieved: the pod is left to its watchdog's retrieve grace
  (``pod.AwaitingRetrieval``) and the user is told how to collect them or delete it.

The whole of it is shielded from Ctrl-C: it acts on a pod that bills.
"""

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.types import PodState
from overbrainer.exec.base import Executor
from overbrainer.runpod import messages
from overbrainer.runpod.messages import Ending
from overbrainer.runpod.pod_scripts import RETRIEVED, WATCHDOG_LOG
from overbrainer.targets.runpod.delete import delete_pod
from overbrainer.targets.runpod.pods import PodContext, confirm_gone
from overbrainer.targets.runpod.provision import remote_run_dir

__all__ = ["LOG_COPY", "Ending", "copy_watchdog_log", "end_pod"]

LOG_COPY = "watchdog.log"
"""The watchdog's log, copied into ``runs/<id>/``."""

_LOG_CHUNK = 1 << 20
_LOG_LIMIT = 16 << 20  # a runaway log is cut here: its head tells the story
_SLACK = 120.0  # the most copying the log and touching the marker may take


async def copy_watchdog_log(ctx: PodContext, run_id: str, executor: Executor) -> bool:
    """Copy the pod's ``.pod/watchdog.log`` into ``runs/<id>/watchdog.log``; best effort
    (a warning says why it could not be copied). True when copied."""
    remote = f"{remote_run_dir(run_id)}/{WATCHDOG_LOG}"
    data = bytearray()
    try:
        while len(data) < _LOG_LIMIT:
            chunk = await executor.read_file(remote, len(data), _LOG_CHUNK)
            data += chunk
            if len(chunk) < _LOG_CHUNK:
                break
    except OverbrainerError as error:
        ctx.session.front.warn(f"cannot copy the watchdog's log of run {run_id} home: {error}")
        return False
    path = ctx.session.run_dir(run_id) / LOG_COPY
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))
    except OSError as error:
        ctx.session.front.warn(
            f"cannot write the watchdog's log of run {run_id} into runs/{run_id}/{LOG_COPY}: "
            f"{error.strerror or error}"
        )
        return False
    return True


async def end_pod(
    ctx: PodContext,
    run_id: str,
    executor: Executor,
    *,
    retrieved: bool,
    retrieve_grace_minutes: int,
    problem: str = "",
) -> Ending:
    """End the pod of run ``run_id`` whose job ended; see the module docstring.

    ``retrieved`` says whether the results are home and verified; ``problem`` why not.
    Shielded from Ctrl-C.

    Raises:
        DeleteUnconfirmed: the pod could not be confirmed deleted; it may still bill.
    """
    session = ctx.session

    async def work() -> Ending:
        state = await session.journal.state(run_id)
        pod = state.pod
        pod_id = pod.pod_id
        if pod_id is None or pod.deleted(pod_id):
            return Ending.deleted
        if pod.pods.get(pod_id) == PodState.deleting:
            # Another command (a second follower, `pod rm`) is deleting it: join that delete
            # rather than reach a pod on its way out.
            await delete_pod(ctx, run_id, pod_id, "retrieved")
            return Ending.deleted
        await copy_watchdog_log(ctx, run_id, executor)
        if pod.keep:
            await session.journal.append(run_id, lambda s: decisions.keep_pod(s, pod_id))
            return Ending.kept
        if not retrieved:
            detail = problem[:300]
            await session.journal.append(
                run_id, lambda s: decisions.await_retrieval(s, pod_id, detail)
            )
            if await _gone_under_retrieval(ctx, pod_id):
                session.front.warn(messages.gone_before_results(pod, run_id, problem))
            else:
                session.front.warn(
                    messages.awaiting_retrieval(pod, run_id, retrieve_grace_minutes, problem)
                )
            return Ending.awaiting_retrieval
        try:
            await executor.touch(f"{remote_run_dir(run_id)}/{RETRIEVED}")
        except OverbrainerError as error:
            # The delete below is what matters; the marker only backs it up.
            session.front.warn(
                f"cannot mark the results of run {run_id} retrieved on pod {pod_id} "
                f"({error}); deleting the pod anyway"
            )
        await delete_pod(ctx, run_id, pod_id, "retrieved")
        return Ending.deleted

    limit = ctx.timing.delete_limit + _SLACK
    return await session.interrupts.shield(f"ending the pod of run {run_id}", limit, work)


async def _gone_under_retrieval(ctx: PodContext, pod_id: str) -> bool:
    """Whether the pod whose results did not come home is gone (it vanished during their
    download, say): then no pod is "left running" for them. An unknown answer is not gone."""
    try:
        return await confirm_gone(ctx, pod_id)
    except OverbrainerError:
        return False
