"""Fixtures for the executor tests: shells to run the job scripts under, the real sshd."""

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from overbrainer.exec.base import NativeRuntime
from overbrainer.exec.job import CONTROL_SCRIPT, JOB_SCRIPT, render_commands, script
from overbrainer.testing.sshd import SshServer
from tests.fakes.sshd import sshd_server

__all__ = ["Shell", "SshServer", "shell", "sshd_server"]

SHELLS = ("sh", "dash", "busybox", "bash-posix")


@dataclass(frozen=True)
class Shell:
    """A POSIX shell to run the job scripts under: ``bin`` goes first on PATH and holds
    ``sh`` (and, for busybox, every busybox applet, like a minimal container)."""

    name: str
    bin: Path

    @property
    def sh(self) -> str:
        return str(self.bin / "sh")

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "VAULT_"))}
        env["PATH"] = f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        env.update(extra or {})
        return env

    def ctl(self, *args: str, timeout: float = 30, path: str | None = None) -> str:
        """Run ``ctl.sh ARGS`` (fed on stdin, like the executors do); return its stdout.
        ``path`` goes first on PATH (commands standing in for the system's)."""
        return self.ctl_bytes(*args, timeout=timeout, path=path).decode()

    def ctl_bytes(self, *args: str, timeout: float = 30, path: str | None = None) -> bytes:
        """Like `ctl`, but stdout as bytes."""
        env = self.env()
        if path is not None:
            env["PATH"] = f"{path}:{env['PATH']}"
        result = subprocess.run(
            [self.sh, "-s", "--", *args],
            input=script(CONTROL_SCRIPT).encode(),
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()
        return result.stdout

    def prepare(self, run_dir: Path, commands: Sequence[Sequence[str]]) -> None:
        """Write job.sh and job.cmds into ``run_dir`` as an executor would."""
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / JOB_SCRIPT).write_text(script(JOB_SCRIPT))
        text = render_commands(
            commands, env={}, secret_names=[], runtime=NativeRuntime(), container=None
        )
        (run_dir / "job.cmds").write_text(text)

    def start(self, run_dir: Path, secrets: bytes = b"") -> int:
        """``sh job.sh start`` with ``secrets`` on stdin; the pid it reports."""
        result = subprocess.run(
            [self.sh, JOB_SCRIPT, "start"],
            cwd=run_dir,
            input=secrets,
            capture_output=True,
            env=self.env(),
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()
        word, pid = result.stdout.decode().split()
        assert word == "pid"
        return int(pid)


def _make_shell(name: str, directory: Path) -> Shell:
    directory.mkdir(parents=True, exist_ok=True)
    if name == "busybox":
        busybox = shutil.which("busybox")
        assert busybox, "busybox is needed for these tests (apt install busybox)"
        applets = subprocess.run([busybox, "--list"], capture_output=True, check=True)
        for applet in applets.stdout.decode().split():
            if "/" not in applet and applet not in ("[", "[["):
                (directory / applet).symlink_to(busybox)
    else:
        target = {"sh": "/bin/sh", "dash": "dash", "bash-posix": "bash"}[name]
        found = shutil.which(target)
        assert found, f"{target} is needed for these tests"
        (directory / "sh").symlink_to(found)
    return Shell(name, directory)


@pytest.fixture(scope="session")
def shells(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Shell]:
    base = tmp_path_factory.mktemp("shells")
    return {name: _make_shell(name, base / name) for name in SHELLS}


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest, shells: dict[str, Shell]) -> Shell:
    """Each POSIX shell the job scripts must behave the same under."""
    return shells[str(request.param)]


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Process groups to SIGKILL at the end of a test, whatever happened."""
    groups: list[int] = []
    yield groups
    import signal

    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
