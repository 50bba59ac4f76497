"""Per-run SSH keys for a pod: the run's client key and the pod's pinned host key.

Both are ed25519 pairs generated in-process. The client key and the public halves live in
``runs/<id>/ssh/`` (directory 0700, private files 0600, created with those modes, never
widened later). The host key's private half is never written here: it exists only in memory,
for the create call's environment, which is how it reaches the pod. Its public half is what
overbrainer pins — the only part of the keys that may appear in events.
"""

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from overbrainer.errors import OverbrainerError
from overbrainer.events.ids import check_run_id

CLIENT_KEY = "id_ed25519"
CLIENT_PUBLIC_KEY = "id_ed25519.pub"
HOST_PUBLIC_KEY = "host_ed25519_key.pub"
CONFIG = "config"
KNOWN_HOSTS = "known_hosts"

# A host name, an IPv4 address or a bare IPv6 address; nothing a shell or ssh_config parses.
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
# What a double-quoted ssh_config argument holds as is: no quote, backslash or control.
_PLAIN_IN_QUOTES = re.compile(r'[^"\\\x00-\x1f\x7f]*')
_PUBLIC_KEY = re.compile(r"^ssh-ed25519 [A-Za-z0-9+/]+={0,2}( [A-Za-z0-9._@:+-]+)?$")


class UnsafeSshValue(OverbrainerError):
    """A host, user or port that cannot be written into an SSH config safely."""


@dataclass(frozen=True)
class RunKeys:
    """The SSH keys of one run's pod.

    ``host_private_key`` goes into the pod's create-call environment and nowhere else; it is
    kept out of ``repr`` so a log line or traceback never shows it.
    """

    ssh_dir: Path
    client_key_path: Path
    client_public_key: str
    host_public_key: str
    host_private_key: str = field(repr=False)


def generate_run_keys(run_id: str) -> tuple[str, str, str, str]:
    """New ed25519 pairs for run ``run_id``, in OpenSSH formats.

    Returns ``(client_private, client_public, host_private, host_public)``: the private keys
    as unencrypted OpenSSH PEM text, the public keys as one-line ``ssh-ed25519 …`` entries.
    """
    check_run_id(run_id)
    client_private, client_public = _ed25519_pair(f"overbrainer-{run_id}")
    host_private, host_public = _ed25519_pair(f"overbrainer-{run_id}-host")
    return client_private, client_public, host_private, host_public


def write_run_keys(ssh_dir: Path, run_id: str) -> RunKeys:
    """Generate the run's client and host keys and store what belongs on this machine.

    ``ssh_dir`` is ``runs/<id>/ssh``; it is created with mode 0700 (or brought to it).
    The client private key is written 0600 from its first byte; the public halves are
    written 0644. Writing again for the same run replaces the keys atomically.
    """
    check_run_id(run_id)
    client_private, client_public, host_private, host_public = generate_run_keys(run_id)
    _make_private_dir(ssh_dir)
    client_key_path = ssh_dir.absolute() / CLIENT_KEY
    _write_atomically(client_key_path, client_private, 0o600)
    _write_atomically(ssh_dir / CLIENT_PUBLIC_KEY, client_public + "\n", 0o644)
    _write_atomically(ssh_dir / HOST_PUBLIC_KEY, host_public + "\n", 0o644)
    return RunKeys(
        ssh_dir=ssh_dir,
        client_key_path=client_key_path,
        client_public_key=client_public,
        host_public_key=host_public,
        host_private_key=host_private,
    )


def read_host_public_key(ssh_dir: Path) -> str:
    """The pinned host public key of a run (``ssh-ed25519 …``), as written by
    :func:`write_run_keys`."""
    line = (ssh_dir / HOST_PUBLIC_KEY).read_text(encoding="ascii").strip()
    if not _PUBLIC_KEY.match(line):
        raise OverbrainerError(
            f"{ssh_dir / HOST_PUBLIC_KEY} does not hold one ed25519 public key; "
            "the run's pinned host key is unusable"
        )
    return line


def client_key_path(ssh_dir: Path) -> Path:
    """Where a run's client private key is (or was, once forgotten)."""
    return ssh_dir.absolute() / CLIENT_KEY


