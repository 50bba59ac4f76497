"""Retrieval over SSH and the follower's delay, training on a machine over SSH.

Both against a real OpenSSH sshd on loopback, started as the tests start it
(``overbrainer/testing/sshd.py``), with the real SSH executor and the real run service:

- Retrieval of 1 GiB in 200 files (16 MiB in 20 with ``--quick``): ``service.collect``
  (the host's SHA-256 manifest, the tar stream, extraction, the verification of every
  file, the event), beside OpenSSH's ``scp -r`` of the same files from the same sshd
  (``-O``: the test sshd runs every command through a recording ``ForceCommand``, so
  scp's SFTP mode has no subsystem to talk to).
  Best of a few alternating rounds of each, so both see the same machine (each round says
  the load average: on a busy machine both ends compete for the cores with other work).
  The floor is scp as it comes, with OpenSSH's default cipher.
- The delay from a metrics line written on the target (its own ``time`` field, from the
  plugin's ``metrics_line``) to the follower (``service.watch``) showing it.
"""

import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.exec.ssh import UserHost, open_ssh
from overbrainer.exec.transfer import remove
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import service
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.testing.sshd import SshServer, sshd
from overbrainer.train.metrics import MetricsSummary

RUN_ID = "20260101-000000-beef"
LINE_SECONDS = 0.37  # not a divisor of the poll period: lines land at every phase of it


@dataclass(frozen=True)
class Sizes:
    """How much is retrieved, how often, and how many metrics lines are followed."""

    total: int
    files: int
    rounds: int
    lines: int

    def total_text(self) -> str:
        return f"{self.total >> 30} GiB" if self.total >= 1 << 30 else f"{self.total >> 20} MiB"


FULL = Sizes(total=1 << 30, files=200, rounds=2, lines=12)
QUICK = Sizes(total=16 << 20, files=20, rounds=1, lines=4)


def _make_results(run_dir: Path, sizes: Sizes) -> None:
    """``output/`` with ``sizes.total`` bytes in incompressible files, plus metrics.jsonl and
    job.log."""
    output = run_dir / "output"
    output.mkdir(parents=True)
    files = sizes.files
    size, rest = divmod(sizes.total, files)
    block = os.urandom(size + rest)
    for i in range(files):
        # Every file differs (its first bytes), so none can be told from another.
        data = i.to_bytes(8, "big") + block[8 : size + (rest if i == files - 1 else 0)]
        (output / f"model-{i:05d}-of-{files:05d}.safetensors").write_bytes(data)
    (run_dir / "metrics.jsonl").write_text('{"event":"begin","time":0}\n')
    (run_dir / "job.log").write_text("trained\n")


def _target(server: SshServer) -> UserHost:
    return UserHost(server.alias, config=server.ssh_config, known_hosts=server.known_hosts)


def _session(project: Path, front: Front) -> tuple[Session, RunStore]:
    store = RunStore(None, project, Actor.here("bench"))
    return Session(Journal(store, project), front, Interrupts(), project), store


def _new_run(project: Path) -> None:
    """Create the run in ``project``'s store: collecting records the retrieval on it, and
    following reads it (a cancel asked from another checkout arrives through it)."""
    session, store = _session(project, Front(io.StringIO(), io.StringIO(), terminal=False))
    try:
        trio.run(
            session.journal.create,
            ev.RunCreated(
                run_id=RUN_ID,
                target="box",
                kind="ssh",
                remote_dir=f"runs/{RUN_ID}",
                settings_digest="bench",
            ),
        )
    finally:
        store.close()


async def _collect_once(server: SshServer, remote_root: Path, project: Path, total: int) -> float:
    """Seconds for one verified retrieval of the run's results, through the run service."""
    session, store = _session(project, Front(io.StringIO(), io.StringIO(), terminal=False))
    try:
        async with open_ssh(_target(server), workdir=str(remote_root)) as executor:
            job = service.Job(RUN_ID, executor, f"runs/{RUN_ID}")
            started = time.perf_counter()
            retrieval = await service.collect(session, job)
            spent = time.perf_counter() - started
    finally:
        store.close()
    if not retrieval.ok or retrieval.bytes < total:
        raise RuntimeError(f"the retrieval failed: {retrieval.problem}")
    return spent


