"""Retrieval over SSH, hashed as the bytes arrive, still verified file by file against the
target's manifest: against the real sshd on loopback, through the run service's `collect`.

The target's files are changed between its manifest and the stream (each kind: a flipped
byte, a short file, a file gone, a file added), and while the stream is being sent; each is
refused and nothing is recorded. A big download holds only a bounded amount in memory.
"""

import contextlib
import hashlib
import io
import os
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.events.types import RunState
from overbrainer.exec.base import Arrived, Executor, JobState, JobStatus
from overbrainer.exec.ssh import SshExecutor, UserHost, open_ssh
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import service
from overbrainer.lifecycle.checkpoints_home import CheckpointFetcher
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.testing.sshd import SshServer
from overbrainer.train.metrics import MetricsEvent, MetricsSummary
from tests.fakes.sshd import sshd_server

__all__ = ["sshd_server"]

RUN_ID = "20260101-000000-5eed"
REMOTE_DIR = f"runs/{RUN_ID}"
MIB = 1 << 20


class _Tampering:
    """The SSH executor, with the target's files changed by ``tamper`` once its manifest
    is computed and before the stream starts: exactly what the verifier sees when a file
    changes between the target's hashing and its sending."""

    def __init__(self, inner: SshExecutor, tamper: Callable[[], None]) -> None:
        self.inner = inner
        self.tamper = tamper
        self.tampered = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        expected = await self.inner.manifest(remote_dir, paths)
        self.tamper()
        self.tampered.set()
        return expected

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived]:
        await self.tampered.wait()
        return await self.inner.download(remote_dir, paths, local_dir)


def _results(run_dir: Path, big: int = 3 * MIB) -> None:
    (run_dir / "output/sub").mkdir(parents=True)
    (run_dir / "output/adapter_model.safetensors").write_bytes(os.urandom(big))
    (run_dir / "output/sub/config.json").write_text('{"r": 16}')
    (run_dir / "output/empty").write_bytes(b"")
    (run_dir / "metrics.jsonl").write_text('{"event":"begin"}\n')
    (run_dir / "job.log").write_text("trained\n")


@contextlib.asynccontextmanager
async def _session(project: Path) -> AsyncIterator[tuple[Session, RunStore]]:
    store = RunStore(None, project, Actor.here("test"))
    session = Session(
        Journal(store, project),
        Front(io.StringIO(), io.StringIO(), terminal=False),
        Interrupts(),
        project,
    )
    try:
        await session.journal.create(
            ev.RunCreated(
                run_id=RUN_ID, target="box", kind="ssh", remote_dir=REMOTE_DIR, settings_digest="d"
            )
        )
        yield session, store
    finally:
        store.close()


@contextlib.asynccontextmanager
async def _executor(server: SshServer, root: Path) -> AsyncIterator[SshExecutor]:
    target = UserHost(server.alias, config=server.ssh_config, known_hosts=server.known_hosts)
    async with open_ssh(target, workdir=str(root)) as executor:
        yield executor


def _retrieved(store: RunStore) -> list[ev.Event]:
    return [r.event for r in store.history(RUN_ID) if isinstance(r.event, ev.ArtifactsRetrieved)]


