"""The steps of a run's job on its target: start (shielded), watch, settle, collect and
cancel (shielded), every transition appended to the run's log.

What a job's end means for the run is ``outcome.judge``'s; what each step appends is
decided by ``overbrainer.events.decisions``; this module drives the executor, the journal
and the front end. The order of the steps is ``run.py``'s.
"""

import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.types import RunState
from overbrainer.exec.base import (
    Arrived,
    ExecError,
    Executor,
    JobState,
    JobStatus,
    TargetUnreachable,
)
from overbrainer.exec.manifest import checkpoint_path, local_manifest, verify
from overbrainer.exec.transfer import STAGING_DIR
from overbrainer.front.interrupts import AFTER_STOP, Offer
from overbrainer.lifecycle.outcome import Verdict, judge
from overbrainer.plurals import plural
from overbrainer.projections.live import LiveFiles
from overbrainer.session.limits import CANCEL_LIMIT, COLLECT_LIMIT, START_LIMIT
from overbrainer.session.session import Session, ended_by
from overbrainer.train.axolotl import STOP_FILE
from overbrainer.train.metrics import MetricsEvent, MetricsSummary, milestones, parse_metrics_lines

RETRIEVED_PATHS = ("output", "metrics.jsonl", "job.log")
METRICS_FILE = "metrics.jsonl"
POLL_SECONDS = 1.0
READ_LIMIT = 1 << 20
MAX_FAILED_POLLS = 5
NOT_RETRIEVED = decisions.NOT_RETRIEVED
# In runs/<id>/: held by the one process collecting and recording the run's end.
SETTLE_LOCK = ".settle.lock"


def result_paths(summary: MetricsSummary | None) -> tuple[str, ...]:
    """What a job's collection brings home: its results, and the checkpoint it saved when
    a save-and-stop request stopped it (the summary's ``stopped_step``)."""
    if summary is None or summary.stopped_step is None:
        return RETRIEVED_PATHS
    return (*RETRIEVED_PATHS, checkpoint_path(summary.stopped_step))


def attach_hint(run_id: str) -> str:
    """How to follow a run again."""
    return f"follow it again with `overbrainer train attach {run_id}`"


class FollowLost(OverbrainerError):
    """Following gave up after too many failed polls; the job keeps running."""


class EndedMeanwhile(OverbrainerError):
    """Another command ended the run while this one followed it (and may have taken its
    target away: a pod deleted, its key forgotten); ``state`` is the run as it ended."""

    def __init__(self, state: RunLog) -> None:
        super().__init__(f"run {state.run.run_id} ended meanwhile ({state.run.state})")
        self.state = state


@dataclass
class Job:
    """A run's job on its target. ``in_place``: the target's run dir is the local one.
    ``results_wait``: where the results wait when their collection is stopped, and for how
    long (default: in the job's directory on the target)."""

    run_id: str
    executor: Executor
    remote_dir: str
    in_place: bool = False
    results_wait: str | None = None


@dataclass
class Followed:
    """What following saw: the job's end and the metrics up to it."""

    state: JobState
    summary: MetricsSummary = field(default_factory=MetricsSummary)


def compact(summary: MetricsSummary) -> dict[str, int | float | str | None]:
    """The metrics summary as stored in events (no bookkeeping fields, no unknowns)."""
    keep = (
        "step",
        "max_steps",
        "epoch",
        "loss",
        "eval_loss",
        "learning_rate",
        "lines",
        "malformed",
    )
    data = summary.to_dict()
    return {k: data[k] for k in keep if data.get(k) is not None}


# ---- start ----------------------------------------------------------------------------


