"""A project whose ``box`` target is this machine reached over SSH: a real OpenSSH sshd on
loopback, a temporary HOME whose ``~/.ssh/config`` alias and ``known_hosts`` reach it, and a
remote venv whose ``bin/axolotl`` runs the stand-in trainer.

The remote side is this machine, so a test sees the remote run directory as a local path
(``SshProject.remote_run``) — but every command overbrainer runs there crosses the sshd.

What differs from a local target, and how the fixture handles it:

- The remote job's environment comes from the sshd session, not from the test: the
  ``FAKE_AXOLOTL_*`` knobs reach the stand-in through ``bin/axolotl``, a wrapper that
  sources ``knobs.sh`` (written by `SshProject.knobs`) before exec'ing it. The knob
  ``OB_GATE=1`` makes the wrapper wait for a file ``go`` in the run directory before
  training, so a test controls exactly when the job ends.
- The sshd can be stopped (listener and sessions) and restarted on the same port with the
  same host key (`Box.stop`, `Box.start`), as a host going away and coming back; its
  sessions can be killed alone (`Box.drop`), as a dropped connection; its listener can be
  frozen (`Box.pause`), as a host that accepts connections and never answers.
- The sshd sets ``PATH`` for its sessions (``SetEnv``) with ``Box.bin`` first. It holds
  ``sha256sum`` and ``openssl`` wrappers that corrupt the manifest line of one file while
  the flag file ``Box.corrupt`` exists, or add a file that was never there while
  ``Box.ghost`` exists — to the verifier, exactly a corrupted or a missing download, and
  deterministic — and a ``setsid`` wrapper that makes the job's start take a second while
  ``Box.slow_start`` exists, so a Ctrl-C lands inside the shielded start for sure. Its
  ``dd`` (which only the preflight's probe uses) holds while ``Box.hold_probe`` exists,
  after creating ``Box.probe_held``: a test can change the host while the preflight waits.
"""

import contextlib
import json
import os
import pwd
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

import pytest

from overbrainer.testing.sshd import (
    SSHD,
    SshServer,
    drop_connections,
    ensure_privsep_dir,
    free_port,
    keygen,
    known_hosts_line,
    wait_for_banner,
    write_sshd_config,
)
from tests.fakes.sshd import require_sshd
from tests.runs.conftest import ROOT, STAND_IN, Project, alive, kill_group

ALIAS = "box-alias"
_USER = pwd.getpwuid(os.getuid())
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CORRUPTED_FILE = "output/adapter_config.json"
GHOST_FILE = "output/ghost.bin"

_DIGEST = r"""#!/bin/sh
# Test seam: the real checksum tool (sha256sum or openssl), whose answer a flag file alters.
out=$({real} "$@") || exit $?
if [ -e {corrupt} ]; then
    out=$(printf '%s\n' "$out" | sed 's|^[0-9a-f]\{{64\}}\( [ *]{corrupted}\)$|{zeros}\1|')
fi
printf '%s\n' "$out"
if [ -e {ghost} ]; then
    case " $* " in
    *" ./output/"* | *" output/"*) printf '%s *{ghost_file}\n' {zeros} ;;
    esac
fi
"""

_SETSID = """#!/bin/sh
# Test seam: the job launcher's setsid, one second late while a flag file exists.
if [ -e {slow} ]; then sleep 1; fi
exec {real} "$@"
"""

_DD = """#!/bin/sh
# Test seam: the preflight probe's dd, held while a flag file exists.
if [ -e {hold} ]; then
    echo held >{held}
    n=0
    while [ -e {hold} ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n + 1)); done
fi
exec {real} "$@"
"""

_WRAPPER = """#!/bin/sh
# The remote venv's axolotl: the knobs first (the sshd session does not carry the test's
# environment), then the stand-in.
. {knobs}
if [ "${{1-}}" = train ] && [ "${{OB_GATE-}}" = 1 ]; then
    while [ ! -e go ]; do sleep 0.02; done
fi
exec {python} {stand_in} "$@"
"""