def write_ssh_config(ssh_dir: Path, run_id: str, host: str, port: int, user: str) -> Path:
    """Write ``runs/<id>/ssh/config`` and its ``known_hosts`` for the pod's endpoint.

    ``ssh -F runs/<id>/ssh/config overbrainer-<id>`` then reaches the pod with the run's own
    key only, refusing any host key but the pinned one; the user's ``~/.ssh/config``, the
    system config and the agent play no part. Any project path can be written (see
    :func:`_config_path`). Returns the config's path.
    """
    check_run_id(run_id)
    _check_endpoint(host, port, user)
    host_key = read_host_public_key(ssh_dir)
    # OpenSSH looks a port-22 host up under its bare name, any other port as [host]:port.
    known_as = host if port == 22 else f"[{host}]:{port}"
    known_hosts = ssh_dir.absolute() / KNOWN_HOSTS
    _write_atomically(known_hosts, f"{known_as} {_key_only(host_key)}\n", 0o644)
    lines = [
        f"Host overbrainer-{run_id}",
        f"    HostName {host}",
        f"    Port {port}",
        f"    User {user}",
        f"    IdentityFile {_config_path(client_key_path(ssh_dir))}",
        "    IdentitiesOnly yes",
        "    IdentityAgent none",
        "    ForwardAgent no",
        "    PasswordAuthentication no",
        "    KbdInteractiveAuthentication no",
        f"    UserKnownHostsFile {_config_path(known_hosts)}",
        "    GlobalKnownHostsFile /dev/null",
        "    StrictHostKeyChecking yes",
        "    UpdateHostKeys no",
        "    HostKeyAlgorithms ssh-ed25519",
        "",
    ]
    config = ssh_dir / CONFIG
    _write_atomically(config, "\n".join(lines), 0o600)
    return config


def forget_client_key(ssh_dir: Path) -> bool:
    """Delete the run's client private key once its pod is gone; True if one was deleted."""
    try:
        (ssh_dir / CLIENT_KEY).unlink()
    except FileNotFoundError:
        return False
    return True


def _ed25519_pair(comment: str) -> tuple[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, f"{public.decode('ascii')} {comment}"


def _key_only(public_line: str) -> str:
    """``ssh-ed25519 AAAA…`` without the comment, as known_hosts wants it."""
    kind, blob = public_line.split()[:2]
    return f"{kind} {blob}"


def _check_endpoint(host: str, port: int, user: str) -> None:
    # Each value ends up in a config file and on ssh's command line: no option look-alikes,
    # no whitespace, quotes or tokens.
    if not _HOST.match(host):
        raise UnsafeSshValue(
            "refusing to write the pod's SSH config: its host is not a plain host name or "
            "IP address"
        )
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UnsafeSshValue("refusing to write the pod's SSH config: its port is not 1-65535")
    if not _USER.match(user):
        raise UnsafeSshValue(
            "refusing to write the pod's SSH config: its user name is not a plain user name"
        )


def _config_path(path: Path) -> str:
    """``path`` (a file in ``runs/<id>/ssh/``) as an ssh_config argument.

    Absolute, in double quotes, with ``%`` doubled (ssh expands ``%`` tokens), whenever
    every OpenSSH reads that back as the same path: non-ASCII, spaces, ``'`` and ``#`` are
    fine inside quotes. A path it cannot hold that way — a ``"`` or ``\\`` (older clients
    know no escapes), a control character, ``${`` (ssh expands environment variables and
    has no escape for it) — is written relative to the project, ``runs/<id>/ssh/<file>``,
    which is where ``ssh -F runs/<id>/ssh/config`` is run from.
    """
    text = str(path)
    if _PLAIN_IN_QUOTES.fullmatch(text) and "${" not in text:
        return '"' + text.replace("%", "%%") + '"'
    return "/".join(path.parts[-4:])


def _make_private_dir(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise OverbrainerError(
                f"{path} exists and is not a directory; the run's SSH keys cannot be stored"
            ) from None
    # mkdir's mode is masked by the umask, which can only narrow it; chmod pins it exactly.
    path.chmod(0o700)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    """Write ``text`` to ``path`` through a temporary file that has ``mode`` from creation.

    Encoded as file names are (UTF-8, undecodable bytes kept as they were), so a config
    naming the project's path holds exactly that path's bytes.
    """
    data = os.fsencode(text)
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    # A leftover from a crashed write of this same process id.
    temp.unlink(missing_ok=True)
    fd = os.open(temp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            # The umask may have narrowed ``mode`` (never widened it): set it exactly.
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    temp.replace(path)
