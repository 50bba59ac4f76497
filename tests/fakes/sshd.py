"""pytest's side of the OpenSSH server on loopback (``overbrainer.testing.sshd``): the
session-scoped fixture ``sshd_server`` (import it into a ``conftest.py``), and
:func:`require_sshd`, which fails, never skips, where OpenSSH's server is missing."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from overbrainer.testing.sshd import SSHD, SshServer, sshd


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
