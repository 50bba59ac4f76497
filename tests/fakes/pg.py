"""A real PostgreSQL server for the team-store tests, started once per session (the
fixture ``pg_cluster``), and one fresh team store on it per test (``team``): import both
into a ``conftest.py``.

When the server binaries are missing the tests FAIL (not skip), saying what to install:
the team store is a product feature, and a suite that silently skips it proves nothing.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from overbrainer.testing.pg import PgCluster, PgUnavailable


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The session's server (tests that stop it start it again before they end)."""
    missing = None
    try:
        cluster = PgCluster()
    except PgUnavailable as error:
        missing = str(error)
    if missing is not None:
        pytest.fail(missing, pytrace=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@dataclass(frozen=True)
class Team:
    """One fresh database on the server, and how a client reaches it."""

    cluster: PgCluster
    db: str

    @property
    def url(self) -> str:
        """``[store] url`` (no password: it comes from the passfile)."""
        return self.cluster.url(self.db)

    @property
    def env(self) -> dict[str, str]:
        """A client's environment (PGPASSFILE set, no PG*/OVERBRAINER_* leaking in)."""
        return self.cluster.client_env()

    def checkout(self, path: Path) -> Path:
        """A project directory whose ``overbrainer.toml`` points at this store."""
        path.mkdir(parents=True, exist_ok=True)
        (path / "overbrainer.toml").write_text(f'[store]\nurl = "{self.url}"\n')
        return path


@pytest.fixture
def team(pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch) -> Team:
    """A fresh team store; in-process commands find its password through PGPASSFILE."""
    for name in (
        "PGPASSWORD",
        "PGSERVICE",
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGDATABASE",
        "OVERBRAINER_STORE__URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(pg_cluster.passfile))
    return Team(pg_cluster, pg_cluster.new_database())
