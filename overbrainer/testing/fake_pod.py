"""Stand-ins for a pod's machine.

- :func:`fake_pods`: brings the fake Runpod API's pods to life. When a pod is first seen
  RUNNING (the fake's ``on_running`` hook), it runs the pod's real startup: the packaged
  container command (``pod_args``) or, for a create without our scripts in its env, the
  packaged ``bootstrap.sh`` directly, against a temporary directory that stands for the
  pod's filesystem (``OVERBRAINER_ROOT``), with ``HOME`` at ``<pod>/root``. The bootstrap
  installs the create call's host key and client key there, writes ``.pod/job.env`` and
  ``exec``s the REAL ``watchdog.sh``, which talks to the fake API over loopback with the
  pod's own scoped key. In place of OpenSSH's ``sshd``, a REAL asyncssh SSH server on
  127.0.0.1 (port 0) serves the pod with the host key and authorized key the bootstrap
  installed; each exec request runs ``sh -c <command>`` in the pod's home with
  stdin/stdout/stderr wired and its exit status returned. The pod's ``ssh.direct`` then
  points at that server. When the pod is stopped or deleted (``on_stopped`` /
  ``on_deleted``), the watchdog, the SSH server and every process left in the pod's
  directory are stopped, as a container's end would.

asyncssh runs on asyncio while the fake API and the tests run under trio: the SSH servers
run in one asyncio event loop on its own thread (per :func:`fake_pods`), reached through
``asyncio.run_coroutine_threadsafe`` from ``trio.to_thread``. That keeps the two event
loops fully apart (no trio-asyncio in the fake), so the fake pod behaves the same whether
or not the code under test uses trio-asyncio. Real sockets and processes: real clock only
(never trio's ``MockClock``); the fake API must be served on loopback
(``serve_loopback``) so the watchdog process can reach it.

Paths: the pod's filesystem root is ``<workspace>/<pod id>``; its home is
``<workspace>/<pod id>/root`` and SSH sessions start there, so home-relative paths just
work. Absolute pod paths are moved inside the pod's directory: the run directory the
create call names (``OVERBRAINER_RUN_DIR=/workspace/overbrainer/runs/<run>`` becomes
``<workspace>/<pod id>/workspace/overbrainer/runs/<run>`` for the bootstrap and the
watchdog; the job's ``HF_HOME`` the create call names likewise), and, in the command line
of every SSH exec request, any path under the ``mapped`` prefixes (default
``/workspace``) — not in what a command reads on its stdin.
:meth:`FakePods.path` maps a pod path to the local one.

Network volumes: a pod whose create mounts one (``mounts.network``) finds, at the mount's
path (``/workspace``), the volume's directory ``<workspace>/network-volumes/<volume id>``
(a symbolic link to it), shared by every pod that mounts it: what one pod's job wrote
there, the next pod on the volume sees.

Clusters: each member of a fake cluster is a pod of the fake API, so it comes to life as
any pod does, with its own SSH server. Its container sees Runpod's cluster variables
(``PRIMARY_ADDR``, ``NODE_RANK``, ``NUM_NODES``, ``NUM_TRAINERS``, ``WORLD_SIZE``...), its
addresses on loopback: every node's (``PRIMARY_ADDR``, ``NODE_ADDR``) is ``127.0.0.1``
and ``PRIMARY_PORT`` a free port, the same for every member of a cluster, where rank 0
can listen and the others reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import subprocess
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from overbrainer.runpod.pod_scripts import (
    BOOTSTRAP,
    ENV_BOOTSTRAP,
    ENV_HF_HOME,
    ENV_RUN_DIR,
    ENV_WATCHDOG,
    WATCHDOG,
    pod_args,
    script_text,
)
from overbrainer.testing.sshd import free_port

_T = TypeVar("_T")

# Stands for OpenSSH's sshd in the bootstrap: checks nothing, "starts" by writing its
# PidFile. The pod's SSH server is the asyncssh one the fake pod starts next.
_SSHD_STUB = """#!/bin/sh
for arg; do config=$arg; done
[ "$1" = -t ] && exit 0
pid_file=$(sed -n 's/^PidFile //p' "$config")
echo $$ > "$pid_file"
"""


# --- the asyncssh server of a fake pod ------------------------------------------------


class _AsyncioThread:
    """One asyncio event loop on its own daemon thread."""

    def __init__(self) -> None:
        # The loop is made inside its thread: trio-asyncio, once imported, refuses to make
        # an asyncio loop from a thread that trio runs in.
        made = threading.Event()
        loops: list[asyncio.AbstractEventLoop] = []

        def serve() -> None:
            loop = asyncio.SelectorEventLoop()
            asyncio.set_event_loop(loop)
            loops.append(loop)
            made.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fake-pod-asyncio", daemon=True)
        self._thread.start()
        made.wait()
        self.loop = loops[0]

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float = 30.0) -> _T:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        """End the loop as ``asyncio.run`` ends one: every task still running (a session
        whose client went away) cancelled and run to its end, so that it kills and reaps
        its command and closes its pipes. A transport left open when the loop closes would
        call into the closed loop when collected ("Event loop is closed", raised where
        nothing can catch it, failing whichever test runs then)."""

        async def drain() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # The pipes' and processes' last callbacks (scheduled as they closed).
            for _ in range(3):
                await asyncio.sleep(0.01)
            await self.loop.shutdown_asyncgens()

        with contextlib.suppress(Exception):
            self.run(drain(), timeout=20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


async def _pump_in(source: Any, sink: asyncio.StreamWriter) -> None:
    """SSH channel stdin → the command's stdin, then EOF."""
    try:
        while True:
            data = await source.read(65536)
            if not data:
                break
            sink.write(data)
            await sink.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.close()


