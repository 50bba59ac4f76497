"""The executor for jobs on a host reached over SSH (asyncssh, bridged into trio).

Open it with ``async with open_ssh(target, workdir=…) as executor:``. asyncssh runs on
asyncio, so the executor needs a trio-asyncio loop: `open_ssh` opens one
(``trio_asyncio.open_loop()``) unless the calling task already runs inside one — a
command that talks to several hosts opens its loop once and every `open_ssh` inside
shares it.

Two kinds of targets:

- `UserHost`: ``user@host[:port]`` or an alias from ``~/.ssh/config`` (HostName, User,
  Port, IdentityFile, ProxyJump… are honoured, and so is the SSH agent), checked strictly
  against the user's known hosts: an unknown or changed host key is refused with the
  command that would add it — never accepted automatically.
- `PinnedHost` (pods): an explicit address and user, one client key file, exactly one
  trusted host key; no ssh config, no agent, no known_hosts file.

Every remote command is an asyncssh process closed in a shielded ``finally`` (cancelling
a bridged call does not close the remote channel on its own). Control commands are
``sh -s -- ctl-args`` with ``ctl.sh`` on stdin; the job launcher gets the secrets on its
stdin, so they never appear on a command line, in the server's log or in a file.
Connection failures raise `TargetUnreachable` naming the host; the next call reconnects.
"""

import asyncio
import contextlib
import queue
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar, cast

import asyncssh
import trio

from overbrainer.exec.base import (
    Arrived,
    ExecError,
    Executor,
    HostKeyRefused,
    JobHandle,
    JobState,
    LoginRefused,
    NativeRuntime,
    Runtime,
    TargetUnreachable,
)
from overbrainer.exec.job import (
    CONTROL_SCRIPT,
    JOB_SCRIPT,
    job_files,
    parse_pid,
    parse_size,
    parse_state,
    script,
    secrets_input,
)
from overbrainer.exec.manifest import parse_sha256sum
from overbrainer.exec.shell import build_command, check_rel_path, check_safe_word, quote
from overbrainer.exec.transfer import (
    Entry,
    fresh_staging,
    remove,
    replace_paths,
    tar_chunks,
    upload_entries,
)
from overbrainer.exec.untar import Unpacker

_P = ParamSpec("_P")
_T = TypeVar("_T")
# Bytes asked of a remote command's output per read (each read crosses into asyncio), and
# gathered into one chunk of a download for the extracting worker (big ones cost less CPU
# per byte: the worker hashes and writes each at once).
_CHUNK = 4 << 20
# Flow control of every channel: a big window and packets let the server send results
# in fewer, larger packets (asyncssh's work is mostly per packet).
_WINDOW = 8 << 20
_PACKET = 256 << 10
# Chunks of a download handed to the extracting worker and not yet taken: enough to ride
# out a worker's pause, few enough that a download holds a small, fixed amount of memory
# (past them the channel stops reading, and the server stops once the window is full).
_QUEUED_CHUNKS = 2
# A download's bytes wait at most this long (seconds) for their chunk to fill before the
# worker gets them: a slow stream is still checked, and written, as it comes.
_CHUNK_WAIT = 0.05
# The tail of a download's stderr kept for its error message.
_ERRORS_KEPT = 64 << 10
_FAST_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
_CLOSE_TIMEOUT = 5.0
_GLOBAL_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
# asyncssh's (trusted host keys, trusted CA keys, revoked keys): an empty trust list.
_NOTHING_TRUSTED: tuple[list[object], list[object], list[object]] = ([], [], [])
# What a broken or refused connection raises inside asyncssh and the socket layer.
_NETWORK_ERRORS = (OSError, asyncssh.Error, asyncio.TimeoutError)


