"""The one place a kind of target is chosen: for a new run from the project's configuration
(:func:`target_for`), for a recorded run from the kind its log recorded
(:func:`target_of_run`), and for reading a recorded run's job log (:func:`reach_to_read`).

Everything else asks the chosen :class:`~overbrainer.lifecycle.target.Target`, or the
facts recorded on the run; a new kind of target gets its home under ``targets/`` and one
entry in each choice here.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from overbrainer.config.model import LocalTarget, RunpodTarget, Settings, SshTarget
from overbrainer.config.model import Target as AnyTarget
from overbrainer.errors import OverbrainerError, UsageError
from overbrainer.events.aggregate import RunLog
from overbrainer.events.target_kinds import TargetKind
from overbrainer.exec.base import Executor
from overbrainer.lifecycle.target import Target
from overbrainer.session.session import Session

if TYPE_CHECKING:
    from overbrainer.preflight.checks import Check
    from overbrainer.runpod.clocks import ServerClock
    from overbrainer.runpod.models import GpuType, Pod
    from overbrainer.train.parallelism import Choice

Home = Literal["machine", "runpod"]


@dataclass(frozen=True)
class Kind:
    """A kind of target a run's log may record: its home under ``targets/``, and the
    configuration it is declared with (``a runpod`` target)."""

    home: Home
    declared: type[LocalTarget | SshTarget | RunpodTarget]
    article: str


KINDS: dict[TargetKind, Kind] = {
    TargetKind.local: Kind("machine", LocalTarget, "a local"),
    TargetKind.ssh: Kind("machine", SshTarget, "an ssh"),
    TargetKind.runpod: Kind("runpod", RunpodTarget, "a runpod"),
}
"""Each kind a run's log may record (:class:`~overbrainer.events.target_kinds.TargetKind`,
whose facts the lower layers read), and where it lives."""


def kind_of_run(state: RunLog) -> Kind:
    """The kind of a recorded run's target."""
    try:
        return KINDS[TargetKind(state.run.kind)]
    except ValueError:
        raise OverbrainerError(
            f"run {state.run.run_id} is on a target of unknown kind {state.run.kind!r}; "
            "a newer overbrainer recorded it: upgrade to act on it"
        ) from None


def refuse_keep_pod(settings: Settings, name: str) -> None:
    """``--keep-pod`` for a target that creates no pod is refused before anything happens."""
    spec = settings.targets.get(name)
    if spec is not None and not isinstance(spec, RunpodTarget):
        raise UsageError(
            f"--keep-pod applies only to a Runpod target; target {name} is {spec.kind}"
        )


@dataclass(frozen=True)
class TargetFound:
    """What checking a target before a run saw that the run uses, so it is not read twice:
    for a Runpod target the account's pods (the run's warning about leftover pods),
    Runpod's clock as its answers told it (how far this machine's is, before the run's
    first call) and the GPU catalog (the run's candidates come from it)."""

    pods: "list[Pod] | None" = None
    runpod_clock: "ServerClock | None" = None
    catalog: "list[GpuType] | None" = None


async def check_target(
    found: "list[Check]", settings: Settings, name: str, spec: AnyTarget, project_dir: Path
) -> TargetFound:
    """The preflight's checks of target ``name`` (``spec``), appended to ``found``."""
    if isinstance(spec, RunpodTarget):
        from overbrainer.targets.runpod.preflight import check_pod_target

        pods, clock, catalog = await check_pod_target(found, settings, name, spec)
        return TargetFound(pods, clock, catalog)
    from overbrainer.targets.machine.preflight import check_machine

    await check_machine(found, settings, name, spec, project_dir)
    return TargetFound()


def parallelism_for(settings: Settings, name: str, seen: TargetFound) -> "Choice":
    """How a new run's job on target ``name`` would share the model among its processes
    (what its target will choose: ``seen`` is what the preflight read)."""
    spec = settings.target_of(name)
    if isinstance(spec, RunpodTarget):
        from overbrainer.targets.runpod.preflight import parallelism_of as pod_parallelism

        return pod_parallelism(settings, spec, seen.catalog)
    from overbrainer.targets.machine.target import parallelism_of

    return parallelism_of(settings, spec)


