"""One interface over a target that runs jobs: this machine or a host reached over SSH.

A *job* is a POSIX ``sh`` wrapper (``scripts/job.sh``) running in a run directory on the
target, in its own session and process group. It leaves markers there:

- ``job.pid``: its pid, which is also its process group id;
- ``job.log``: the trainer's stdout and stderr;
- ``exit_code``: written atomically once the trainer commands are done;
- ``cancelling`` / ``cancelled``: written by a cancel, before and after stopping it;
- ``job.container``: the container engine and name when the job runs in one.

The status of a job is read from these markers with a fixed priority: ``cancelled`` beats
``cancelling`` beats ``exit_code`` beats "process group alive"; none of them and no live
group means the job is ``lost``.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal, Protocol

from overbrainer.errors import OverbrainerError
from overbrainer.exec.shell import check_safe_word, check_value


class JobStatus(StrEnum):
    """Where a job stands, as read from its markers on the target."""

    running = "running"
    exited = "exited"
    cancelling = "cancelling"
    cancelled = "cancelled"
    lost = "lost"


@dataclass(frozen=True)
class JobState:
    """A job's status; ``exit_code`` is set for ``exited`` (``None`` if unreadable).
    ``node``: for a job across many nodes, the node rank whose end this is, when it is not
    rank 0's (another node's job failed first); ``said``: the last lines of that node's
    log (its log does not come home with rank 0's)."""

    status: JobStatus
    exit_code: int | None = None
    node: int | None = None
    said: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        """Whether the job will never run again (everything but running/cancelling)."""
        return self.status in (JobStatus.exited, JobStatus.cancelled, JobStatus.lost)


@dataclass(frozen=True)
class Arrived:
    """One downloaded file as its bytes arrived: their SHA-256 (hex) and their count."""

    sha256: str
    size: int


@dataclass(frozen=True)
class JobHandle:
    """A started job: its pid (= process group id) and its container, if any."""

    pid: int
    container: str | None


@dataclass(frozen=True)
class NativeRuntime:
    """Trainer commands run directly; ``venv`` (holding ``bin/axolotl``) goes first on PATH."""

    venv: str | None = None

    def __post_init__(self) -> None:
        if self.venv is not None:
            check_safe_word(self.venv, name="the runtime's venv")


@dataclass(frozen=True)
class ContainerRuntime:
    """Trainer commands run in ``image`` through ``engine run --rm --name <container>``.

    The run directory is mounted at the same path and is the working directory; the job's
    environment and secrets pass by *name* (``-e NAME``), so no value is on a command line.
    ``gpus`` adds the engine's flag for all GPUs; ``extra_args`` go before the image.
    """

    engine: Literal["docker", "podman"]
    image: str
    gpus: bool = True
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.engine not in ("docker", "podman"):
            raise ValueError(f"unknown container engine {self.engine!r}")
        check_safe_word(self.image, name="the container image")
        for arg in self.extra_args:
            # Options start with "-" by nature; they are quoted, so only line breaks matter.
            check_value(arg, name="an extra container argument")

    def gpu_args(self) -> tuple[str, ...]:
        """The flags that give the container every GPU."""
        if not self.gpus:
            return ()
        if self.engine == "docker":
            return ("--gpus", "all")
        return ("--device", "nvidia.com/gpu=all")


Runtime = NativeRuntime | ContainerRuntime


class ExecError(OverbrainerError):
    """An operation on a target failed; the message names the target and the operation."""


class TargetUnreachable(ExecError):
    """The target could not be reached (connection refused, timed out or dropped).

    Transient by nature: callers following a job count these and retry.
    """

    def __init__(self, message: str, *, host: str) -> None:
        super().__init__(message)
        self.host = host


class HostKeyRefused(ExecError):
    """The SSH server's host key is unknown, changed, or not the pinned one. Never retried."""

    def __init__(self, message: str, *, host: str) -> None:
        super().__init__(message)
        self.host = host


class LoginRefused(ExecError):
    """The SSH server refused every key offered for the login."""

    def __init__(self, message: str, *, host: str) -> None:
        super().__init__(message)
        self.host = host


class JobAlreadyRunning(ExecError):
    """A job is still running in the run directory a new job was to start in."""


class Executor(Protocol):
    """Upload, spawn, observe, cancel and collect jobs on one target.

    Every ``remote_dir`` and ``path`` is relative to the executor's root (a local directory,
    or the ``workdir`` on an SSH host) and is validated before use.
    """

    @property
    def location(self) -> str:
        """The target in words, for messages: ``this machine``, ``host gpu1``."""
        ...

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        """Copy ``local_dir`` to ``remote_dir`` (a tar stream over SSH).

        ``ssh/``, ``run.json`` and ``pod.json`` at the top of ``local_dir`` never leave.
        """
        ...

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Start the job wrapper detached in ``remote_dir``; return once its pid is recorded.

        ``commands`` run in order, stopping at the first failure. ``env`` is written to the
        job's command file (no secrets there); ``secrets`` reach only the job's environment.
        ``container`` names the container when the runtime is a container runtime.
        Raises `JobAlreadyRunning` if a job is running there already.
        """
        ...

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` if it does not exist."""
        ...

    async def file_size(self, path: str) -> int:
        """The size of ``path`` in bytes; 0 if it does not exist."""
        ...

    async def status(self, remote_dir: str) -> JobState:
        """The state of the job in ``remote_dir``, read from its markers."""
        ...

    async def cancel(self, remote_dir: str) -> JobState:
        """Stop the job in ``remote_dir`` and return its final state.

        Writes ``cancelling``, stops its container, SIGTERMs its process group, waits up to
        the grace (10 s), SIGKILLs it, writes ``cancelled``. A job that already ended is
        left alone and its real state returned. Never signals pid 0, 1 or a garbage pid.
        """
        ...

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        """SHA-256 of every regular file under ``paths`` (``checkpoint-*`` dirs excluded)."""
        ...

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> Mapping[str, Arrived] | None:
        """Bring ``paths`` of ``remote_dir`` into ``local_dir``, replacing what was there.

        Returns what arrived of each file written (its SHA-256, hashed as it was written,
        and its size), or ``None`` when the files were not hashed on the way (the caller
        then reads them back to verify them).
        """
        ...

    async def touch(self, path: str) -> None:
        """Create ``path`` (and its parent directories) if it does not exist."""
        ...

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        """Run the POSIX script ``text`` with ``args`` (``sh -s -- ARGS``, the script on
        stdin, every argument quoted); its stdout. A short question or a set-up step
        (``what`` names it in errors), not a job. Where it starts is the login directory
        over SSH, this process's directory here: give it absolute paths."""
        ...

    async def aclose(self) -> None:
        """Release the connection, if any. Running jobs are not affected."""
        ...