class _PipeToChannel(asyncio.Protocol):
    """One pipe of the command (its stdout or stderr) → one SSH channel stream. The
    session owns the pipe's transport and closes it itself: a pipe left to asyncio's
    subprocess transport stays open while anything the command started still holds its
    other end, and one still open when the loop closes fails whichever test runs then."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        with contextlib.suppress(Exception):  # the client may be gone: its output with it
            self.sink.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


async def _read_pipe(fd: int, sink: Any) -> tuple[asyncio.BaseTransport, _PipeToChannel]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_read_pipe(
        lambda: _PipeToChannel(sink), os.fdopen(fd, "rb", buffering=0)
    )
    return transport, protocol


def _make_server_class(authorized_keys: str, user: str, connections: set[Any]) -> type:
    import asyncssh

    keys = asyncssh.import_authorized_keys(authorized_keys)

    class _PodSshServer(asyncssh.SSHServer):
        """Lets in ``user`` with the pod's authorized keys only; tracks its connections."""

        def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
            self._conn = conn
            connections.add(conn)

        def connection_lost(self, exc: Exception | None) -> None:
            connections.discard(self._conn)

        def begin_auth(self, username: str) -> bool:
            if username == user:
                self._conn.set_authorized_keys(keys)
            return True

        def password_auth_supported(self) -> bool:
            return False

    return _PodSshServer


@dataclass
class _SshServer:
    acceptor: Any
    connections: set[Any]
    port: int


def map_pod_paths(command: str, root: Path, prefixes: Sequence[str]) -> str:
    """``command`` with each absolute pod path under one of ``prefixes`` (``/workspace``)
    moved into the pod's directory ``root``: the machine's own ``/workspace`` is never
    touched, and a client addressing the pod by absolute paths finds its files."""
    for prefix in prefixes:
        pattern = r"(?<![\w./~-])" + re.escape(prefix.rstrip("/")) + r"(?=/|$|[\s'\";&|)])"
        # Escaped for re.sub's replacement syntax, where a backslash is special.
        moved = (str(root) + prefix.rstrip("/")).replace("\\", "\\\\")
        command = re.sub(pattern, moved, command)
    return command


async def _start_ssh_server(
    root: Path,
    home: Path,
    host_key: str,
    authorized_keys: str,
    env: Mapping[str, str],
    prefixes: Sequence[str],
) -> _SshServer:
    import asyncssh

    connections: set[Any] = set()

    async def run_command(process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if command is not None:
            command = map_pod_paths(command, root, prefixes)
        argv = ["sh", "-c", command] if command is not None else ["sh"]
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            child = await asyncio.create_subprocess_exec(
                *argv,
                cwd=home,
                env=dict(env),
                stdin=asyncio.subprocess.PIPE,
                stdout=out_write,
                stderr=err_write,
                start_new_session=True,  # its own group: what it started ends with it
            )
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        assert child.stdin is not None
        feeding = asyncio.ensure_future(_pump_in(process.stdin, child.stdin))
        pipes = [
            await _read_pipe(out_read, process.stdout),
            await _read_pipe(err_read, process.stderr),
        ]
        ended = [protocol.ended for _, protocol in pipes]
        try:
            await asyncio.gather(*ended)
            status = await child.wait()
        except BaseException:
            # The client went away: like sshd, leave nothing of the session running (a
            # download's `tar` under its `sh` too).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
            raise
        finally:
            for transport, _ in pipes:
                transport.close()
            feeding.cancel()
            with contextlib.suppress(BaseException):
                await feeding
        process.exit(status)

    server_class = _make_server_class(authorized_keys, env.get("USER", "root"), connections)
    acceptor = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_factory=server_class,
        server_host_keys=[asyncssh.import_private_key(host_key)],
        process_factory=run_command,
        encoding=None,
        allow_scp=False,
        agent_forwarding=False,
        x11_forwarding=False,
        config=None,
    )
    return _SshServer(acceptor, connections, acceptor.get_port())


