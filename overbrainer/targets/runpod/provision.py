"""Provisioning a run's pod: from nothing to a pod whose SSH answers with the pinned host
key and whose watchdog said ``ready``, before the run's job exists.

The walk: choose the GPU types to try and the bound of each
(:mod:`~overbrainer.runpod.candidates`, from Runpod's catalog, read once before the walk
when ``gpu_types = "auto"`` or ``max_cost_usd`` needs it; none qualifying refuses the run
before any create) and record them (``CandidatesChosen``); generate the run's keys; for
each candidate in order, append ``AttemptSent``
(durably, before the create leaves), create, and settle the pod — wait until SSH answers
with the pinned host key and the pod's watchdog wrote ``ready``. A pod that does not get
there in time, vanishes or dies is deleted and the next type is tried; a watchdog that
refuses, or a failed bootstrap, deletes the pod and refuses the run; an ambiguous create
is reconciled through the run marker before anything is sent again; a delete that cannot
be confirmed stops the walk, since no pod is created while another may still bill.

What to do next is decided by the pure machine :class:`overbrainer.runpod.provisioning.Walk`
(the candidate walk, resends, rate limits, the ways out); this module is its driver: it
performs each command (the create, the listing, the waits, the deletes, the log's appends)
with trio, httpx and the journal, and feeds back what came of it.

Waiting for capacity (the target's ``wait_for_capacity``): when every GPU type was tried
and some had no capacity, the machine asks the time and the walk waits (recording
``pod.CapacityAwaited`` and showing what it waits for and until when), then tries every
type again; the machine decides how long, never past the wait's end.

Ctrl-C: the walk runs shielded, so a create or a delete is never torn. It checks for
Ctrl-C before each create, and its waits (a pod booting, a rate limit, capacity) are races
the first Ctrl-C ends. Then the pod, if any, is deleted (shielded), ``run.Interrupted`` is appended
and :class:`ProvisionInterrupted` raised, its message saying from the run's log whether a
pod of it may be left (:func:`~overbrainer.runpod.decide.interrupted_before_job`). The
caller appends the run's ``run.Ended``, as for every other error here.

The SSH connection is a seam (:data:`~overbrainer.targets.runpod.pods.Connect`): MockClock tests
use an in-memory executor, production :func:`pinned_ssh`.
"""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TypeVar

import trio

from overbrainer.config.model import RunpodTarget
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import (
    ExecError,
    Executor,
    HostKeyRefused,
    Runtime,
)
from overbrainer.exec.nodes import NodesExecutor
from overbrainer.front.interrupts import ShieldTimeout, StopRequested
from overbrainer.plurals import plural
from overbrainer.projections.words import duration_text
from overbrainer.runpod import decide
from overbrainer.runpod import provisioning as machine
from overbrainer.runpod.candidates import (
    Candidate,
    Chosen,
    NoCandidate,
    Wanted,
    choose,
    shortened_text,
    wanted_of,
)
from overbrainer.runpod.client import CreateCluster, CreateFailed, CreatePod, RunpodError
from overbrainer.runpod.decide import (
    BootKind,
    Step,
    VerdictKind,
    interrupted_before_job,
    rate_text,
)
from overbrainer.runpod.keys import RunKeys, write_run_keys, write_ssh_config
from overbrainer.runpod.models import (
    GpuType,
    NetworkVolume,
    Pod,
    SshEndpoint,
    UnsafeSshEndpoint,
)
from overbrainer.runpod.pod_scripts import (
    BOOTSTRAP_FAILED,
    VERDICT,
    StallBound,
    VolumeLink,
    pod_args,
    pod_env,
    save_before_seconds,
)
from overbrainer.runpod.provisioning import Command, Done
from overbrainer.runpod.volumes import VOLUME_MOUNT, find_volume
from overbrainer.targets.runpod.budget import month_budget
from overbrainer.targets.runpod.delete import DeleteUnconfirmed, delete_pod, forget_key_if_done
from overbrainer.targets.runpod.model_cache import volume_hf_home
from overbrainer.targets.runpod.pods import Connect, PodAccess, PodContext, pod_ls_hint
from overbrainer.targets.runpod.pull import show_pull, while_showing
from overbrainer.targets.runpod.volume_data import VolumeData
from overbrainer.utc import iso_utc

__all__ = [
    "CreateStopped",
    "NoGpuCandidate",
    "NothingPlaced",
    "OverBudget",
    "PodRefused",
    "ProvisionCancelled",
    "ProvisionError",
    "ProvisionInterrupted",
    "ProvisionOvertaken",
    "Provisioned",
    "ReadyPod",
    "interrupted_before_job",
    "open_provisioned",
    "pinned_ssh",
    "provision",
    "remote_run_dir",
]

T = TypeVar("T")

_VERDICT_LIMIT = 4096


# --- results and errors ----------------------------------------------------------------


class ProvisionError(OverbrainerError):
    """Provisioning ended without a ready pod; the message says why and what is left."""


class NothingPlaced(ProvisionError):
    """Every GPU type was tried; the message names each attempt's outcome."""


class NoGpuCandidate(ProvisionError):
    """No GPU type may be tried (none of the catalog qualifies for ``"auto"``, the cost cap
    pays for no hour of any, or the catalog they need could not be read): nothing was
    created; the message names the setting to change."""


class OverBudget(ProvisionError):
    """The run could pass the project's monthly budget (``[project] monthly_budget_usd``):
    no pod was created; the message says the month's spend, the budget, the run's bound
    and what to change."""


class CreateStopped(ProvisionError):
    """Runpod refused a create in a way no other GPU type fixes (balance, malformed
    request, API key, a rate limit that does not end), or a create's outcome could not be
    found out. No further create is sent."""


class PodRefused(ProvisionError):
    """The pod's watchdog refused to guard it, or its bootstrap failed: the pod was deleted
    and the run is refused (no further GPU type is tried)."""