@dataclass(frozen=True)
class UserHost:
    """A host the user reaches with ``ssh``: ``user@host[:port]`` or a ``~/.ssh/config`` alias.

    ``config`` and ``known_hosts`` replace ``~/.ssh/config`` and the known hosts files
    (the config's ``UserKnownHostsFile``, else ``~/.ssh/known_hosts``) — for tests, or a
    user who keeps them elsewhere.
    """

    spec: str
    config: Path | None = None
    known_hosts: Path | None = None


@dataclass(frozen=True)
class PinnedHost:
    """A pod: address, user, the run's client key file and the one host key to trust."""

    host: str
    port: int
    user: str
    client_key: Path
    host_key: str  # OpenSSH public key line: "ssh-ed25519 AAAA…"


def parse_host_spec(spec: str) -> tuple[str | None, str, int | None]:
    """Split ``user@host[:port]`` (``[v6addr]:port`` too) into user, host and port."""
    from overbrainer.exec.shell import UnsafeValue

    rest = spec.strip()
    user: str | None = None
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
    port: int | None = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail:
            if not tail.startswith(":") or not tail[1:].isdigit():
                raise UnsafeValue(f"the SSH host {spec!r} should look like user@host[:port]")
            port = int(tail[1:])
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        if not port_text.isdigit():
            raise UnsafeValue(f"the SSH host {spec!r} should look like user@host[:port]")
        port = int(port_text)
    else:
        host = rest
    if (
        not host
        or host.startswith("-")
        or (user is not None and (not user or user.startswith("-")))
        or (port is not None and not 0 < port < 65536)
        or any(char.isspace() or char in "'\"`$;&|<>\\" for char in spec)
    ):
        raise UnsafeValue(f"the SSH host {spec!r} should look like user@host[:port] or an alias")
    return user, host, port


