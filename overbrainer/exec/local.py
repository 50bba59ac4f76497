"""The executor for jobs on this machine.

Jobs run as ``sh job.sh run`` in their own session (``start_new_session``), so a Ctrl-C in
the terminal never reaches them, and they keep running after overbrainer exits. This process
reaps every job it spawned (a thread waits for it), so a finished job never lingers as a
zombie that ``kill -0`` would report alive; ``ctl.sh`` also tells zombies apart on Linux.

The job's environment is this process's minus every ``OVERBRAINER_*`` and ``VAULT_*``
variable, plus the secrets — which are never written to a file or a command line.
"""

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import trio

from overbrainer.exec.base import (
    ExecError,
    Executor,
    JobHandle,
    JobState,
    NativeRuntime,
    Runtime,
)
from overbrainer.exec.job import (
    CONTROL_SCRIPT,
    JOB_SCRIPT,
    STALE_MARKERS,
    job_files,
    parse_state,
    script,
)
from overbrainer.exec.manifest import local_manifest
from overbrainer.exec.shell import check_rel_path
from overbrainer.exec.transfer import (
    copy_results,
    fresh_staging,
    remove,
    replace_paths,
    same_directory,
    upload_entries,
)

_STRIPPED_PREFIXES = ("OVERBRAINER_", "VAULT_")
_START_TIMEOUT = 10.0