async def start(
    session: Session,
    job: Job,
    commands: list[list[str]],
    *,
    env: Mapping[str, str],
    secrets: Mapping[str, str],
    container: str | None = None,
    source: Path | None = None,
) -> RunLog:
    """Upload the run and spawn its job, recording it — never interrupted: a job spawned but
    not recorded would be a job nothing finds again. ``source``: what is uploaded, when it
    is not the run's directory (a recovery's: its inputs only, not what came home)."""

    async def work() -> RunLog:
        if not job.in_place:
            await job.executor.upload(source or session.run_dir(job.run_id), job.remote_dir)
        handle = await job.executor.spawn(
            job.remote_dir, commands, env=env, secrets=secrets, container=container
        )
        started = ev.JobStarted(job_dir=job.remote_dir, pid=handle.pid, container=handle.container)
        try:
            # Decided on the fresh log: another command may have ended the run meanwhile.
            state = await session.journal.append(
                job.run_id, lambda s: decisions.start_job(s, started)
            )
        except OverbrainerError as error:
            # The log cannot say the job exists (the store is full, locked, gone): stop it,
            # so no job runs that nothing knows of.
            raise await _unrecorded(job, handle.pid, error) from error
        if state.run.state != RunState.running or (state.run.job or {}).get("pid") != handle.pid:
            who = await ended_by(session, job.run_id)
            ended = OverbrainerError(f"run {job.run_id} was {state.run.state}{who} meanwhile")
            raise await _unrecorded(job, handle.pid, ended)
        return state

    return await session.interrupts.shield(
        f"starting the job of run {job.run_id}", START_LIMIT, work
    )


async def _unrecorded(job: Job, pid: int, error: OverbrainerError) -> OverbrainerError:
    """Stop a job whose start could not be recorded; the error to raise, saying so."""
    try:
        after = await job.executor.cancel(job.remote_dir)
    except OverbrainerError as failure:
        return OverbrainerError(
            f"the job of run {job.run_id} started (pid {pid}) but could not be recorded "
            f"({error}), and stopping it failed ({failure}): stop it yourself on "
            f"{job.executor.location}, in {job.remote_dir}"
        )
    if after.status is not JobStatus.cancelled:
        # It ended on its own while the store was unavailable: its files stay on the target.
        return OverbrainerError(
            f"the job of run {job.run_id} ran and ended ({after.status.value}) but its start "
            f"could not be recorded ({error}); its files are in {job.remote_dir} on "
            f"{job.executor.location}"
        )
    return OverbrainerError(
        f"the job of run {job.run_id} was stopped: its start could not be recorded ({error})"
    )


# ---- follow ---------------------------------------------------------------------------


async def watch(
    session: Session,
    job: Job,
    *,
    poll: float = POLL_SECONDS,
    spend: Callable[[], float | None] | None = None,
    at_each_poll: Callable[[], Awaitable[None]] | None = None,
    on_events: Callable[[list[MetricsEvent]], None] | None = None,
) -> Followed:
    """Follow the job until it ends: poll its status, show new metrics lines, then drain
    the metrics file; ``at_each_poll`` is what the target checks besides (a pod nearing
    its cost cap); ``on_events`` is given each read's new metrics events (it must not
    wait: checkpoints are fetched beside following, never in its way). Up to
    ``MAX_FAILED_POLLS`` consecutive failures to reach the target are warned about and
    retried; one more gives up (the job keeps running)."""
    summary = MetricsSummary()
    offset = 0
    failures = 0
    # What this follower sees is kept beside run.json for `runs ls` and `runs show`.
    live = await _live_files(session, job)
    while True:
        # Polls start every ``poll`` seconds: the time the target takes to answer is part
        # of the period, not added to it (a line written just after a read waits one
        # period, not a period plus two round trips).
        tick = trio.current_time()
        try:
            state = await job.executor.status(job.remote_dir)
            summary, offset, events = await _read_metrics(job, summary, offset, final=state.ended)
            failures = 0
        except ExecError as error:
            # Another follower may have won the race to the end (and deleted the pod): the
            # log says so before any failure is reported or retried.
            ended = await _ended_meanwhile(session, job.run_id)
            if ended is not None:
                raise EndedMeanwhile(ended) from error
            if not isinstance(error, TargetUnreachable):
                raise
            failures += 1
            if failures > MAX_FAILED_POLLS:
                raise FollowLost(
                    f"gave up following run {job.run_id} after {failures} failed attempts in "
                    f"a row to reach {job.executor.location} (last: {error}); its job keeps "
                    f"running there: {attach_hint(job.run_id)}"
                ) from error
            # The error names the target and what failed.
            session.front.warn(f"{error}; retrying ({failures}/{MAX_FAILED_POLLS})")
            await trio.sleep_until(tick + poll)
            continue
        live.saw(events, summary)
        if on_events is not None and events:
            on_events(events)
        for line in milestones(events):
            session.front.milestone(line)
        session.front.progress(summary, spend() if spend else None)
        if state.ended:
            session.front.progress_done(summary, spend() if spend else None)
            return Followed(state=state, summary=summary)
        if at_each_poll is not None:
            await at_each_poll()
        if state.status is JobStatus.running and await take_relayed_cancel(session, job):
            continue  # the job is stopping: the next look sees it cancelled
        await trio.sleep_until(tick + poll)


