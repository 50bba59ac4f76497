"""What differs between the kinds of target, as a run's life (:mod:`.run`) asks for it.

A target is what runs a run's job: this machine or a host over SSH
(:class:`~overbrainer.targets.machine.target.MachineTarget`), or a Runpod pod created for the run
(:class:`~overbrainer.targets.runpod.target.PodTarget`). The lifecycle does what every run does —
create it, prepare its files, start its job, follow it, settle its end, report — and asks
its target for the rest: how to open it for a new job (a connection; a pod provisioned),
how to reach the job again, what a lost target means, and how to end it once the job ended
(a pod deleted, kept, or left to its watchdog). What only a machine rented for the run has
— a deadline, a spend, a watchdog, a pod that may vanish — is its :class:`Billed` side,
which a machine that stays does not have.
"""

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import Enum
from typing import Literal, Protocol

from overbrainer.config.model import Settings
from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.exec.base import Executor
from overbrainer.lifecycle.service import FollowLost, Job, Retrieval
from overbrainer.train.parallelism import Choice

Command = Literal["attach", "cancel"]
"""The command acting on a run that exists."""


@dataclass(frozen=True)
class Launch:
    """How a run's job is spawned: its commands, its environment (no secret), and the
    container it runs in, if any."""

    commands: list[list[str]]
    env: Mapping[str, str]
    container: str | None = None


class Stop(Enum):
    """Why following a job ended without the job's end."""

    detached = "a signal"
    past_deadline = "past the target's deadline"
    stop_overdue = "a job asked to save and stop did not stop in time"


@dataclass(frozen=True)
class Recover:
    """Following lost the target before the job ended, and the target goes on with the run
    on a new one (:meth:`Billed.recover`): ``why`` the target was lost."""

    why: str


@dataclass(frozen=True)
class Resume:
    """Following lost the target for a while, and it answers again: the job is followed
    again, the target reached afresh (its endpoint may have changed)."""


class StoppedBeforeJob(Interrupted):
    """A signal stopped the run before its job started; the message says what is left.
    ``stage`` is where, for ``run.Interrupted`` (None: the target recorded it already)."""

    def __init__(self, message: str, *, stage: str | None) -> None:
        super().__init__(message)
        self.stage = stage


class CancelledBeforeJob(OverbrainerError):
    """A cancel asked through the run's log was taken before its job started (what the
    target held is deleted); the run ends cancelled with ``reason``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class TargetGone(Exception):
    """What ran the run's job no longer exists (its pod): nothing can be reached."""


