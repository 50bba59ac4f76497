"""A real OpenSSH ``sshd`` on loopback, with everything it needs in a directory.

- :func:`sshd`: generates an ed25519 host key and client key, writes an ``sshd_config``
  (public-key login only, the client key authorized, ``LogLevel DEBUG3`` to ``sshd.log``),
  starts ``/usr/sbin/sshd -D`` on a free 127.0.0.1 port and waits until it greets. It also
  writes, for the client side, a ``known_hosts`` holding the host key and an ``ssh_config``
  with the alias ``testbox`` (HostName, Port, User, IdentityFile), so nothing touches the
  real ``~/.ssh``. OpenSSH does not log the commands clients run, even at DEBUG3, so every
  command goes through a ``ForceCommand`` that appends it to ``commands.log`` and then runs
  it with ``/bin/sh -c`` (what the login shell would do): a test can check what crossed the
  wire. :func:`drop_connections` kills the processes serving its connections.
- :func:`openssh_server`: an ``sshd`` with a given host key, letting in one given key.
- :func:`write_sshd_config`: the one ``sshd_config`` both use (and any other server a test
  runs: pass its directory, keys and options).
- :func:`keygen`, :func:`known_hosts_line`, :func:`free_port`, :func:`wait_for_port`,
  :func:`wait_for_banner`: the small pieces around them.
"""

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

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


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def ensure_privsep_dir() -> None:
    """OpenSSH's sshd refuses to start without its privilege separation directory."""
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)


def write_command_recorder(directory: Path, commands_log: Path) -> Path:
    """A ``ForceCommand`` script that appends each command to ``commands_log``, then runs it
    with ``/bin/sh -c``; returns its path."""
    recorder = directory / "record-command"
    recorder.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$SSH_ORIGINAL_COMMAND\" >>{commands_log}\n"
        'exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
    )
    recorder.chmod(0o755)
    return recorder


def write_sshd_config(
    directory: Path,
    authorized_keys: Path,
    *,
    host_key: Path | None = None,
    port: int | None = None,
    commands_log: Path | None = None,
    set_env: Mapping[str, str] | None = None,
) -> Path:
    """Write ``directory/sshd_config`` for an sshd on 127.0.0.1 that lets in the keys of
    ``authorized_keys`` only (no password, no PAM), and return its path.

    ``host_key`` and ``port`` go into the file when given (otherwise they are left to the
    command line: ``-h``, ``-p``). ``commands_log``: every command a client runs is
    recorded there first (:func:`write_command_recorder`). ``set_env``: variables every
    session gets (``SetEnv``).
    """
    lines = [
        *([f"HostKey {host_key}"] if host_key is not None else []),
        "ListenAddress 127.0.0.1",
        *([f"Port {port}"] if port is not None else []),
        f"AuthorizedKeysFile {authorized_keys}",
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
    ]
    if set_env:
        lines.append("SetEnv " + " ".join(f"{name}={value}" for name, value in set_env.items()))
    if commands_log is not None:
        lines.append(f"ForceCommand {write_command_recorder(directory, commands_log)}")
    # DEBUG3 logs every command a client runs: tests check no secret is there.
    lines += ["LogLevel DEBUG3", ""]
    config = directory / "sshd_config"
    config.write_text("\n".join(lines))
    return config


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
    port = free_port()
    config = write_sshd_config(directory, authorized, commands_log=commands_log)
    ensure_privsep_dir()
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


@contextlib.contextmanager
def openssh_server(workdir: Path, host_private_key: str, authorized_key: str) -> Iterator[int]:
    """Run a real OpenSSH ``sshd`` on 127.0.0.1 with ``host_private_key`` as its only host
    key, letting in ``authorized_key`` only; yields its port."""
    workdir.mkdir(parents=True, exist_ok=True)
    host_key = workdir / "ssh_host_ed25519_key"
    fd = os.open(host_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(host_private_key)
    authorized = workdir / "authorized_keys"
    authorized.write_text(authorized_key.strip() + "\n")
    port = free_port()
    config = write_sshd_config(workdir, authorized, host_key=host_key, port=port)
    ensure_privsep_dir()
    log = (workdir / "sshd.log").open("wb")
    process = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL, stderr=log
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


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