async def _stop_ssh_server(server: _SshServer) -> None:
    server.acceptor.close()
    connections = list(server.connections)
    for conn in connections:
        conn.close()
    await server.acceptor.wait_closed()
    for conn in connections:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.wait_closed(), 5)


# --- the fake pods ---------------------------------------------------------------------


@dataclass
class RunningPod:
    """One boot of a fake pod."""

    pod_id: str
    root: Path
    home: Path
    run_dir: Path
    container: trio.Process
    container_log: Path
    ssh: _SshServer | None = None
    ssh_port: int | None = None
    bootstrap_failed: str | None = None
    stopped: bool = False
    done: trio.Event = field(default_factory=trio.Event)
    # Set once stopping it is over: its SSH server closed, every process in it ended.
    gone: trio.Event = field(default_factory=trio.Event)
    # The environment its container started with.
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


class FakePods:
    """The running fake pods of one :class:`~overbrainer.testing.runpod_api.FakeRunpod`."""

    def __init__(
        self,
        fake: Any,
        base_url: str,
        workspace: Path,
        nursery: trio.Nursery,
        *,
        shell: Sequence[str] = ("sh",),
        overrides: Mapping[str, str] | None = None,
        user: str = "root",
        mapped: Sequence[str] = ("/workspace",),
    ) -> None:
        self.fake = fake
        self.mapped = tuple(mapped)
        self.base_url = base_url
        self.workspace = workspace
        self.shell = tuple(shell)
        self.overrides = dict(overrides or {})
        self.user = user
        self.boots: dict[str, list[RunningPod]] = {}
        # The PRIMARY_PORT of each cluster on loopback (chosen as its first member boots).
        self.cluster_ports: dict[str, int] = {}
        self._nursery = nursery
        self._asyncio = _AsyncioThread()

    # --- what tests look at ---

    def current(self, pod_id: str) -> RunningPod:
        """The pod's latest boot."""
        return self.boots[pod_id][-1]

    def root(self, pod_id: str) -> Path:
        """The directory standing for the pod's filesystem root."""
        return self.workspace / pod_id

    def home(self, pod_id: str) -> Path:
        """The pod's home (``/root``), where SSH sessions start."""
        return self.root(pod_id) / "root"

    def path(self, pod_id: str, pod_path: str) -> Path:
        """The local path of ``pod_path`` on the pod (absolute, or relative to its home)."""
        if pod_path.startswith("/"):
            return self.root(pod_id) / pod_path.lstrip("/")
        return self.home(pod_id) / pod_path

    def volume_dir(self, volume_id: str) -> Path:
        """The directory standing for a network volume (every pod that mounts it)."""
        return self.workspace / "network-volumes" / volume_id

    def _mount_volumes(self, pod: Any, root: Path) -> None:
        """Put each network volume the pod's create mounts at its mount path."""
        mounts = pod.body.get("mounts") or {}
        for mount in mounts.get("network", []):
            shared = self.volume_dir(str(mount["volumeId"]))
            shared.mkdir(parents=True, exist_ok=True)
            where = root / str(mount["path"]).strip("/")
            if where.is_symlink():
                continue  # mounted at an earlier boot
            where.parent.mkdir(parents=True, exist_ok=True)
            where.symlink_to(shared, target_is_directory=True)

    def container_log(self, pod_id: str) -> str:
        """What the pod's container printed so far (bootstrap and watchdog), every boot."""
        return "".join(boot.container_log.read_text() for boot in self.boots.get(pod_id, []))

    # --- the fake API's hooks ---

    async def on_running(self, pod: Any) -> None:
        """Start the container (bootstrap → watchdog) and the pod's SSH server; Runpod
        shows the endpoint once the server listens.

        A restarted pod starts once its previous container is all gone, as a container
        restart does: the old boot's end kills whatever runs in the pod's directory, which
        would otherwise take the new boot's bootstrap with it (the endpoint then refused
        every connection)."""
        for previous in self.boots.get(pod.id, []):
            if previous.stopped:
                with trio.move_on_after(30):
                    await previous.gone.wait()
        root = self.root(pod.id)
        home = self.home(pod.id)
        home.mkdir(parents=True, exist_ok=True)
        self._mount_volumes(pod, root)
        scripts = root / "opt" / "overbrainer"
        scripts.mkdir(parents=True, exist_ok=True)
        stub = scripts / "fake-sshd"
        stub.write_text(_SSHD_STUB)
        stub.chmod(0o755)
        pid_file = root / "run" / "overbrainer-sshd.pid"
        pid_file.unlink(missing_ok=True)

        created = self.fake.pod_runtime_env(pod.id)
        if getattr(pod, "cluster_id", None) is not None:
            created.update(self._loopback_cluster_env(pod.cluster_id))
        run_dir_value = created.get(ENV_RUN_DIR, "")
        if run_dir_value.startswith("/"):
            # Inside the pod's directory, never the machine's own /workspace or /root.
            created[ENV_RUN_DIR] = str(self.path(pod.id, run_dir_value))
        if created.get(ENV_HF_HOME, "").startswith("/"):
            # A network volume's cache: through the pod's mount of it.
            created[ENV_HF_HOME] = str(self.path(pod.id, created[ENV_HF_HOME]))
        # Where the bootstrap records a failure when it has no usable run directory.
        run_dir = (
            self.path(pod.id, run_dir_value) if run_dir_value else root / "tmp" / "overbrainer-run"
        )
        env = {
            **created,
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "OVERBRAINER_API_BASE": self.base_url,
            "OVERBRAINER_ROOT": str(root),
            "OVERBRAINER_SSHD": str(stub),
            "OVERBRAINER_SSH_USER": self.user,
            "OVERBRAINER_SHELL": " ".join(self.shell),
            "TMPDIR": str(root),
            **self.overrides,
        }
        if ENV_BOOTSTRAP in created and ENV_WATCHDOG in created:
            # The real container command, decoding the scripts the create call carried.
            argv = shlex.split(pod_args(str(scripts)))
        else:
            (scripts / BOOTSTRAP).write_text(script_text(BOOTSTRAP))
            (scripts / WATCHDOG).write_text(script_text(WATCHDOG))
            argv = [*self.shell, str(scripts / BOOTSTRAP)]
        log = root / f"container-{len(self.boots.get(pod.id, []))}.log"
        with log.open("wb") as sink:
            container = await trio.lowlevel.open_process(
                argv,
                env=env,
                cwd=str(home),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        boot = RunningPod(pod.id, root, home, run_dir, container, log, env=env)
        self.boots.setdefault(pod.id, []).append(boot)
        self._nursery.start_soon(self._reap, boot)

        # The bootstrap's own steps take milliseconds; then it starts "sshd" or fails.
        failed_marker = run_dir / ".pod" / "bootstrap_failed"
        with trio.move_on_after(20):
            while not pid_file.exists() and container.returncode is None:
                if failed_marker.exists():
                    break
                await trio.sleep(0.01)
        if failed_marker.exists():
            boot.bootstrap_failed = failed_marker.read_text().strip()
        if not pid_file.exists():
            # sshd never came up: the endpoint refuses connections.
            self.fake.set_ssh_endpoint(pod.id, "127.0.0.1", free_port(), self.user)
            return
        host_key = (root / "etc" / "ssh" / "overbrainer_host_ed25519_key").read_text()
        authorized = (home / ".ssh" / "authorized_keys").read_text()
        session_env = {
            "HOME": str(home),
            "USER": self.user,
            "LOGNAME": self.user,
            "SHELL": "/bin/sh",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
        }
        boot.ssh = await trio.to_thread.run_sync(
            self._asyncio.run,
            _start_ssh_server(root, home, host_key, authorized, session_env, self.mapped),
        )
        boot.ssh_port = boot.ssh.port
        self.fake.set_ssh_endpoint(pod.id, "127.0.0.1", boot.ssh.port, self.user)

    async def on_stopped(self, pod: Any) -> None:
        """A stopped container: everything in it ends."""
        self._stop_soon(pod.id)

    async def on_deleted(self, pod: Any) -> None:
        """A deleted pod: everything in it ends."""
        self._stop_soon(pod.id)

    def _loopback_cluster_env(self, cluster_id: str) -> dict[str, str]:
        """A member's cluster addresses on loopback: every node at 127.0.0.1, the primary
        listening on one free port per cluster."""
        port = str(self.cluster_ports.setdefault(cluster_id, free_port()))
        return {
            "PRIMARY_ADDR": "127.0.0.1",
            "MASTER_ADDR": "127.0.0.1",
            "NODE_ADDR": "127.0.0.1",
            "PRIMARY_PORT": port,
            "MASTER_PORT": port,
            "HOST_NODE_ADDR": f"127.0.0.1:{port}",
        }

    # --- what the campaigns do to a pod ---

    async def move_ssh_server(self, pod_id: str) -> None:
        """The pod's SSH server moves to a new port (its jobs keep running): Runpod shows
        the new endpoint, and the old port refuses connections."""
        boot = self.current(pod_id)
        old = boot.ssh
        if old is None:
            return
        host_key = (boot.root / "etc" / "ssh" / "overbrainer_host_ed25519_key").read_text()
        authorized = (boot.home / ".ssh" / "authorized_keys").read_text()
        env = {
            "HOME": str(boot.home),
            "USER": self.user,
            "LOGNAME": self.user,
            "SHELL": "/bin/sh",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
        }
        new = await trio.to_thread.run_sync(
            self._asyncio.run,
            _start_ssh_server(boot.root, boot.home, host_key, authorized, env, self.mapped),
        )
        boot.ssh, boot.ssh_port = new, new.port
        self.fake.set_ssh_endpoint(pod_id, "127.0.0.1", new.port, self.user)
        await trio.to_thread.run_sync(self._asyncio.run, _stop_ssh_server(old))

    async def block_ssh(self, pod_id: str) -> None:
        """The pod's SSH server stops answering (its jobs keep running, Runpod still shows
        it RUNNING at the same endpoint): a pod nothing can reach."""
        boot = self.current(pod_id)
        if boot.ssh is not None:
            await trio.to_thread.run_sync(self._asyncio.run, _stop_ssh_server(boot.ssh))
            boot.ssh = None

    # --- internals ---

    def _stop_soon(self, pod_id: str) -> None:
        # Hooks run inside the fake's request handling (often the watchdog's own DELETE):
        # stopping waits for nothing here.
        for boot in self.boots.get(pod_id, []):
            if not boot.stopped:
                boot.stopped = True
                self._nursery.start_soon(self._stop, boot)

    async def _stop(self, boot: RunningPod, grace: float = 0.3) -> None:
        try:
            if boot.ssh is not None:
                await trio.to_thread.run_sync(self._asyncio.run, _stop_ssh_server(boot.ssh))
            # A moment for the watchdog to log what it saw, as a container's stop allows.
            with trio.move_on_after(grace):
                await boot.done.wait()
            if boot.container.returncode is None:
                boot.container.terminate()
                with trio.move_on_after(5):
                    await boot.done.wait()
                if boot.container.returncode is None:
                    boot.container.kill()
            # The run's directory may lie on a network volume, outside the pod's root.
            _kill_processes_in(boot.root, boot.run_dir)
        finally:
            boot.gone.set()

    async def _reap(self, boot: RunningPod) -> None:
        try:
            await boot.container.wait()
        finally:
            boot.done.set()

    async def aclose(self) -> None:
        """Stop every pod, then the SSH servers' event loop — only once every stop (those
        begun earlier by a delete, and these) is over: a stop still closing its SSH server
        on a loop closed under it failed the test that was ending ("Event loop is
        closed")."""
        for pod_id in list(self.boots):
            self._stop_soon(pod_id)
        with trio.CancelScope(shield=True):
            for boots in self.boots.values():
                for boot in boots:
                    if boot.container.returncode is None:
                        boot.container.kill()
                    with trio.move_on_after(30):
                        await boot.gone.wait()
            await trio.to_thread.run_sync(self._asyncio.close)


def _kill_processes_in(*roots: Path) -> None:
    """SIGKILL the processes the pod left behind (detached jobs): those whose working
    directory lies inside one of ``roots``. A container's end would take them with it."""
    me = os.getpid()
    places = [str(root.resolve()) for root in roots]
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if any(cwd == place or cwd.startswith(place + "/") for place in places):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


@contextlib.asynccontextmanager
async def fake_pods(
    fake: Any,
    base_url: str,
    workspace: Path,
    *,
    shell: Sequence[str] = ("sh",),
    overrides: Mapping[str, str] | None = None,
    user: str = "root",
    mapped: Sequence[str] = ("/workspace",),
) -> AsyncIterator[FakePods]:
    """Bring ``fake``'s pods to life while inside; ``base_url`` is its loopback URL.

    ``overrides`` replaces variables of the pods' environment (the watchdog's interval and
    graces, in seconds — fractions allowed); ``shell`` runs the watchdog; ``mapped`` are
    the absolute pod paths that SSH commands may name (see :func:`map_pod_paths`).
    """
    async with trio.open_nursery() as nursery:
        pods = FakePods(
            fake,
            base_url,
            workspace,
            nursery,
            shell=shell,
            overrides=overrides,
            user=user,
            mapped=mapped,
        )
        hooks = (fake.on_running, fake.on_stopped, fake.on_deleted, fake.container_output)
        fake.on_running, fake.on_stopped, fake.on_deleted = (
            pods.on_running,
            pods.on_stopped,
            pods.on_deleted,
        )
        # The pods' container output is their log's `container` source.
        fake.container_output = lambda pod: pods.container_log(pod.id)
        try:
            yield pods
        finally:
            fake.on_running, fake.on_stopped, fake.on_deleted, fake.container_output = hooks
            await pods.aclose()
            nursery.cancel_scope.cancel()


# --- command line: the fake API with living pods, for the demo --------------------------


async def _vanish_on_request(fake: Any, pods: FakePods, requests: Path) -> None:
    """Make a pod vanish once a file named after it appears in ``requests``, as Runpod
    losing it would: the API reads 404 for it, and everything in it ends. The file goes
    once that is done (an unknown pod's too). The hook of a test driving this process."""
    requests.mkdir(parents=True, exist_ok=True)
    while True:
        for request in sorted(requests.iterdir()):
            if request.name in fake.pods:
                fake.vanish(request.name)
                await pods.on_deleted(fake.pod(request.name))
            request.unlink()
        await trio.sleep(0.05)


async def _serve_until_signalled(args: Any) -> None:
    import tempfile

    from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback

    fake = FakeRunpod(
        provisioning_seconds=args.provisioning_seconds, starting_seconds=args.starting_seconds
    )
    key = fake.add_account(args.api_key, balance=args.balance)
    overrides = dict(item.split("=", 1) for item in args.env)
    workspace = Path(args.workspace or tempfile.mkdtemp(prefix="overbrainer-fake-pods-"))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with (
            serve_loopback(fake, args.host, args.port) as url,
            fake_pods(fake, url, workspace, overrides=overrides) as pods,
            trio.open_nursery() as nursery,
        ):
            if args.vanish_dir:
                nursery.start_soon(_vanish_on_request, fake, pods, Path(args.vanish_dir))
            if args.print_url:
                print(url, flush=True)
                print(key, flush=True)
            else:
                print(
                    f"fake Runpod API v2 at {url}; account API key: {key}; "
                    f"pods live under {workspace}",
                    flush=True,
                )
            async for _ in signals:
                nursery.cancel_scope.cancel()
                return


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the fake API on loopback with fake pods until SIGINT or SIGTERM."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m overbrainer.testing.fake_pod")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--print-url", action="store_true", help="print the URL, then the key")
    parser.add_argument("--api-key", default=None, help="the account key (default: random)")
    parser.add_argument("--balance", type=float, default=100.0)
    parser.add_argument("--provisioning-seconds", type=float, default=2.0)
    parser.add_argument("--starting-seconds", type=float, default=3.0)
    parser.add_argument("--workspace", default=None, help="where the pods' files go")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a pod environment variable (e.g. OVERBRAINER_INTERVAL=5)",
    )
    parser.add_argument(
        "--vanish-dir",
        default=None,
        metavar="DIR",
        help="a file named after a pod, put in DIR, makes that pod vanish (its processes end)",
    )
    args = parser.parse_args(argv)
    for item in args.env:
        if "=" not in item:
            parser.error(f"--env wants NAME=VALUE, got {item!r}")
    trio.run(_serve_until_signalled, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