async def _live_files(session: Session, job: Job) -> LiveFiles:
    """Where the follower keeps what it sees: a job not on this machine has its lines
    mirrored in the mirror of its attempt (a recovery's job, on a new pod, in one of its
    own, so the lines of the lost pods' jobs stay)."""
    run_dir = session.run_dir(job.run_id)
    if job.in_place:
        return LiveFiles(run_dir, mirror=False)
    from overbrainer.events.errors import StoreError

    try:
        state = await session.journal.state(job.run_id)
    except StoreError:
        # Which attempt this is cannot be told: no mirror (it could overwrite another
        # attempt's lines); the retrieved metrics come home at the end all the same.
        return LiveFiles(run_dir, mirror=False)
    recoveries = state.run.recoveries
    if not recoveries:
        return LiveFiles(run_dir, mirror=True)
    resumed = recoveries[-1].get("resumed_step")
    return LiveFiles(
        run_dir,
        mirror=True,
        recovery=len(recoveries),
        resumed=resumed if isinstance(resumed, int) else None,
    )


async def _ended_meanwhile(session: Session, run_id: str) -> RunLog | None:
    """The run's state if another command ended it; None if not (or the log is unreadable)."""
    from overbrainer.events.errors import StoreError

    try:
        state = await session.journal.state(run_id)
    except StoreError:
        return None
    return state if state.final else None


# Runs whose follower already warned that the store cannot be read (once per outage).
_store_down_told: set[str] = set()


async def take_relayed_cancel(session: Session, job: Job) -> bool:
    """Take a cancel another checkout asked of this run's follower through the log (it
    cannot reach the job itself): record that it is taken, so the asker knows, and stop
    the job — shielded. Returns whether a request was taken."""
    from overbrainer.events.errors import StoreError

    try:
        log = await session.journal.state(job.run_id)
    except StoreError as error:
        # Following needs only the target: a store that is down stops nothing here. The
        # run's end cannot be recorded either, which its settling will say.
        if job.run_id not in _store_down_told:
            session.front.warn(f"{error}; following the job of run {job.run_id} goes on")
            _store_down_told.add(job.run_id)
        return False
    _store_down_told.discard(job.run_id)
    if log.run.stop_pending and not log.run.cancel_pending and not log.final:
        await take_relayed_stop(session, job)
        return False
    if not log.run.cancel_pending or log.final:
        return False
    asker = await session.journal.asker_of_cancel(job.run_id)
    session.front.info(
        f"train: cancel of run {job.run_id} requested{asker}: stopping its job on "
        f"{job.executor.location}"
    )

    async def work() -> bool:
        # Taken first, so the asker hears at once that somebody is at work.
        await session.journal.append(job.run_id, decisions.take_cancel)
        try:
            await job.executor.cancel(job.remote_dir)
        except ExecError as error:
            # Asked again, by this follower: the next look tries again.
            session.front.warn(f"{error}; trying again at the next look")
            await session.journal.append(job.run_id, decisions.ask_cancel_again)
            return False
        return True

    return await session.interrupts.shield(
        f"cancelling the job of run {job.run_id}", CANCEL_LIMIT, work
    )


async def take_relayed_stop(session: Session, job: Job) -> None:
    """Take a save-and-stop asked of this run's follower through the log: write the
    request on the target (the job saves and stops at its next step) and record that it
    is taken. A target that cannot be reached now is tried again at the next look."""
    asker = await session.journal.asker_of_stop(job.run_id)
    session.front.info(
        f"train: stop of run {job.run_id} requested{asker}: asking its job on "
        f"{job.executor.location} to save a checkpoint and stop"
    )
    try:
        await write_stop_request(job)
    except ExecError as error:
        session.front.warn(f"{error}; trying again at the next look")
        return
    await session.journal.append(job.run_id, decisions.take_stop)


async def write_stop_request(job: Job) -> None:
    """Write the save-and-stop request in the job's directory on its target."""
    await job.executor.touch(f"{job.remote_dir}/{STOP_FILE}")


async def read_all_metrics(job: Job) -> list[MetricsEvent]:
    """Every complete metrics line the job wrote so far, read from its target."""
    _, _, events = await _read_metrics(job, MetricsSummary(), 0, final=True)
    return events