@asynccontextmanager
async def target_for(
    session: Session, settings: Settings, name: str, seen: TargetFound, *, keep: bool
) -> AsyncIterator[Target]:
    """The target ``name`` of the project's configuration, for a new run; ``seen`` is what
    the preflight that checked it saw."""
    spec = settings.target_of(name)
    if isinstance(spec, RunpodTarget):
        from overbrainer.targets.runpod.target import for_train

        async with for_train(
            session,
            settings,
            name,
            spec,
            keep=keep,
            pods=seen.pods,
            runpod_clock=seen.runpod_clock,
            catalog=seen.catalog,
        ) as pod:
            yield pod
        return
    from overbrainer.targets.machine.target import MachineTarget, plan_for

    yield MachineTarget(session, settings, plan_for(settings, name))


@asynccontextmanager
async def target_of_run(
    session: Session, settings: Settings, state: RunLog
) -> AsyncIterator[Target]:
    """The target of a recorded run, to attach to, cancel or stop it."""
    if kind_of_run(state).home == "runpod":
        from overbrainer.targets.runpod.target import for_run

        async with for_run(session, settings, state) as pod:
            yield pod
        return
    from overbrainer.targets.machine.target import MachineTarget, plan_for

    yield MachineTarget(session, settings, plan_for(settings, state.run.target))


def follower_poll(settings: Settings, state: RunLog) -> float:
    """How often a command following a recorded run reads its log (its target's poll)."""
    if kind_of_run(state).home == "runpod":
        from overbrainer.targets.runpod.target import follow_poll

        return follow_poll(settings)
    from overbrainer.lifecycle.service import POLL_SECONDS

    return POLL_SECONDS


@dataclass(frozen=True)
class Reached:
    """A recorded run's job, reached to read its log: the executor, the job's directory in
    its terms, and how often a follow looks again."""

    executor: Executor
    job_dir: str
    poll: float


@asynccontextmanager
async def reach_to_read(
    project_dir: Path, settings: Settings, state: RunLog, node: int | None = None
) -> AsyncIterator[Reached]:
    """The run's job on its target, reached to read (nothing is recorded); ``node``: on
    that node of the run's cluster."""
    from overbrainer.lifecycle.logs import POLL

    run = state.run
    kind = kind_of_run(state)
    spec = settings.targets.get(run.target)
    if not isinstance(spec, kind.declared):
        raise OverbrainerError(
            f"target `{run.target}` of run {run.run_id} is no longer {kind.article} target in "
            "overbrainer.toml; declare it again to read the run's log there"
        )
    job_dir = f"runs/{run.run_id}"
    if isinstance(spec, RunpodTarget):
        from overbrainer.targets.runpod.logs import reach_pod_to_read
        from overbrainer.targets.runpod.target import follow_poll

        async with reach_pod_to_read(project_dir, settings, state, node) as executor:
            yield Reached(executor, job_dir, follow_poll(settings))
        return
    from overbrainer.targets.machine.target import plan_for
    from overbrainer.targets.machine.target import reach_to_read as reach_machine

    async with reach_machine(project_dir, plan_for(settings, run.target)) as executor:
        yield Reached(executor, job_dir, POLL)


def checkpoints_on_volume(settings: Settings, name: str, source: RunLog) -> list[int]:
    """The steps of run ``source``'s checkpoints recorded whole on its network volume, when
    target ``name`` mounts that same volume (by name, in its data center): a new run there
    can resume from them with no copy at home. Empty for any other target."""
    spec = settings.targets.get(name)
    volume = source.pod.volume
    if not isinstance(spec, RunpodTarget) or spec.volume is None or volume is None:
        return []
    if (spec.volume, spec.volume_center) != (volume.get("name"), volume.get("data_center")):
        return []
    return [int(c["step"]) for c in source.run.volume_checkpoints]
