"""Checkpoints brought home while a run's job runs, and the old ones removed from here.

While a run is followed, every checkpoint the trainer announces as saved (a ``saved`` line
of ``metrics.jsonl``, which the metrics plugin writes from the trainer's ``on_save``, once
the folder is written whole) is fetched in the background, beside the progress display:
the target's manifest of ``output/checkpoint-STEP`` and its download side by side, as the
results' own collection does (``service.fetch``), into a temporary folder at the top of
the run's directory. Only once every file matched is the folder renamed into
``output/`` — one rename, under the run's settle lock — and ``run.CheckpointRetrieved``
appended. A signal or a crash before that leaves at most the temporary folder, which no
command reads and the next fetch removes: a partial checkpoint is never home, never
recorded. Which checkpoints to fetch and which to remove is :mod:`~overbrainer.train.
checkpoint_plan`'s to decide.

On a Runpod target with a network volume the job saves its checkpoints there: each one
announced is recorded once the target's manifest shows it whole (``run.CheckpointOnVolume``,
with that manifest's digest), and which come home is the target's ``checkpoints_home``
(:func:`policy_of`): ``all`` as they are saved, ``last`` only the newest once the job
ended, ``none`` none.
"""

import contextlib
import os
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import trio

from overbrainer.config.model import CheckpointsHome, Settings
from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.types import Event
from overbrainer.exec.manifest import checkpoint_path, manifest_digest, verify
from overbrainer.exec.transfer import remove
from overbrainer.lifecycle import service
from overbrainer.lifecycle.service import Job
from overbrainer.session.session import Session
from overbrainer.train import checkpoint_plan
from overbrainer.train.metrics import MetricsEvent
from overbrainer.train.resume_files import TRAINER_STATE

FETCHING_PREFIX = ".overbrainer-checkpoint-"
"""A checkpoint on its way home: ``runs/<id>/.overbrainer-checkpoint-STEP-PID/``."""

PRUNING_PREFIX = ".overbrainer-pruned-"
"""A checkpoint on its way out: renamed first, so a half-removed folder is never one."""

RETRY_SECONDS = 5.0
"""How long after a failed fetch it is tried again (the target may be back by then)."""

PLACE_LIMIT = 60.0
"""How long putting a verified checkpoint in place and recording it may take (a rename and
one append)."""


def policy_of(settings: Settings, state: RunLog) -> tuple[CheckpointsHome, bool]:
    """Which checkpoints of the run come home (its target's ``checkpoints_home``; ``all``
    on a target that is not Runpod's), and whether its job saves them on a network volume
    (the run's pods mount the target's volume)."""
    spec = settings.targets.get(state.run.target)
    if spec is None:
        return "all", False
    return spec.checkpoints_brought_home, spec.saves_on_volume


def home_due(
    policy: CheckpointsHome,
    saved: Iterable[int],
    home: Iterable[int],
    *,
    keep: int,
    skip: Iterable[int] = (),
    ended: bool = False,
) -> list[int]:
    """The saved checkpoints to bring home now under ``policy``, the newest first: ``all``
    as :func:`checkpoint_plan.to_fetch` says; ``last`` none while the job runs, then
    (``ended``) the newest saved one, unless it is home or skipped; ``none`` none."""
    if policy == "none" or (policy == "last" and not ended):
        return []
    if policy == "last":
        keep = 1
    return checkpoint_plan.to_fetch(saved, home, keep=keep, skip=skip)