async def _read_metrics(
    job: Job, summary: MetricsSummary, offset: int, *, final: bool
) -> tuple[MetricsSummary, int, list[MetricsEvent]]:
    """The summary after the new lines, the next offset, and the new lines' events."""
    # After the end, drain the file completely; while running, one bounded read per poll.
    seen: list[MetricsEvent] = []
    while True:
        data = await job.executor.read_file(f"{job.remote_dir}/{METRICS_FILE}", offset, READ_LIMIT)
        events, malformed, consumed = parse_metrics_lines(
            data, final=final and len(data) < READ_LIMIT
        )
        summary = summary.with_events(events, malformed)
        seen.extend(events)
        offset += consumed
        if not final or len(data) < READ_LIMIT or consumed == 0:
            return summary, offset, seen


async def detach(session: Session, run_id: str, reason: str | None = None) -> RunLog:
    """Record that following stopped while the job keeps running; ``reason`` defaults to
    the signal that stopped it (``interrupted``, ``interrupted by SIGTERM``)."""
    why = reason or session.interrupts.reason
    return await session.journal.append(run_id, lambda s: decisions.detach(s, why))


# ---- collect and settle ---------------------------------------------------------------


@dataclass
class Retrieval:
    """What a collection brought home, or why it could not."""

    ok: bool
    files: int = 0
    bytes: int = 0
    digest: str = ""
    problem: str = ""
    # The target's manifest, when it could be computed (even if the download then failed).
    expected: dict[str, str] | None = None
    # A signal stopped the collection (the user chose to leave the results on the target).
    stopped: bool = False

    @property
    def has_output(self) -> bool | None:
        """Whether the target has files under ``output/``; None when it is unknown."""
        if self.expected is None:
            return None
        return any(name.startswith("output/") for name in self.expected)


def _results_wait(job: Job) -> str:
    return job.results_wait or f"they stay in {job.remote_dir} on {job.executor.location}"


def collection_offer(session: Session, job: Job) -> Offer:
    """What collecting the job's results says to a first signal: how far it got and what a
    second signal leaves."""
    local = session.run_dir(job.run_id)
    where = _results_wait(job)
    return Offer(
        what=f"collecting the results of run {job.run_id}",
        if_stopped=f"{where}, and `overbrainer train attach {job.run_id}` collects them",
        progress=None if job.in_place else partial(_arrived, local / STAGING_DIR),
    )


def _arrived(staging: Path) -> str:
    """How much of a download has arrived, from its staging directory."""
    total = 0
    for directory, _, names in os.walk(staging):
        for name in names:
            with contextlib.suppress(OSError):
                total += (Path(directory) / name).lstat().st_size
    return f"{_size(total)} so far"


def _size(count: int) -> str:
    """``count`` bytes, as ``"12.5 MB"``."""
    value = float(count)
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 1000:
            return plural(count, "byte") if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def stopped_collection(job: Job) -> Interrupted:
    """The error of a command whose collection of results a signal stopped."""
    where = _results_wait(job)
    return Interrupted(
        f"interrupted: the collection of the results of run {job.run_id} was stopped before "
        f"they were all home and verified (nothing is recorded as retrieved); {where}: "
        f"`overbrainer train attach {job.run_id}` collects them"
    )


async def collect(
    session: Session,
    job: Job,
    paths: tuple[str, ...] = RETRIEVED_PATHS,
    *,
    home: Collection[str] = (),
) -> Retrieval:
    """Bring the job's results (``paths``) home and check every file against the target's
    manifest (none missing, none different, none extra); record the retrieval. ``home``:
    the checkpoints already home, which come again only if they differ (see :func:`fetch`).

    A second signal stops it (:meth:`Interrupts.stoppable`): nothing is recorded then, and
    the retrieval says ``stopped``."""
    if job.in_place:
        session.front.info(f"checking the results of run {job.run_id}")
    else:
        session.front.info(
            f"retrieving the results of run {job.run_id} from {job.executor.location}"
        )
    local = session.run_dir(job.run_id)

    async def bring_home() -> tuple[dict[str, str] | None, OverbrainerError | None, list[str]]:
        expected, arrived, error = await fetch(job, local, paths, home=home)
        if error is not None or expected is None:
            return expected, error, []
        problems = await trio.to_thread.run_sync(verify, expected, local, paths, arrived)
        return expected, None, problems

    interrupts = session.interrupts
    brought = await interrupts.stoppable(collection_offer(session, job), COLLECT_LIMIT, bring_home)
    if brought is None:
        return Retrieval(
            ok=False,
            problem=f"the collection was stopped by {interrupts.label}",
            stopped=True,
        )
    expected, error, problems = brought.value
    if error is not None:
        return Retrieval(ok=False, problem=str(error), expected=expected)
    assert expected is not None
    if problems:
        return Retrieval(ok=False, problem="; ".join(problems[:5]), expected=expected)
    size = sum((local / name).stat().st_size for name in expected)
    digest = hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()
    retrieval = Retrieval(
        ok=True, files=len(expected), bytes=size, digest=digest, expected=expected
    )
    await session.journal.append(
        job.run_id,
        lambda s: decisions.retrieved(
            s, files=retrieval.files, size=retrieval.bytes, digest=digest
        ),
    )
    return retrieval