@dataclass
class Box:
    """A real sshd on 127.0.0.1 that can go away and come back on the same port."""

    directory: Path
    port: int
    host_key: Path
    host_key_pub: str
    client_key: Path
    bin: Path
    corrupt: Path
    ghost: Path
    slow_start: Path
    hold_probe: Path
    probe_held: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def config(self) -> Path:
        """The sshd's configuration file."""
        return self.directory / "sshd_config"

    @property
    def commands_log(self) -> Path:
        """Every command a client ran, one per line (through ForceCommand)."""
        return self.directory / "commands.log"

    @property
    def log(self) -> Path:
        """The sshd's own log (DEBUG3)."""
        return self.directory / "sshd.log"

    def log_text(self) -> str:
        """Everything the sshd logged and every command clients ran."""
        return self.log.read_text(errors="replace") + "\n".join(self.commands())

    def commands(self) -> list[str]:
        """The commands clients ran so far."""
        if not self.commands_log.exists():
            return []
        return self.commands_log.read_text().splitlines()

    def server(self) -> SshServer:
        """This box as overbrainer.testing.sshd describes a server (for `drop_connections`)."""
        assert self.process is not None, "the sshd is stopped"
        return SshServer(
            host="127.0.0.1",
            port=self.port,
            user=_USER.pw_name,
            host_key=self.host_key,
            host_key_pub=self.host_key_pub,
            client_key=self.client_key,
            client_key_pub="",
            known_hosts=self.directory / "known_hosts",
            ssh_config=self.directory / "ssh_config",
            alias=ALIAS,
            log=self.log,
            commands_log=self.commands_log,
            directory=self.directory,
            pid=self.process.pid,
        )

    def start(self) -> None:
        """Start the sshd (again) on its port, with its host key."""
        assert self.process is None
        deadline = time.monotonic() + 10
        command = [SSHD, "-D", "-f", str(self.config), "-p", str(self.port)]
        command += ["-h", str(self.host_key), "-E", str(self.log)]
        while True:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait_for_banner(self.port, timeout=3)
                return
            except TimeoutError:
                self._kill()
                if time.monotonic() > deadline:
                    raise

    def drop(self) -> int:
        """Kill the processes serving the current connections, as a network drop would."""
        return drop_connections(self.server())

    def pause(self) -> None:
        """Freeze the listener: connections are accepted by the kernel, never answered."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def wait_for_caller(self, timeout: float = 60) -> None:
        """Wait until a client's connection waits in the kernel's queue of the paused
        listener (an established TCP connection to its port, in ``/proc/net/tcp``): on a
        busy machine a command may take seconds to get that far."""
        deadline = time.monotonic() + timeout
        while not _connected_to(self.port):
            assert time.monotonic() < deadline, f"nothing connected to port {self.port}"
            time.sleep(0.02)

    def resume(self) -> None:
        """Undo `pause`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the listener and every session: the host is unreachable until `start`."""
        if self.process is None:
            return
        self.drop()
        self._kill()

    def _kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.process = None


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@contextlib.contextmanager
def box_sshd(directory: Path) -> Iterator[Box]:
    """A `Box` running for the duration of the block."""
    require_sshd()
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "ssh_host_ed25519_key"
    client_key = directory / "id_ed25519"
    host_pub = keygen(host_key, "box-host")
    keygen(client_key)
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    box = Box(
        directory=directory,
        port=free_port(),
        host_key=host_key,
        host_key_pub=host_pub,
        client_key=client_key,
        bin=bin_dir,
        corrupt=directory / "corrupt",
        ghost=directory / "ghost",
        slow_start=directory / "slow_start",
        hold_probe=directory / "hold_probe",
        probe_held=directory / "probe_held",
    )
    for tool in ("sha256sum", "openssl"):
        real = shutil.which(tool, path=_SYSTEM_PATH)
        if real is not None:  # without openssl, ctl.sh uses sha256sum: one seam is enough
            _script(
                bin_dir / tool,
                _DIGEST.format(
                    real=real,
                    corrupt=box.corrupt,
                    ghost=box.ghost,
                    corrupted=CORRUPTED_FILE,
                    ghost_file=GHOST_FILE,
                    zeros="0" * 64,
                ),
            )
    real_setsid = shutil.which("setsid", path=_SYSTEM_PATH)
    assert real_setsid, "the job launcher needs setsid (util-linux)"
    _script(bin_dir / "setsid", _SETSID.format(real=real_setsid, slow=box.slow_start))
    real_dd = shutil.which("dd", path=_SYSTEM_PATH)
    assert real_dd
    _script(bin_dir / "dd", _DD.format(real=real_dd, hold=box.hold_probe, held=box.probe_held))
    authorized = directory / "authorized_keys"
    authorized.write_text(client_key.with_name(client_key.name + ".pub").read_text())
    write_sshd_config(
        directory,
        authorized,
        commands_log=box.commands_log,
        # SHLVL=1: bash (the login shell here) then skips ~/.bashrc, which on this machine
        # costs 0.2 s per command (pyenv init); the remote side of a test needs none of it.
        set_env={"PATH": f"{box.bin}:{_SYSTEM_PATH}", "SHLVL": "1"},
    )
    ensure_privsep_dir()
    box.start()
    try:
        yield box
    finally:
        box.stop()


@dataclass
class SshProject(Project):
    """A project whose training target is ``box``, reached over SSH through an alias."""

    box: Box | None = None
    home: Path = field(default_factory=Path)
    venv: Path = field(default_factory=Path)
    workdir: str = ""

    @property
    def sshd(self) -> Box:
        """The project's target host."""
        assert self.box is not None
        return self.box

    @property
    def remote_root(self) -> Path:
        """The workdir on the "remote" host (the same machine), under the remote home."""
        return Path(_USER.pw_dir) / self.workdir

    def remote_run(self, run_id: str) -> Path:
        """The run's directory on the host."""
        return self.remote_root / "runs" / run_id

    def knobs(self, **knobs: str) -> None:
        """The ``FAKE_AXOLOTL_*`` (and ``OB_GATE``) settings of the next jobs' trainer."""
        lines = ["FAKE_AXOLOTL_STEP_SECONDS=0.02", "export FAKE_AXOLOTL_STEP_SECONDS"]
        for name, value in knobs.items():
            lines += [f"{name}={value}", f"export {name}"]
        (self.venv / "knobs.sh").write_text("\n".join(lines) + "\n")

    def job_pid(self, run_id: str) -> int:
        """The pid (= process group) of the run's job on the host."""
        return int((self.remote_run(run_id) / "job.pid").read_text().split()[0])

    def wait_for_file(self, path: Path, timeout: float = 15) -> None:
        """Wait until ``path`` exists and is not empty."""
        deadline = time.monotonic() + timeout
        while not (path.exists() and path.stat().st_size > 0):
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} did not appear in {timeout} s")
            time.sleep(0.02)

    def open_gate(self, run_id: str) -> None:
        """Let a gated job (``OB_GATE=1``) train."""
        (self.remote_run(run_id) / "go").touch()

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events as ``events RUN --json`` prints them."""
        done = self.run("events", run_id, "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]


def _ssh_home(home: Path, box: Box) -> None:
    """``~/.ssh/config`` with the alias and ``~/.ssh/known_hosts`` with the host key."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text(
        f"Host {ALIAS}\n"
        "    HostName 127.0.0.1\n"
        f"    Port {box.port}\n"
        f"    User {_USER.pw_name}\n"
        f"    IdentityFile {box.client_key}\n"
        "    IdentitiesOnly yes\n"
        "    IdentityAgent none\n"
    )
    (ssh / "known_hosts").write_text(known_hosts_line(box.port, box.host_key_pub))


