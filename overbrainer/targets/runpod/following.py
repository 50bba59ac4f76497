"""What bounds following a job on its pod: the pod's deadline, its cost cap, and the pod lost.

Following never calls the API. It is bounded by the pod's deadline plus
:data:`DEADLINE_SLACK`: a job still followed then runs on a pod its watchdog should have
deleted, so the client deletes it and fails the run. The deadline is Runpod's
``createdAt`` plus ``max_hours``, counted on Runpod's clock (the ``Date`` of the API's last
answer carried forward on the monotonic clock): this machine's wall clock being hours off,
or jumping, neither deletes a healthy pod nor lets one run unbounded. The monotonic clock
itself can jump (a laptop waking up, a VM restored): a bound that seems due is read again
on Runpod's clock before anything is done about it (:func:`confirm_left`). When following loses
the pod, the run fails only once the pod is confirmed gone (``pods.confirm_gone``).

A pod created with a cost cap is also bounded by it (``runpod/cost_cap.py``): following
records when the cap is near and, a margin before the pod reaches it, the job is stopped,
its results so far retrieved and the pod deleted (``cost_cap``); its watchdog deletes it at
the cap whatever happens.
"""

from dataclasses import dataclass
from functools import partial
from typing import NoReturn

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import PodView, RunLog
from overbrainer.exec.base import ExecError
from overbrainer.lifecycle.target import Recover, Resume, TargetLost
from overbrainer.projections.summary import resume_clause
from overbrainer.runpod import clocks, cost_cap, messages
from overbrainer.runpod.decide import uptime_and_spend
from overbrainer.targets.runpod.delete import delete_pod
from overbrainer.targets.runpod.pods import PodContext, confirm_gone, note_clock
from overbrainer.targets.runpod.reach import lost_reason, reach, record_gone, record_lost
from overbrainer.train.metrics import MetricsSummary, summary_line
from overbrainer.utc import parse_utc

__all__ = [
    "DEADLINE_SLACK",
    "CostCapWatch",
    "at_cost_cap",
    "confirm_left",
    "cost_cap_message",
    "lost",
    "max_hours",
    "past_deadline",
    "seconds_left",
    "spend_so_far",
]

DEADLINE_SLACK = 5 * 60.0
"""How long past the pod's deadline a job may still be followed before the client deletes
the pod itself (the watchdog should have done it at the deadline)."""


def seconds_left(ctx: PodContext, state: RunLog) -> float:
    """How long the run's job may still be followed: until its pod's deadline plus
    :data:`DEADLINE_SLACK`, or its cost cap less ``cost_cap.FOLLOW_MARGIN``, whichever
    comes first, on Runpod's clock (infinite for a kept pod, which has neither)."""
    deadline = parse_utc(state.pod.deadline)
    if state.pod.keep or deadline is None:
        return float("inf")
    # Both on Runpod's clock, and from here on trio's monotonic one: no change of this
    # machine's wall clock moves it.
    now = ctx.server_now()
    by_deadline = max(0.0, (deadline - now).total_seconds() + DEADLINE_SLACK)
    return min(by_deadline, cost_cap.seconds_until(cost_cap.follow_until(state.pod), now))


CONFIRM_LIMIT = 60.0
"""How long reading Runpod's clock again may take, before a bound that seems due is acted
on as this machine carried Runpod's clock (well within :data:`DEADLINE_SLACK`)."""


async def confirm_left(ctx: PodContext, state: RunLog) -> float:
    """:func:`seconds_left`, once Runpod's clock was read again (the ``Date`` of one read of
    the pod): following's bound is carried on this machine's monotonic clock, which a
    laptop waking up or a VM restored can move hours at once. When Runpod's clock says the
    carried one ran off (:data:`clocks.LARGE_OFFSET` or more), the jump is recorded in the
    run's log (``run.ClockJumped``) and said, and nothing else is done with it. A read
    that fails leaves the bound as carried. Never raises."""
    run_id, pod_id = state.run.run_id, state.pod.pod_id
    if pod_id is None:
        return seconds_left(ctx, state)
    session = ctx.session
    carried = ctx.server_now()
    problem = await _read_clock_again(ctx, pod_id)
    if problem is not None:
        session.front.warn(
            f"could not read Runpod's clock to confirm the bound of pod {pod_id} ({problem}): "
            "acting on it as this machine counted it"
        )
        return seconds_left(ctx, state)
    jumped = (carried - ctx.server_now()).total_seconds()
    left = seconds_left(ctx, state)
    if not clocks.large(jumped):
        return left
    try:
        await session.journal.append(run_id, [ev.ClockJumped(seconds=float(round(jumped)))])
        # This machine's wall clock may have moved with it: said once, as at any answer.
        await note_clock(ctx, run_id)
    except OverbrainerError as error:
        session.front.warn(f"{error} (while recording that this machine's clock jumped)")
    if left > 0:
        session.front.warn(
            f"run {run_id}: this machine's clock jumped ({clocks.offset_text(jumped)} "
            f"Runpod's since its last answer); by Runpod's clock pod {pod_id} has not "
            f"reached its bound: following goes on (for at most {clocks.span(left)})"
        )
    return left


