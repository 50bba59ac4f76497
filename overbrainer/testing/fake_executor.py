"""In-memory stand-ins for a pod's machine, for tests on trio's MockClock (no sockets, no
threads, so virtual time never jumps under real I/O).

- :class:`FakeMachine`: a pod's files (paths relative to the executor's root) in a dict,
  writes scheduled in trio time (the watchdog's verdict), and how SSH to it behaves:
  unreachable until some time, down, or presenting another host key.
- :class:`FakeExecutor`: the :class:`~overbrainer.exec.base.Executor` protocol over a
  machine — ``read_file``/``touch`` for readiness, and a small job model (``spawn`` writes
  ``job.pid``; the test writes ``exit_code``) for what comes after.
- :class:`FakeNetwork`: machines by SSH endpoint, and ``connect`` — the provisioning seam
  (``PodContext.connect``) — which refuses a host key other than the pinned one.
- :func:`run_inline`: the journal's runner without a worker thread (``Journal(...,
  runner=run_inline)``). A thread makes the MockClock autojump to the next deadline while
  the store works, which would fire timeouts that real time never reaches.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import httpx
import trio

from overbrainer.config.model import RunpodTarget
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.ids import new_run_id
from overbrainer.events.store import RunStore
from overbrainer.events.types import Event, RunCreated
from overbrainer.exec.base import (
    ExecError,
    Executor,
    HostKeyRefused,
    JobAlreadyRunning,
    JobHandle,
    JobState,
    JobStatus,
    TargetUnreachable,
)
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.runpod.client import CreatePod, RunpodClient
from overbrainer.runpod.models import Pod
from overbrainer.runpod.pod_scripts import BOOTSTRAP_FAILED, RUN_MARKER, VERDICT
from overbrainer.runpod.timing import Timing
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.targets.runpod.pods import PodAccess, PodContext
from overbrainer.testing.runpod_api import FAKE_URL, FakePod, FakeRunpod

FAKE_PID = 4242

T = TypeVar("T")


@dataclass
class FakeMachine:
    """A pod's machine as SSH shows it.

    ``host_key`` None means the machine presents whatever key the run pinned (the pod
    installed the run's host key); a string is the only key it presents. It answers from
    ``reachable_at`` (trio time) on, unless ``down``.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    host_key: str | None = None
    reachable_at: float = 0.0
    down: bool = False
    connects: int = 0
    refused: int = 0
    scheduled: list[tuple[float, str, bytes]] = field(default_factory=list)
    spawned: list[tuple[str, list[list[str]]]] = field(default_factory=list)
    # Called after each settle: what a job does when it sees a file appear (a request).
    reactions: list[Callable[[], None]] = field(default_factory=list)

    def write_at(self, at: float, path: str, data: bytes) -> None:
        """Make ``path`` hold ``data`` from trio time ``at`` on."""
        self.scheduled.append((at, path, data))

    def settle(self) -> None:
        """Apply the scheduled writes that are due."""
        now = trio.current_time()
        due = [s for s in self.scheduled if s[0] <= now]
        self.scheduled = [s for s in self.scheduled if s[0] > now]
        for _, path, data in sorted(due, key=lambda s: s[0]):
            self.files[path] = data
        for react in self.reactions:
            react()


class FakeExecutor:
    """The Executor protocol over a :class:`FakeMachine`."""

    def __init__(self, machine: FakeMachine, label: str = "fake pod") -> None:
        self.machine = machine
        self._label = label
        self.closed = False

    @property
    def location(self) -> str:
        """The machine in words."""
        return f"host {self._label}"

    def _files(self) -> dict[str, bytes]:
        if self.closed or self.machine.down:
            raise TargetUnreachable(
                f"cannot reach {self.location}: connection lost", host=self._label
            )
        self.machine.settle()
        return self.machine.files

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        """Copy every file of ``local_dir`` (but ``ssh/``, run.json, pod.json)."""
        await trio.lowlevel.checkpoint()
        files = self._files()
        for path in sorted(local_dir.rglob("*")):
            rel = path.relative_to(local_dir)
            if rel.parts[0] in ("ssh", "run.json", "pod.json") or not path.is_file():
                continue
            files[f"{remote_dir}/{rel.as_posix()}"] = path.read_bytes()

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Record the job and write its pid marker."""
        await trio.lowlevel.checkpoint()
        if (await self.status(remote_dir)).status is JobStatus.running:
            raise JobAlreadyRunning(f"a job already runs in {remote_dir} on {self.location}")
        files = self._files()
        files[f"{remote_dir}/job.pid"] = f"{FAKE_PID}\n".encode()
        self.machine.spawned.append((remote_dir, [list(c) for c in commands]))
        return JobHandle(pid=FAKE_PID, container=container)

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` if absent."""
        await trio.lowlevel.checkpoint()
        return self._files().get(path, b"")[offset : offset + limit]

    async def file_size(self, path: str) -> int:
        """The size of ``path`` in bytes; 0 if absent."""
        await trio.lowlevel.checkpoint()
        return len(self._files().get(path, b""))

    async def status(self, remote_dir: str) -> JobState:
        """From the markers, as the real job wrapper leaves them."""
        await trio.lowlevel.checkpoint()
        files = self._files()
        if f"{remote_dir}/cancelled" in files:
            return JobState(JobStatus.cancelled)
        if f"{remote_dir}/cancelling" in files:
            return JobState(JobStatus.cancelling)
        code = files.get(f"{remote_dir}/exit_code")
        if code is not None:
            text = code.decode().strip()
            return JobState(JobStatus.exited, int(text) if text.lstrip("-").isdigit() else None)
        if f"{remote_dir}/job.pid" in files:
            return JobState(JobStatus.running)
        return JobState(JobStatus.lost)

    async def cancel(self, remote_dir: str) -> JobState:
        """Mark a running job cancelled; an ended one is left alone."""
        state = await self.status(remote_dir)
        if state.ended:
            return state
        self._files()[f"{remote_dir}/cancelled"] = b""
        return JobState(JobStatus.cancelled)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        """SHA-256 of every file under ``paths`` (relative to ``remote_dir``)."""
        await trio.lowlevel.checkpoint()
        found: dict[str, str] = {}
        prefix = f"{remote_dir}/"
        for name, data in self._files().items():
            if not name.startswith(prefix):
                continue
            rel = name[len(prefix) :]
            if any(rel == p or rel.startswith(f"{p}/") for p in paths):
                found[rel] = hashlib.sha256(data).hexdigest()
        return found

    async def download(self, remote_dir: str, paths: Sequence[str], local_dir: Path) -> None:
        """Write ``paths`` of ``remote_dir`` under ``local_dir``."""
        for rel in await self.manifest(remote_dir, paths):
            target = local_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self._files()[f"{remote_dir}/{rel}"])

    async def touch(self, path: str) -> None:
        """Create ``path`` if it does not exist."""
        await trio.lowlevel.checkpoint()
        self._files().setdefault(path, b"")

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        """An in-memory machine has no shell: a script cannot run on it."""
        await trio.lowlevel.checkpoint()
        raise ExecError(f"{what} failed: an in-memory machine runs no script")

    async def aclose(self) -> None:
        """Forget the connection."""
        self.closed = True
        await trio.lowlevel.checkpoint()