@pytest.fixture
def ssh_project(tmp_path: Path) -> Iterator[SshProject]:
    """``overbrainer init``, plus ``[targets.box]`` (kind ssh) as the training target."""
    with ssh_project_at(tmp_path, tmp_path / "project") as made:
        yield made


@contextlib.contextmanager
def ssh_project_at(tmp_path: Path, path: Path) -> Iterator[SshProject]:
    """The ``ssh_project`` fixture's project at ``path`` (its sshd, home and venv in
    ``tmp_path``)."""
    with box_sshd(tmp_path / "sshd") as box:
        home = tmp_path / "home"
        _ssh_home(home, box)
        venv = tmp_path / "venv"
        (venv / "bin").mkdir(parents=True)
        wrapper = venv / "bin" / "axolotl"
        wrapper.write_text(
            _WRAPPER.format(knobs=venv / "knobs.sh", python=sys.executable, stand_in=STAND_IN)
        )
        wrapper.chmod(0o755)
        # The workdir is relative to the remote home: a link there into tmp_path.
        workdir = f"ob-e2e-{uuid.uuid4().hex[:12]}"
        remote = tmp_path / "remote"
        remote.mkdir()
        link = Path(_USER.pw_dir) / workdir
        link.symlink_to(remote)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OVERBRAINER_", "FAKE_AXOLOTL_", "SSH_"))
        }
        env.update(
            {
                "HOME": str(home),
                "OVERBRAINER_TRAINING__TARGET": "box",
                "OVERBRAINER_TARGETS__BOX__HOST": ALIAS,
                "PYTHONPATH": str(ROOT),
            }
        )
        made = SshProject(path, env, box=box, home=home, venv=venv, workdir=workdir)
        made.knobs()
        init = subprocess.run(
            [sys.executable, "-m", "overbrainer", "init", str(path)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert init.returncode == 0, init.stderr
        with (path / "overbrainer.toml").open("a") as toml:
            toml.write(f'\n[targets.box]\nkind = "ssh"\nworkdir = "{workdir}"\nvenv = "{venv}"\n')
        try:
            yield made
        finally:
            for run_dir in (remote / "runs").glob("*") if (remote / "runs").exists() else []:
                with contextlib.suppress(OSError, ValueError):
                    pid = int((run_dir / "job.pid").read_text().split()[0])
                    if alive(pid):
                        kill_group(pid)
            link.unlink()


def stop_following(process: subprocess.Popen[str], timeout: float = 30) -> tuple[str, str]:
    """Ctrl-C a following command; its stdout and stderr."""
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=timeout)


__all__ = [
    "ALIAS",
    "CORRUPTED_FILE",
    "GHOST_FILE",
    "Box",
    "SshProject",
    "box_sshd",
    "ssh_project",
    "ssh_project_at",
    "stop_following",
]


_ESTABLISHED = "01"


def _connected_to(port: int) -> bool:
    """Whether a TCP connection to 127.0.0.1:``port`` is established (either side of it)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == _ESTABLISHED and int(remote.split(":")[1], 16) == port:
            return True
    return False