async def fetch(
    job: Job, local: Path, paths: tuple[str, ...], *, home: Collection[str] = ()
) -> tuple[dict[str, str] | None, Mapping[str, Arrived] | None, OverbrainerError | None]:
    """The target's manifest of ``paths`` and their download into ``local``, side by side
    (the target hashes while the files travel, and this side as they arrive): the manifest,
    if it came, what arrived (``None`` if the download did not hash it) and the first
    error. A file that changed between the two differs from the manifest, and fails the
    verification. The results' collection and a checkpoint's retrieval share it.

    ``home``: paths already here, verified when they came (the checkpoints brought home
    while the job ran). One of ``paths`` among them is not downloaded again when its files
    here are exactly the target's (hashed here, against the manifest): what arrived then
    counts them as they are here. One that differs is downloaded after all."""
    skip = () if job.in_place else tuple(p for p in paths if p in home)
    wanted = tuple(p for p in paths if p not in skip)
    expected: dict[str, str] | None = None
    arrived: Mapping[str, Arrived] | None = None
    errors: list[OverbrainerError] = []

    async def manifest() -> None:
        nonlocal expected
        try:
            expected = await job.executor.manifest(job.remote_dir, paths)
        except OverbrainerError as error:
            errors.append(error)

    async def download() -> None:
        nonlocal arrived
        arrived = await _download(job, local, wanted, errors)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(manifest)
        if not job.in_place:
            nursery.start_soon(download)
    if errors or expected is None or not skip:
        return expected, arrived, (errors[0] if errors else None)
    same, stale = await trio.to_thread.run_sync(_home_copies, expected, local, skip)
    again = await _download(job, local, stale, errors) if stale else None
    if errors:
        return expected, arrived, errors[0]
    return expected, {**(arrived or {}), **(again or {}), **same}, None


async def _download(
    job: Job, local: Path, paths: tuple[str, ...], errors: list[OverbrainerError]
) -> Mapping[str, Arrived] | None:
    """``paths`` of the job's directory downloaded into ``local``; a failure is added to
    ``errors``."""
    try:
        return await job.executor.download(job.remote_dir, paths, local)
    except OverbrainerError as error:
        errors.append(error)
    except OSError as error:
        # Writing here failed (a full disk, permissions): a retrieval that did not
        # happen, which `train attach` retries, not a crash.
        errors.append(OverbrainerError(f"cannot write the results into runs/{job.run_id}: {error}"))
    return None


def _home_copies(
    expected: Mapping[str, str], local: Path, paths: tuple[str, ...]
) -> tuple[dict[str, Arrived], tuple[str, ...]]:
    """Of ``paths`` (folders already home), what matches the target's manifest file for
    file (each file as it is here), and the folders that do not, or cannot be read here:
    to be downloaded again. A folder the target has no file of is neither: the
    verification says it is extra."""
    same: dict[str, Arrived] = {}
    stale: list[str] = []
    for path in paths:
        theirs = {n: h for n, h in expected.items() if n.startswith(f"{path}/")}
        if not theirs:
            continue
        try:
            mine = local_manifest(local, [path])
            sizes = {name: (local / name).stat().st_size for name in mine}
        except OSError:
            mine = {}
        if mine != theirs:
            stale.append(path)
            continue
        for name, digest in mine.items():
            same[name] = Arrived(sha256=digest, size=sizes[name])
    return same, tuple(stale)