async def test_every_file_comes_home_verified_and_recorded(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    remote = tmp_path / "remote"
    _results(remote / REMOTE_DIR)
    (remote / REMOTE_DIR / "output/checkpoint-2").mkdir()
    (remote / REMOTE_DIR / "output/checkpoint-2/optimizer.pt").write_bytes(b"never")
    project = tmp_path / "project"
    async with _session(project) as (session, store), _executor(sshd_server, remote) as executor:
        retrieval = await service.collect(session, service.Job(RUN_ID, executor, REMOTE_DIR))
        assert retrieval.ok, retrieval.problem
        home = project / "runs" / RUN_ID
        names = sorted(
            p.relative_to(home).as_posix()
            for p in home.rglob("*")
            if p.is_file() and p.name != "run.json"  # the run's projection
        )
        assert names == [
            "job.log",
            "metrics.jsonl",
            "output/adapter_model.safetensors",
            "output/empty",
            "output/sub/config.json",
        ]
        for name in names:
            assert (home / name).read_bytes() == (remote / REMOTE_DIR / name).read_bytes()
        assert retrieval.files == 5
        assert retrieval.bytes == sum((home / name).stat().st_size for name in names)
        assert len(_retrieved(store)) == 1


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda d: _flip(d / "output/adapter_model.safetensors", 2 * MIB + 17),
            "output/adapter_model.safetensors: different (sha256",
        ),
        (
            lambda d: os.truncate(d / "output/adapter_model.safetensors", MIB),
            "output/adapter_model.safetensors: different (sha256",
        ),
        (lambda d: (d / "output/sub/config.json").unlink(), "output/sub/config.json: missing here"),
        (
            lambda d: (d / "output/sub/stray.bin").write_bytes(b"stray"),
            "output/sub/stray.bin: extra here",
        ),
    ],
    ids=["flipped-byte", "short-file", "file-gone", "file-added"],
)
async def test_a_file_changed_after_the_target_hashed_it_is_refused(
    sshd_server: SshServer, tmp_path: Path, change: Callable[[Path], object], problem: str
) -> None:
    remote = tmp_path / "remote"
    _results(remote / REMOTE_DIR)
    project = tmp_path / "project"
    async with _session(project) as (session, store), _executor(sshd_server, remote) as executor:
        tampering = _Tampering(executor, lambda: change(remote / REMOTE_DIR))
        job = service.Job(RUN_ID, _as_executor(tampering), REMOTE_DIR)
        retrieval = await service.collect(session, job)
        assert not retrieval.ok
        assert problem in retrieval.problem
        assert _retrieved(store) == []
        # Once the target answers truthfully, the same files are collected.
        retrieval = await service.collect(session, service.Job(RUN_ID, executor, REMOTE_DIR))
        assert retrieval.ok, retrieval.problem


def _as_executor(wrapper: _Tampering) -> Executor:
    executor: Executor = wrapper  # type: ignore[assignment]  # delegates the rest
    return executor