@dataclass
class FakeNetwork:
    """Machines by SSH endpoint; :meth:`connect` is ``PodContext.connect``."""

    machines: dict[tuple[str, int], FakeMachine] = field(default_factory=dict)
    opened: list[FakeExecutor] = field(default_factory=list)

    def add(self, host: str, port: int, machine: FakeMachine | None = None) -> FakeMachine:
        """Put a machine at ``host:port`` (a fresh one unless given); return it."""
        machine = machine or FakeMachine()
        self.machines[(host, port)] = machine
        return machine

    def connect(self, access: PodAccess) -> contextlib.AbstractAsyncContextManager[Executor]:
        """Open a fake SSH connection, checking the pinned host key like the real one."""
        return self._open(access)

    @contextlib.asynccontextmanager
    async def _open(self, access: PodAccess) -> AsyncIterator[Executor]:
        await trio.lowlevel.checkpoint()
        endpoint = access.endpoint
        label = f"{endpoint.username}@{endpoint.host}:{endpoint.port}"
        machine = self.machines.get((endpoint.host, endpoint.port))
        if machine is None or machine.down or trio.current_time() < machine.reachable_at:
            raise TargetUnreachable(f"cannot reach host {label}: connection refused", host=label)
        machine.connects += 1
        if machine.host_key is not None and machine.host_key != access.host_public_key:
            machine.refused += 1
            raise HostKeyRefused(
                f"the SSH server at {endpoint.host}:{endpoint.port} did not present the host "
                "key pinned for this run",
                host=label,
            )
        executor = FakeExecutor(machine, label)
        self.opened.append(executor)
        try:
            yield executor
        finally:
            await executor.aclose()


