"""What only the SSH executor does, against a real OpenSSH sshd on loopback
(overbrainer/testing/sshd.py): a whole run over one connection, connections lost and
regained, host keys and logins, secrets on stdin only, channels closed when a call ends.
What every executor does: test_executors.py."""

import contextlib
import dataclasses
import hashlib
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from overbrainer.exec.base import (
    ExecError,
    HostKeyRefused,
    JobState,
    JobStatus,
    LoginRefused,
    TargetUnreachable,
)
from overbrainer.exec.manifest import RESULT_PATHS, verify
from overbrainer.exec.ssh import PinnedHost, SshExecutor, UserHost, open_ssh, parse_host_spec
from overbrainer.testing.sshd import (
    SshServer,
    drop_connections,
    free_port,
    keygen,
    known_hosts_line,
)
from tests.exec.procs import all_command_lines


def _user_host(server: SshServer, **changes: Any) -> UserHost:
    """The test server's alias, with a config and known_hosts that never touch ~/.ssh."""
    target = UserHost(server.alias, config=server.ssh_config, known_hosts=server.known_hosts)
    return dataclasses.replace(target, **changes)


@contextlib.asynccontextmanager
async def _connect(server: SshServer, root: Path) -> AsyncIterator[SshExecutor]:
    async with open_ssh(_user_host(server), workdir=str(root), cancel_grace=2) as executor:
        yield executor


async def _until(executor: SshExecutor, run: str, *wanted: JobStatus) -> JobState:
    with trio.fail_after(20):
        while True:
            current = await executor.status(run)
            if current.status in wanted:
                return current
            await trio.sleep(0.05)


# Jobs wait for a `go` file the test creates, so no assertion races the clock.
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"
TRAIN = (
    "mkdir -p output/checkpoint-2 output/logs;"
    " echo weights > output/adapter.bin; echo state > output/checkpoint-2/s;"
    " echo tb > output/logs/events;"
    f' echo \'{{"event":"begin"}}\' >> metrics.jsonl; {WAIT_FOR_GO};'
    ' echo \'{"event":"log","step":1}\' >> metrics.jsonl; echo trained'
)


async def test_a_run_end_to_end_over_ssh(
    sshd_server: SshServer, tmp_path: Path, reap: list[int]
) -> None:
    local = tmp_path / "project/runs/r1"
    (local / "data").mkdir(parents=True)
    (local / "data/train.jsonl").write_text('{"messages": []}\n')
    (local / "axolotl.yaml").write_text("base_model: x\n")
    (local / "ssh").mkdir()
    (local / "ssh/id_ed25519").write_text("PRIVATE")
    (local / "run.json").write_text("{}")
    remote_root = tmp_path / "remote"
    async with _connect(sshd_server, remote_root) as executor:
        assert executor.location == f"host {sshd_server.alias}"
        await executor.upload(local, "runs/r1")
        remote = remote_root / "runs/r1"
        assert sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*")) == [
            "axolotl.yaml",
            "data",
            "data/train.jsonl",
        ]
        handle = await executor.spawn(
            "runs/r1", [["sh", "-c", TRAIN]], env={"PLAIN": "1"}, secrets={}
        )
        reap.append(handle.pid)
        assert handle.container is None
        assert (remote / "job.pid").read_text() == f"{handle.pid}\n"
        assert (await executor.status("runs/r1")).status is JobStatus.running
        with trio.fail_after(10):
            while not (first := await executor.read_file("runs/r1/metrics.jsonl", 0, 1000)):
                await trio.sleep(0.02)
        assert first == b'{"event":"begin"}\n'
        assert (await executor.status("runs/r1")).status is JobStatus.running
        (remote / "go").touch()
        assert await _until(executor, "runs/r1", JobStatus.exited) == JobState(JobStatus.exited, 0)
        tail = await executor.read_file("runs/r1/metrics.jsonl", 18, 1000)
        assert tail == b'{"event":"log","step":1}\n'
        expected = await executor.manifest("runs/r1", RESULT_PATHS)
        assert set(expected) == {
            "output/adapter.bin",
            "output/logs/events",
            "metrics.jsonl",
            "job.log",
        }
        await executor.download("runs/r1", RESULT_PATHS, local)
        assert verify(expected, local, RESULT_PATHS) == []
        assert (local / "job.log").read_text() == "trained\n"
        assert not (local / "output/checkpoint-2").exists()
        # A checkpoint asked for by its path comes with the results, verified alike.
        with_checkpoint = (*RESULT_PATHS, "output/checkpoint-2")
        expected_too = await executor.manifest("runs/r1", with_checkpoint)
        assert set(expected_too) == set(expected) | {"output/checkpoint-2/s"}
        await executor.download("runs/r1", with_checkpoint, local)
        assert verify(expected_too, local, with_checkpoint) == []
        assert (local / "output/checkpoint-2/s").read_text() == "state\n"
        # The results again: what output/ held is replaced, but a checkpoint already home
        # stays (it came home verified on its own while the job ran).
        (local / "output/stale").write_text("from an earlier attempt")
        await executor.download("runs/r1", RESULT_PATHS, local)
        assert not (local / "output/stale").exists()
        assert (local / "output/checkpoint-2/s").read_text() == "state\n"
        assert (local / "ssh/id_ed25519").read_text() == "PRIVATE"
        await executor.touch("runs/r1/.pod/retrieved")
        assert (remote / ".pod/retrieved").is_file()


