"""A real OpenSSH ``sshd`` on loopback for tests, with everything it needs in a temp dir.

``start_sshd(directory)`` generates an ed25519 host key and client key, writes an
``sshd_config`` (public-key login only, the client key authorized, ``LogLevel DEBUG3``
to ``sshd.log``), starts ``/usr/sbin/sshd -D`` on a free 127.0.0.1 port and waits until it
greets. It also writes, for the client side, a ``known_hosts`` holding the host key and an
``ssh_config`` with the alias ``testbox`` (HostName, Port, User, IdentityFile), so tests
never touch the real ``~/.ssh``.

OpenSSH does not log the commands clients run, even at DEBUG3, so every command goes
through a ``ForceCommand`` that appends it to ``commands.log`` and then runs it with
``/bin/sh -c`` (what the login shell would do): tests can check what crossed the wire.

Use the ``sshd`` context manager directly, or the pytest fixture ``sshd_server``
(session-scoped) by importing it into a ``conftest.py``.
"""

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
ALIAS = "testbox"


@dataclass(frozen=True)
class SshServer:
    """A running test sshd and the client-side files that reach it."""

    host: str
    port: int
    user: str
    host_key: Path  # private, the server's
    host_key_pub: str  # "ssh-ed25519 AAAA…"
    client_key: Path  # private, authorized for login
    client_key_pub: str
    known_hosts: Path  # "[127.0.0.1]:PORT ssh-ed25519 …"
    ssh_config: Path  # Host testbox → this server
    alias: str
    log: Path
    commands_log: Path
    directory: Path
    pid: int  # the listening sshd; each connection is served by a child of it

    def log_text(self) -> str:
        """Everything sshd logged so far, and every command clients ran."""
        commands = (
            self.commands_log.read_text(errors="replace") if self.commands_log.exists() else ""
        )
        return self.log.read_text(errors="replace") + commands


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keygen(path: Path, comment: str = "overbrainer-test") -> str:
    """Generate an ed25519 key pair at ``path`` (no passphrase); return the public line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path.with_name(path.name + ".pub").read_text().strip()


def wait_for_banner(port: int, timeout: float = 10.0) -> None:
    """Wait until an SSH server greets on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd did not answer on port {port}")
        time.sleep(0.02)


def known_hosts_line(port: int, public: str, host: str = "127.0.0.1") -> str:
    """A known_hosts line for ``public`` at ``host``:``port``."""
    key_type, key_b64 = public.split()[:2]
    return f"[{host}]:{port} {key_type} {key_b64}\n"


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


@contextlib.contextmanager
def sshd(directory: Path) -> Iterator[SshServer]:
    """Run a real OpenSSH sshd on loopback for the duration of the block."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "ssh_host_ed25519_key"
    client_key = directory / "id_ed25519"
    host_pub = keygen(host_key, "test-host")
    client_pub = keygen(client_key)
    authorized = directory / "authorized_keys"
    authorized.write_text(client_pub + "\n")
    log = directory / "sshd.log"
    commands_log = directory / "commands.log"
    recorder = directory / "record-command"
    recorder.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$SSH_ORIGINAL_COMMAND\" >>{commands_log}\n"
        'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    )
    recorder.chmod(0o755)
    config = directory / "sshd_config"
    port = free_port()
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"AuthorizedKeysFile {authorized}",
                # Tests run as root in containers; temp dirs are under world-writable /tmp.
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "PidFile none",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "X11Forwarding no",
                "PrintMotd no",
                "UseDNS no",
                "MaxSessions 50",
                "MaxStartups 50",
                f"ForceCommand {recorder}",
                # DEBUG3 logs every command a client runs: tests check no secret is there.
                "LogLevel DEBUG3",
                "",
            ]
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    user = _user()
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host_pub))
    ssh_config = directory / "ssh_config"
    ssh_config.write_text(
        f"Host {ALIAS}\n"
        "    HostName 127.0.0.1\n"
        f"    Port {port}\n"
        f"    User {user}\n"
        f"    IdentityFile {client_key}\n"
        "    IdentitiesOnly yes\n"
        "    IdentityAgent none\n"
    )
    process = subprocess.Popen(
        [SSHD, "-D", "-f", str(config), "-p", str(port), "-h", str(host_key), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        try:
            wait_for_banner(port)
        except TimeoutError:
            process.kill()
            _, err = process.communicate()
            detail = err.decode(errors="replace") + log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"sshd did not start: {detail}") from None
        yield SshServer(
            host="127.0.0.1",
            port=port,
            user=user,
            host_key=host_key,
            host_key_pub=host_pub,
            client_key=client_key,
            client_key_pub=client_pub,
            known_hosts=known_hosts,
            ssh_config=ssh_config,
            alias=ALIAS,
            log=log,
            commands_log=commands_log,
            directory=directory,
            pid=process.pid,
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def drop_connections(server: SshServer) -> int:
    """SIGKILL every process serving a connection to ``server`` (its listener's
    descendants), as if the network had dropped; return how many were killed."""
    import signal

    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    victims: list[int] = []
    todo = list(children.get(server.pid, []))
    while todo:
        pid = todo.pop()
        victims.append(pid)
        todo.extend(children.get(pid, []))
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(victims)


def require_sshd() -> None:
    """Fail (never skip) with a clear reason when OpenSSH's server is not installed."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        pytest.fail("these tests need OpenSSH's sshd and ssh-keygen (apt install openssh-server)")


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """One real sshd on loopback for the whole test session."""
    require_sshd()
    with sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server