async def _read_clock_again(ctx: PodContext, pod_id: str) -> OverbrainerError | None:
    """Read the pod once, for the ``Date`` of Runpod's answer (``ctx.server_now`` then
    carries it); the error when that read failed (none when it took too long: the clock
    stays as carried)."""
    try:
        with trio.move_on_after(CONFIRM_LIMIT):
            await ctx.client.get_pod(pod_id)
    except OverbrainerError as error:
        return error
    return None


def cost_cap_message(pod: PodView) -> str:
    """Why a run ends at its pod's cost cap (``run.Ended``'s message)."""
    return (
        f"cost_cap: pod {pod.pod_id} was about to reach its cost cap "
        f"({cost_cap.cap_text(pod)}); overbrainer stopped its job and deleted the pod"
    )


@dataclass
class CostCapWatch:
    """Called at each poll while the job is followed: once the pod has cost
    ``cost_cap.NEAR`` of its cap (on Runpod's clock), record it (``pod.CostCapNear``) and
    say so, once; nothing for a pod without a cap or whose log says it already.
    ``at_bound``: called as following stops at the cap, which is near by then (recorded
    without a word, whatever a clock rounding says)."""

    ctx: PodContext
    run_id: str
    pod: PodView
    at_bound: bool = False
    done: bool = False

    async def __call__(self) -> None:
        pod = self.pod
        at = cost_cap.cap_at(pod, cost_cap.NEAR)
        cap = cost_cap.max_cost(pod)
        if self.done or pod.cost_cap_near or at is None or cap is None:
            return
        if pod.pod_id is None or pod.cost_per_hour is None:
            return
        if not self.at_bound and self.ctx.server_now() < at:
            return
        if not self.at_bound:
            # Said only once Runpod's clock, read again, agrees: this machine's monotonic
            # clock may have jumped since Runpod's last answer.
            await _read_clock_again(self.ctx, pod.pod_id)
            if self.ctx.server_now() < at:
                return
        self.done = True
        pod_id, rate = pod.pod_id, pod.cost_per_hour
        session = self.ctx.session
        try:
            await session.journal.append(
                self.run_id, lambda s: decisions.cost_cap_near(s, pod_id, cap, rate)
            )
        except OverbrainerError as error:
            # Following goes on: the bound itself does not depend on this record.
            session.front.warn(f"{error} (while recording that pod {pod_id} nears its cost cap)")
        if self.at_bound:
            return
        margin = cost_cap.FOLLOW_MARGIN / 60
        session.front.warn(
            f"run {self.run_id}: pod {pod_id} has cost 95 % of its cap "
            f"({cost_cap.cap_text(pod)}); its watchdog asks the job to save a checkpoint and "
            f"stop; a job still running up to {margin:g} min before the cap is stopped, its "
            "results so far retrieved and the pod deleted"
        )


async def at_cost_cap(ctx: PodContext, run_id: str, message: str, *, collected: bool) -> RunLog:
    """The pod is at its cost cap (less the margin), its job stopped and its results
    collected (``collected``) or not: delete the pod (``cost_cap``) and, when the run's end
    is not recorded yet, fail it with ``message``, its results not home. The delete's
    failure is raised once the run's end is recorded."""
    session = ctx.session
    state = await session.journal.state(run_id)
    pod_id = state.pod.pod_id
    assert pod_id is not None
    problem: OverbrainerError | None = None
    try:
        await delete_pod(ctx, run_id, pod_id, "cost_cap")
    except OverbrainerError as error:
        problem = error
    if not collected:
        why = "its job could not be stopped and collected before the pod's cost cap"
        state = await session.journal.append(
            run_id, lambda s: decisions.fail_at_cost_cap(s, message, why)
        )
    else:
        state = await session.journal.state(run_id)
    if problem is not None:
        raise problem
    return state