async def _aio(fn: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Await the asyncio coroutine function ``fn`` from trio (through trio-asyncio)."""
    import trio_asyncio

    return cast(_T, await trio_asyncio.aio_as_trio(fn)(*args, **kwargs))


async def _feed(process: "asyncssh.SSHClientProcess[bytes]", data: bytes, eof: bool) -> None:
    """(asyncio side) Write ``data`` to the process's stdin, wait for room, maybe send EOF."""
    if data:
        process.stdin.write(data)
        await process.stdin.drain()
    if eof:
        process.stdin.write_eof()


async def _read_chunk(stream: "asyncssh.SSHReader[bytes]", size: int) -> bytes:
    """(asyncio side) ``size`` bytes of ``stream``, fewer only at its end: big chunks cross
    into trio, not each packet on its own."""
    try:
        return await stream.readexactly(size)
    except asyncio.IncompleteReadError as end:
        return bytes(end.partial)


@contextlib.asynccontextmanager
async def open_ssh(
    target: UserHost | PinnedHost,
    *,
    workdir: str = "overbrainer",
    runtime: Runtime | None = None,
    cancel_grace: int = 10,
    connect_timeout: float = 20.0,
    connect: bool = True,
) -> AsyncIterator["SshExecutor"]:
    """Connect to ``target`` and yield its executor; close the connection at the end.

    With ``connect=False`` the block starts unconnected: the caller connects with
    `SshExecutor.connect` (say, in a scope Ctrl-C may cancel), or the first call does.

    ``workdir`` is the executor's root, relative to the remote home (or absolute). Opens a
    trio-asyncio loop for the block unless the calling task already runs inside one; an
    error that the loop's nursery wraps in an exception group comes out unwrapped when it
    is the only one, so callers catch `TargetUnreachable` & co. as plain exceptions.
    Raises `HostKeyRefused`, `LoginRefused` or `TargetUnreachable` when it cannot connect.
    """
    import trio_asyncio

    executor = SshExecutor(
        target,
        workdir=workdir,
        runtime=runtime,
        cancel_grace=cancel_grace,
        connect_timeout=connect_timeout,
    )
    if trio_asyncio.current_loop.get() is not None:
        async with _connected(executor, connect):
            yield executor
        return
    try:
        async with trio_asyncio.open_loop(), _connected(executor, connect):
            yield executor
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from leaves[0].__cause__
        raise


@contextlib.asynccontextmanager
async def _connected(executor: "SshExecutor", connect: bool) -> AsyncIterator[None]:
    try:
        if connect:
            await executor.connect()
        yield
    finally:
        await executor.aclose()


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


class SshExecutor:
    """Jobs in directories under ``workdir`` on an SSH host. Create it with `open_ssh`."""

    def __init__(
        self,
        target: UserHost | PinnedHost,
        *,
        workdir: str,
        runtime: Runtime | None,
        cancel_grace: int,
        connect_timeout: float,
    ) -> None:
        self.target = target
        self.workdir = check_safe_word(workdir.rstrip("/") or "/", name="the SSH workdir")
        self.runtime: Runtime = runtime or NativeRuntime()
        self._grace = cancel_grace
        self._timeout = connect_timeout
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = trio.Lock()
        if isinstance(target, PinnedHost):
            self._label = f"{target.user}@{target.host}:{target.port}"
        else:
            parse_host_spec(target.spec)
            self._label = target.spec

    @property
    def location(self) -> str:
        """``host <spec>``."""
        return f"host {self._label}"

    # -- connection ------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the connection now (calls reconnect by themselves after a failure)."""
        await self._connection()

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is None:
                self._conn = await self._open()
            return self._conn

    async def _open(self) -> asyncssh.SSHClientConnection:
        if isinstance(self.target, PinnedHost):
            return await self._open_pinned(self.target)
        return await self._open_user(self.target)

    async def _open_pinned(self, target: PinnedHost) -> asyncssh.SSHClientConnection:
        try:
            host_key = asyncssh.import_public_key(target.host_key)
        except (asyncssh.KeyImportError, ValueError):
            raise ExecError(
                f"the pinned host key for {self.location} is not a public key"
            ) from None
        try:
            client_key = asyncssh.read_private_key(target.client_key)
        except (OSError, asyncssh.KeyImportError, ValueError):
            raise ExecError(
                f"cannot read the run's SSH key {target.client_key} (it should be an "
                "unencrypted OpenSSH private key, mode 600)"
            ) from None
        try:
            return await _aio(
                asyncssh.connect,
                target.host,
                target.port,
                username=target.user,
                config=None,
                agent_path=None,
                agent_forwarding=False,
                client_keys=[client_key],
                known_hosts=([host_key], [], []),
                password_auth=False,
                kbdint_auth=False,
                host_based_auth=False,
                x509_trusted_certs=None,
                encryption_algs=_ciphers(None),
                connect_timeout=self._timeout,
                keepalive_interval=15,
                keepalive_count_max=4,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise HostKeyRefused(
                f"the SSH server at {target.host}:{target.port} did not present the host key "
                "pinned for this run, so overbrainer refused it: it is not the pod this run "
                "created (or the pod was replaced)",
                host=self._label,
            ) from None
        except _NETWORK_ERRORS as exc:
            raise self._connect_error(exc) from None

    async def _open_user(self, target: UserHost) -> asyncssh.SSHClientConnection:
        user, host, port = parse_host_spec(target.spec)
        config: list[str] | tuple[()] = [str(target.config)] if target.config else ()
        known: str | tuple[()] = str(target.known_hosts) if target.known_hosts else ()
        try:
            options = await _aio(
                asyncssh.SSHClientConnectionOptions.construct,
                None,
                config=config,
                host=host,
                port=port if port is not None else (),
                username=user if user is not None else (),
                known_hosts=known,
                connect_timeout=self._timeout,
                keepalive_interval=15,
                keepalive_count_max=4,
            )
            # Always an explicit list of existing files, or nothing trusted at all:
            # "UserKnownHostsFile none" (None) would switch checking off — never.
            files = _known_hosts_files(options.known_hosts, explicit=bool(target.known_hosts))
            trusted: object = files or _NOTHING_TRUSTED
            options = await _aio(
                asyncssh.SSHClientConnectionOptions.construct,
                options,
                known_hosts=trusted,
                encryption_algs=_ciphers(options.encryption_algs),
            )
        except (OSError, ValueError, asyncssh.Error) as exc:
            raise ExecError(f"cannot use the SSH settings for {self.location}: {exc}") from None
        try:
            return await _aio(asyncssh.connect, host, options=options)
        except asyncssh.HostKeyNotVerifiable:
            raise self._host_key_error(options, files) from None
        except _NETWORK_ERRORS as exc:
            raise self._connect_error(exc) from None

    def _host_key_error(
        self, options: asyncssh.SSHClientConnectionOptions, files: list[str]
    ) -> HostKeyRefused:
        host, port = str(options.host), int(options.port or 22)
        where = host if port == 22 else f"[{host}]:{port}"
        scan = f"ssh-keyscan -p {port} {host} >> ~/.ssh/known_hosts"
        changed = False
        with contextlib.suppress(Exception):
            for name in files:
                keys = asyncssh.match_known_hosts(name, host, host, port if port != 22 else None)
                changed = changed or bool(keys[0])
        if changed:
            return HostKeyRefused(
                f"the host key of {self._label} ({where}) is not the one in your known hosts: "
                "the host was reinstalled, or someone is intercepting the connection. "
                "overbrainer refused it. If the change is expected, check the new key's "
                f"fingerprint, then replace the old one: `ssh-keygen -R '{where}'` and `{scan}`",
                host=self._label,
            )
        return HostKeyRefused(
            f"the host key of {self._label} ({where}) is not in your known hosts, and "
            "overbrainer never accepts an unknown host key. Check its fingerprint, then add "
            f"it: `{scan}` (or connect once with `{self._ssh_command()}` and confirm)",
            host=self._label,
        )

    def _ssh_command(self) -> str:
        """The ``ssh`` command a user would type to reach this host."""
        assert isinstance(self.target, UserHost)
        user, host, port = parse_host_spec(self.target.spec)
        login = f"{user}@{host}" if user else host
        return f"ssh -p {port} {login}" if port else f"ssh {login}"

    def _connect_error(self, exc: BaseException) -> ExecError:
        if isinstance(exc, asyncssh.PermissionDenied):
            return LoginRefused(
                f"{self.location} refused the login: none of the offered keys is authorized "
                "(check User and IdentityFile in ~/.ssh/config, or your ssh agent)",
                host=self._label,
            )
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, asyncio.TimeoutError):
            reason = f"no answer within {self._timeout:.0f} s"
        elif isinstance(exc, ConnectionRefusedError):
            reason = "connection refused (no SSH server listening there)"
        return TargetUnreachable(f"cannot reach {self.location}: {reason}", host=self._label)

    async def _drop(self) -> None:
        """Forget a broken connection (closing it); the next call opens a new one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                with contextlib.suppress(*_NETWORK_ERRORS):
                    await _aio(conn.wait_closed)

    async def aclose(self) -> None:
        """Close the connection. Jobs keep running on the host."""
        await self._drop()

    # -- running commands ------------------------------------------------------------

    async def _exec(
        self,
        command: str,
        *,
        what: str,
        stdin: bytes = b"",
        chunks: Iterator[bytes] | None = None,
    ) -> bytes:
        """Run ``command``; feed ``stdin`` (then ``chunks``); return stdout. Non-zero exit →
        `ExecError` with stderr's tail."""
        conn = await self._connection()
        try:
            process = await _aio(
                conn.create_process, command, encoding=None, window=_WINDOW, max_pktsize=_PACKET
            )
        except _NETWORK_ERRORS as exc:
            await self._drop()
            raise self._lost(what, exc) from None
        errors: list[bytes] = []
        output: list[bytes] = []
        failures: list[BaseException] = []
        try:
            async with trio.open_nursery() as nursery:
                # Each stream task keeps its network error (instead of raising it) so it
                # arrives here unwrapped, and stops its siblings.
                nursery.start_soon(
                    _guard,
                    failures,
                    nursery.cancel_scope,
                    self._collect(process.stderr, errors),
                )
                nursery.start_soon(
                    _guard,
                    failures,
                    nursery.cancel_scope,
                    self._collect(process.stdout, output),
                )
                await _guard(failures, nursery.cancel_scope, self._send(process, stdin, chunks))
            if failures:
                raise failures[0]
            result = await _aio(process.wait)
        except _NETWORK_ERRORS as exc:
            await self._drop()
            raise self._lost(what, exc) from None
        finally:
            # A cancelled bridged call leaves the remote channel open: close it here.
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                process.close()
                with contextlib.suppress(*_NETWORK_ERRORS):
                    await _aio(process.wait_closed)
        signal = result.exit_signal[0] if result.exit_signal is not None else None
        await self._check_exit(what, result.exit_status, signal, b"".join(errors))
        return b"".join(output)

    async def _check_exit(
        self, what: str, status: int | None, signal: str | None, errors: bytes
    ) -> None:
        """Raise for a remote command that did not exit with 0: killed, failed (with the
        tail of its stderr), or gone with no status (the connection was lost)."""
        if status is None or status < 0:
            if signal is not None:
                raise ExecError(f"{what} on {self.location} was killed ({signal})")
            await self._drop()
            raise self._lost(what, None)
        if status != 0:
            detail = errors.decode(errors="replace").strip()[-800:]
            raise ExecError(
                f"{what} failed on {self.location} (exit code {status})"
                + (f": {detail}" if detail else "")
            )

    async def _send(
        self,
        process: "asyncssh.SSHClientProcess[bytes]",
        stdin: bytes,
        chunks: Iterator[bytes] | None,
    ) -> None:
        try:
            await _aio(_feed, process, stdin, chunks is None)
            if chunks is not None:
                try:
                    # The end is the iterator's end: an empty chunk (a file whose size is a
                    # multiple of the tar block has no padding) is not the end.
                    while (chunk := await trio.to_thread.run_sync(next, chunks, None)) is not None:
                        if chunk:
                            await _aio(_feed, process, chunk, False)
                finally:
                    close = getattr(chunks, "close", None)
                    if close is not None:
                        close()
                await _aio(_feed, process, b"", True)
        except BrokenPipeError:
            # The command stopped reading (it failed): its exit status and stderr tell why.
            return

    @staticmethod
    async def _collect(stream: "asyncssh.SSHReader[bytes]", into: list[bytes]) -> None:
        while data := await _aio(_read_chunk, stream, _CHUNK):
            into.append(data)

    def _lost(self, what: str, exc: BaseException | None) -> TargetUnreachable:
        reason = f": {exc}" if exc is not None and str(exc) else ""
        return TargetUnreachable(
            f"lost the connection to {self.location} while {what}{reason}", host=self._label
        )

    def _remote(self, rel: str, what: str) -> str:
        check_rel_path(rel, name=what)
        return rel if self.workdir == "." else f"{self.workdir}/{rel}"

    async def _ctl(self, *args: str, what: str) -> bytes:
        command = "sh -s --" + (" " + build_command(args, name=what) if args else "")
        return await self._exec(command, what=what, stdin=script(CONTROL_SCRIPT).encode())

    async def run_script(self, text: str, args: Sequence[str], *, what: str) -> bytes:
        """Run the POSIX script ``text`` as ``sh -s -- ARGS`` (the script on stdin, every
        argument quoted) in the remote home directory; return its stdout. A short
        question, not a job: it ends with the connection."""
        command = "sh -s --" + (" " + build_command(args, name=what) if args else "")
        return await self._exec(command, what=what, stdin=text.encode())

    # -- the executor interface ------------------------------------------------------

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        """Send ``local_dir`` as a tar stream into ``remote_dir`` (created if needed)."""
        target = self._remote(remote_dir, "the run directory")
        entries = await trio.to_thread.run_sync(upload_entries, local_dir)
        await self._untar(target, entries, what=f"uploading {local_dir}")

    async def _untar(self, target: str, entries: Sequence[Entry], *, what: str) -> None:
        where = quote(target, name="the run directory")
        command = f"mkdir -p {where} && cd {where} && tar -x -o -f -"
        await self._exec(command, what=what, chunks=tar_chunks(entries))

    async def spawn(
        self,
        remote_dir: str,
        commands: Sequence[Sequence[str]],
        *,
        env: Mapping[str, str],
        secrets: Mapping[str, str],
        container: str | None = None,
    ) -> JobHandle:
        """Start the job detached (``setsid``) in ``remote_dir``; secrets go on stdin."""
        target = self._remote(remote_dir, "the run directory")
        files = await job_files(
            self,
            remote_dir,
            commands,
            env=env,
            secrets=secrets,
            runtime=self.runtime,
            container=container,
            where=f"{target} on {self.location}",
        )
        entries = [Entry(name, text.encode()) for name, text in files.items()]
        await self._untar(target, entries, what="writing the job's files")
        where = quote(target, name="the run directory")
        out = await self._exec(
            f"cd {where} && sh {JOB_SCRIPT} start",
            what="starting the job",
            stdin=secrets_input(secrets),
        )
        pid = parse_pid(out.decode(errors="replace"), where=self.location)
        return JobHandle(pid, container)

    async def read_file(self, path: str, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes of ``path`` from ``offset``; ``b""`` if it is missing."""
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        target = self._remote(path, "the file")
        return await self._ctl("read", target, str(offset), str(limit), what=f"reading {path}")

    async def file_size(self, path: str) -> int:
        """The size of ``path`` in bytes; 0 if it is missing."""
        target = self._remote(path, "the file")
        out = await self._ctl("size", target, what=f"reading the size of {path}")
        return parse_size(out, where=self.location)

    async def status(self, remote_dir: str) -> JobState:
        """The job's state from its markers."""
        target = self._remote(remote_dir, "the run directory")
        out = await self._ctl("status", target, what="reading the job's status")
        return parse_state(out.decode(errors="replace"), where=self.location)

    async def cancel(self, remote_dir: str) -> JobState:
        """Stop the job; a job that already ended is left alone (its state returned)."""
        target = self._remote(remote_dir, "the run directory")
        out = await self._ctl("cancel", target, str(self._grace), what="cancelling the job")
        return parse_state(out.decode(errors="replace"), where=self.location)

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        """SHA-256 of the result files under ``paths``, computed on the host."""
        target = self._remote(remote_dir, "the run directory")
        for rel in paths:
            check_rel_path(rel, name="a result path")
        out = await self._ctl("manifest", target, *paths, what="computing the manifest")
        return parse_sha256sum(out.decode(errors="surrogateescape"), where=self.location)

    async def download(
        self, remote_dir: str, paths: Sequence[str], local_dir: Path
    ) -> dict[str, Arrived]:
        """Bring ``paths`` back by tar stream; each replaces its local copy once all arrived.

        The stream is extracted (and checked) by a worker thread as it arrives, into a
        staging directory, each file hashed as its bytes are written: the archive is never
        stored, no file is read twice, and nothing is replaced unless the whole stream was
        good. Returns what arrived of each file (its SHA-256 and size).
        """
        target = self._remote(remote_dir, "the run directory")
        for rel in paths:
            check_rel_path(rel, name="a result path")
        await trio.Path(local_dir).mkdir(parents=True, exist_ok=True)
        staging = await trio.to_thread.run_sync(fresh_staging, local_dir)
        try:
            unpacked = staging / "files"
            arrived = await self._pack_into(target, list(paths), unpacked)
            await trio.to_thread.run_sync(replace_paths, unpacked, local_dir, list(paths))
            return arrived
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(remove, staging)

    async def _pack_into(self, target: str, paths: list[str], unpacked: Path) -> dict[str, Arrived]:
        """Run ``ctl.sh pack`` and extract its stream into ``unpacked`` as it comes."""
        what = "downloading results"
        command = "sh -s -- " + build_command(("pack", target, *paths), name=what)
        stdin = script(CONTROL_SCRIPT).encode()
        return await self._unpack_output(command, stdin, paths, unpacked, what=what)

    async def _unpack_output(
        self, command: str, stdin: bytes, paths: list[str], unpacked: Path, *, what: str
    ) -> dict[str, Arrived]:
        """Run ``command`` (``stdin`` fed to it) and hand its output, a tar stream, in
        chunks to a worker thread that extracts and hashes it as it comes (`Unpacker`), so
        the transfer and the hashing each have a core.

        The output goes from asyncssh straight to the worker (`_Download`): no coroutine
        wakes per packet and no chunk crosses into trio. A refused entry stops the transfer
        at once; a failed command or a lost connection raises as `_exec` does.
        """
        conn = await self._connection()
        download = _Download(stdin)
        try:
            channel, _ = await _aio(
                conn.create_session,
                lambda: download,
                command,
                encoding=None,
                window=_WINDOW,
                max_pktsize=_PACKET,
            )
        except _NETWORK_ERRORS as exc:
            await self._drop()
            raise self._lost(what, exc) from None
        arrived: dict[str, Arrived] = {}
        refused: list[Exception] = []

        def extract() -> bool:
            """Extract the whole stream; whether it was refused before its end."""
            unpacker = Unpacker(unpacked, paths)
            try:
                unpacked.mkdir()
                while (parts := download.take()) is not None:
                    unpacker.feed(b"".join(parts))
            except Exception as exc:  # handed over to the trio side
                refused.append(exc)
                return True
            else:
                # Cut short or not: the command's exit tells why first, if it failed.
                try:
                    arrived.update(unpacker.finish())
                except Exception as exc:
                    refused.append(exc)
                return False
            finally:
                unpacker.close()

        async def worker(transfer: trio.CancelScope) -> None:
            if await trio.to_thread.run_sync(extract):
                transfer.cancel()  # the rest of the stream is of no use

        transfer = trio.CancelScope()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker, transfer)
                try:
                    with transfer:
                        await _aio(channel.wait_closed)
                finally:
                    download.end()  # the worker stops waiting for more
        finally:
            # A cancelled bridged call leaves the remote channel open: close it here.
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                channel.close()
                with contextlib.suppress(*_NETWORK_ERRORS):
                    await _aio(channel.wait_closed)
        if download.lost is not None:
            await self._drop()
            raise self._lost(what, download.lost)
        if not transfer.cancelled_caught:
            signal = channel.get_exit_signal()
            await self._check_exit(
                what,
                channel.get_exit_status(),
                signal[0] if signal is not None else None,
                bytes(download.errors),
            )
        if refused:
            raise refused[0]
        return arrived

    async def touch(self, path: str) -> None:
        """Create ``path`` (and its parents) on the host."""
        target = self._remote(path, "the marker")
        await self._ctl("touch", target, what=f"marking {path}")


async def _guard(
    failures: list[BaseException], scope: trio.CancelScope, work: Awaitable[None]
) -> None:
    """Await ``work``; on a network error, record it and cancel ``scope``."""
    try:
        await work
    except _NETWORK_ERRORS as exc:
        failures.append(exc)
        scope.cancel()


def _ciphers(configured: Sequence[bytes] | None) -> list[str]:
    """The ciphers to offer: those of the user's ``Ciphers`` setting as they are, else
    asyncssh's defaults with AES-GCM first. In Python, asyncssh decrypts AES-GCM (one call
    into OpenSSL per packet, using the CPU's AES instructions) much faster than
    ChaCha20-Poly1305, its own first choice: it bounds how fast results come home."""
    from asyncssh.encryption import get_default_encryption_algs

    defaults = [alg.decode("ascii") for alg in get_default_encryption_algs()]
    if configured is not None:
        chosen = [alg.decode("ascii") for alg in configured]
        if chosen != defaults:
            return chosen
    gcm = [alg for alg in _FAST_CIPHERS if alg in defaults]
    return gcm + [alg for alg in defaults if alg not in gcm]


def _known_hosts_files(configured: object, *, explicit: bool) -> list[str]:
    """The known hosts files that exist among ``configured`` (asyncssh's resolved option:
    a path, a list of paths, ``[]`` for the default, or ``None`` for "none"), plus the
    system-wide file as OpenSSH reads it, unless the caller named one file explicitly."""
    if isinstance(configured, (str, Path)):
        names = [str(configured)]
    elif isinstance(configured, list) and configured:
        names = [str(name) for name in configured]
    else:
        names = ["~/.ssh/known_hosts"]
    if not explicit:
        names.append(_GLOBAL_KNOWN_HOSTS)
    paths = [Path(name).expanduser() for name in dict.fromkeys(names)]
    return [str(path) for path in paths if path.is_file()]


def _conforms(executor: SshExecutor) -> Executor:
    """(For the type checker) an `SshExecutor` is an `Executor`."""
    return executor


class _Download(asyncssh.SSHClientSession[bytes]):
    """(asyncio side) The channel of a download: its stdin written at the start, its stdout
    gathered into chunks of about `_CHUNK` bytes (or what came in `_CHUNK_WAIT`) taken by
    the extracting worker thread (`take`), the tail of its stderr kept.

    Past `_QUEUED_CHUNKS` chunks not yet taken, the channel stops reading, so asyncssh
    holds at most a flow control window more: the memory a download uses is fixed.
    """

    def __init__(self, stdin: bytes) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stdin = stdin
        self._channel: asyncssh.SSHClientChannel[bytes] | None = None
        self._parts: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self._chunks: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
        self._waiting = 0  # chunks handed over and not yet taken
        self._paused = False
        self._ended = False
        self.errors = bytearray()
        self.lost: Exception | None = None

    # -- asyncssh's calls (on the event loop) ---------------------------------------

    def connection_made(self, chan: "asyncssh.SSHClientChannel[bytes]") -> None:
        self._loop = asyncio.get_running_loop()
        self._channel = chan

    def session_started(self) -> None:
        assert self._channel is not None
        self._channel.write(self._stdin)
        self._channel.write_eof()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            self.errors += data
            del self.errors[:-_ERRORS_KEPT]
            return
        self._parts.append(data)
        self._size += len(data)
        if self._size >= _CHUNK:
            self._hand_over()
        elif self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(_CHUNK_WAIT, self._hand_over)

    def eof_received(self) -> bool:
        self.end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.lost = exc
        self.end()

    # -- the trio side's and the worker's calls ---------------------------------------

    def end(self) -> None:
        """(event loop) No more output: what was gathered goes, then the end."""
        if self._ended:
            return
        if self._parts:
            self._hand_over()
        self._ended = True
        self._chunks.put(None)

    def take(self) -> list[bytes] | None:
        """(worker thread) The next chunk's pieces, in order; ``None`` at the end."""
        parts = self._chunks.get()
        if parts is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._taken)
        return parts

    def _hand_over(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ended or not self._parts:
            return  # (the timer, after the end)
        self._chunks.put(self._parts)
        self._parts, self._size = [], 0
        self._waiting += 1
        if self._waiting >= _QUEUED_CHUNKS and not self._paused and self._channel is not None:
            self._paused = True
            self._channel.pause_reading()

    def _taken(self) -> None:
        self._waiting -= 1
        if self._ended or self._channel is None:
            return
        if self._paused and self._waiting < _QUEUED_CHUNKS:
            self._paused = False
            self._channel.resume_reading()