class CheckpointFetcher:
    """Brings a followed run's saved checkpoints home as the trainer announces them.

    :meth:`saw` takes the metrics events following reads (it never waits); :meth:`run` is
    the background task that fetches; :meth:`finish` fetches what is still due once the
    job ended. ``home`` and ``pruned``: the steps the log has home, and those it removed
    on purpose (``[training] keep_checkpoints``) — the latter are never fetched again.
    """

    def __init__(
        self,
        session: Session,
        job: Job,
        *,
        keep: int,
        home: Iterable[int],
        pruned: Iterable[int] = (),
        policy: CheckpointsHome = "all",
        on_volume: bool = False,
        recorded: Iterable[int] = (),
    ) -> None:
        self.session = session
        self.job = job
        self.keep = keep
        self.home: set[int] = set(home)
        self.pruned: set[int] = set(pruned)
        self.policy: CheckpointsHome = policy
        # The job saves on a network volume: each checkpoint is recorded there once whole.
        self.on_volume = on_volume
        self.recorded: set[int] = set(recorded)
        self.ended = False
        self.saved: set[int] = set()
        self.failures: dict[int, int] = {}
        self.given_up: set[int] = set()
        self._wake = trio.Event()
        self._told: set[int] = set()
        self._one_at_a_time = trio.Lock()

    def saw(self, events: list[MetricsEvent]) -> None:
        """New metrics events: note the checkpoints they announce, and wake the fetcher."""
        new = checkpoint_plan.saved_steps(events) - self.saved
        if new:
            self.saved |= new
            self._wake.set()

    def due(self) -> list[int]:
        """The checkpoints to fetch now, the newest first."""
        # In place, every save is recorded (nothing travels), so that pruning removes the
        # older ones from the job's own output as well.
        keep = len(self.saved) + len(self.home) if self.job.in_place else self.keep
        policy: CheckpointsHome = "all" if self.job.in_place else self.policy
        return home_due(
            policy,
            self.saved,
            self.home,
            keep=keep,
            skip=self.given_up | self.pruned,
            ended=self.ended,
        )

    def to_record(self) -> list[int]:
        """The checkpoints saved on the volume to record now, the newest first."""
        if not self.on_volume:
            return []
        return sorted(self.saved - self.recorded - self.given_up, reverse=True)

    async def run(self) -> None:
        """Fetch each checkpoint as it is announced, until cancelled; one that failed is
        tried again :data:`RETRY_SECONDS` later (up to ``checkpoint_plan.MAX_ATTEMPTS``)."""
        await trio.to_thread.run_sync(clear_leftovers, self._local)
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if await self._fetch_due():
                await trio.sleep(RETRY_SECONDS)
                self._wake.set()

    async def finish(self) -> None:
        """The job ended: fetch what is still due (its last save), once each."""
        self.ended = True
        await self._fetch_due(retry=False)

    async def _fetch_due(self, *, retry: bool = True) -> bool:
        """Fetch what is due; whether one failed and is to be tried again."""
        # One fetch at a time: ``finish`` waits for the one in flight, then sees it home.
        async with self._one_at_a_time:
            return await self._fetch_each(retry=retry)

    async def _fetch_each(self, *, retry: bool) -> bool:
        again = False
        for step in self.to_record():
            if not await self.record_on_volume(step) and self._failed(step, retry=retry):
                again = True
        for step in self.due():
            if not await self.fetch(step) and self._failed(step, retry=retry):
                again = True
        return again

    def _failed(self, step: int, *, retry: bool) -> bool:
        """Count a failed look at ``step``; whether it is to be tried again."""
        failures = self.failures[step] = self.failures.get(step, 0) + 1
        if not retry or not checkpoint_plan.should_retry(failures):
            self.given_up.add(step)
            return False
        return True

    async def record_on_volume(self, step: int) -> bool:
        """Record checkpoint ``step`` on the volume once the target's manifest shows it
        whole (``run.CheckpointOnVolume``); whether it is settled (recorded, or not whole
        there: not to be tried again)."""
        path = checkpoint_path(step)
        run_id = self.job.run_id
        try:
            expected = await self.job.executor.manifest(self.job.remote_dir, [path])
            if not _whole(expected, path):
                return await self._not_whole(step, path)
            files = sum(1 for name in expected if name.startswith(f"{path}/"))
            digest = manifest_digest(expected)
            await self.session.journal.append(
                run_id,
                partial(
                    decisions.checkpoint_on_volume, step=step, path=path, files=files, digest=digest
                ),
            )
        except (OverbrainerError, OSError) as error:
            self._warn(step, f"checkpoint-{step} of run {run_id} was not recorded ({error})")
            return False
        self.recorded.add(step)
        return True

    @property
    def _local(self) -> Path:
        return self.session.run_dir(self.job.run_id)

    async def fetch(self, step: int) -> bool:
        """Bring checkpoint ``step`` home verified and record it; whether it is settled
        (home, or not whole on the target: not to be tried again)."""
        path = checkpoint_path(step)
        try:
            if self.job.in_place:
                # The job's directory is the run's own: the checkpoint is home as the
                # trainer wrote it; its manifest only checks it is whole.
                expected = await self.job.executor.manifest(self.job.remote_dir, [path])
                if not _whole(expected, path):
                    return await self._not_whole(step, path)
                await self._record(step, path, None)
                return True
            return await self._download(step, path)
        except (OverbrainerError, OSError) as error:
            # Never fatal: following goes on, and the next look tries again.
            run_id = self.job.run_id
            self._warn(step, f"checkpoint-{step} of run {run_id} did not come home ({error})")
            return False

    async def _download(self, step: int, path: str) -> bool:
        # Named by this process too: another follower of the run (a second attach) never
        # shares, nor clears, this one's folder.
        temp = self._local / f"{FETCHING_PREFIX}{step}-{os.getpid()}"
        try:
            await trio.to_thread.run_sync(_fresh, temp)
            expected, arrived, error = await service.fetch(self.job, temp, (path,))
            if error is not None:
                raise error
            if expected is None or not _whole(expected, path):
                return await self._not_whole(step, path)
            problems = await trio.to_thread.run_sync(verify, expected, temp, [path], arrived)
            if problems:
                raise OverbrainerError("; ".join(problems[:3]))
            await self._record(step, path, temp / path)
            return True
        finally:
            with trio.move_on_after(PLACE_LIMIT, shield=True):
                await trio.to_thread.run_sync(remove, temp)

    async def _record(self, step: int, path: str, verified: Path | None) -> None:
        """Put the verified folder in place (one rename) and record it, under the run's
        settle lock (no collection of the results replaces ``output/`` meanwhile)."""
        run_id = self.job.run_id
        async with service.settling(self.session, run_id):

            async def place() -> None:
                if verified is not None:
                    _place(verified, self._local / path)
                await self.session.journal.append(
                    run_id, lambda s: decisions.checkpoint_home(s, step, path)
                )

            await self.session.interrupts.shield(
                f"putting checkpoint-{step} of run {run_id} in place", PLACE_LIMIT, place
            )
        self.home.add(step)
        await prune(self.session, run_id, self.keep)

    async def _not_whole(self, step: int, path: str) -> bool:
        # Gone from the target (the trainer's own rotation removed it) or without the file
        # the trainer writes last: not one to resume from — unless the log says it is home
        # or was pruned on purpose meanwhile (another follower of the run, say the `train`
        # that `train stop` joins, brought it and removed it): then nothing is wrong.
        self.given_up.add(step)
        if await self._settled_elsewhere(step):
            return True
        self._warn(
            step,
            f"checkpoint-{step} of run {self.job.run_id} is not whole on "
            f"{self.job.executor.location} (no {path}/{TRAINER_STATE}); not brought home",
        )
        return True

    async def _settled_elsewhere(self, step: int) -> bool:
        """Whether the log has ``step`` home or pruned (read afresh: another command may
        have recorded it since this one started)."""
        try:
            state = await self.session.journal.state(self.job.run_id)
        except StoreError:
            return False  # the warning stands; following goes on
        self.pruned |= set(state.run.pruned)
        self.home |= set(state.run.checkpoints)
        return step in self.pruned or step in self.home

    def _warn(self, step: int, text: str) -> None:
        if step not in self._told:
            self._told.add(step)
            self.session.front.warn(text)


