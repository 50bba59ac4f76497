"""Faults on a machine target: the event store failing at each append, and the SSH
connection dropped at each stage of a run.

The store fails for real: at the checkpoint just before (or just after) an append, the
command pauses and the campaign either sets its file-size limit to zero — every write it
makes to the SQLite file then fails as on a full disk — or takes SQLite's write lock
from another connection for a while. The SSH connection drops for real too: the campaign
kills every process serving it (each case has its own ``sshd``).
"""

from __future__ import annotations

import resource
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliability.core import Case
from reliability.machine import inject_case, short
from reliability.world import MachineWorld, Project

# How long the "locked" fault holds SQLite's write lock: an append waits it out.
BRIEF_LOCK = 2.0
# One case holds it past the store's lock timeout (30 s): the append fails.
LONG_LOCK = 33.0


def disk_full(project: Project) -> None:
    """From now on every write of the command (the store, the projections) fails."""
    pid = _running_pid(project)
    _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, hard))


def _running_pid(project: Project) -> int:
    """The overbrainer process of the project that is paused at a checkpoint."""
    needle = str(project.path).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"overbrainer" in cmdline and needle in cmdline and b"-m\x00overbrainer" in cmdline:
            return int(entry.name)
    raise RuntimeError("the paused command is not running")


def locked(seconds: float) -> Callable[[Project], None]:
    """Hold SQLite's write lock on the project's store for ``seconds`` from another
    connection (released in the background, so the command goes on meanwhile)."""

    def hold(project: Project) -> None:
        path = project.path / ".overbrainer" / "events.sqlite"
        ready = threading.Event()

        def keep() -> None:
            db = sqlite3.connect(path, timeout=5, isolation_level=None)
            try:
                db.execute("BEGIN EXCLUSIVE")
                ready.set()
                time.sleep(seconds)
                db.execute("COMMIT")
            finally:
                ready.set()
                db.close()

        thread = threading.Thread(target=keep, daemon=True)
        thread.start()
        ready.wait(10)
        project.cleanup.append(lambda: thread.join(seconds + 5))

    return hold


def cases(world: MachineWorld, traced: dict[str, list[str]], only: str | None = None) -> list[Case]:
    """Each append of each command (those naming ``only``, if given): the disk full just
    before it and just after it, and the store locked for a moment just before it; once,
    the lock held past its timeout."""
    out: list[Case] = []
    long_done = False
    for command, keys in traced.items():
        for i, key in enumerate(keys):
            if not key.startswith("append-") or (only is not None and only not in key):
                continue
            faults: list[tuple[str, Callable[[Project], None]]] = [("disk full", disk_full)]
            if key.startswith("append-before"):
                faults.append(("locked briefly", locked(BRIEF_LOCK)))
                if not long_done and "run.JobStarted" in key:
                    long_done = True
                    faults.append(("locked past its timeout", locked(LONG_LOCK)))
            for label, fault in faults:
                slug = "-".join([world.kind, "store", *command.split(), f"{i:02d}", *label.split()])
                name = f"{world.kind} {command} store {label} @{i:02d} {short(key)}"
                out.append(
                    Case(
                        "faults",
                        name,
                        _bind(inject_case, world, command, key, "pause", slug, fault, {0, 1}),
                        weight=3.0 if "timeout" in label else 1.5,
                    )
                )
    return out


# --- PostgreSQL unreachable or stopped -------------------------------------------------