class ProvisionCancelled(ProvisionError):
    """``train cancel`` asked (through the log) for the run to stop while its pod was being
    started: the request was taken between two steps and the pod deleted. The caller
    ends the run ``cancelled`` with ``reason``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProvisionOvertaken(ProvisionError):
    """Another command ended the run (``pod rm --force``, a ``train attach`` that found it
    abandoned) or deleted its pod while this one was starting it: nothing more is done,
    and the pod this walk held is deleted if the other command did not."""


class ProvisionInterrupted(Interrupted):
    """Ctrl-C before the job existed. The message is :func:`interrupted_before_job`'s;
    ``stage`` says where provisioning stopped."""

    def __init__(self, message: str, *, stage: str) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass(frozen=True)
class Provisioned:
    """A pod that answered SSH with the pinned host key and whose watchdog said ``ready``.

    ``remote_dir`` is the run's directory relative to the executor's root
    (``access.root``); ``rate`` the first non-zero hourly rate Runpod gave (None if none
    yet); ``deadline`` when the watchdog deletes the pod whatever happens (Runpod's
    ``createdAt`` plus ``max_hours``, on Runpod's clock).
    """

    run_id: str
    pod_id: str
    pod_name: str
    attempt: int
    gpu_type: str
    data_center: str | None
    rate: float | None
    deadline: datetime
    access: PodAccess
    remote_dir: str
    # A cluster's nodes by rank (the first is ``access``, the primary's); empty for a pod.
    nodes: tuple[PodAccess, ...] = ()
    cluster_id: str | None = None

    @property
    def endpoint(self) -> SshEndpoint:
        """The pod's direct SSH endpoint."""
        return self.access.endpoint


@dataclass(frozen=True)
class ReadyPod:
    """A provisioned pod and the open SSH connection the run's job starts through (a
    cluster's: every node's, as one executor); ``primary``: the pod's own, or rank 0's."""

    pod: Provisioned
    executor: Executor
    primary: Executor


def remote_run_dir(run_id: str) -> str:
    """The run's directory on its pod, relative to the executor's root."""
    return f"runs/{run_id}"


def pinned_ssh(runtime: Runtime | None = None, *, connect_timeout: float = 20.0) -> Connect:
    """The production :data:`Connect`: the SSH executor in pinned mode (the run's client key
    only, the one pinned host key, no agent, no ssh config), rooted at ``access.root``."""

    def connect(access: PodAccess) -> contextlib.AbstractAsyncContextManager[Executor]:
        from overbrainer.exec.ssh import PinnedHost, open_ssh

        target = PinnedHost(
            host=access.endpoint.host,
            port=access.endpoint.port,
            user=access.endpoint.username,
            client_key=access.client_key_path,
            host_key=access.host_public_key,
        )
        return open_ssh(
            target, workdir=access.root, runtime=runtime, connect_timeout=connect_timeout
        )

    return connect


# --- entry points ----------------------------------------------------------------------


async def provision(
    ctx: PodContext,
    run_id: str,
    spec: RunpodTarget,
    *,
    keep: bool,
    api_base: str | None = None,
    catalog: Sequence[GpuType] | None = None,
    monthly_budget: float | None = None,
    stall: StallBound | None = None,
    volume_data: VolumeData | None = None,
) -> Provisioned:
    """Create run ``run_id``'s pod on the first GPU type of ``spec`` that gives a ready one.

    ``keep`` is ``--keep-pod`` (told to the watchdog); ``api_base`` is given to the pod's
    watchdog only when it is not Runpod's own API (the fake one); ``catalog`` is Runpod's
    GPU catalog when the command already read it (the preflight), else it is read here
    when the choice needs it. ``monthly_budget`` is the project's (``[project]
    monthly_budget_usd``): a run whose bound could pass what the month has left creates no
    pod. The whole walk is shielded; see the module docstring for Ctrl-C. The run must
    exist and be preparing. ``stall`` is the stall rule told to the watchdog (None: none).
    ``volume_data``: the run's files kept on the target's volume (``volume = "NAME"``),
    put there once the volume is attached, before the first create.

    Raises:
        NoGpuCandidate: no GPU type may be tried; nothing was created.
        OverBudget: the run could pass the monthly budget; nothing was created.
        NothingPlaced: every GPU type was tried (the message names each outcome).
        CreateStopped: Runpod refused in a way no other type fixes (402, 422, …).
        PodRefused: the watchdog refused the pod, or its bootstrap failed.
        DeleteUnconfirmed: a pod could not be confirmed deleted; the walk stopped.
        ProvisionInterrupted: Ctrl-C; the message says whether a pod may be left.
    """
    if ctx.connect is None:
        raise ValueError("provisioning needs PodContext.connect")
    state = await ctx.session.journal.state(run_id)
    wanted = wanted_of(state.run.target, spec, priced=monthly_budget is not None)
    chosen = await _choose(ctx, wanted, catalog)
    if monthly_budget is not None:
        # Asked again here, candidates chosen: another run may have spent since `train`
        # looked before creating this one.
        budget = await month_budget(
            ctx.session, monthly_budget, wanted, chosen, ctx.clock(), run_id=run_id
        )
        if not budget.fits:
            raise OverBudget(budget.refusal(state.run.target))
    walk = _Walk(
        ctx,
        run_id,
        spec,
        keep=keep,
        api_base=api_base,
        wanted=wanted,
        chosen=chosen,
        stall=stall,
        volume_data=volume_data,
    )
    limit = ctx.timing.walk_limit(len(chosen.candidates), spec.capacity_wait_seconds)
    if volume_data is not None:
        limit += volume_data.allowance()
    try:
        return await ctx.session.interrupts.shield(
            f"provisioning a pod for run {run_id}", limit, walk.run
        )
    except ShieldTimeout as error:
        raise ProvisionError(
            f"provisioning a pod for run {run_id} did not end within {limit:g} s; a pod of "
            f"it may be left: {pod_ls_hint(run_id)}"
        ) from error


async def _choose(ctx: PodContext, wanted: Wanted, catalog: Sequence[GpuType] | None) -> Chosen:
    """The candidates, from ``catalog`` or (when the choice needs one) a single read of it,
    availability included for the pod's GPU count."""
    if catalog is None and wanted.needs_catalog:
        try:
            catalog = await ctx.client.list_gpu_types(
                availability=True, gpu_count=wanted.gpu_count, product=wanted.product
            )
        except RunpodError as error:
            ctx.session.front.warn(f"cannot read Runpod's GPU catalog: {error}")
            catalog = None
    try:
        return choose(wanted, catalog)
    except NoCandidate as error:
        raise NoGpuCandidate(str(error)) from None


@contextlib.asynccontextmanager
async def open_provisioned(
    ctx: PodContext,
    run_id: str,
    spec: RunpodTarget,
    *,
    keep: bool,
    api_base: str | None = None,
    catalog: Sequence[GpuType] | None = None,
    monthly_budget: float | None = None,
    stall: StallBound | None = None,
    volume_data: VolumeData | None = None,
) -> AsyncIterator[ReadyPod]:
    """:func:`provision`, then hold the SSH connection the job starts through.

    The connection is opened here, outside provisioning's shield and races, so it can
    live as long as the ``async with`` block (the probes of the walk used short-lived
    ones). A pod that cannot be reached again (``timing.connect_attempts`` tries,
    ``timing.poll`` apart) is deleted and the run fails. Leaving the block closes the
    connection only: what becomes of the pod is the caller's decision.
    """
    ready = await provision(
        ctx,
        run_id,
        spec,
        keep=keep,
        api_base=api_base,
        catalog=catalog,
        monthly_budget=monthly_budget,
        stall=stall,
        volume_data=volume_data,
    )
    assert ctx.connect is not None  # provision checked it
    async with contextlib.AsyncExitStack() as stack:
        executors: list[Executor] = []
        for rank, access in enumerate(ready.nodes or (ready.access,)):
            executor: Executor | None = None
            problem: ExecError | None = None
            for attempt in range(max(1, ctx.timing.connect_attempts)):
                if attempt:
                    await trio.sleep(ctx.timing.poll)
                try:
                    executor = await stack.enter_async_context(ctx.connect(access))
                    break
                except HostKeyRefused as error:
                    problem = error
                    break
                except ExecError as error:
                    problem = error
            if executor is None:
                await _give_up_ready_pod(ctx, ready, problem, rank)
            assert executor is not None
            executors.append(executor)
        if ready.cluster_id is None:
            yield ReadyPod(ready, executors[0], executors[0])
        else:
            nodes = NodesExecutor(executors, f"cluster {ready.cluster_id}")
            yield ReadyPod(ready, nodes, executors[0])


async def _give_up_ready_pod(
    ctx: PodContext, ready: Provisioned, problem: Exception | None, rank: int = 0
) -> None:
    """Delete a ready pod the job's connection could not reach, and fail the run; a
    cluster's node (of ``rank``) is named, and the whole cluster deleted with its primary."""
    run_id = ready.run_id
    what, gone = f"pod {ready.pod_id}", "it was deleted"
    detail = f"SSH failed once the pod was ready: {problem}"
    if ready.cluster_id is not None:
        what = f"node {rank} of cluster {ready.cluster_id} (primary pod {ready.pod_id})"
        gone = "the cluster was deleted"
        detail = f"SSH to node {rank} failed once the cluster was ready: {problem}"
    await ctx.session.journal.append(
        run_id,
        [
            ev.AttemptResolved(
                n=ready.attempt,
                result="not_ready",
                pod_id=ready.pod_id,
                detail=detail,
            )
        ],
    )
    await delete_pod(ctx, run_id, ready.pod_id, "not_ready")
    raise ProvisionError(
        f"{what} of run {run_id} was ready but could not be reached again "
        f"({problem}); {gone}. Run `overbrainer train` again"
    )


# --- the walk --------------------------------------------------------------------------


class _Stop(Exception):
    """Ctrl-C was noted; ``stage`` says where the walk stopped."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


class _Cancel(Exception):
    """A cancel asked through the log was found between two steps, at ``stage``."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


class _Overtaken(Exception):
    """The fresh log says another command ended the run or is deleting the walk's pod."""

    def __init__(self, state: RunLog) -> None:
        super().__init__(state.run.state)
        self.state = state


@dataclass(frozen=True)
class _Booted:
    """How waiting for a pod to be ready ended."""

    kind: str  # ready, refused, not_ready, vanished, dead
    detail: str = ""
    endpoint: SshEndpoint | None = None


class _Walk:
    """One provisioning walk; see :func:`provision`."""

    def __init__(
        self,
        ctx: PodContext,
        run_id: str,
        spec: RunpodTarget,
        *,
        keep: bool,
        api_base: str | None,
        wanted: Wanted,
        chosen: Chosen,
        stall: StallBound | None = None,
        volume_data: VolumeData | None = None,
    ) -> None:
        self.ctx = ctx
        self.stall = stall
        self.volume_data = volume_data
        # What the pods' bootstrap links from the run's directory into the volume.
        self.volume_links: list[VolumeLink] = []
        self.wanted = wanted
        self.chosen = chosen
        # The candidate being tried (its bound and price go into the create and the log).
        self.current: Candidate = chosen.candidates[0]
        self.run_id = run_id
        self.spec = spec
        self.keep = keep
        self.api_base = api_base
        self.journal = ctx.session.journal
        self.front = ctx.session.front
        self.interrupts = ctx.session.interrupts
        self.timing = ctx.timing
        self.remote_dir = remote_run_dir(run_id)
        # What to do next is the machine's (which pod is held, what is sent again);
        # this class performs its commands and remembers what they need.
        self.machine = machine.Walk(
            chosen.candidates,
            machine.Policy(
                resends=ctx.timing.resends,
                rate_limited=ctx.timing.rate_limited,
                max_retry_after=ctx.timing.max_retry_after,
                capacity_wait=spec.capacity_wait_seconds,
                capacity_first=ctx.timing.capacity_first,
                capacity_cap=ctx.timing.capacity_cap,
            ),
        )
        self.walk_first = 1  # the number of the first attempt of the latest walk
        self.then: list[Command] = []  # the machine's answer to the pod just created
        self.keys: RunKeys | None = None
        # The attempt being made: its number, pod name, GPU type and when it was sent.
        self.n = 0
        self.name = ""
        self.gpu_type = self.current.gpu_type
        self.sent_at = 0.0
        self.created: dict[str, Pod] = {}
        self.ready: Provisioned | None = None
        self.failure: BaseException | None = None  # the error a failing walk raises
        self.deleted_ok = False  # a way out's delete was confirmed
        self.asker = ""  # who asked for the cancel being taken
        self.rate: float | None = None
        # When each pod this walk created must be gone (Runpod's clock).
        self.deadlines: dict[str, datetime] = {}
        # The network volume the pods mount: the target's id, or its volume's once found.
        self.volume_id: str | None = spec.network_volume_id
        # The cluster of each primary pod this walk created (a target of many nodes).
        self.clusters: dict[str, str] = {}

    @property
    def live(self) -> str | None:
        """The pod this walk created and has not handed to a delete yet (the machine's)."""
        return self.machine.live

    async def run(self) -> Provisioned:
        """The whole walk (inside provisioning's shield): the machine decides, this
        performs its commands and feeds back what came of them."""
        commands: list[Command]
        try:
            await self._record_candidates()
            self.keys = await self._keys()
            await self._attach_volume()
            await self._fill_volume()
            commands = self.machine.start()
        except BaseException as error:
            commands = self._way_out(error)
        while True:
            then: list[Command] | None = None
            for command in commands:
                if isinstance(command, Done):
                    return await self._end(command.outcome)
                try:
                    then = await self._perform(command)
                except BaseException as error:
                    if self.machine.done:
                        # The walk is already ending: its own error is the one to say.
                        if isinstance(error, OverbrainerError):
                            await self._forget_key()
                        raise
                    then = self._way_out(error)
                if then is not None:
                    break
            assert then is not None, "the machine's commands end with Done or an event"
            commands = then

    def _way_out(self, error: BaseException) -> list[Command]:
        """Tell the machine how the walk is being left."""
        event: machine.Event
        if isinstance(error, _Stop):
            event = machine.Interrupted(error.stage)
        elif isinstance(error, _Cancel):
            event = machine.Cancelled(error.stage)
        elif isinstance(error, _Overtaken):
            event = machine.Overtaken()
        else:
            self.failure = error
            event = machine.Failed()
        return self.machine.send(event)

    async def _perform(self, command: Command) -> list[Command] | None:
        """Do ``command``: the machine's next commands when it gave an event, else None."""
        match command:
            case machine.SendCreate(candidate):
                return await self._send(candidate)
            case machine.Reconcile(detail):
                return await self._reconcile_sent(detail)
            case machine.Wait(seconds, why):
                await self._race(why, partial(self._sleep_watching, seconds, why))
                return self.machine.send(machine.Waited())
            case machine.ReadClock():
                return self.machine.send(machine.Clock(trio.current_time()))
            case machine.AwaitCapacity(seconds, until, since, walks):
                await self._await_capacity(seconds, until, since, walks)
                return self.machine.send(machine.Waited())
            case machine.Settle(pod_id):
                return await self._settle(self.created[pod_id])
            case machine.Resolve(result, detail, pod_id):
                await self._resolve(self.n, result, detail, pod_id)
            case machine.Record(what, stage):
                await self._record_ending(what, stage)
            case machine.DeletePod(pod_id, reason, strict):
                await self._delete(pod_id, reason, strict=strict)
            case _:
                raise TypeError(f"not a command to perform: {command!r}")
        return None

    async def _forget_key(self) -> None:
        # No pod left to log in to: the client key has no further use.
        forget_key_if_done(self.ctx, self.run_id, await self.journal.state(self.run_id))

    async def _end(self, outcome: machine.Outcome) -> Provisioned:
        """The walk's end: the ready pod, or the error that says why there is none."""
        run_id = self.run_id
        if outcome.kind == "ready":
            assert self.ready is not None
            return self.ready
        if outcome.kind == "interrupted":
            state = await self.journal.state(run_id)
            forget_key_if_done(self.ctx, run_id, state)
            raise ProvisionInterrupted(interrupted_before_job(state), stage=outcome.stage)
        if outcome.kind == "overtaken":
            state = await self.journal.state(run_id)
            forget_key_if_done(self.ctx, run_id, state)
            done = await _what_others_did(self.ctx, run_id, state)
            raise ProvisionOvertaken(
                f"run {run_id} {done} while this command was starting its pod; nothing "
                f"more is done here (see `overbrainer events {run_id}`)"
            )
        if outcome.kind == "failed":
            assert self.failure is not None
            if isinstance(self.failure, OverbrainerError):
                await self._forget_key()
            raise self.failure
        await self._forget_key()
        if outcome.kind == "cancelled":
            reason = f"cancelled before its job started{self.asker}"
            deleted = f"; pod {outcome.deleted} was deleted" if self.deleted_ok else ""
            raise ProvisionCancelled(f"run {run_id} {reason}{deleted}", reason=reason)
        if outcome.kind == "nothing_placed":
            state = await self.journal.state(run_id)
            if not outcome.walks:
                raise NothingPlaced(decide.nothing_placed(run_id, state.pod.attempts))
            last = [a for a in state.pod.attempts if int(a.get("n", 0)) >= self.walk_first]
            waited = (
                f"waited {duration_text(outcome.waited)} for capacity (wait_for_capacity = "
                f'"{self.spec.wait_for_capacity}"), trying every GPU type '
                f"{plural(outcome.walks, 'time')}"
            )
            raise NothingPlaced(decide.nothing_placed(run_id, last, waited=waited))
        if outcome.kind == "stopped":
            assert outcome.decision is not None
            raise CreateStopped(self._stopped(self.n, self.gpu_type, outcome.decision))
        if outcome.kind == "rate_limited":
            raise CreateStopped(
                f"run {run_id}: Runpod kept rate-limiting the create of a pod on "
                f"{self.gpu_type} (last asked to wait {outcome.wait:g} s); nothing was "
                "created. Run `overbrainer train` again later"
            )
        if outcome.kind == "unknown":
            raise CreateStopped(outcome.detail)
        assert outcome.kind == "refused"
        raise PodRefused(
            f"run {run_id} refused pod {outcome.pod_id} ({self.gpu_type}{rate_text(self.rate)}): "
            f"{outcome.detail}; the pod was deleted and no other GPU type is tried. See the "
            f"pod's log in `overbrainer events {run_id}`, fix the image or target, "
            "then run `overbrainer train` again"
        )

    # -- steps --

    async def _await_capacity(self, seconds: float, until: float, since: float, walks: int) -> None:
        """No GPU type had capacity: say what is awaited and until when, and wait
        ``seconds`` (Ctrl-C or a cancel ends the wait) before the next walk."""
        now = trio.current_time()
        wall = self.ctx.clock()
        stage = "waiting for capacity"
        awaited = ev.CapacityAwaited(
            walks=walks,
            seconds=seconds,
            until=iso_utc((wall + timedelta(seconds=until - now)).replace(microsecond=0)),
            gpu_types=[c.gpu_type for c in self.machine.candidates],
            gpu_count=self.spec.gpu_count,
            data_centers=list(self.spec.data_center_ids),
        )
        self._taken(
            await self.journal.append(self.run_id, self._unless_overtaken([awaited])), stage
        )
        self.front.status(
            f"run {self.run_id}: no capacity for {self._awaited()}: waiting for some until "
            f"{_clock_text(wall, until - now)} (wait_for_capacity = "
            f'"{self.spec.wait_for_capacity}", {duration_text(now - since)} so far); '
            f"trying again at {_clock_text(wall, seconds)} (try {walks + 1}); Ctrl-C stops",
            milestone=True,
        )
        try:
            await self._race(stage, partial(self._sleep_watching, seconds, stage))
        finally:
            self.front.close()  # the waiting line gives way to the next walk's or the end's
        state = await self.journal.state(self.run_id)
        self.walk_first = decide.next_attempt(state.pod.attempts)

    def _awaited(self) -> str:
        """``1 × NVIDIA A40 or NVIDIA L40S in any data center``: what the walk waits for."""
        types = [c.gpu_type for c in self.machine.candidates]
        named = ", ".join(types[:-1]) + f" or {types[-1]}" if len(types) > 1 else types[0]
        centers = self.spec.data_center_ids
        where = f"in {', '.join(centers)}" if centers else "in any data center"
        return f"{self.spec.gpu_count} × {named} {where}"

    async def _record_candidates(self) -> None:
        """What will be tried, in order, and why the rest is left out: recorded when the
        choice was the catalog's or the cost cap's (a plain list is its own record)."""
        wanted = self.wanted
        if not wanted.needs_catalog:
            return
        chosen = ev.CandidatesChosen(
            source=self.chosen.source,
            candidates=[
                {
                    "gpu_type": c.gpu_type,
                    "price_per_hour": _cents4(c.rate),
                    "max_hours": c.max_hours,
                    "shortened": c.shortened,
                    "stock": c.stock.value if c.stock is not None else None,
                }
                for c in self.chosen.candidates
            ],
            left=[{"gpu_type": x.gpu_type, "reason": x.reason} for x in self.chosen.left],
            max_hours=wanted.max_hours,
            min_vram_gb=wanted.min_vram_gb,
            max_price_per_hour=wanted.max_price_per_hour,
            max_cost_usd=wanted.max_cost_usd,
        )
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([chosen])))

    async def _attach_volume(self) -> None:
        """The target's network volume, found by its name where it lives or created there,
        recorded (``VolumeAttached``) before the first create. Any failure stops the run
        here, before a pod bills."""
        spec = self.spec
        name, center = spec.volume, spec.volume_center
        if name is None or center is None:
            return
        client = self.ctx.client
        what = f"network volume {name!r} of target {self.wanted.target} in {center}"
        try:
            listed = await client.list_network_volumes()
            found = find_volume(listed, name, center, self.wanted.target)
            if found.problem is not None:
                raise ProvisionError(f"{found.problem}; no pod was created")
            volume: NetworkVolume | None = found.volume
            created = volume is None
            if volume is None:
                volume = await client.create_network_volume(name, spec.volume_size_gb, center)
        except RunpodError as error:
            raise ProvisionError(
                f"cannot find or create the {what} ({error}); no pod was created. A volume may "
                "have been created anyway: `overbrainer train` again finds it by its name"
            ) from error
        attached = ev.VolumeAttached(
            volume_id=volume.id,
            volume_name=name,
            data_center=volume.data_center or center,
            created=created,
            size_gb=volume.size_gb,
            fill_seconds=0.0 if self.volume_data is None else self.volume_data.allowance(),
        )
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([attached])))
        self.volume_id = volume.id
        done = "created" if created else "using"
        self.front.info(
            f"train: {done} network volume {name} ({volume.id}) in {center}, mounted at "
            f"{VOLUME_MOUNT}"
        )

    async def _fill_volume(self) -> None:
        """The run's files from home onto the attached volume before the first create
        (:mod:`~overbrainer.targets.runpod.volume_data`: with an S3 API key, uploaded and
        verified now; the pods link to them). Ctrl-C ends it; nothing was created."""
        data, volume_id, center = self.volume_data, self.volume_id, self.spec.volume_center
        if data is None or volume_id is None or center is None or self.spec.volume is None:
            return
        self.volume_links, placed = await self._race(
            "putting the run's files on the network volume",
            partial(data.before_create, volume_id, center),
        )
        if placed is not None:
            self._taken(await self.journal.append(self.run_id, self._unless_overtaken([placed])))

    async def _keys(self) -> RunKeys:
        # Before any create: a run directory that cannot hold the keys stops the run here,
        # not once a pod bills.
        try:
            keys = write_run_keys(self.ctx.session.run_dir(self.run_id) / "ssh", self.run_id)
        except OSError as error:
            raise ProvisionError(
                f"cannot store the SSH keys of run {self.run_id} in runs/{self.run_id}/ssh "
                f"({error.strerror or error}); no pod was created"
            ) from error
        generated = ev.KeysGenerated(host_public_key=keys.host_public_key)
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([generated])))
        return keys

    # -- other commands' events --

    def _taken(self, state: RunLog, stage: str = "creating a pod") -> None:
        """Between two steps, on the fresh log: stop if another command ended the run or
        is deleting the walk's pod, or take a cancel asked through the log."""
        if decisions.overtaken(state, self.live):
            raise _Overtaken(state)
        if state.run.cancel_pending:
            raise _Cancel(stage)

    def _unless_overtaken(self, events: list[ev.Event]) -> Callable[[RunLog], list[ev.Event]]:
        """A decision appending ``events`` unless the fresh log says the walk was overtaken
        (then nothing: the caller's :meth:`_taken` stops the walk). The walk's own deletes
        hand the pod over first (``live`` is None by then)."""
        return lambda state: decisions.unless_overtaken(state, self.live, events)

    async def _look(self, stage: str) -> None:
        """:meth:`_taken` on a fresh read of the log (a log that cannot be read now is
        looked at again at the next step: only an append the walk needs fails it)."""
        from overbrainer.events.errors import StoreError

        try:
            state = await self.journal.state(self.run_id)
        except StoreError:
            return
        self._taken(state, stage)

    async def _sleep_watching(self, seconds: float, stage: str) -> None:
        """Sleep ``seconds``, looking at the log every poll (a cancel is taken at once)."""
        end = trio.current_time() + seconds
        while (left := end - trio.current_time()) > 0:
            await trio.sleep(min(left, self.timing.poll))
            await self._look(stage)

    def _check(self, before: str) -> None:
        try:
            self.interrupts.check(before)
        except StopRequested:
            raise _Stop(before) from None

    async def _race(self, stage: str, fn: Callable[[], Awaitable[T]]) -> T:
        finished = await self.interrupts.race(fn)
        if finished is None:
            raise _Stop(stage)
        return finished.value

    async def _resolve(self, n: int, result: str, detail: str, pod_id: str | None = None) -> None:
        await self.journal.append(
            self.run_id, [ev.AttemptResolved(n=n, result=result, detail=detail, pod_id=pod_id)]
        )

    async def _send(self, candidate: Candidate) -> list[Command]:
        """One attempt on ``candidate``: ``AttemptSent`` (durably, before the create
        leaves), then the create; the machine's next commands."""
        self.current = candidate
        gpu_type = candidate.gpu_type
        self._check("creating a pod")
        state = await self.journal.state(self.run_id)
        self._taken(state)
        n = decide.next_attempt(state.pod.attempts)
        name = decide.pod_name(self.run_id, n)
        # Built (and checked) before AttemptSent: a bad value sends nothing. The pod's
        # bound is max_hours, counted on the pod from its creation: nothing of this
        # machine's clock goes into it.
        assert self.keys is not None
        request = self._request(name, gpu_type, self.keys)
        sent = ev.AttemptSent(
            n=n,
            pod_name=name,
            gpu_type=gpu_type,
            max_hours=candidate.max_hours,
            price_per_hour=_cents4(candidate.rate),
            max_cost_usd=self.wanted.max_cost_usd,
            nodes=self.spec.nodes,
        )
        if candidate.shortened and self.wanted.max_cost_usd is not None:
            self.front.info(
                shortened_text(candidate, self.wanted.max_hours, self.wanted.max_cost_usd)
            )
        # Decided on the fresh log: no create leaves for a run another command ended.
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([sent])))
        self.n, self.name, self.gpu_type = n, name, gpu_type
        if self.interrupts.interrupted:
            # A Ctrl-C noted since the check above (while the attempt was recorded):
            # nothing has left yet, and no create is sent after a Ctrl-C.
            await self._resolve(n, "not_sent", "Ctrl-C came before the create was sent")
            raise _Stop("creating a pod")
        self.sent_at = trio.current_time()
        try:
            pod = await self.interrupts.shield(
                f"creating {'cluster' if self.spec.nodes > 1 else 'pod'} {name}",
                self.timing.create_limit * (2 if self.spec.nodes > 1 else 1),
                partial(self._create, request),
            )
        except (CreateFailed, ShieldTimeout) as error:
            if isinstance(error, ShieldTimeout):
                choice = decide.CreateDecision(Step.RECONCILE, "ambiguous", str(error))
            else:
                choice = decide.after_create_error(error)
            return self.machine.send(machine.CreateFailed(choice))
        state = await self._record_created(n, gpu_type, pod)
        self._taken(state, f"waiting for pod {pod.id} to be ready")
        return self.then

    async def _reconcile_sent(self, detail: str) -> list[Command]:
        """Look for the pod of the ambiguous create just sent; the machine's next
        commands."""
        found = await self._reconcile(self.n, self.name, self.gpu_type, self.sent_at, detail)
        if isinstance(found, str):
            return self.machine.send(machine.ReconcileFailed(found))
        if found is None:
            return self.machine.send(machine.NotFound())
        return self.then

    async def _delete(self, pod_id: str, reason: ev.DeleteReason, *, strict: bool) -> None:
        """Delete a pod the machine let go of. ``strict``: an unconfirmed delete stops the
        walk; else it is warned of (and, on a failure's way out, so is any error). The
        run's key is kept while the walk goes on to another pod."""
        keep_key = not self.machine.done
        if strict:
            try:
                await delete_pod(
                    self.ctx, self.run_id, pod_id, reason, rate=self.rate, keep_key=keep_key
                )
            except DeleteUnconfirmed as error:
                raise DeleteUnconfirmed(
                    f"{error}. Provisioning of run {self.run_id} stopped: no pod is created "
                    "while another may still bill",
                    run_id=self.run_id,
                    pod_id=pod_id,
                ) from error
            return
        if self.failure is None:
            try:
                await delete_pod(
                    self.ctx, self.run_id, pod_id, reason, rate=self.rate, keep_key=keep_key
                )
                self.deleted_ok = True
            except DeleteUnconfirmed as error:
                self.front.warn(str(error))
            return
        # Shielded on its own: the way out may be a cancellation of the walk itself.
        with trio.move_on_after(self.timing.delete_limit + 60.0, shield=True):
            try:
                await delete_pod(
                    self.ctx, self.run_id, pod_id, reason, rate=self.rate, keep_key=keep_key
                )
            except DeleteUnconfirmed as failure:
                self.front.warn(str(failure))
            except Exception as failure:  # the original error matters more; say this one
                self.front.warn(
                    f"cannot delete pod {pod_id} of run {self.run_id} ({failure}): "
                    f"{pod_ls_hint(self.run_id)}"
                )

    async def _record_ending(self, what: str, stage: str) -> None:
        """Record how the walk ends, before its pod is deleted."""
        if what == "interrupted":
            await self.journal.append(self.run_id, lambda s: decisions.interrupted_at(s, stage))
            return
        await self.journal.append(self.run_id, decisions.take_cancel)
        self.asker = await self.journal.asker_of_cancel(self.run_id)
        self.front.info(
            f"train: cancel of run {self.run_id} requested{self.asker}: stopping while "
            f"{stage}, before its job started"
        )

    async def _create(self, request: CreatePod | CreateCluster) -> Pod:
        """Send the create: the pod; for a cluster, its primary once placed."""
        if isinstance(request, CreatePod):
            return await self.ctx.client.create_pod(request)
        return await self._create_cluster(request)

    async def _create_cluster(self, request: CreateCluster) -> Pod:
        """Create the cluster and wait (within the create's own limit) until Runpod placed
        its primary, node rank 0: the run's pod, through which it is followed. A cluster
        that places none in time, or cannot be read, is deleted here before anything else
        (it is in no log yet) and the attempt fails as one with no capacity."""
        client = self.ctx.client
        cluster = await client.create_cluster(request)
        until = trio.current_time() + self.timing.create_limit
        problem = ""
        try:
            while cluster.primary_pod_id is None and trio.current_time() < until:
                await trio.sleep(self.timing.poll)
                found = await client.get_cluster(cluster.id)
                if found is None:
                    raise CreateFailed(
                        "the cluster vanished", status=400, detail=f"cluster {cluster.id} vanished"
                    )
                cluster = found
            primary = None
            if cluster.primary_pod_id is not None:
                primary = await client.get_pod(cluster.primary_pod_id)
            if primary is not None:
                self.clusters[primary.id] = cluster.id
                return primary
            problem = f"placed no primary pod within {self.timing.create_limit:g} s"
        except RunpodError as error:
            if isinstance(error, CreateFailed):
                raise
            problem = f"could not be read ({error})"
        with contextlib.suppress(RunpodError):
            await client.delete_cluster(cluster.id)
        raise CreateFailed(
            "no capacity", status=400, detail=f"cluster {cluster.id} {problem}; it was deleted"
        )

    def _request(self, name: str, gpu_type: str, keys: RunKeys) -> CreatePod | CreateCluster:
        spec = self.spec
        env = pod_env(
            self.run_id,
            keys,
            run_dir=f"{self.ctx.root.rstrip('/')}/{self.remote_dir}",
            max_hours=self.current.max_hours,
            boot_grace_seconds=spec.boot_grace_minutes * 60,
            retrieve_grace_seconds=spec.retrieve_grace_minutes * 60,
            keep=self.keep,
            hf_home=volume_hf_home(spec),
            api_base=self.api_base,
            interval_seconds=self.timing.watchdog_interval,
            max_cost_usd=spec.max_cost_usd,
            # A node's rate: each node's watchdog counts its own times the cluster's nodes.
            expected_cost_per_hour=(
                None if self.current.rate is None else self.current.rate / self.spec.nodes
            ),
            save_before_seconds=save_before_seconds(spec.save_before, self.current.max_hours),
            stall=self.stall,
            volume_links=self.volume_links,
        )
        # One create for either: a cluster's container settings are a pod's.
        create: Callable[..., CreatePod | CreateCluster] = (
            partial(CreateCluster, gpus_per_pod=spec.gpu_count, pod_count=spec.nodes)
            if spec.nodes > 1
            else partial(CreatePod, gpu_count=spec.gpu_count)
        )
        return create(
            name=name,
            image=spec.image,
            gpu_type=gpu_type,
            disk_gb=spec.container_disk_gb,
            data_center_ids=spec.pod_data_centers,
            env=env,
            args=pod_args(),
            network_volume_id=self.volume_id,
            volume_mount_path=VOLUME_MOUNT,
        )

    def _stopped(self, n: int, gpu_type: str, choice: decide.CreateDecision) -> str:
        said = f" (Runpod said: {choice.detail})" if choice.detail != choice.text else ""
        return (
            f"run {self.run_id} stopped at attempt {n} ({gpu_type}): {choice.text}{said}; "
            "no pod was created"
        )

    async def _record_created(self, n: int, gpu_type: str, pod: Pod, detail: str = "") -> RunLog:
        """The pod exists: its id is in the log before anything else is done with it."""
        self.created[pod.id] = pod
        self.then = self.machine.send(machine.Created(pod.id))
        self.rate = self._rate_of(pod)
        # Runpod's own createdAt; without one, Runpod's time of its answer (no earlier than
        # the creation, so the deadline is never put before the pod's own).
        created = pod.created_at or self.ctx.server_now()
        self.deadlines[pod.id] = decide.deadline(created, self.current.max_hours)
        events: list[ev.Event] = [
            ev.AttemptResolved(n=n, result="created", detail=detail, pod_id=pod.id),
            ev.PodCreated(
                pod_id=pod.id,
                gpu_type=pod.gpu_id or gpu_type,
                data_center=pod.data_center_id,
                cost_per_hour=self.rate,
                created_at=iso_utc(created),
                deadline=iso_utc(self.deadlines[pod.id]),
            ),
        ]
        cluster_id = self.clusters.get(pod.id)
        if cluster_id is not None:
            events.append(
                ev.ClusterCreated(
                    cluster_id=cluster_id,
                    pod_id=pod.id,
                    nodes=self.spec.nodes,
                    gpus_per_node=self.spec.gpu_count,
                )
            )
        # A fact even for a run another command ended meanwhile (the pod exists and must be
        # deleted) — unless that command already found the pod by its marker and has it.
        return await self.journal.append(
            self.run_id, lambda s: decisions.pod_created(s, pod.id, events)
        )

    def _rate_of(self, pod: Pod) -> float | None:
        """What the run's pod bills per hour: a cluster's primary bills for every node."""
        return pod.cost * self.spec.nodes if pod.cost > 0 else None

    # -- ambiguous creates --

    async def _reconcile(
        self, n: int, name: str, gpu_type: str, sent_at: float, detail: str
    ) -> Pod | str | None:
        """After an ambiguous create: list the run's pods at each ``reconcile_after``,
        adopt the one named for this attempt, delete every other as a duplicate. Shielded:
        until it is known whether a pod exists, nothing may stop this. The adopted pod,
        None when none appeared, or what to say when the pods could not be listed."""

        async def work() -> Pod | str | None:
            adopted: Pod | None = None
            failure: RunpodError | None = None
            for after in self.timing.reconcile_after:
                await trio.sleep_until(sent_at + after)
                try:
                    pods = await self._made_by_creates()
                except RunpodError as error:
                    failure = error  # the next listing may tell; the last one must
                    continue
                failure = None
                state = await self.journal.state(self.run_id)
                found = decide.reconcile(pods, self.run_id, name, state.pod.pods)
                if found.adopt is not None and adopted is None:
                    adopted = found.adopt
                    await self._record_created(
                        n, gpu_type, adopted, f"adopted after an ambiguous create ({detail})"
                    )
                for duplicate in found.duplicates:
                    await self._drop_duplicate(duplicate)
            if failure is not None:
                if adopted is not None:
                    self.front.warn(
                        f"could not look for duplicates of pod {adopted.id} of run "
                        f"{self.run_id} ({failure}): {pod_ls_hint(self.run_id)}"
                    )
                    return adopted
                return (
                    f"the create of pod {name} (run {self.run_id}, attempt {n}) got no clear "
                    f"answer ({detail}), and the pods could not be listed to find out "
                    f"({failure}); a pod may have been created: {pod_ls_hint(self.run_id)}"
                )
            if adopted is None:
                await self._resolve(
                    n,
                    "not_created",
                    f"{detail}; no pod named {name} appeared within "
                    f"{max(self.timing.reconcile_after, default=0):g} s",
                )
            return adopted

        limit = max(self.timing.reconcile_after, default=0.0) + self.timing.create_limit * 2
        limit += 8 * self.timing.delete_limit
        return await self.interrupts.shield(f"looking for the pod of attempt {n}", limit, work)

    async def _made_by_creates(self) -> list[Pod]:
        """What an ambiguous create may have made: the account's pods; for a cluster, each
        cluster's primary once Runpod placed it (its other nodes go with it)."""
        if self.spec.nodes == 1:
            return await self.ctx.client.list_pods()
        primaries = []
        for pod in await self.ctx.client.list_pods(include_cluster_pods=True):
            if pod.cluster is not None and pod.cluster.rank == 0:
                self.clusters[pod.id] = pod.cluster.cluster_id
                primaries.append(pod)
        return primaries

    async def _drop_duplicate(self, pod: Pod) -> None:
        await self.journal.append(
            self.run_id,
            [
                ev.StrayRecorded(
                    pod_id=pod.id, reason=f"duplicate of an ambiguous create ({pod.name})"
                )
            ],
        )
        created = iso_utc(pod.created_at) if pod.created_at is not None else None
        try:
            await delete_pod(
                self.ctx,
                self.run_id,
                pod.id,
                "duplicate",
                rate=pod.cost if pod.cost > 0 else None,
                created_at=created,
                keep_key=True,  # the walk goes on with the same keys
                cluster_id=self.clusters.get(pod.id),
            )
        except DeleteUnconfirmed as error:
            raise DeleteUnconfirmed(
                f"{error}. Provisioning of run {self.run_id} stopped: no pod is created while "
                "another may still bill",
                run_id=self.run_id,
                pod_id=pod.id,
            ) from error

    # -- settling a created pod --

    async def _settle(self, pod: Pod) -> list[Command]:
        """Wait for the created pod to be ready; the machine's next commands."""
        keys = self.keys
        assert keys is not None
        booted = await self._race(
            f"waiting for pod {pod.id} to be ready",
            lambda: while_showing(
                lambda: self._boot(pod.id, keys),
                lambda: show_pull(
                    self.ctx.client, pod.id, self.front, retry_after=self.timing.poll * 4
                ),
            ),
        )
        self.front.close()  # the pod's status line gives way to the job's
        nodes: tuple[PodAccess, ...] = ()
        cluster_id = self.clusters.get(pod.id)
        if booted.kind == "ready" and cluster_id is not None:
            booted, nodes = await self._race(
                f"waiting for the nodes of cluster {cluster_id} to be ready",
                lambda: self._boot_nodes(cluster_id, pod.id, booted, keys),
            )
        if booted.kind == "ready":
            assert booted.endpoint is not None
            # Recorded while the walk still holds the pod: overtaken here, it is deleted.
            ready = ev.PodReady(pod_id=pod.id, verdict="ready")
            self._taken(await self.journal.append(self.run_id, self._unless_overtaken([ready])))
            access = PodAccess(
                booted.endpoint, keys.client_key_path, keys.host_public_key, self.ctx.root
            )
            self.ready = Provisioned(
                run_id=self.run_id,
                pod_id=pod.id,
                pod_name=decide.pod_name(self.run_id, self.n),
                attempt=self.n,
                gpu_type=pod.gpu_id or self.gpu_type,
                data_center=pod.data_center_id,
                rate=self.rate,
                deadline=self.deadlines[pod.id],
                access=access,
                remote_dir=self.remote_dir,
                nodes=nodes,
                cluster_id=cluster_id,
            )
        return self.machine.send(machine.Booted(booted.kind, booted.detail))

    async def _boot_nodes(
        self, cluster_id: str, primary_id: str, primary: _Booted, keys: RunKeys
    ) -> tuple[_Booted, tuple[PodAccess, ...]]:
        """Once the primary is ready, every other node of its cluster: ranked, its SSH
        answering with the pinned key and its watchdog's verdict ``ready`` (each node runs
        the same bootstrap and watchdog). The first node that is not ready is the
        cluster's verdict, named; else every node's access by rank (``pod.ClusterRanked``)."""
        until = trio.current_time() + self.timing.ssh_within
        while True:
            await self._look(f"waiting for the nodes of cluster {cluster_id} to be ranked")
            members = await self.ctx.client.cluster_pods(cluster_id)
            if members is None:
                return _Booted("vanished", f"cluster {cluster_id} vanished"), ()
            ranks = [m.cluster.rank if m.cluster is not None else None for m in members]
            if len(members) == self.spec.nodes and None not in ranks:
                break
            if trio.current_time() >= until:
                return _Booted(
                    "not_ready",
                    f"cluster {cluster_id} ranked {len([r for r in ranks if r is not None])} "
                    f"of {self.spec.nodes} nodes within {_span(self.timing.ssh_within)}",
                ), ()
            await trio.sleep(self.timing.poll)
        if members[0].id != primary_id:
            return _Booted(
                "refused", f"cluster {cluster_id} ranks pod {members[0].id} first, not its primary"
            ), ()
        booted_nodes = [primary]
        for rank, member in enumerate(members[1:], start=1):
            booted = await self._boot(member.id, keys, primary=False)
            if booted.kind != "ready":
                return _Booted(booted.kind, f"node {rank} (pod {member.id}): {booted.detail}"), ()
            booted_nodes.append(booted)
        accesses = []
        for booted in booted_nodes:
            assert booted.endpoint is not None
            accesses.append(
                PodAccess(
                    booted.endpoint, keys.client_key_path, keys.host_public_key, self.ctx.root
                )
            )
        ranked = ev.ClusterRanked(
            cluster_id=cluster_id,
            members=[
                {
                    "pod_id": member.id,
                    "rank": rank,
                    "ip": member.cluster.ip if member.cluster is not None else None,
                }
                for rank, member in enumerate(members)
            ],
        )
        stage = f"waiting for the nodes of cluster {cluster_id} to be ready"
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([ranked])), stage)
        return _Booted("ready", primary.detail, primary.endpoint), tuple(accesses)

    async def _boot(self, pod_id: str, keys: RunKeys, *, primary: bool = True) -> _Booted:
        """Poll the pod until SSH answers with the pinned key and the watchdog's verdict is
        written, or until it is given up (inside a race: Ctrl-C ends it). ``primary``: the
        run's pod, whose endpoint is recorded (a cluster's other nodes are recorded ranked
        once all are ready)."""
        timing = self.timing
        ssh_deadline = trio.current_time() + timing.ssh_within
        verdict_deadline: float | None = None
        seen: SshEndpoint | None = None
        warned: set[SshEndpoint] = set()
        problem = "Runpod showed no SSH endpoint"
        while True:
            await self._look(f"waiting for pod {pod_id} to be ready")
            limit = verdict_deadline if verdict_deadline is not None else ssh_deadline
            if trio.current_time() >= limit:
                if verdict_deadline is not None:
                    return _Booted(
                        "not_ready",
                        f"the watchdog wrote no verdict within {timing.verdict_within:g} s of "
                        "SSH answering",
                    )
                return _Booted("not_ready", f"no SSH within {_span(timing.ssh_within)}: {problem}")
            try:
                pod = await self.ctx.client.get_pod(pod_id)
            except RunpodError as error:
                problem = f"the pod could not be read ({error})"
                pod = None
                boot = decide.Boot(BootKind.WAIT)
            else:
                unsafe: str | None = None
                if pod is not None:
                    try:
                        pod.ssh_endpoint()
                    except UnsafeSshEndpoint as error:
                        unsafe = str(error)
                    if self.rate is None:
                        self.rate = self._rate_of(pod)
                boot = decide.observe(pod, unsafe_endpoint=unsafe)
            if boot.kind in (BootKind.VANISHED, BootKind.DEAD):
                return _Booted(boot.kind.value, boot.detail)
            if boot.kind is BootKind.ENDPOINT:
                assert boot.endpoint is not None
                endpoint = boot.endpoint
                access = PodAccess(
                    endpoint, keys.client_key_path, keys.host_public_key, self.ctx.root
                )
                try:
                    assert self.ctx.connect is not None
                    async with self.ctx.connect(access) as executor:
                        if seen != endpoint and primary:
                            await self._endpoint_seen(pod_id, endpoint)
                        seen = endpoint
                        if verdict_deadline is None:
                            verdict_deadline = trio.current_time() + timing.verdict_within
                        booted = await self._verdict(executor, verdict_deadline)
                        if booted is not None:
                            return _Booted(booted.kind, booted.detail, endpoint)
                except HostKeyRefused as error:
                    problem = f"SSH at {endpoint.host}:{endpoint.port} refused: {error}"
                    if endpoint not in warned:
                        warned.add(endpoint)
                        self.front.warn(
                            f"pod {pod_id}: {error}; not trusting it, still waiting for the "
                            "pinned key"
                        )
                except ExecError as error:
                    problem = f"SSH at {endpoint.host}:{endpoint.port} failed ({error})"
            elif pod is not None:
                problem = (
                    boot.detail or f"the pod is {pod.raw_status or 'starting'} with no SSH endpoint"
                )
            await trio.sleep(timing.poll)

    async def _endpoint_seen(self, pod_id: str, endpoint: SshEndpoint) -> None:
        seen = ev.EndpointSeen(
            pod_id=pod_id, host=endpoint.host, port=endpoint.port, user=endpoint.username
        )
        stage = f"waiting for pod {pod_id} to be ready"
        self._taken(await self.journal.append(self.run_id, self._unless_overtaken([seen])), stage)
        # For --keep-pod and for humans: `ssh -F runs/<id>/ssh/config overbrainer-<id>`.
        try:
            write_ssh_config(
                self.ctx.session.run_dir(self.run_id) / "ssh",
                self.run_id,
                endpoint.host,
                endpoint.port,
                endpoint.username,
            )
        except OSError as error:
            # A disk that cannot take this file cannot take the results either: the walk
            # ends here and deletes the pod.
            raise ProvisionError(
                f"cannot write runs/{self.run_id}/ssh/config for pod {pod_id} "
                f"({error.strerror or error}); the pod is deleted"
            ) from error

    async def _verdict(self, executor: Executor, deadline: float) -> _Booted | None:
        """Read the watchdog's verdict every poll until it is written or ``deadline``;
        None at the deadline. A lost connection raises (the caller reconnects)."""
        while True:
            said = await executor.read_file(f"{self.remote_dir}/{VERDICT}", 0, _VERDICT_LIMIT)
            failed = await executor.read_file(
                f"{self.remote_dir}/{BOOTSTRAP_FAILED}", 0, _VERDICT_LIMIT
            )
            verdict = decide.read_verdict(said, failed)
            if verdict.kind is VerdictKind.READY:
                return _Booted("ready", verdict.reason)
            if verdict.kind is VerdictKind.REFUSED:
                return _Booted("refused", verdict.reason)
            if trio.current_time() >= deadline:
                return None
            await trio.sleep(self.timing.poll)
            await self._look("waiting for the pod's watchdog")


async def _what_others_did(ctx: PodContext, run_id: str, state: RunLog) -> str:
    """``was failed by `pod rm` as alice on host h (pid 4): its pods were deleted …``."""
    from overbrainer.session.session import ended_by, recorded_by

    if state.final:
        who = await ended_by(ctx.session, run_id)
        why = f": {state.run.message}" if state.run.message else ""
        done = "ended" if state.run.state == RunState.succeeded else state.run.state
        return f"was {done}{who}{why}"
    # The other command may not have recorded the run's end yet: who deleted the pod.
    who = await recorded_by(ctx.session, run_id, ev.PodDeleting)
    return f"had its pod deleted{who or ' by another command'}"


def _clock_text(wall: datetime, after: float) -> str:
    """``21:15:03 UTC``: the time ``after`` seconds past ``wall``."""
    return f"{(wall + timedelta(seconds=max(0.0, after))).astimezone(UTC):%H:%M:%S} UTC"


def _cents4(rate: float | None) -> float | None:
    """A rate as recorded: to 1/100 of a cent (a float product carries noise)."""
    return None if rate is None else round(rate, 4)


def _span(seconds: float) -> str:
    if seconds >= 120:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