def _whole(expected: dict[str, str], path: str) -> bool:
    return f"{path}/{TRAINER_STATE}" in expected


def _fresh(temp: Path) -> None:
    remove(temp)
    temp.mkdir(parents=True)


def _place(verified: Path, dest: Path) -> None:
    """Rename the verified folder to ``dest``; one already there (brought by the results'
    collection, verified as well) stays."""
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    verified.rename(dest)


def clear_leftovers(local: Path) -> None:
    """Remove what an interrupted fetch or removal left (never a checkpoint home), but not
    the folder a fetch of a live process is filling."""
    with contextlib.suppress(OSError):
        for child in local.iterdir():
            if child.name.startswith(PRUNING_PREFIX) or (
                child.name.startswith(FETCHING_PREFIX) and not _alive(child.name)
            ):
                remove(child)


def _alive(name: str) -> bool:
    """Whether the process that names a fetch's folder (``…-STEP-PID``) still runs."""
    pid = name.rpartition("-")[2]
    if not pid.isdigit() or int(pid) <= 1 or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def prune(session: Session, run_id: str, keep: int) -> None:
    """Remove the checkpoints home beyond the last ``keep``: each recorded first
    (``run.CheckpointPruned``), then renamed out of ``output/`` and deleted — under the
    run's settle lock, shielded."""
    async with service.settling(session, run_id) as state:
        steps = checkpoint_plan.to_prune(state.run.checkpoints, keep=keep)
        if not steps:
            return
        local = session.run_dir(run_id)

        async def work() -> None:
            for step in steps:
                path = checkpoint_path(step)
                await session.journal.append(run_id, partial(_pruned, step=step, path=path))
                await trio.to_thread.run_sync(_discard, local / path, local, step)

        await session.interrupts.shield(
            f"removing older checkpoints of run {run_id}", PLACE_LIMIT * (1 + len(steps)), work
        )


def _pruned(state: RunLog, *, step: int, path: str) -> list[Event]:
    return decisions.checkpoint_pruned(state, step, path)


def _discard(folder: Path, local: Path, step: int) -> None:
    if not folder.exists():
        return
    aside = local / f"{PRUNING_PREFIX}{step}"
    remove(aside)
    folder.rename(aside)
    remove(aside)