async def test_a_file_rewritten_while_it_is_sent_is_refused(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    remote = tmp_path / "remote"
    big = 192 * MIB
    _results(remote / REMOTE_DIR, big=big)
    target = remote / REMOTE_DIR / "output/adapter_model.safetensors"
    project = tmp_path / "project"
    staging = project / "runs" / RUN_ID / service.STAGING_DIR
    async with _session(project) as (session, store), _executor(sshd_server, remote) as executor:

        async def rewrite_once_bytes_arrive() -> None:
            # The flow control windows hold a few MiB: the target is still sending the
            # start of the file when its first bytes land here, long before its end.
            while not any(p.is_file() and p.stat().st_size for p in staging.rglob("*")):
                await trio.sleep(0.001)
            with target.open("r+b") as handle:
                handle.seek(big - 100)
                handle.write(b"rewritten")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(rewrite_once_bytes_arrive)
            retrieval = await service.collect(session, service.Job(RUN_ID, executor, REMOTE_DIR))
        assert not retrieval.ok
        # GNU tar notices the change itself; either way the file is named.
        assert "output/adapter_model.safetensors" in retrieval.problem
        assert _retrieved(store) == []
        assert not (project / "runs" / RUN_ID / "output").exists()


async def test_a_big_download_holds_a_bounded_amount_in_memory(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    remote = tmp_path / "remote"
    big = 256 * MIB
    _results(remote / REMOTE_DIR, big=big)
    digest = hashlib.sha256((remote / REMOTE_DIR / "output/adapter_model.safetensors").read_bytes())
    local = tmp_path / "local"
    async with _executor(sshd_server, remote) as executor:
        tracemalloc.start()
        try:
            arrived = await executor.download(REMOTE_DIR, service.RETRIEVED_PATHS, local)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    came = arrived["output/adapter_model.safetensors"]
    assert came == Arrived(digest.hexdigest(), big)
    # What asyncssh buffers (its channel's and its stream's windows, and at times packets
    # beyond them: up to 35 MiB were seen on a busy machine, once 132 MiB while the writer
    # lagged), the chunks queued for the writer and the ones in hand: far less than the
    # file. A whole-file buffer would hold all of it: more than this bound.
    assert peak < big * 3 // 4, f"{peak / MIB:.0f} MiB"


class _Counting:
    """The SSH executor, noting what each download brought: its paths and what arrived."""

    def __init__(self, inner: SshExecutor) -> None:
        self.inner = inner
        self.downloads: list[tuple[tuple[str, ...], dict[str, Arrived]]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived]:
        arrived = await self.inner.download(remote_dir, paths, local_dir)
        self.downloads.append((tuple(paths), dict(arrived)))
        return arrived

    def brought(self, prefix: str) -> int:
        """The bytes of files under ``prefix`` that downloads brought, all told."""
        return sum(
            came.size
            for _, arrived in self.downloads
            for name, came in arrived.items()
            if name.startswith(prefix)
        )


STEP = 7
CHECKPOINT = f"output/checkpoint-{STEP}"


@dataclass
class _Stopped:
    """A job that saved checkpoint-7 as asked and stopped, the checkpoint already brought
    home by the background fetch (as while it was followed)."""

    session: Session
    store: RunStore
    counting: _Counting
    job: service.Job
    home: Path  # the run's directory here
    remote: Path  # the job's directory on the target

    async def settle(self) -> service.Retrieval:
        """Settle the job as the command following it does once it ended."""
        followed = service.Followed(
            JobState(JobStatus.exited, 0), MetricsSummary(lines=9, step=STEP, stopped_step=STEP)
        )
        _, retrieval = await service.settle(self.session, self.job, followed)
        return retrieval


@contextlib.asynccontextmanager
async def _stopped(server: SshServer, tmp_path: Path) -> AsyncIterator[_Stopped]:
    remote = tmp_path / "remote"
    _results(remote / REMOTE_DIR, big=MIB)
    saved = remote / REMOTE_DIR / CHECKPOINT
    saved.mkdir()
    (saved / "optimizer.pt").write_bytes(os.urandom(2 * MIB))
    (saved / "trainer_state.json").write_text(f'{{"global_step": {STEP}}}\n')
    project = tmp_path / "project"
    async with _session(project) as (session, store), _executor(server, remote) as executor:
        await session.journal.append(RUN_ID, [ev.JobStarted(job_dir=REMOTE_DIR, pid=7)])
        counting = _Counting(executor)
        job = service.Job(RUN_ID, _as_executor(counting), REMOTE_DIR)
        fetcher = CheckpointFetcher(session, job, keep=2, home=[])
        fetcher.saw([MetricsEvent("saved", step=STEP)])
        assert await fetcher.fetch(STEP)
        assert store.get(RUN_ID).run.checkpoints == [STEP]
        assert counting.brought(f"{CHECKPOINT}/") == 2 * MIB + len(f'{{"global_step": {STEP}}}\n')
        counting.downloads.clear()
        home = session.run_dir(RUN_ID)
        yield _Stopped(session, store, counting, job, home, remote / REMOTE_DIR)


async def test_a_stops_checkpoint_already_home_is_not_downloaded_again_and_still_verified(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    async with _stopped(sshd_server, tmp_path) as w:
        retrieval = await w.settle()
        assert retrieval.ok, retrieval.problem
        # The results came; the checkpoint did not come a second time.
        assert [paths for paths, _ in w.counting.downloads] == [service.RETRIEVED_PATHS]
        assert w.counting.brought("output/") == MIB + len('{"r": 16}')
        assert w.counting.brought(f"{CHECKPOINT}/") == 0
        # Still verified file for file against the target's manifest, the checkpoint too.
        assert retrieval.expected is not None
        assert f"{CHECKPOINT}/optimizer.pt" in retrieval.expected
        assert retrieval.files == 7
        run = w.store.get(RUN_ID).run
        assert run.state is RunState.stopped
        assert run.checkpoint is not None and run.checkpoint["step"] == STEP
        names = [r.event.name for r in w.store.history(RUN_ID)]
        assert names.count("run.CheckpointRetrieved") == 1
        assert names[-2:] == ["run.ArtifactsRetrieved", "run.Ended"]
        for name in retrieval.expected:
            assert (w.home / name).read_bytes() == (w.remote / name).read_bytes()


@pytest.mark.parametrize("where", ["home", "target"])
async def test_a_checkpoint_home_that_is_not_the_targets_is_downloaded_again(
    sshd_server: SshServer, tmp_path: Path, where: str
) -> None:
    async with _stopped(sshd_server, tmp_path) as w:
        # The copy home changed since it was verified, or the target's was written again.
        _flip((w.home if where == "home" else w.remote) / CHECKPOINT / "optimizer.pt", 5)
        retrieval = await w.settle()
        assert retrieval.ok, retrieval.problem
        assert [paths for paths, _ in w.counting.downloads] == [
            service.RETRIEVED_PATHS,
            (CHECKPOINT,),
        ]
        assert w.counting.brought(f"{CHECKPOINT}/") > 2 * MIB
        theirs = w.remote / CHECKPOINT / "optimizer.pt"
        assert (w.home / CHECKPOINT / "optimizer.pt").read_bytes() == theirs.read_bytes()
        assert w.store.get(RUN_ID).run.state is RunState.stopped