async def run_inline(call: Callable[[], T], /) -> T:
    """The :class:`~overbrainer.session.journal.Journal`'s runner for MockClock tests: the
    store call runs in the calling task, a checkpoint on either side as a worker thread's
    would be (cancellable before it starts, never torn once it has)."""
    await trio.lowlevel.checkpoint_if_cancelled()
    result = call()
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result


# --- a MockClock rig for pod tests -----------------------------------------------------

# A canary account key: it must never show in an event, a projection or a create body.
CANARY_KEY = "rpa_CANARYx7Q2w9e4R1t8Y3u6I5o0PzKvBnMlJhGf"
PINNED_IMAGE = "ghcr.io/example/trainer@sha256:" + "ab" * 32
POD_HOST = "192.0.2.10"


def runpod_target(gpu_types: Sequence[str], **overrides: object) -> RunpodTarget:
    """A Runpod target for tests (pinned image, 2 h bound)."""
    values: dict[str, object] = {
        "kind": "runpod",
        "gpu_types": list(gpu_types),
        "max_hours": 2.0,
        "image": PINNED_IMAGE,
    }
    values.update(overrides)
    return RunpodTarget.model_validate(values)


@dataclass
class MachinePlan:
    """How the machine of the next pod behaves once Runpod shows it RUNNING (seconds
    are counted from then): when SSH answers, what the watchdog writes and when."""

    ssh_after: float = 0.0
    verdict: bytes | None = b"ready\n"
    verdict_after: float = 3.0
    bootstrap_failed: bytes | None = None
    host_key: str | None = None
    no_machine: bool = False