async def test_a_job_outlives_its_ssh_connection(
    sshd_server: SshServer, tmp_path: Path, reap: list[int]
) -> None:
    root = tmp_path / "remote"
    async with _connect(sshd_server, root) as executor:
        handle = await executor.spawn(
            "runs/r1", [["sh", "-c", f"{WAIT_FOR_GO}; exit 5"]], env={}, secrets={}
        )
        reap.append(handle.pid)
    async with _connect(sshd_server, root) as executor:
        assert (await executor.status("runs/r1")).status is JobStatus.running
        (root / "runs/r1/go").touch()
        assert await _until(executor, "runs/r1", JobStatus.exited) == JobState(JobStatus.exited, 5)


async def test_a_dropped_connection_is_reported_then_recovered(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    async with _connect(sshd_server, tmp_path / "remote") as executor:
        assert (await executor.status("runs/r1")).status is JobStatus.lost
        assert drop_connections(sshd_server) > 0
        with trio.fail_after(15), pytest.raises(TargetUnreachable) as caught:
            for _ in range(5):  # the first call may still race the broken socket
                await executor.status("runs/r1")
                await trio.sleep(0.05)
        assert caught.value.host == sshd_server.alias
        assert sshd_server.alias in str(caught.value)
        # The next call reconnects by itself.
        assert (await executor.status("runs/r1")).status is JobStatus.lost


async def test_secrets_cross_on_stdin_only(
    sshd_server: SshServer, tmp_path: Path, reap: list[int]
) -> None:
    canary = f"hf_ssh_canary_{uuid.uuid4().hex}"
    root = tmp_path / "remote"
    async with _connect(sshd_server, root) as executor:
        handle = await executor.spawn(
            "runs/r1",
            [["sh", "-c", 'printf %s "$HF_TOKEN" | sha256sum > seen; sleep 300']],
            env={"OVERBRAINER_METRICS": "metrics.jsonl"},
            secrets={"HF_TOKEN": canary},
        )
        reap.append(handle.pid)
        run = root / "runs/r1"
        with trio.fail_after(10):
            while not (run / "seen").exists() or not (run / "seen").read_text():
                await trio.sleep(0.02)
        assert canary not in all_command_lines()
        assert (await executor.status("runs/r1")).status is JobStatus.running
        await executor.cancel("runs/r1")
    digest = hashlib.sha256(canary.encode()).hexdigest()
    assert (run / "seen").read_text().split()[0] == digest
    for path in run.rglob("*"):
        if path.is_file():
            assert canary not in path.read_text(errors="replace"), path.name
    log = sshd_server.log_text()
    assert "job.sh start" in log  # the command log works: it shows the launcher...
    assert canary not in log  # ...and never the secret


async def test_an_unknown_host_key_is_refused_with_the_way_to_add_it(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    target = _user_host(sshd_server, known_hosts=empty)
    with pytest.raises(HostKeyRefused) as caught:
        async with open_ssh(target, workdir=str(tmp_path)):
            pass
    message = str(caught.value)
    assert "not in your known hosts" in message
    assert f"ssh-keyscan -p {sshd_server.port} 127.0.0.1 >> ~/.ssh/known_hosts" in message
    assert empty.read_text() == ""  # never added by itself


async def test_a_changed_host_key_is_refused(sshd_server: SshServer, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other_host_key")
    known = tmp_path / "known_hosts"
    known.write_text(known_hosts_line(sshd_server.port, other))
    target = _user_host(sshd_server, known_hosts=known)
    with pytest.raises(HostKeyRefused) as caught:
        async with open_ssh(target, workdir=str(tmp_path)):
            pass
    message = str(caught.value)
    assert "intercepting" in message
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd_server.port}'" in message


async def test_user_at_host_port_with_the_users_config(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text(
        f"Host *\n    IdentityFile {sshd_server.client_key}\n    IdentityAgent none\n"
    )
    spec = f"{sshd_server.user}@127.0.0.1:{sshd_server.port}"
    target = _user_host(sshd_server, spec=spec, config=config)
    async with open_ssh(target, workdir=str(tmp_path / "remote")) as executor:
        assert (await executor.status("runs/r1")).status is JobStatus.lost


async def test_a_login_without_an_authorized_key_is_refused(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    keygen(stranger)
    config = tmp_path / "config"
    config.write_text(f"Host *\n    IdentityFile {stranger}\n    IdentityAgent none\n")
    spec = f"{sshd_server.user}@127.0.0.1:{sshd_server.port}"
    with pytest.raises(LoginRefused, match="refused the login"):
        async with open_ssh(_user_host(sshd_server, spec=spec, config=config)):
            pass


async def test_an_unreachable_host_names_itself(sshd_server: SshServer, tmp_path: Path) -> None:
    spec = f"nobody@127.0.0.1:{free_port()}"
    with pytest.raises(TargetUnreachable) as caught:
        async with open_ssh(_user_host(sshd_server, spec=spec)):
            pass
    assert caught.value.host == spec
    assert f"cannot reach host {spec}" in str(caught.value)


async def test_pinned_mode_trusts_exactly_the_pinned_key(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    pinned = PinnedHost(
        host="127.0.0.1",
        port=sshd_server.port,
        user=sshd_server.user,
        client_key=sshd_server.client_key,
        host_key=sshd_server.host_key_pub,
    )
    async with open_ssh(pinned, workdir=str(tmp_path / "remote")) as executor:
        assert executor.location == f"host {sshd_server.user}@127.0.0.1:{sshd_server.port}"
        assert (await executor.status("runs/r1")).status is JobStatus.lost
    other = keygen(tmp_path / "image_host_key")
    impostor = PinnedHost(
        host="127.0.0.1",
        port=sshd_server.port,
        user=sshd_server.user,
        client_key=sshd_server.client_key,
        host_key=other,
    )
    with pytest.raises(HostKeyRefused, match="pinned for this run"):
        async with open_ssh(impostor, workdir=str(tmp_path / "remote")):
            pass


async def test_pinned_mode_is_not_fooled_by_the_environment(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A HOME whose ssh config and known_hosts would let anything in: pinned mode ignores it.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/config").write_text("Host *\n    UserKnownHostsFile none\n")
    (home / ".ssh/known_hosts").write_text(
        known_hosts_line(sshd_server.port, sshd_server.host_key_pub)
    )
    monkeypatch.setenv("HOME", str(home))
    impostor = PinnedHost(
        host="127.0.0.1",
        port=sshd_server.port,
        user=sshd_server.user,
        client_key=sshd_server.client_key,
        host_key=keygen(tmp_path / "k2"),
    )
    with pytest.raises(HostKeyRefused):
        async with open_ssh(impostor):
            pass


async def test_known_hosts_checking_cannot_be_switched_off_by_config(
    sshd_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    config = tmp_path / "config"
    config.write_text(
        f"Host {sshd_server.alias}\n    HostName 127.0.0.1\n    Port {sshd_server.port}\n"
        f"    IdentityFile {sshd_server.client_key}\n    UserKnownHostsFile none\n"
    )
    target = UserHost(sshd_server.alias, config=config)
    with pytest.raises(HostKeyRefused, match="not in your known hosts"):
        async with open_ssh(target, workdir=str(tmp_path)):
            pass


async def test_a_relative_workdir_is_under_the_remote_home(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    workdir = f"overbrainer-test-{uuid.uuid4().hex[:8]}"
    try:
        async with open_ssh(_user_host(sshd_server), workdir=workdir) as executor:
            await executor.touch("runs/r1/.pod/retrieved")
        assert (Path.home() / workdir / "runs/r1/.pod/retrieved").is_file()
    finally:
        shutil.rmtree(Path.home() / workdir, ignore_errors=True)


async def test_an_open_loop_is_reused(sshd_server: SshServer, tmp_path: Path) -> None:
    import trio_asyncio

    async with trio_asyncio.open_loop() as loop, _connect(sshd_server, tmp_path / "a") as first:
        assert trio_asyncio.current_loop.get() is loop
        async with _connect(sshd_server, tmp_path / "b") as second:
            assert trio_asyncio.current_loop.get() is loop
            assert (await first.status("runs/r1")).status is JobStatus.lost
            assert (await second.status("runs/r1")).status is JobStatus.lost


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("gpu1", (None, "gpu1", None)),
        ("me@gpu1", ("me", "gpu1", None)),
        ("me@10.0.0.5:2222", ("me", "10.0.0.5", 2222)),
        ("[::1]:2200", (None, "::1", 2200)),
        ("me@[fe80::1]", ("me", "fe80::1", None)),
    ],
)
def test_host_specs(spec: str, parsed: tuple[str | None, str, int | None]) -> None:
    assert parse_host_spec(spec) == parsed


@pytest.mark.parametrize(
    "spec", ["", "-oProxyCommand=x", "me@", "host:port", "host:0", "a b", "h;rm", "@h", "h:99999"]
)
def test_bad_host_specs_are_refused(spec: str) -> None:
    from overbrainer.exec.shell import UnsafeValue

    with pytest.raises(UnsafeValue):
        parse_host_spec(spec)


def test_ssh_module_stays_out_of_the_base_modules() -> None:
    # asyncssh and trio_asyncio are heavy: only overbrainer.exec.ssh may import them.
    import subprocess
    import sys

    code = (
        "import sys; import overbrainer.exec.base, overbrainer.exec.local, "
        "overbrainer.exec.manifest, overbrainer.exec.job; "
        "print(any(m in sys.modules for m in ('asyncssh', 'trio_asyncio')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert out.stdout == b"False\n"


async def test_a_cancelled_remote_command_has_its_channel_closed(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    # Cancelling the bridged call alone would leave the remote command running; the
    # executor closes the channel, so the command's next write fails and it stops.
    count = tmp_path / "count"
    ticker = (
        f"i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo $i > {count}; echo tick; sleep 0.05; done"
    )
    async with _connect(sshd_server, tmp_path / "remote") as executor:
        with trio.move_on_after(0.6) as scope:
            await executor._exec(ticker, what="ticking")
        assert scope.cancelled_caught
        # Left open, the ticker would count on for 10 s; closed, it stops at once.
        with trio.fail_after(5):
            while True:
                before = count.read_text()
                await trio.sleep(0.3)
                if count.read_text() == before:
                    break
        await trio.sleep(0.3)
        assert count.read_text() == before
        assert int(before) < 100
        # The connection itself is still good.
        assert (await executor.status("runs/r1")).status is JobStatus.lost


# A remote command that writes `piece` and counts each write in `count`, until its output is
# closed (a write then fails and the loop ends).
def _endless(piece: str, count: Path) -> str:
    return f"i=0; while {piece}; do i=$((i+1)); echo $i > {count}; sleep 0.02; done"


async def _stops_counting(count: Path) -> str:
    """The count once it stopped moving (the remote command ended)."""
    with trio.fail_after(5):
        while True:
            before = count.read_text()
            await trio.sleep(0.3)
            if count.read_text() == before:
                return before


async def test_a_stream_refused_midway_stops_its_download_at_once(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    # A damaged first header, then an endless trickle: the worker refuses the header and
    # the channel is closed, with no wait for the (never coming) end of the stream.
    count = tmp_path / "count"
    command = "head -c 512 /dev/urandom; " + _endless("head -c 512 /dev/zero", count)
    unpacked = tmp_path / "unpacked"
    async with _connect(sshd_server, tmp_path / "remote") as executor:
        with trio.fail_after(10), pytest.raises(ExecError, match="not a readable tar stream"):
            await executor._unpack_output(command, b"", ["output"], unpacked, what="fetching")
        before = await _stops_counting(count)
        assert int(before) < 200
        assert list(unpacked.iterdir()) == []
        assert (await executor.status("runs/r1")).status is JobStatus.lost


async def test_a_cancelled_download_has_its_channel_closed(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    # Zero blocks are an archive's padding: the stream is good, and endless.
    count = tmp_path / "count"
    command = _endless("head -c 512 /dev/zero", count)
    async with _connect(sshd_server, tmp_path / "remote") as executor:
        with trio.CancelScope() as scope:

            async def cancel_once_it_streams() -> None:
                # On a busy machine the channel may take a while to open: cancel only once
                # the remote command is writing.
                with trio.fail_after(30):
                    while not count.exists():
                        await trio.sleep(0.01)
                await trio.sleep(0.2)
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_it_streams)
                await executor._unpack_output(
                    command, b"", ["output"], tmp_path / "unpacked", what="fetching"
                )
        assert scope.cancelled_caught
        before = await _stops_counting(count)
        assert int(before) < 200
        assert (await executor.status("runs/r1")).status is JobStatus.lost


async def test_a_download_cut_by_a_lost_connection_is_reported(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    count = tmp_path / "count"
    command = _endless("head -c 512 /dev/zero", count)
    async with _connect(sshd_server, tmp_path / "remote") as executor:

        async def drop_once_it_streams() -> None:
            while not count.exists():
                await trio.sleep(0.01)
            assert drop_connections(sshd_server) > 0

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drop_once_it_streams)
                with pytest.raises(TargetUnreachable, match="while fetching"):
                    await executor._unpack_output(
                        command, b"", ["output"], tmp_path / "unpacked", what="fetching"
                    )
        # The next call reconnects by itself.
        assert (await executor.status("runs/r1")).status is JobStatus.lost


async def test_a_failed_download_names_its_command_s_error(
    sshd_server: SshServer, tmp_path: Path
) -> None:
    # Half a header and a failure: the command's own error, not "cut short", is reported;
    # what the command read on its stdin is what was given.
    command = "head -c 100 /dev/zero; cat > got; echo 'no such thing' >&2; exit 3"
    root = tmp_path / "remote"
    root.mkdir()
    async with _connect(sshd_server, root) as executor:
        with pytest.raises(ExecError, match=r"fetching failed .*exit code 3.*no such thing"):
            await executor._unpack_output(
                f"cd {root} && {{ {command}; }}",
                b"the input",
                ["output"],
                tmp_path / "u",
                what="fetching",
            )
    assert (root / "got").read_bytes() == b"the input"