def job_environment(base: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """``base`` without ``OVERBRAINER_*`` / ``VAULT_*`` variables, plus ``secrets``."""
    env = {
        name: value
        for name, value in base.items()
        if not name.upper().startswith(_STRIPPED_PREFIXES)
    }
    env.update(secrets)
    return env


class LocalExecutor:
    """Jobs in directories under ``root`` on this machine.

    ``base_env`` is the environment jobs start from (default: this process's);
    ``shell`` runs the scripts; ``cancel_grace`` is the wait between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        root: Path,
        *,
        runtime: Runtime | None = None,
        base_env: Mapping[str, str] | None = None,
        shell: str = "sh",
        cancel_grace: int = 10,
    ) -> None:
        self.root = root
        self.runtime: Runtime = runtime or NativeRuntime()
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._shell = shell
        self._grace = cancel_grace

    @property
    def location(self) -> str:
        """``this machine``."""
        return "this machine"

    def _path(self, rel: str, what: str) -> Path:
        return self.root / check_rel_path(rel, name=what)

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        """Copy ``local_dir`` into ``remote_dir`` (nothing to do when they are one)."""
        target = self._path(remote_dir, "the run directory")
        await trio.to_thread.run_sync(_copy_tree, local_dir, target)

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Start the job detached in ``remote_dir``; return once it recorded its pid."""
        directory = self._path(remote_dir, "the run directory")
        files = await job_files(
            self,
            remote_dir,
            commands,
            env=env,
            secrets=secrets,
            runtime=self.runtime,
            container=container,
            where=str(directory),
        )
        await trio.to_thread.run_sync(_write_job_files, directory, files)
        process = await trio.to_thread.run_sync(
            _launch, self._shell, directory, job_environment(self._base_env, secrets)
        )
        await _wait_for_pid(directory, process)
        return JobHandle(process.pid, container)

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` if it is missing."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        return await trio.to_thread.run_sync(_read, self._path(path, "the file"), offset, limit)

    async def file_size(self, path: str) -> int:
        """The size of ``path`` in bytes; 0 if it is missing."""
        return await trio.to_thread.run_sync(_size, self._path(path, "the file"))

    async def status(self, remote_dir: str) -> JobState:
        """The job's state from its markers (``ctl.sh status``)."""
        directory = self._path(remote_dir, "the run directory")
        return parse_state(await self._ctl("status", str(directory)), where=self.location)

    async def cancel(self, remote_dir: str) -> JobState:
        """Stop the job (container, SIGTERM, grace, SIGKILL); a finished job is left alone."""
        directory = self._path(remote_dir, "the run directory")
        out = await self._ctl("cancel", str(directory), str(self._grace))
        return parse_state(out, where=self.location)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        """SHA-256 of the result files under ``paths`` of ``remote_dir``."""
        directory = await self._existing(remote_dir)
        return await trio.to_thread.run_sync(local_manifest, directory, list(paths))

    async def download(self, remote_dir: str, paths: Sequence[str], local_dir: Path) -> None:
        """Copy ``paths`` of ``remote_dir`` into ``local_dir`` (nothing to do if one dir).
        The copies are not hashed on the way: verifying reads them."""
        source = await self._existing(remote_dir)
        for rel in paths:
            check_rel_path(rel, name="a result path")
        await trio.to_thread.run_sync(_copy_results, source, local_dir, list(paths))

    async def touch(self, path: str) -> None:
        """Create ``path`` and its parents."""
        target = self._path(path, "the marker")
        await trio.to_thread.run_sync(_touch, target)

    async def aclose(self) -> None:
        """Nothing to release: jobs keep running, their reapers stay with this process."""

    async def _existing(self, remote_dir: str) -> Path:
        """The run directory, which must exist: a wrong root must never read as "empty"."""
        directory = self._path(remote_dir, "the run directory")
        if not await trio.Path(directory).is_dir():
            raise ExecError(f"there is no run directory {directory} on {self.location}")
        return directory

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        """Run the POSIX script ``text`` as ``sh -s -- ARGS`` (here, in this process's
        directory: its paths are absolute)."""
        result = await trio.run_process(
            [self._shell, "-s", "--", *args],
            stdin=text.encode(),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=job_environment(self._base_env, {}),
        )
        if result.returncode != 0:
            detail = result.stderr.decode(errors="replace").strip()[-500:]
            raise ExecError(f"{what} failed on {self.location}: {detail}")
        return bytes(result.stdout)

    async def _ctl(self, *args: str) -> str:
        out = await self.run_script(script(CONTROL_SCRIPT), args, what=f"`{args[0]}`")
        return out.decode(errors="replace")


def _conforms(executor: LocalExecutor) -> Executor:
    """(For the type checker) a `LocalExecutor` is an `Executor`."""
    return executor


def _copy_tree(source: Path, target: Path) -> None:
    if same_directory(source, target):
        return
    target.mkdir(parents=True, exist_ok=True)
    for entry in upload_entries(source):
        destination = target / entry.name
        if entry.source is None:
            destination.mkdir(exist_ok=True)
        elif isinstance(entry.source, Path):
            remove(destination)
            shutil.copyfile(entry.source, destination)
            destination.chmod(entry.mode)


def _write_job_files(directory: Path, files: Mapping[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in STALE_MARKERS:
        remove(directory / name)
    for name, text in files.items():
        (directory / name).write_text(text)


def _launch(shell: str, directory: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        process = subprocess.Popen(
            [shell, JOB_SCRIPT, "run"],
            cwd=directory,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise ExecError(f"could not start the job in {directory}: {exc.strerror}") from None
    # Reap it whenever it ends, so it never reads as alive once done. A daemon thread:
    # when overbrainer exits, the job lives on and init adopts it.
    threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
    return process


async def _wait_for_pid(directory: Path, process: subprocess.Popen[bytes]) -> None:
    pid_file = trio.Path(directory / "job.pid")
    with trio.move_on_after(_START_TIMEOUT):
        while True:
            ended = process.poll() is not None
            if await pid_file.exists():
                recorded = (await pid_file.read_text()).strip()
                if recorded == str(process.pid):
                    return
                raise ExecError(
                    f"the job in {directory} recorded pid {recorded!r}, not {process.pid}"
                )
            if ended:
                break
            await trio.sleep(0.01)
    raise ExecError(
        f"the job in {directory} did not start (no job.pid after {_START_TIMEOUT:.0f} s); "
        f"see {directory / 'job.log'}"
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _read(path: Path, offset: int, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except (FileNotFoundError, IsADirectoryError):
        return b""


def _copy_results(source: Path, local_dir: Path, paths: list[str]) -> None:
    if same_directory(source, local_dir):
        return
    local_dir.mkdir(parents=True, exist_ok=True)
    staging = fresh_staging(local_dir)
    copy_results(source, staging, paths)
    replace_paths(staging, local_dir, paths)


def _touch(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch()
