"""A throwaway PostgreSQL server for tests and benchmarks, run from the server binaries.

``PgCluster.start()`` runs ``initdb`` into a fresh temporary directory and starts
``postgres`` on a free loopback port. Local (Unix socket) logins are trusted, so the
harness administers it without a password; TCP logins need the superuser's password
(scram-sha-256), so the code under test goes through its real password path.

The server refuses to run as root: as root, the cluster belongs to the ``postgres`` user
(``nobody`` when there is none) and every server binary runs through ``runuser``.
"""

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = (
    "the PostgreSQL server binaries (initdb, pg_ctl, postgres) are missing: the team-store "
    "tests start their own server from them. Install them with `apt-get install postgresql` "
    "(Debian/Ubuntu; they land in /usr/lib/postgresql/<version>/bin), `dnf install "
    "postgresql-server` (Fedora) or `brew install postgresql` (macOS), then run the tests again"
)


class PgUnavailable(RuntimeError):
    """The server binaries are not installed (the message says what to install)."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$PG_BINDIR`` when set, else the
    newest of Debian's ``/usr/lib/postgresql/<version>/bin``, else ``pg_ctl`` on PATH."""
    if os.environ.get("PG_BINDIR"):
        chosen = Path(os.environ["PG_BINDIR"])
        if all((chosen / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return chosen
        raise PgUnavailable(f"PG_BINDIR={chosen} lacks initdb, pg_ctl or postgres; " + INSTALL_HINT)
    candidates: list[Path] = []
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted(
            (p for p in debian.iterdir() if p.name.split(".")[0].isdigit()),
            key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()],
            reverse=True,
        )
        candidates += [v / "bin" for v in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    raise PgUnavailable(INSTALL_HINT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PgCluster:
    """One running server; ``url(db)`` names a database on it for overbrainer."""

    bindir: Path = field(default_factory=find_bindir)
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="obpg-")))
    port: int = field(default_factory=_free_port)
    password: str = field(default_factory=lambda: "pw-canary-" + secrets.token_hex(8))
    _owner: str | None = None

    @property
    def data(self) -> Path:
        """The cluster's data directory (also where its Unix socket is)."""
        return self.root / "data"

    @property
    def passfile(self) -> Path:
        """A libpq password file (mode 600) holding the superuser's password."""
        return self.root / "pgpass"

    def _as_owner(self, args: list[str]) -> list[str]:
        if self._owner is None:
            return args
        return ["runuser", "-u", self._owner, "--", *args]

    def _run(self, args: list[str], timeout: float = 60) -> None:
        done = subprocess.run(
            self._as_owner(args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def start(self) -> "PgCluster":
        """initdb (first time) and start the server; returns when it accepts connections."""
        if os.geteuid() == 0 and self._owner is None:
            self._owner = "postgres" if _has_user("postgres") else "nobody"
            entry = pwd.getpwnam(self._owner)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        if not self.data.exists():
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            if self._owner is not None:
                entry = pwd.getpwnam(self._owner)
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            pwfile.chmod(0o600)
            self._run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--no-sync",
                    "--no-instructions",
                ]
            )
            pwfile.unlink()
            self.passfile.write_text(f"127.0.0.1:{self.port}:*:postgres:{self.password}\n")
            self.passfile.chmod(0o600)
        options = (
            f"-p {self.port} -k {self.data} -h 127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )
        self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                options,
                "-l",
                str(self.data / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        return self

    def stop(self) -> None:
        """Stop the server at once (clients see their connections drop)."""
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def destroy(self) -> None:
        """Stop the server (if running) and delete its directory."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Run ``sql`` as the superuser over the Unix socket (trusted); returns its output."""
        done = subprocess.run(
            self._as_owner(
                [
                    str(self.bindir / "psql"),
                    "-h",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "-d",
                    db,
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-qAt",
                    "-c",
                    sql,
                ]
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout

    def new_database(self) -> str:
        """A fresh empty database; returns its name."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.psql(f"CREATE DATABASE {name}")
        return name

    def url(self, db: str, *, user: str = "postgres") -> str:
        """The ``[store] url`` of database ``db`` over TCP (no password in it)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def client_env(self) -> dict[str, str]:
        """Environment for a client process: the password comes from the passfile."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "OVERBRAINER_"))}
        env["PGPASSFILE"] = str(self.passfile)
        return env


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def running_cluster() -> Iterator[PgCluster]:
    """A started cluster, destroyed on exit."""
    cluster = PgCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
