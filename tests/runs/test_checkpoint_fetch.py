"""A checkpoint's background retrieval stopped at any await (what Ctrl-C or SIGTERM does to
the scope it runs in) never tears it: the checkpoint is either home whole and recorded,
or not home and not recorded — never a partial folder in ``output/``, never a record of
one. A retrieval that does not match the target's manifest is not recorded either."""

import hashlib
import io
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import trio

from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.events.types import CheckpointPruned, CheckpointRetrieved, JobStarted, RunCreated
from overbrainer.exec.base import Arrived, JobHandle, JobState, TargetUnreachable
from overbrainer.exec.manifest import list_files, local_manifest
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle.checkpoints_home import FETCHING_PREFIX, CheckpointFetcher
from overbrainer.lifecycle.service import Job
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.testing.fake_executor import run_inline
from overbrainer.train.metrics import MetricsEvent

RUN = "20260101-100000-abcd"
STEP = 20
PATH = f"output/checkpoint-{STEP}"


class SlowTarget:
    """A target whose run directory is a local folder, downloaded one file at a time with
    an await between files (so a cancel can land between any two); ``corrupt`` changes one
    file on the way."""

    location = "the test's target"

    def __init__(self, root: Path, *, corrupt: bool = False, unreachable: int = 0) -> None:
        self.root = root
        self.corrupt = corrupt
        self.unreachable = unreachable  # how many manifests fail first, as a lost link

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        await trio.lowlevel.checkpoint()
        if self.unreachable:
            self.unreachable -= 1
            raise TargetUnreachable("cannot reach the test's target", host="target")
        return local_manifest(self.root / remote_dir, paths)

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived] | None:
        source = self.root / remote_dir
        for name in list_files(source, paths):
            await trio.lowlevel.checkpoint()
            target = local_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = (source / name).read_bytes()
            if self.corrupt and name.endswith("optimizer.pt"):
                data = b"x" + data[1:]
            target.write_bytes(data)
        return None

    # Not used by a checkpoint's retrieval.
    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        raise AssertionError

    async def spawn(self, *args: object, **kwargs: object) -> JobHandle:
        raise AssertionError

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        raise AssertionError

    async def file_size(self, path: str) -> int:
        raise AssertionError

    async def status(self, remote_dir: str) -> JobState:
        raise AssertionError

    async def cancel(self, remote_dir: str) -> JobState:
        raise AssertionError

    async def touch(self, path: str) -> None:
        raise AssertionError

    async def aclose(self) -> None:
        return None


def _checkpoint(folder: Path) -> None:
    folder.mkdir(parents=True)
    for i in range(6):
        (folder / f"shard-{i}.bin").write_bytes(hashlib.sha256(bytes([i])).digest() * 512)
    (folder / "optimizer.pt").write_bytes(b"optimizer" * 100)
    (folder / "trainer_state.json").write_text('{"global_step": 20}\n')


class CancelAtStep(trio.abc.Instrument):
    """Cancels ``scope`` when ``task`` or a task below it (the manifest's and the
    download's) is about to run its ``k``-th step in all: as a signal landing at that
    await."""

    def __init__(self, task: trio.lowlevel.Task, k: int, scope: trio.CancelScope) -> None:
        self.task, self.k, self.scope, self.steps = task, k, scope, 0

    def _below(self, task: trio.lowlevel.Task | None) -> bool:
        while task is not None:
            if task is self.task:
                return True
            nursery = task.parent_nursery
            task = nursery.parent_task if nursery is not None else None
        return False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._below(task):
            self.steps += 1
            if self.steps == self.k:
                self.scope.cancel()


ERR = io.StringIO()


def _rig(project: Path, target: SlowTarget) -> Iterator[tuple[Session, RunStore, Job]]:
    ERR.seek(0)
    ERR.truncate()
    front = Front(io.StringIO(), ERR, terminal=False)
    store = RunStore(None, project, Actor.here("test"))
    journal = Journal(store, project, listener=front.event, runner=run_inline)
    session = Session(journal, front, Interrupts(front.notice), project)
    try:
        yield session, store, Job(RUN, target, f"remote/{RUN}")  # type: ignore[arg-type]
    finally:
        store.close()


async def _started(session: Session) -> None:
    await session.journal.create(
        RunCreated(
            run_id=RUN, target="box", kind="ssh", remote_dir=f"remote/{RUN}", settings_digest="d"
        )
    )
    await session.journal.append(RUN, [JobStarted(job_dir=f"remote/{RUN}", pid=7)])


async def _fetch_cancelled_at(project: Path, k: int) -> tuple[bool, bool]:
    """Fetch checkpoint-20 with a cancel at step ``k`` of the fetching task; whether the
    cancel landed, and whether the checkpoint is recorded home."""
    _checkpoint(project / "remote" / RUN / PATH)
    target = SlowTarget(project)
    rig = _rig(project, target)
    session, store, job = next(rig)
    try:
        await _started(session)
        fetcher = CheckpointFetcher(session, job, keep=2, home=[])
        fetcher.saw([MetricsEvent("saved", step=STEP)])
        with trio.CancelScope() as scope:
            instrument = CancelAtStep(trio.lowlevel.current_task(), k, scope)
            trio.lowlevel.add_instrument(instrument)
            try:
                await fetcher.fetch(STEP)
            finally:
                trio.lowlevel.remove_instrument(instrument)
        recorded = STEP in store.get(RUN).run.checkpoints
    finally:
        rig.close()
    return scope.cancelled_caught, recorded