@contextlib.asynccontextmanager
async def _settling(session: Session, run_id: str) -> AsyncIterator[RunLog]:
    """Hold the run's settle lock and yield its state as it is then.

    Another command may be settling the same run (``train cancel`` in a second terminal
    while ``train`` follows, two ``train attach``): both would replace the same local files.
    One at a time, and the second sees what the first recorded.
    """
    import fcntl

    path = session.run_dir(run_id) / SETTLE_LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await trio.sleep(0.05)  # polled, so a time limit can still stop the wait
        yield await session.journal.state(run_id)
    finally:
        os.close(fd)  # releases the lock


settling = _settling
"""The run's settle lock, for what else replaces files under ``output/`` (a checkpoint
put in place, or removed)."""


def _settled(state: RunLog) -> Retrieval | None:
    """The retrieval already recorded for a run that ended with its results home."""
    found = state.run.artifacts
    if not state.final or found is None or state.run.note:
        return None
    return Retrieval(
        ok=True, files=found["files"], bytes=found["bytes"], digest=found["manifest_digest"]
    )


async def _home_as_recorded(
    session: Session, run_id: str, state: RunLog, paths: tuple[str, ...] = RETRIEVED_PATHS
) -> Retrieval | None:
    """The retrieval the log records for a run whose end it does not (the command that
    brought the results home was stopped, or could not record the end, just after): when
    the files at home still match it, they need not come again (no second download, no
    second ``run.ArtifactsRetrieved``). None when nothing is recorded or the files
    changed since."""
    found = state.run.artifacts
    if found is None or state.run.note:
        return None
    local = session.run_dir(run_id)
    try:
        home = await trio.to_thread.run_sync(local_manifest, local, paths)
    except OSError:
        return None
    digest = hashlib.sha256(json.dumps(home, sort_keys=True).encode()).hexdigest()
    if digest != found.get("manifest_digest"):
        return None
    return Retrieval(
        ok=True, files=found["files"], bytes=found["bytes"], digest=digest, expected=home
    )


async def recollect(session: Session, job: Job) -> Retrieval:
    """Collect the results of a run that ended without them (``train attach``) — shielded;
    nothing is done when another command brought them home meanwhile."""

    async def work() -> Retrieval:
        async with _settling(session, job.run_id) as state:
            return _settled(state) or await collect(session, job)

    return await session.interrupts.shield(
        f"collecting the results of run {job.run_id}", COLLECT_LIMIT + AFTER_STOP, work
    )


async def settle(session: Session, job: Job, followed: Followed) -> tuple[RunLog, Retrieval]:
    """Turn the job's end into the run's outcome — shielded, since collecting has begun.

    A would-be success whose results cannot be retrieved stays ``running`` (with a note
    saying why) so ``train attach`` retries; a failed or cancelled run whose results cannot
    be retrieved gets a note saying so.
    """

    async def work() -> tuple[RunLog, Retrieval]:
        async with _settling(session, job.run_id) as state:
            done = _settled(state)
            if done is not None:
                return state, done  # another command settled it: its result stands
            return await _settle_now(session, job, followed, state)

    return await session.interrupts.shield(
        f"recording the end of run {job.run_id}", COLLECT_LIMIT + AFTER_STOP, work
    )


async def _settle_now(
    session: Session, job: Job, followed: Followed, state: RunLog
) -> tuple[RunLog, Retrieval]:
    paths = result_paths(followed.summary)
    home = {checkpoint_path(step) for step in state.run.checkpoints}
    retrieval = await _home_as_recorded(session, job.run_id, state, paths) or await collect(
        session, job, paths, home=home
    )
    # The manifest tells whether output/ has files: no second pass over the output.
    # When it could not be computed (the target was unreachable), the output is given
    # the benefit of the doubt: a would-be success then stays running for attach,
    # instead of failing for good as "left nothing under output/".
    has_output = retrieval.has_output
    verdict = judge(
        followed.state,
        followed.summary,
        has_output=True if has_output is None else has_output,
        run_id=job.run_id,
        checkpoint_home=checkpoint_home(followed.summary, retrieval),
    )
    return await _record(session, job.run_id, verdict, followed.summary, retrieval), retrieval


def checkpoint_home(summary: MetricsSummary, retrieval: Retrieval) -> bool:
    """Whether the checkpoint a stopped job saved came home, as far as the retrieval tells
    (one that did not complete says nothing: the run then stays running for attach)."""
    if not retrieval.ok or retrieval.expected is None:
        return True
    return saved_checkpoint(summary, retrieval) is not None