class SpyTransport(httpx.AsyncBaseTransport):
    """The fake API's transport, noting the run's events when each create or delete
    arrives, and able to replay a create as a proxy retrying it would."""

    def __init__(self, inner: httpx.AsyncBaseTransport, rig: PodRig) -> None:
        self.inner = inner
        self.rig = rig
        self.duplicate_creates = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Note what the log held, then hand the request on."""
        path = request.url.path
        if (
            request.method in ("POST", "DELETE")
            and path.startswith("/v2/pods")
            and (request.method == "DELETE" or path == "/v2/pods")
        ):
            for run_id in self.rig.runs:
                names = [r.event.name for r in self.rig.store.history(run_id)]
                self.rig.seen_at_request.append((request.method, path, names))
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and path == "/v2/pods" and self.duplicate_creates:
            self.duplicate_creates -= 1
            await self.inner.handle_async_request(request)
        return response


@dataclass
class PodRig:
    """A fake Runpod account, a fake network of pod machines, and a PodContext on them."""

    fake: FakeRunpod
    network: FakeNetwork
    store: RunStore
    journal: Journal
    interrupts: Interrupts
    front: Front
    err: io.StringIO
    project: Path
    plans: dict[int, MachinePlan] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    seen_at_request: list[tuple[str, str, list[str]]] = field(default_factory=list)
    spy: SpyTransport | None = None
    ctx: PodContext | None = None
    # The pids whose commands count as gone (killed) for ``PodContext.alive``.
    gone: set[object] = field(default_factory=set)

    @property
    def context(self) -> PodContext:
        """The PodContext (set once the client is open)."""
        assert self.ctx is not None
        return self.ctx

    async def create_pod(
        self, name: str, marker: str | None, gpu_type: str = "NVIDIA A40", args: str | None = None
    ) -> Pod:
        """Create a pod on the fake account through the client, behind the run log's back
        (the caller records it, or not); ``marker`` is the run ID it carries, if any."""
        return await self.context.client.create_pod(
            CreatePod(
                name=name,
                image=PINNED_IMAGE,
                gpu_type=gpu_type,
                gpu_count=1,
                disk_gb=20,
                env={RUN_MARKER: marker} if marker else {},
                **({"args": args} if args is not None else {}),
            )
        )

    async def new_run(self, *, keep: bool = False) -> str:
        """Create a preparing Runpod run; return its ID."""
        run_id = new_run_id()
        while run_id in self.runs:
            await trio.sleep(1)
            run_id = new_run_id()
        await self.journal.create(
            RunCreated(
                run_id=run_id,
                target="gpu",
                kind="runpod",
                remote_dir=f"runs/{run_id}",
                settings_digest="d",
                keep_pod=keep,
            )
        )
        self.runs.append(run_id)
        return run_id

    def names(self, run_id: str) -> list[str]:
        """The run's event names, in order."""
        return [r.event.name for r in self.store.history(run_id)]

    def events(self, run_id: str, cls: type[Event]) -> list[Event]:
        """The run's events of one type."""
        return [r.event for r in self.store.history(run_id) if isinstance(r.event, cls)]

    def state(self, run_id: str) -> RunLog:
        """The run's state from the store."""
        return self.store.get(run_id)

    def creates(self) -> list[dict[str, object]]:
        """Every create body the fake received."""
        return [r.json for r in self.fake.create_requests()]

    async def _on_running(self, pod: FakePod) -> None:
        plan = self.plans.get(pod.index, MachinePlan())
        port = 22000 + pod.index
        self.fake.set_ssh_endpoint(pod.id, POD_HOST, port)
        if plan.no_machine:
            return
        now = trio.current_time()
        machine = self.network.add(POD_HOST, port)
        machine.reachable_at = now + plan.ssh_after
        machine.host_key = plan.host_key
        run_dir = f"runs/{pod.env[RUN_MARKER]}"
        if plan.verdict is not None:
            machine.write_at(now + plan.verdict_after, f"{run_dir}/{VERDICT}", plan.verdict)
        if plan.bootstrap_failed is not None:
            machine.write_at(now, f"{run_dir}/{BOOTSTRAP_FAILED}", plan.bootstrap_failed)


def wall_clock() -> Callable[[], datetime]:
    """A wall clock that follows trio's clock (so uptimes agree with the fake's times)."""
    start = datetime.now(UTC).replace(microsecond=0)
    t0 = trio.current_time()
    return lambda: start + timedelta(seconds=trio.current_time() - t0)


@contextlib.asynccontextmanager
async def pod_rig(
    project: Path,
    *,
    timing: Timing | None = None,
    fake: FakeRunpod | None = None,
    balance: float = 100.0,
) -> AsyncIterator[PodRig]:
    """A rig on ``project`` (a temporary directory). Every create body the fake received
    is checked against the published schema when the block ends, and so is every billing
    read."""
    fake = fake or FakeRunpod()
    fake.add_account(CANARY_KEY, balance=balance)
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False)
    store = RunStore(None, project, Actor.here("test"))
    journal = Journal(store, project, listener=front.event, runner=run_inline)
    interrupts = Interrupts(front.notice)
    rig = PodRig(
        fake=fake,
        network=FakeNetwork(),
        store=store,
        journal=journal,
        interrupts=interrupts,
        front=front,
        err=err,
        project=project,
    )
    fake.on_running = rig._on_running
    rig.spy = SpyTransport(fake.transport(), rig)
    try:
        async with RunpodClient(
            CANARY_KEY, FAKE_URL, transport=rig.spy, rng=random.Random(3)
        ) as client:
            rig.ctx = PodContext(
                client=client,
                session=Session(journal, front, interrupts, project),
                timing=timing or Timing(),
                connect=rig.network.connect,
                clock=wall_clock(),
                # Every command of the rig runs in this test's process, which is alive; a
                # test of a dead starter says so (``rig.gone``).
                alive=lambda actor: actor.get("pid") not in rig.gone,
            )
            yield rig
        for request in fake.create_requests() + fake.billing_requests():
            assert request.schema_errors == [], request.schema_errors
    finally:
        store.close()