class TargetLost(TargetGone):
    """What ran the run's job was lost before the job ended, or a recovery of it was left
    unfinished by a command that died, and the target recovers runs: ``why`` it was lost.
    Only ``train attach`` (and ``supervise``, through it) goes on with the run on a new
    one (:meth:`Billed.recover`); the rest treat it as gone."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class NotEnded(OverbrainerError):
    """The run's job ended, but its target could not be ended (a pod that may still bill);
    the message says so and what to do."""


class Target(Protocol):
    """A kind of target, for one command and one run (or one run to be)."""

    @property
    def settings(self) -> Settings:
        """The project's settings."""

    @property
    def poll(self) -> float:
        """How often following reads the job's status and metrics (seconds)."""

    @property
    def device(self) -> str:
        """The device the job trains on (``auto``, ``cpu``)."""

    @property
    def parallelism(self) -> Choice:
        """How the job's processes share the model (nothing, for one process)."""

    @property
    def prepared_path(self) -> str | None:
        """Where Axolotl keeps the tokenised data, when not in the run directory (a network
        volume's folder, shared by the runs on it)."""

    @property
    def billed(self) -> "Billed | None":
        """What only a machine rented for the run has (a pod); None for a machine that
        stays and costs nothing here."""

    # -- a new run --

    async def before_create(self) -> None:
        """Warn about what the run is about to meet (before it exists)."""

    def created(self, run_id: str) -> ev.RunCreated:
        """The run's first event."""

    def open(self, run_id: str) -> AbstractAsyncContextManager[Executor]:
        """The target, opened for the new run's job: an executor on it.

        Raises:
            StoppedBeforeJob: a signal came first (anything held is released).
            CancelledBeforeJob: a cancel asked through the log was taken.
        """

    async def before_start(self, run_id: str) -> None:
        """The last look before the job starts (same raises as :meth:`open`)."""

    def launch(self, run_id: str) -> Launch:
        """The job's commands, environment and container."""

    # -- a run that exists --

    async def settle_start(self, state: RunLog, command: Command) -> RunLog | int:
        """A run still preparing: the state to go on with (its start settled), or the
        command's exit code once it was dealt with here.

        Raises:
            TargetLost: ``attach`` of a run whose recovery was left unfinished by a command
                that died: what that recovery held is ended, and the recovery goes on.
        """

    def reach(
        self, state: RunLog, *, recovers: bool = False
    ) -> AbstractAsyncContextManager[Executor]:
        """The run's job, reached again. ``recovers``: the command goes on with a run whose
        target was lost on a new one (``train attach``), so a lost target is not the run's
        end.

        Raises:
            TargetLost: ``recovers``, and the target was lost under the running job.
            TargetGone: the target no longer exists.
        """

    # -- following and ending --

    def job(self, run_id: str, executor: Executor, state: RunLog) -> Job:
        """The run's job on the target, reached through ``executor``."""

    async def lost(self, job: Job, state: RunLog, lost: FollowLost) -> "Stop | Recover | Resume":
        """Following gave up reaching the target: :attr:`Stop.detached` when a signal came
        meanwhile; :class:`Recover` when the target was lost and the run goes on, on a new
        one; :class:`Resume` when it answers again; otherwise raises, saying what became of
        the run and its target."""

    def detached(self, state: RunLog, job: Job) -> str:
        """The message of a command that stopped following while the job runs on."""

    async def end(self, job: Job, state: RunLog, retrieval: Retrieval) -> RunLog:
        """End the target of a run whose job ended; the run's state after that.

        Raises:
            NotEnded: the target could not be ended.
        """


class Billed(Protocol):
    """A machine rented for one run (a pod): held from before its job starts, billed while
    it lives, bounded by a deadline and a cost cap, and able to vanish under its job."""

    async def not_started(self, run_id: str) -> None:
        """The job could not start: release what the target holds for it."""

    async def started(self, run_id: str, state: RunLog) -> RunLog:
        """The job started (recorded in ``state``): the target's own record of it."""

    async def gone(self, state: RunLog, command: Command) -> int:
        """``command`` of a run whose target is gone (:class:`TargetGone`)."""

    def seconds_left(self, state: RunLog) -> float:
        """How long following may still go on (``math.inf``: no bound)."""

    async def confirm_left(self, state: RunLog) -> float:
        """How long following may still go on, read afresh on the target's own clock once
        :meth:`seconds_left` seemed to run out (``lifecycle/bounds.py``): a jump of this
        machine's clocks never ends a job whose bound is not reached. Never raises: what
        cannot be read afresh is answered by what the target knows."""

    def spend(self, state: RunLog) -> Callable[[], float | None] | None:
        """What the target has cost so far, shown while following (None: nothing)."""

    def at_each_poll(self, state: RunLog) -> Callable[[], Awaitable[None]] | None:
        """What the target checks at each poll while its job is followed (a pod nearing
        its cost cap); None: nothing."""

    async def job_vanished(self, state: RunLog) -> Recover | None:
        """The job ended without an exit code (its machine restarted under it, or it was
        killed): a :class:`Recover` when the target can no longer run it (a pod stopped,
        or back with no GPU) and recovers runs; None: the end is settled as any."""

    @property
    def recovers(self) -> bool:
        """Whether a run whose target is lost, or whose job stalls, goes on, on a new one
        (:meth:`recover`) rather than failing."""

    def recover(
        self, run_id: str, recover: Recover
    ) -> AbstractAsyncContextManager[tuple[Executor, RunLog]]:
        """A new target for a run whose target was lost (``recover``): the job started on
        it again from the run's newest checkpoint home, and the run's state then, for as
        long as the block runs.

        Raises:
            OverbrainerError: the run is not recovered (it failed: the message says why).
        """

    async def past_deadline(self, job: Job) -> int:
        """Following reached :meth:`seconds_left`: end the target (its job's results so far
        collected where the bound allows), fail the run."""
