"""Projects the campaigns run the real ``overbrainer`` against, one fresh copy per case.

- ``local``: the local target, whose venv's ``axolotl`` is the stand-in trainer.
- ``ssh``: the same machine reached through a real OpenSSH ``sshd`` on loopback
  (``overbrainer/testing/sshd.py``), by an alias of a private ``~/.ssh/config``, with strict
  host keys.

The stand-in is reached through a wrapper that first sources the project's ``knobs.sh``
(an SSH session does not carry our environment) and, before training, waits while the
project's ``hold`` file exists: a campaign holds a job running as long as it needs (a
cancel, an attach) and lets it finish by removing the file.

Every command gets canary secrets: a Hugging Face token and a Runpod API key that must
never appear anywhere but the job's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from overbrainer.testing.stand_in import AXOLOTL, TORCHRUN

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = AXOLOTL

SOURCE = ROOT
"""Where the commands import overbrainer from (``python -m reliability`` points it at a
copy made as it starts: see :func:`snapshot_sources`)."""


def snapshot_sources(into: Path) -> Path:
    """A copy of the overbrainer package under ``into``, which every command the campaigns
    start runs from then on.

    A case acts at a checkpoint keyed by file, function and line, traced once: a source
    file edited while the campaigns run (by hand, by a checkout or a rebase) moves the
    lines, and every later case would pass none of its checkpoints — run without its fault,
    checked as clean. The copy keeps the code the traces were taken of."""
    global SOURCE
    target = into / "overbrainer"
    shutil.copytree(
        ROOT / "overbrainer", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    SOURCE = into
    return into


CANARY_HF = "hf_CANARYhfTOKEN0123456789abcdefXYZ"
CANARY_API = "rpa_CANARYapiKEY0123456789abcdefghijXYZW"
CANARIES = (CANARY_HF, CANARY_API)

WRAPPER = """#!/bin/sh
# The venv's axolotl: the project's knobs, an optional hold, then the stand-in.
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/knobs.sh"
if [ "${1-}" = train ] && [ -n "${OB_HOLD-}" ]; then
    i=0
    while [ -e "$OB_HOLD" ] && [ "$i" -lt 3000 ]; do sleep 0.02; i=$((i + 1)); done
fi
# The stand-in keeps the right time whatever this machine's clock (a clock case's
# libfaketime is for overbrainer, not for it).
unset LD_PRELOAD FAKETIME FAKETIME_TIMESTAMP_FILE FAKETIME_NO_CACHE FAKETIME_DONT_FAKE_MONOTONIC
exec %(python)s %(stand_in)s "$@"
"""

# Every run saves checkpoints (every 2 steps), so their retrieval while following — and its
# removal of the older ones — is traced and interrupted like the rest.
DEFAULT_KNOBS = {
    "FAKE_AXOLOTL_STEPS": "5",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.05",
    "FAKE_AXOLOTL_SAVE_EVERY": "2",
}


LIVE: set[Any] = set()
"""The commands running now (so an interrupted campaign stops them, by pid)."""


def stop_live() -> None:
    """Kill every command the campaign is running (it is being interrupted)."""
    for process in list(LIVE):
        with contextlib.suppress(ProcessLookupError):
            process.kill()


@dataclass
class Done:
    """One finished ``overbrainer`` command."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str
    seconds: float
    timed_out: bool = False

    def said(self) -> str:
        """Its stdout and stderr, for messages."""
        return (self.out + self.err)[-1500:]