def _scp_once(server: SshServer, run_dir: Path, into: Path, total: int) -> float:
    """Seconds for ``scp -r`` of the same files from the same sshd."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir()
    sources = [f"{server.alias}:{run_dir / name}" for name in service.RETRIEVED_PATHS]
    started = time.perf_counter()
    options = ["-O", "-q", "-r", "-F", str(server.ssh_config)]
    options += ["-o", f"UserKnownHostsFile={server.known_hosts}"]
    subprocess.run(
        ["scp", *options, *sources, str(into)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    spent = time.perf_counter() - started
    copied = sum(p.stat().st_size for p in into.rglob("*") if p.is_file())
    if copied < total:
        raise RuntimeError(f"scp copied {copied} bytes, not {total}")
    return spent


def _retrieval(
    server: SshServer, tmp: Path, sizes: Sizes, say: Callable[[str], None]
) -> tuple[float, float]:
    """Best seconds of ours and of scp, in alternating rounds."""
    remote_root = tmp / "remote"
    run_dir = remote_root / "runs" / RUN_ID
    _make_results(run_dir, sizes)
    project = tmp / "project"
    _new_run(project)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(sizes.rounds):
        # As scp's, our copy starts from nothing: no earlier copy to replace on the clock.
        for name in service.RETRIEVED_PATHS:
            remove(project / "runs" / RUN_ID / name)
        ours.append(trio.run(_collect_once, server, remote_root, project, sizes.total))
        theirs.append(_scp_once(server, run_dir, tmp / "scp", sizes.total))
        # Both ends share this machine's cores with whatever else runs: say how busy it was.
        load = os.getloadavg()[0]
        say(f"ssh:   round: ours {ours[-1]:.2f} s, scp {theirs[-1]:.2f} s, load average {load:.1f}")
    shutil.rmtree(tmp / "scp", ignore_errors=True)
    shutil.rmtree(project / "runs", ignore_errors=True)
    shutil.rmtree(remote_root, ignore_errors=True)
    return min(ours), min(theirs)


class _Recorder(Front):
    """A front end that notes when each step was first shown."""

    def __init__(self) -> None:
        super().__init__(io.StringIO(), io.StringIO(), terminal=False)
        self.shown: dict[int, float] = {}

    def progress(self, summary: MetricsSummary, spend: float | None = None) -> None:
        now = time.time()
        for step in range(1, (summary.step or 0) + 1):
            self.shown.setdefault(step, now)
        super().progress(summary, spend)


_WRITER = """
import time
from overbrainer.train.overbrainer_metrics import append_line, metrics_line
for step in range(1, {lines} + 1):
    time.sleep({seconds})
    append_line("metrics.jsonl", metrics_line("log", step=step, max_steps={lines}, loss=1.0))
"""


async def _follow_once(
    server: SshServer, remote_root: Path, project: Path, lines: int
) -> list[float]:
    """Seconds from each metrics line's write on the target to the follower showing it."""
    front = _Recorder()
    session, store = _session(project, front)
    try:
        async with open_ssh(_target(server), workdir=str(remote_root)) as executor:
            job = service.Job(RUN_ID, executor, f"runs/{RUN_ID}")
            # The target is this machine: the writer goes straight into the run directory.
            writer = _WRITER.format(lines=lines, seconds=LINE_SECONDS)
            (remote_root / job.remote_dir / "writer.py").write_text(writer)
            await executor.spawn(
                job.remote_dir, [[sys.executable, "writer.py"]], env={}, secrets={}
            )
            await service.watch(session, job)
    finally:
        store.close()
    written = _written(remote_root / "runs" / RUN_ID / "metrics.jsonl")
    return [front.shown[step] - at for step, at in written.items()]


def _written(path: Path) -> dict[int, float]:
    import json

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {int(line["step"]): float(line["time"]) for line in lines if line.get("step")}


def _latency(server: SshServer, tmp: Path, lines: int) -> list[float]:
    remote_root = tmp / "remote-follow"
    (remote_root / "runs" / RUN_ID).mkdir(parents=True)
    project = tmp / "project-follow"
    _new_run(project)
    return trio.run(_follow_once, server, remote_root, project, lines)


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """Start an sshd, measure, stop it; one row per figure (``quick``: small sizes)."""
    say = progress or (lambda _text: None)
    sizes = QUICK if quick else FULL
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        with sshd(tmp / "sshd") as server:
            say(f"ssh: retrieval of {sizes.total_text()}, ours and scp")
            ours, scp = _retrieval(server, tmp, sizes, say)
            say("ssh: metrics delay")
            delays = _latency(server, tmp, sizes.lines)
    ratio = scp / ours
    median = statistics.median(delays)

    def rate(seconds: float) -> str:
        return f"{sizes.total / seconds / 1e6:.0f} MB/s"

    return [
        (
            f"retrieval over SSH, {sizes.total_text()} in {sizes.files} files, verified",
            f"{ours:.1f} s ({rate(ours)})",
            f"scp -r {scp:.1f} s ({rate(scp)})",
            "",
        ),
        ("retrieval over SSH vs scp -r (throughput ratio)", f"{ratio:.2f}x", "1x", ">= 1.0x"),
        (
            f"metrics line on the target -> shown (median, max of {len(delays)})",
            f"{median:.2f} s, {max(delays):.2f} s",
            f"poll every {service.POLL_SECONDS:g} s",
            "< 2.5 s",
        ),
    ]