async def test_a_cancel_at_any_await_of_a_retrieval_never_tears_the_checkpoint(
    tmp_path: Path,
) -> None:
    outcomes: list[bool] = []
    for k in range(1, 400):
        project = tmp_path / f"k{k}"
        landed, recorded = await _fetch_cancelled_at(project, k)
        local = project / "runs" / RUN
        home = local / PATH
        if recorded:
            # Whole and matching the target's files.
            assert local_manifest(local, [PATH]) == local_manifest(project / "remote" / RUN, [PATH])
        else:
            assert not home.exists(), f"a partial checkpoint left in output/ at step {k}"
        # The temporary folder is gone either way (removed shielded).
        assert not [p for p in local.iterdir() if p.name.startswith(FETCHING_PREFIX)]
        outcomes.append(recorded)
        shutil.rmtree(project)
        if not landed:
            break
    else:
        pytest.fail("the retrieval never ran to its end")
    # Both sides were reached: cancels that stopped it, and the retrieval's own end.
    assert outcomes[0] is False and outcomes[-1] is True
    assert len(outcomes) > 10


async def test_a_checkpoint_that_does_not_match_is_not_recorded(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "remote" / RUN / PATH)
    rig = _rig(tmp_path, SlowTarget(tmp_path, corrupt=True))
    session, store, job = next(rig)
    try:
        await _started(session)
        fetcher = CheckpointFetcher(session, job, keep=2, home=[])
        fetcher.saw([MetricsEvent("saved", step=STEP)])
        assert await fetcher.fetch(STEP) is False
        assert store.get(RUN).run.checkpoints == []
        assert not (tmp_path / "runs" / RUN / PATH).exists()
        err = ERR.getvalue()
        assert f"checkpoint-{STEP} of run {RUN} did not come home" in err
        assert "optimizer.pt: different" in err
    finally:
        rig.close()


def test_a_dead_fetchs_folder_is_cleared_a_live_ones_is_not(tmp_path: Path) -> None:
    import subprocess

    from overbrainer.lifecycle.checkpoints_home import PRUNING_PREFIX, clear_leftovers

    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        for name in (
            f"{FETCHING_PREFIX}20-{dead.pid}",
            f"{FETCHING_PREFIX}30-{live.pid}",
            f"{PRUNING_PREFIX}10",
        ):
            (tmp_path / name / "output").mkdir(parents=True)
        (tmp_path / "output" / "checkpoint-10").mkdir(parents=True)
        clear_leftovers(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            f"{FETCHING_PREFIX}30-{live.pid}",
            "output",
        ]
        assert (tmp_path / "output" / "checkpoint-10").is_dir()
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize(("unreachable", "home"), [(2, True), (3, False)])
async def test_a_failed_fetch_is_tried_again_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unreachable: int, home: bool
) -> None:
    from overbrainer.lifecycle import checkpoints_home

    monkeypatch.setattr(checkpoints_home, "RETRY_SECONDS", 0.01)
    _checkpoint(tmp_path / "remote" / RUN / PATH)
    target = SlowTarget(tmp_path, unreachable=unreachable)
    rig = _rig(tmp_path, target)
    session, store, job = next(rig)
    try:
        await _started(session)
        fetcher = CheckpointFetcher(session, job, keep=2, home=[])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetcher.run)
            fetcher.saw([MetricsEvent("saved", step=STEP)])
            with trio.fail_after(10):
                while STEP not in fetcher.home | fetcher.given_up:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert (STEP in store.get(RUN).run.checkpoints) is home
        assert fetcher.failures[STEP] == min(unreachable, 3)
        # Warned once, not at every attempt.
        assert ERR.getvalue().count(f"checkpoint-{STEP} of run {RUN} did not come home") == 1
    finally:
        rig.close()


async def test_a_torn_checkpoint_is_warned_about_and_one_pruned_on_purpose_is_not(
    tmp_path: Path,
) -> None:
    torn, pruned = 20, 10
    # checkpoint-20 on the target lacks the file the trainer writes last; checkpoint-10
    # is gone from it, as keep_checkpoints removed it from this machine.
    _checkpoint(tmp_path / "remote" / RUN / PATH)
    (tmp_path / "remote" / RUN / PATH / "trainer_state.json").unlink()
    rig = _rig(tmp_path, SlowTarget(tmp_path))
    session, store, job = next(rig)
    try:
        await _started(session)
        fetcher = CheckpointFetcher(session, job, keep=5, home=[])
        fetcher.saw([MetricsEvent("saved", step=pruned), MetricsEvent("saved", step=torn)])
        # Another follower of the run brought checkpoint-10 home and pruned it meanwhile.
        await session.journal.append(
            RUN,
            [
                CheckpointRetrieved(step=pruned, path="output/checkpoint-10"),
                CheckpointPruned(step=pruned, path="output/checkpoint-10"),
            ],
        )
        assert fetcher.due() == [torn, pruned]
        await fetcher.finish()
        err = ERR.getvalue()
        assert (
            f"warning: checkpoint-{torn} of run {RUN} is not whole on the test's target "
            f"(no {PATH}/trainer_state.json); not brought home"
        ) in err, err
        assert f"checkpoint-{pruned} of run {RUN} is not whole" not in err, err
        assert err.count("not whole") == 1, err
        assert fetcher.due() == []
        assert store.get(RUN).run.checkpoints == []

        # A later follower starts from the log: what was pruned is not even looked at.
        later = CheckpointFetcher(session, job, keep=5, home=[], pruned=[pruned])
        later.saw([MetricsEvent("saved", step=pruned)])
        assert later.due() == []
    finally:
        rig.close()