@dataclass
class Project:
    """A copy of a world's template project for one case."""

    name: str
    path: Path
    env: dict[str, str]
    kind: str
    remote_root: Path  # where runs/<id> live on the target
    venv: Path
    extra_scan: list[Path] = field(default_factory=list)  # more files to scan for secrets
    log: list[Done] = field(default_factory=list)
    cleanup: list[Any] = field(default_factory=list)

    @property
    def hold(self) -> Path:
        """While this file exists, a starting job waits before training."""
        return self.path / "hold"

    def knobs(self, **knobs: str) -> None:
        """The stand-in trainer's settings (and the hold) for the next jobs."""
        values = {**DEFAULT_KNOBS, **knobs, "OB_HOLD": str(self.hold)}
        lines = [f"{k}={shlex.quote(v)}\nexport {k}" for k, v in values.items()]
        (self.venv / "knobs.sh").write_text("\n".join(lines) + "\n")

    def command(self, *args: str) -> list[str]:
        """The argv of ``overbrainer -C PROJECT ARGS``."""
        # -P: overbrainer from PYTHONPATH (SOURCE), never from the working directory.
        return [sys.executable, "-P", "-m", "overbrainer", "-C", str(self.path), *args]

    def environ(self, plan: dict[str, Any] | None = None, **extra: str) -> dict[str, str]:
        """The environment of a command, with a checkpoint plan if given."""
        env = {**self.env, **extra}
        if plan is not None:
            env["OVERBRAINER_FAULT_PLAN"] = json.dumps(plan)
        return env

    def run(
        self,
        *args: str,
        plan: dict[str, Any] | None = None,
        timeout: float = 90,
        **extra: str,
    ) -> Done:
        """Run ``overbrainer ARGS`` to its end (killed after ``timeout`` s)."""
        started = time.monotonic()
        process = self.start(*args, plan=plan, **extra)
        return self.finish(process, args, started, timeout)

    def start(self, *args: str, plan: dict[str, Any] | None = None, **extra: str) -> Any:
        """Start ``overbrainer ARGS`` in the background; see :meth:`finish`."""
        process = subprocess.Popen(
            self.command(*args),
            env=self.environ(plan, **extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        LIVE.add(process)
        return process

    def finish(
        self, process: Any, args: tuple[str, ...], started: float, timeout: float = 90
    ) -> Done:
        """Wait for a started command; record its output."""
        timed_out = False
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            process.kill()
            out, err = process.communicate()
        finally:
            LIVE.discard(process)
        done = Done(
            tuple(args), process.returncode, out, err, time.monotonic() - started, timed_out
        )
        self.log.append(done)
        return done

    def runs(self) -> list[str]:
        """The project's run IDs, oldest first: those of its log (a command killed right
        after creating a run leaves no ``runs/<id>/`` yet) and of ``runs/``."""
        directory = self.path / "runs"
        found = {p.name for p in directory.iterdir() if p.is_dir()} if directory.is_dir() else set()
        if self.store_url is not None or (self.path / ".overbrainer" / "events.sqlite").exists():
            found |= set(logged_runs(self.path, self.store_url, self.env))
        return sorted(found)

    @property
    def store_url(self) -> str | None:
        """The project's team store (PostgreSQL), when its cases use one."""
        return self.env.get("OVERBRAINER_STORE__URL")

    def job_dir(self, run_id: str) -> Path:
        """The run's directory on the target, as a local path."""
        return self.remote_root / "runs" / run_id

    def wait_for(self, predicate: Any, timeout: float = 30, what: str = "") -> None:
        """Poll ``predicate`` until true; raise naming ``what`` on timeout."""
        end = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > end:
                raise TimeoutError(f"{what or predicate} did not happen in {timeout} s")
            time.sleep(0.02)

    def run_state(self, run_id: str) -> str | None:
        """``state`` from the run's run.json (None if unreadable)."""
        try:
            data = json.loads((self.path / "runs" / run_id / "run.json").read_text())
            return str(data.get("state"))
        except (OSError, ValueError, AttributeError):
            return None

    def close(self) -> None:
        """Stop every job the case left and undo its set-up."""
        for run_id in self.runs():
            pid = job_pid(self.job_dir(run_id))
            if pid is not None:
                kill_group(pid)
        for undo in reversed(self.cleanup):
            with contextlib.suppress(Exception):
                undo()


def project_paths(case: Path, subdir: str | None) -> tuple[Path, Path]:
    """A case's project directory (in ``subdir`` of the case's directory, if given) and
    its venv's (in the case's directory: a target's venv must be a plain path)."""
    project = (case / subdir if subdir else case) / "project"
    return project, case / "venv"


def case_dir(base: Path, name: str) -> Path:
    """A fresh directory for case ``name`` under ``base``: a case run again (its harness
    timed out) gets a new one beside the first, which is left as it was."""
    path = base / "cases" / name
    again = 1
    while path.exists():
        again += 1
        path = base / "cases" / f"{name}-try{again}"
    return path


def logged_runs(
    project_dir: Path, url: str | None = None, environ: dict[str, str] | None = None
) -> list[str]:
    """Every run ID in a project's event log (read as ``runs ls`` does, in this process)."""
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore

    store = RunStore(url, project_dir, Actor.here("reliability"), environ=environ)
    try:
        found: set[str] = set()
        position = 0
        while batch := store.notifications(position, 1000):
            found.update(record.run_id for _, record in batch)
            position = batch[-1][0]
        return sorted(found)
    finally:
        store.close()


def job_pid(job_dir: Path) -> int | None:
    """The pid (= process group) a job recorded in ``job.pid``, if any."""
    try:
        return int((job_dir / "job.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            return True
    return False


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group, if still there."""
    if pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def base_env() -> dict[str, str]:
    """The environment every command starts from: ours without overbrainer's or the
    stand-in's variables, plus the canaries."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OVERBRAINER_", "FAKE_AXOLOTL_", "SSH_", "PYTEST_"))
    }
    env.update(
        {
            "PYTHONPATH": str(SOURCE),
            "OVERBRAINER_HF_TOKEN": CANARY_HF,
            "OVERBRAINER_RUNPOD__API_KEY": CANARY_API,
            "TERM": "dumb",
        }
    )
    return env


class MachineWorld:
    """A template project for the ``local`` or ``ssh`` target, copied for each case.

    With ``subdir``, each case's project lies in a directory of that name (a non-ASCII,
    quoted, spaced path, say); its venv stays beside it, at a path a target accepts."""

    def __init__(
        self, kind: str, base: Path, subdir: str | None = None, *, processes: int = 1
    ) -> None:
        assert kind in ("local", "ssh")
        self.kind = kind
        # More than one: every run is a job of that many processes on the CPU, launched by
        # the venv's torchrun (the stand-in's, over the stand-in trainer).
        self.processes = processes
        self.base = base
        self.subdir = subdir
        self.template = base / "template"
        self._stack = contextlib.ExitStack()
        self.sshd: Any = None
        self.home: Path | None = None

    def __enter__(self) -> MachineWorld:
        self.base.mkdir(parents=True, exist_ok=True)
        env = base_env()
        subprocess.run(
            [sys.executable, "-m", "overbrainer", "init", str(self.template)],
            env=env,
            capture_output=True,
            check=True,
        )
        if self.kind == "ssh":
            from overbrainer.testing.sshd import sshd

            self.sshd = self._stack.enter_context(sshd(self.base / "sshd"))
            self.home = self.base / "home"
            ssh = self.home / ".ssh"
            ssh.mkdir(parents=True)
            (ssh / "config").write_text(
                "Host box-alias\n"
                "    HostName 127.0.0.1\n"
                f"    Port {self.sshd.port}\n"
                f"    User {self.sshd.user}\n"
                f"    IdentityFile {self.sshd.client_key}\n"
                "    IdentitiesOnly yes\n"
                "    IdentityAgent none\n"
            )
            shutil.copy(self.sshd.known_hosts, ssh / "known_hosts")
            with (self.template / "overbrainer.toml").open("a") as toml:
                toml.write('\n[targets.box]\nkind = "ssh"\n')
        if self.processes > 1:
            assert self.kind == "local"
            toml_path = self.template / "overbrainer.toml"
            text = toml_path.read_text()
            table = "[targets.local]\n"
            assert table in text, text
            toml_path.write_text(
                text.replace(table, f'{table}processes = {self.processes}\ndevice = "cpu"\n', 1)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def project(self, name: str) -> Project:
        """A fresh copy of the template for case ``name``."""
        path, venv = project_paths(case_dir(self.base, name), self.subdir)
        shutil.copytree(self.template, path)
        (venv / "bin").mkdir(parents=True)
        wrapper = venv / "bin" / "axolotl"
        wrapper.write_text(WRAPPER % {"python": sys.executable, "stand_in": STAND_IN})
        wrapper.chmod(0o755)
        launcher = venv / "bin" / "torchrun"
        launcher.write_text(WRAPPER % {"python": sys.executable, "stand_in": TORCHRUN})
        launcher.chmod(0o755)
        env = base_env()
        if self.kind == "local":
            env["OVERBRAINER_TARGETS__LOCAL__VENV"] = str(venv)
            project = Project(name, path, env, "local", path, venv)
        else:
            assert self.home is not None and self.sshd is not None
            remote = path.parent / "remote"
            remote.mkdir()
            workdir = f"ob-rel-{uuid.uuid4().hex[:12]}"
            # The workdir is relative to the SSH user's home: point it into the case.
            link = Path(pwd.getpwuid(os.getuid()).pw_dir) / workdir
            link.symlink_to(remote)
            env.update(
                {
                    "HOME": str(self.home),
                    "OVERBRAINER_TRAINING__TARGET": "box",
                    "OVERBRAINER_TARGETS__BOX__HOST": "box-alias",
                    "OVERBRAINER_TARGETS__BOX__WORKDIR": workdir,
                    "OVERBRAINER_TARGETS__BOX__VENV": str(venv),
                }
            )
            project = Project(name, path, env, "ssh", remote, venv)
            project.extra_scan.append(self.sshd.commands_log)
            project.cleanup.append(link.unlink)
        project.knobs()
        return project

    def drop_connections(self) -> int:
        """Kill every live SSH connection to the sshd (a network drop)."""
        from overbrainer.testing.sshd import drop_connections

        return drop_connections(self.sshd) if self.sshd is not None else 0


@contextlib.contextmanager
def case_project(world: MachineWorld, name: str) -> Iterator[Project]:
    """A project for one case, cleaned up after it."""
    project = world.project(name)
    try:
        yield project
    finally:
        project.close()