def saved_checkpoint(summary: MetricsSummary, retrieval: Retrieval) -> tuple[int, str] | None:
    """The step and path of the checkpoint a stopped job saved, when the retrieval brought
    files of it home (a save that left nothing is no checkpoint to resume from)."""
    step = summary.stopped_step
    if step is None or not retrieval.ok or retrieval.expected is None:
        return None
    path = checkpoint_path(step)
    return (step, path) if any(n.startswith(f"{path}/") for n in retrieval.expected) else None


async def _record(
    session: Session, run_id: str, verdict: Verdict, summary: MetricsSummary, retrieval: Retrieval
) -> RunLog:
    metrics = compact(summary)
    checkpoint = saved_checkpoint(summary, retrieval)
    return await session.journal.append(
        run_id,
        lambda s: decisions.record_end(
            s,
            outcome=verdict.state,
            message=verdict.message,
            exit_code=verdict.exit_code,
            metrics=metrics,
            home=retrieval.ok,
            problem=retrieval.problem,
            checkpoint=checkpoint,
        ),
    )


# ---- cancel ---------------------------------------------------------------------------


async def cancel(session: Session, job: Job) -> tuple[RunLog, JobState, Retrieval | None]:
    """Stop the job (its whole process group), collect what it left and record the end —
    never interrupted. A job that had already ended is left alone: its real result stands."""

    async def work() -> tuple[RunLog, JobState, Retrieval | None]:
        before = await job.executor.status(job.remote_dir)
        if before.ended:
            state = await session.journal.state(job.run_id)
            if before.status is not JobStatus.cancelled or state.final:
                return state, before, None
            # An earlier cancel stopped the job but its end was never recorded: record it.
            after = before
        else:
            await session.journal.append(job.run_id, decisions.request_cancel)
            after = await job.executor.cancel(job.remote_dir)
            if after.status is not JobStatus.cancelled:
                return await session.journal.state(job.run_id), after, None
        async with _settling(session, job.run_id) as state:
            done = _settled(state)
            if done is not None:
                return state, after, done  # a follower recorded the cancellation already
            retrieval = await collect(session, job)
            verdict = Verdict(state=RunState.cancelled, message="cancelled", exit_code=None)
            summary = await _summary_from_local(session, job)
            state = await _record(session, job.run_id, verdict, summary, retrieval)
            return state, after, retrieval

    return await session.interrupts.shield(
        f"cancelling the job of run {job.run_id}", CANCEL_LIMIT + COLLECT_LIMIT + AFTER_STOP, work
    )


async def stop_and_collect(session: Session, job: Job, message: str) -> tuple[RunLog, Retrieval]:
    """Stop the job before its target's bound ends it (a pod's cost cap), collect what it
    left and record the run failed with ``message`` — never interrupted. A job that ended
    on its own meanwhile is recorded as it ended; a run another command settled keeps its
    result."""

    async def work() -> tuple[RunLog, Retrieval]:
        before = await job.executor.status(job.remote_dir)
        after = before if before.ended else await job.executor.cancel(job.remote_dir)
        async with _settling(session, job.run_id) as state:
            done = _settled(state)
            if done is not None:
                return state, done
            retrieval = await collect(session, job)
            summary = await _summary_from_local(session, job)
            if before.ended or after.status is not JobStatus.cancelled:
                has_output = retrieval.has_output
                verdict = judge(
                    after,
                    summary,
                    has_output=True if has_output is None else has_output,
                    run_id=job.run_id,
                    checkpoint_home=checkpoint_home(summary, retrieval),
                )
            else:
                verdict = Verdict(state=RunState.failed, message=message, exit_code=None)
            return await _record(session, job.run_id, verdict, summary, retrieval), retrieval

    return await session.interrupts.shield(
        f"stopping the job of run {job.run_id}", CANCEL_LIMIT + COLLECT_LIMIT + AFTER_STOP, work
    )


async def _summary_from_local(session: Session, job: Job) -> MetricsSummary:
    path = session.run_dir(job.run_id) / METRICS_FILE
    try:
        data = path.read_bytes()
    except OSError:
        return MetricsSummary()
    events, malformed, _ = parse_metrics_lines(data, final=True)
    return MetricsSummary().with_events(events, malformed)
