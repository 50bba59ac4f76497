"""Per-run SSH keys and the run's ssh config, checked with real OpenSSH."""

import os
import stat
import subprocess
from pathlib import Path

import asyncssh
import pytest

from overbrainer.errors import OverbrainerError
from overbrainer.events.ids import BadRunId
from overbrainer.runpod.keys import (
    RunKeys,
    UnsafeSshValue,
    client_key_path,
    forget_client_key,
    read_host_public_key,
    write_run_keys,
    write_ssh_config,
)
from overbrainer.testing.sshd import openssh_server

RUN = "20260101-120000-ab12"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _keys(base: Path, run: str = RUN) -> RunKeys:
    return write_run_keys(base / "runs" / run / "ssh", run)


def test_the_key_directory_and_private_key_are_private_even_under_an_open_umask(tmp_path):
    old = os.umask(0)
    try:
        keys = _keys(tmp_path)
    finally:
        os.umask(old)
    assert _mode(keys.ssh_dir) == 0o700
    assert keys.client_key_path == (keys.ssh_dir / "id_ed25519").absolute()
    assert _mode(keys.client_key_path) == 0o600
    assert _mode(keys.ssh_dir / "id_ed25519.pub") == 0o644
    assert _mode(keys.ssh_dir / "host_ed25519_key.pub") == 0o644
    # No temporary file is left behind.
    assert sorted(p.name for p in keys.ssh_dir.iterdir()) == [
        "host_ed25519_key.pub",
        "id_ed25519",
        "id_ed25519.pub",
    ]


def test_an_existing_open_directory_is_narrowed_to_0700(tmp_path):
    ssh_dir = tmp_path / "runs" / RUN / "ssh"
    ssh_dir.mkdir(parents=True, mode=0o777)
    ssh_dir.chmod(0o777)
    write_run_keys(ssh_dir, RUN)
    assert _mode(ssh_dir) == 0o700


def test_public_keys_are_openssh_lines_matching_their_private_halves(tmp_path):
    keys = _keys(tmp_path)
    for line, comment in (
        (keys.client_public_key, f"overbrainer-{RUN}"),
        (keys.host_public_key, f"overbrainer-{RUN}-host"),
    ):
        kind, _blob, note = line.split(" ")
        assert (kind, note) == ("ssh-ed25519", comment)
        assert asyncssh.import_public_key(line).algorithm == b"ssh-ed25519"
    client = asyncssh.read_private_key(str(keys.client_key_path))
    assert (
        client.export_public_key("openssh").decode().split()[1]
        == (keys.client_public_key.split()[1])
    )
    host = asyncssh.import_private_key(keys.host_private_key)
    assert host.export_public_key("openssh").decode().split()[1] == keys.host_public_key.split()[1]
    assert keys.host_private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert keys.client_public_key.split()[1] != keys.host_public_key.split()[1]
    assert (keys.ssh_dir / "id_ed25519.pub").read_text() == keys.client_public_key + "\n"
    assert read_host_public_key(keys.ssh_dir) == keys.host_public_key


def test_every_run_gets_fresh_keys(tmp_path):
    first = _keys(tmp_path / "a")
    second = _keys(tmp_path / "b")
    assert first.client_public_key != second.client_public_key
    assert first.host_public_key != second.host_public_key


def test_the_host_private_key_is_never_written_nor_shown(tmp_path):
    keys = _keys(tmp_path)
    # The first lines of an OpenSSH key are the same for every ed25519 key; this one holds
    # the private scalar.
    secret_line = keys.host_private_key.splitlines()[4]
    for path in keys.ssh_dir.iterdir():
        assert secret_line not in path.read_text()
    assert secret_line not in repr(keys)
    assert "host_private_key=" not in repr(keys)


def test_writing_again_replaces_the_keys(tmp_path):
    first = _keys(tmp_path)
    second = _keys(tmp_path)
    assert first.client_public_key != second.client_public_key
    assert (second.ssh_dir / "id_ed25519.pub").read_text().strip() == second.client_public_key
    assert _mode(second.client_key_path) == 0o600


def test_a_bad_run_id_creates_nothing(tmp_path):
    with pytest.raises(BadRunId):
        write_run_keys(tmp_path / "x", "../evil")
    assert not (tmp_path / "x").exists()


def test_a_file_in_place_of_the_key_directory_is_refused(tmp_path):
    ssh_dir = tmp_path / "ssh"
    ssh_dir.write_text("not a directory")
    with pytest.raises(OverbrainerError, match="not a directory"):
        write_run_keys(ssh_dir, RUN)


def test_the_config_pins_the_endpoint_and_the_host_key(tmp_path):
    keys = _keys(tmp_path)
    config = write_ssh_config(keys.ssh_dir, RUN, "203.0.113.7", 40122, "root")
    assert config == keys.ssh_dir / "config"
    assert _mode(config) == 0o600
    text = config.read_text()
    for line in (
        f"Host overbrainer-{RUN}",
        "HostName 203.0.113.7",
        "Port 40122",
        "User root",
        f'IdentityFile "{keys.client_key_path}"',
        "IdentitiesOnly yes",
        "IdentityAgent none",
        f'UserKnownHostsFile "{keys.ssh_dir.absolute() / "known_hosts"}"',
        "StrictHostKeyChecking yes",
    ):
        assert f"    {line}\n" in text or text.startswith(line + "\n"), line
    blob = keys.host_public_key.split()[1]
    assert (keys.ssh_dir / "known_hosts").read_text() == f"[203.0.113.7]:40122 ssh-ed25519 {blob}\n"
    # Port 22 is looked up under the bare host name.
    write_ssh_config(keys.ssh_dir, RUN, "pod.example", 22, "root")
    assert (keys.ssh_dir / "known_hosts").read_text() == f"pod.example ssh-ed25519 {blob}\n"