def spend_so_far(pod: PodView, ctx: PodContext, earlier: float = 0.0) -> float | None:
    """The pod's spend until now: its rate times its uptime on Runpod's clock (None when
    unknown), plus ``earlier``: what the run's earlier pods cost (a recovered run's)."""
    spend = uptime_and_spend(pod.created_at, ctx.server_now(), pod.cost_per_hour)[1]
    return None if spend is None else spend + earlier


def max_hours(pod: PodView, default: float) -> float:
    """The bound the pod was created with (``default``, the target's, for logs that do
    not say)."""
    for attempt in reversed(pod.attempts):
        if attempt.get("pod_id") == pod.pod_id and attempt.get("max_hours") is not None:
            return float(attempt["max_hours"])
    return default


async def past_deadline(ctx: PodContext, run_id: str, *, default_hours: float) -> NoReturn:
    """The job was still followed past the pod's deadline (plus the slack): delete the pod
    (its watchdog should have) and fail the run; the error says so."""
    session = ctx.session
    state = await session.journal.state(run_id)
    pod = state.pod
    assert pod.pod_id is not None
    pod_id = pod.pod_id
    message = (
        f"the job was still running {DEADLINE_SLACK / 60:g} min past the deadline of pod "
        f"{pod_id} ({pod.deadline}, max_hours = {max_hours(pod, default_hours):g}); "
        "overbrainer deleted the pod"
    )
    problem: OverbrainerError | None = None
    try:
        await delete_pod(ctx, run_id, pod_id, "deadline")
    except OverbrainerError as error:
        problem = error
    state = await session.journal.append(run_id, lambda s: decisions.fail_past_deadline(s, message))
    metrics = state.run.metrics
    summary = MetricsSummary.from_dict(metrics) if metrics else None
    session.front.result(summary_line(run_id, state.run.state, summary, None))
    if problem is not None:
        raise OverbrainerError(f"run {run_id} failed: {message}, but: {problem}")
    raise OverbrainerError(
        f"run {run_id} failed: {message}; raise max_hours of target {state.run.target} in "
        f"overbrainer.toml if the job needs longer{resume_clause(state)}"
    )


async def lost(
    ctx: PodContext,
    run_id: str,
    state: RunLog,
    lost: Exception,
    *,
    default_hours: float,
    recovers: bool = False,
    unreachable_minutes: float = 0.0,
) -> Recover | Resume | None:
    """Following lost the pod (``lost`` says how): the run fails only if the pod is
    confirmed gone; otherwise following stops and the error says the pod is still there.
    Returns None when a signal stopped the check (following then stops as for any signal).

    ``recovers``: the target recovers a run whose pod is lost (``max_recoveries``). A pod
    confirmed gone with no bound of its watchdog passed (recorded gone, with its spend, the
    run not failed), or one Runpod shows stopped (EXITED, ERROR) or without its GPUs under
    the job, is then lost: :class:`Recover`, for the caller to recover the run. A pod its
    watchdog deleted at a bound fails the run as before: a new pod would meet the same
    bound. A pod still running is looked at again for ``unreachable_minutes``: one that
    answers SSH again is followed again (:class:`Resume`); one that does not is lost.
    """
    session = ctx.session
    pod = state.pod
    assert pod.pod_id is not None
    pod_id = pod.pod_id
    try:
        checked = await session.interrupts.race(partial(confirm_gone, ctx, pod_id))
    except OverbrainerError as error:
        await _detach(ctx, run_id)
        raise OverbrainerError(
            f"{lost}; whether pod {pod_id} still exists is unknown ({error}): check "
            f"`overbrainer pod ls`, delete it with `overbrainer pod rm {run_id}`"
        ) from error
    if checked is None:
        return None
    if checked.value and recovers and (why := await record_lost(ctx, state)) is not None:
        return Recover(why)
    if checked.value:
        state = await record_gone(ctx, run_id, pod_id)
        resume = resume_clause(state)
        if state.pod.delete_reason == "cost_cap":
            raise OverbrainerError(
                f"run {run_id} failed: pod {pod_id} reached its cost cap "
                f"({cost_cap.cap_text(state.pod)}) and its watchdog deleted it, and its job "
                f"went with it; raise max_cost_usd of target {state.run.target} in "
                f"overbrainer.toml if the job needs more{resume}"
            )
        deadline = parse_utc(pod.deadline)
        if not pod.keep and deadline is not None and ctx.server_now() >= deadline:
            # Runpod's clock (just read again) says why: the watchdog kept the bound.
            raise OverbrainerError(
                f"run {run_id} failed: pod {pod_id} reached its deadline ({pod.deadline}, "
                f"max_hours = {max_hours(pod, default_hours):g} after its creation) and its "
                "watchdog deleted it, and its job went with it; raise max_hours of target "
                f"{state.run.target} in overbrainer.toml if the job needs longer{resume}"
            )
        raise OverbrainerError(
            f"run {run_id} failed: pod {pod_id} no longer exists (Runpod answered "
            "'no such pod' again and again and no longer lists it), and its job went with "
            "it; start again with `overbrainer train`" + (resume or "")
        )
    stopped = await lost_status(ctx, pod_id) if recovers else None
    if stopped is not None:
        return Recover(stopped)
    if recovers:
        return await _until_answering(ctx, state, unreachable_minutes)
    await _detach(ctx, run_id)
    raise OverbrainerError(
        f"{lost}; pod {pod_id}{messages.rate(pod)} is still there: delete it with "
        f"`overbrainer pod rm {run_id}`"
    )