def postgres_cases(
    world: MachineWorld, traced: dict[str, list[str]], server: Callable[[], Any]
) -> list[Case]:
    """``train`` on a team store (PostgreSQL) whose database becomes unreachable just before
    each append (its connections cut, new ones refused), and, once, whose server stops just
    before the job's start is recorded. The database comes back once the command has
    ended; recovery then runs on it. ``server`` gives the campaign's PostgreSQL server."""
    out: list[Case] = []
    for i, key in enumerate(traced.get("train", [])):
        if not key.startswith("append-before"):
            continue
        variants = [("unreachable", False)]
        if "run.JobStarted" in key:
            variants.append(("stopped", True))
        for label, stop in variants:
            slug = f"{world.kind}-store-postgres-{label}-{i:02d}"
            name = f"{world.kind} train store postgres {label} @{i:02d} {short(key)}"
            out.append(
                Case(
                    "faults",
                    name,
                    _bind(_postgres_case, world, key, slug, server, stop),
                    weight=2.0 if stop else 1.5,
                )
            )
    return out


def _postgres_case(
    world: MachineWorld, key: str, slug: str, server: Callable[[], Any], stop: bool
) -> list[str]:
    from overbrainer.testing.pg import PgCluster

    own: Any = None
    if stop:  # a server of its own: stopping it touches no other case
        own = PgCluster().start()
        cluster = own
    else:
        cluster = server()
    db = cluster.new_database()

    def prepare(project: Project) -> None:
        for name in [n for n in project.env if n.startswith("PG")]:
            del project.env[name]
        # The password from libpq's passfile, as a team member would keep it.
        project.env["PGPASSFILE"] = str(cluster.passfile)
        project.env["OVERBRAINER_STORE__URL"] = cluster.url(db)

    def fail(_project: Project) -> None:
        if stop:
            cluster.stop()
            return
        cluster.psql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS false")
        cut = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s'"
        cluster.psql(cut % db)  # db is this case's own t_<hex> name

    def back(_project: Project) -> None:
        if stop:
            cluster.start()
        else:
            cluster.psql(f"ALTER DATABASE {db} ALLOW_CONNECTIONS true")

    try:
        return inject_case(
            world, "train", key, "pause", slug, fail, {0, 1}, prepare=prepare, after=back
        )
    finally:
        if own is not None:
            own.destroy()


# --- SSH dropped --------------------------------------------------------------------------

STAGES = {
    "connect": ("open_job", "SshExecutor.connect", "SshExecutor._connection"),
    "job start": (".spawn:",),
    "follow": ("watch",),
    "manifest": (".manifest:",),
    "download": (".download:",),
}


def _stage_key(keys: list[str], marks: tuple[str, ...]) -> str | None:
    for key in keys:
        if key.startswith("await ") and any(mark in key for mark in marks):
            return key
    return None


def ssh_drop_cases(base: Path, traced: dict[str, list[str]]) -> list[Case]:
    """The SSH connection dropped at each stage of ``train`` and of ``train attach``
    (each case on an sshd of its own, so a drop touches nothing else)."""
    out: list[Case] = []
    for command in ("train", "train attach"):
        keys = traced.get(command, [])
        for stage, marks in STAGES.items():
            if command == "train attach" and stage == "job start":
                continue
            key = _stage_key(keys, marks)
            if key is None:
                out.append(
                    Case(
                        "faults",
                        f"ssh {command} dropped during {stage}",
                        _missing(f"no checkpoint of `{command}` matches stage {stage}"),
                    )
                )
                continue
            slug = f"drop-{command.replace(' ', '-')}-{stage.replace(' ', '-')}"
            out.append(
                Case(
                    "faults",
                    f"ssh {command} dropped during {stage} ({short(key)})",
                    _bind(_drop_case, base / slug, command, key, slug),
                    weight=2.5,
                )
            )
    return out


def _drop_case(base: Path, command: str, key: str, slug: str) -> list[str]:
    with MachineWorld("ssh", base) as world:
        return inject_case(
            world, command, key, "pause", slug, lambda _p: world.drop_connections(), {0, 1, 130}
        )


def _missing(message: str) -> Callable[[], list[str]]:
    return lambda: [f"harness: {message}"]


def _bind(fn: Callable[..., list[str]], *args: Any) -> Callable[[], list[str]]:
    return lambda: fn(*args)