@pytest.mark.parametrize(
    ("host", "port", "user"),
    [
        ("-oProxyCommand=touch /tmp/x", 22, "root"),
        ("my pod", 22, "root"),
        ("", 22, "root"),
        ("host\nProxyCommand x", 22, "root"),
        ('host"', 22, "root"),
        ("203.0.113.7", 0, "root"),
        ("203.0.113.7", 65536, "root"),
        ("203.0.113.7", True, "root"),
        ("203.0.113.7", 22, "-oProxyCommand=x"),
        ("203.0.113.7", 22, "ro ot"),
        ("203.0.113.7", 22, ""),
    ],
)
def test_unsafe_endpoints_are_refused_before_anything_is_written(tmp_path, host, port, user):
    keys = _keys(tmp_path)
    with pytest.raises(UnsafeSshValue) as caught:
        write_ssh_config(keys.ssh_dir, RUN, host, port, user)
    assert not (keys.ssh_dir / "config").exists()
    assert not (keys.ssh_dir / "known_hosts").exists()
    if host:
        assert host not in str(caught.value)


def test_forgetting_the_client_key_removes_only_the_private_key(tmp_path):
    keys = _keys(tmp_path)
    assert forget_client_key(keys.ssh_dir) is True
    assert not client_key_path(keys.ssh_dir).exists()
    assert (keys.ssh_dir / "id_ed25519.pub").exists()
    assert read_host_public_key(keys.ssh_dir) == keys.host_public_key
    assert forget_client_key(keys.ssh_dir) is False


def _ssh(config: Path, home: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        # An agent socket that would answer nothing sensible: `IdentityAgent none` skips it.
        "SSH_AUTH_SOCK": str(home / "no-agent.sock"),
    }
    return subprocess.run(
        ["ssh", "-F", str(config), f"overbrainer-{RUN}", command],
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _hostile_home(tmp_path: Path) -> Path:
    """A HOME whose ~/.ssh/config would break any connection it applied to."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n    ProxyCommand false\n    Port 1\n")
    return home


def test_real_ssh_reaches_a_server_holding_the_pinned_host_key(tmp_path):
    # A project path with a space and a '%' (ssh would expand it as a token).
    keys = _keys(tmp_path / "my pro%ject")
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    with openssh_server(tmp_path / "server", keys.host_private_key, keys.client_public_key) as port:
        config = write_ssh_config(keys.ssh_dir, RUN, "127.0.0.1", port, user)
        done = _ssh(config, _hostile_home(tmp_path), "echo reached; true")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "reached\n"
    # ssh added nothing to the pinned known_hosts.
    assert len((keys.ssh_dir / "known_hosts").read_text().splitlines()) == 1


def test_real_ssh_refuses_a_server_with_another_host_key(tmp_path):
    keys = _keys(tmp_path / "project")
    impostor = _keys(tmp_path / "impostor")
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    with openssh_server(
        tmp_path / "server", impostor.host_private_key, keys.client_public_key
    ) as port:
        config = write_ssh_config(keys.ssh_dir, RUN, "127.0.0.1", port, user)
        done = _ssh(config, _hostile_home(tmp_path), "echo reached")
    assert done.returncode == 255
    assert "reached" not in done.stdout
    assert "Host key verification failed" in done.stderr


def test_real_ssh_is_refused_once_the_client_key_is_forgotten(tmp_path):
    keys = _keys(tmp_path / "project")
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    with openssh_server(tmp_path / "server", keys.host_private_key, keys.client_public_key) as port:
        config = write_ssh_config(keys.ssh_dir, RUN, "127.0.0.1", port, user)
        forget_client_key(keys.ssh_dir)
        done = _ssh(config, _hostile_home(tmp_path), "echo reached")
    assert done.returncode == 255
    assert "reached" not in done.stdout
    assert "Permission denied" in done.stderr


# A project path that an ASCII-only, quote-refusing config writer
# could not hold was discovered only once the pod existed (a traceback, a pod paid for).
@pytest.mark.parametrize(
    ("name", "absolute"),
    [
        ("josé p'q #x %h", True),
        (os.fsdecode(b"not-utf8-\xff"), True),
        ('quo"te back\\slash', False),
        ("dollar ${HOME} brace", False),
        ("tab\there", False),
    ],
)
def test_any_project_path_survives_in_the_ssh_config(tmp_path, name, absolute):
    project = tmp_path / name / "project"
    keys = _keys(project)
    user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
    with openssh_server(tmp_path / "server", keys.host_private_key, keys.client_public_key) as port:
        config = write_ssh_config(keys.ssh_dir, RUN, "127.0.0.1", port, user)
        text = os.fsdecode(config.read_bytes())
        key_line = f'    IdentityFile "{str(keys.client_key_path).replace("%", "%%")}"\n'
        if absolute:
            assert key_line in text
        else:
            assert f"    IdentityFile runs/{RUN}/ssh/id_ed25519\n" in text
            assert name not in text
        # The printed command, run from the project as it says, with the real client.
        done = subprocess.run(
            ["ssh", "-F", f"runs/{RUN}/ssh/config", f"overbrainer-{RUN}", "echo reached"],
            cwd=project,
            capture_output=True,
            text=True,
            env={"PATH": os.environ["PATH"], "HOME": str(_hostile_home(tmp_path))},
            timeout=20,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "reached\n"
    assert len((keys.ssh_dir / "known_hosts").read_text().splitlines()) == 1