async def _until_answering(
    ctx: PodContext, state: RunLog, minutes: float
) -> Recover | Resume | None:
    """Look at a pod Runpod shows but SSH does not reach, every poll, for ``minutes``: one
    that answers SSH again (at the endpoint Runpod shows now) is :class:`Resume`; one gone,
    stopped or without its GPUs meanwhile, or still not answering at the end, is
    :class:`Recover`; None when a signal came first."""
    session = ctx.session
    run_id = state.run.run_id
    pod_id = state.pod.pod_id
    assert pod_id is not None and ctx.connect is not None
    session.front.warn(
        f"pod {pod_id} of run {run_id} does not answer SSH; looking at it again for up to "
        f"{minutes:g} min (unreachable_minutes of target {state.run.target}), then "
        "recovering the run on a new pod"
    )
    until = trio.current_time() + minutes * 60
    while trio.current_time() < until:
        if await session.interrupts.race(partial(trio.sleep, ctx.timing.poll)) is None:
            return None
        why = await lost_status(ctx, pod_id)
        if why is not None:
            return Recover(why)
        state = await session.journal.state(run_id)
        try:
            reached = await reach(ctx, state, recovers=True)
            if reached is None:
                # Gone past a bound of its watchdog, or ended by another command: recorded.
                state = await session.journal.state(run_id)
                raise OverbrainerError(
                    f"run {run_id} {state.run.state}: pod {pod_id} is gone; see "
                    f"`overbrainer events {run_id}`"
                )
            async with ctx.connect(reached.access):
                pass
        except TargetLost as gone:
            return Recover(gone.why)
        except ExecError:
            continue
        except OverbrainerError:
            if state.final:
                raise
            continue
        session.front.info(f"pod {pod_id} of run {run_id} answers SSH again: following on")
        return Resume()
    return Recover(
        f"pod {pod_id} did not answer SSH for {minutes:g} min (unreachable_minutes of "
        f"target {state.run.target})"
    )


async def lost_status(ctx: PodContext, pod_id: str) -> str | None:
    """Why the pod Runpod shows can no longer run its job (stopped; restarted with no GPU:
    ``reach.lost_reason``), or None: any other state, or the read failed (nothing known)."""
    try:
        remote = await ctx.client.get_pod(pod_id)
    except OverbrainerError:
        return None
    return None if remote is None else lost_reason(remote)


async def _detach(ctx: PodContext, run_id: str) -> None:
    """Following stops; the job may run on (``run.Detached``)."""
    await ctx.session.journal.append(run_id, lambda s: decisions.detach(s, "pod unreachable"))
