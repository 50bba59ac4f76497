"""The fake pod: a pod created on the fake API comes to life with the run's keys, its real
bootstrap and watchdog, and a real SSH server on loopback."""

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import trio

from overbrainer.runpod.keys import RunKeys, write_run_keys
from overbrainer.testing.fake_pod import FakePods
from tests.fakes.pod_world import PodWorld, pod_world

RUN = "20260101-120000-ab12"
RUN_DIR = f"overbrainer/{RUN}"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[PodWorld]:
    async with pod_world(tmp_path, RUN) as w:
        yield w


async def test_a_running_pod_serves_ssh_with_the_pinned_key_and_its_watchdog_is_ready(world):
    pod_id = await world.create_pod(world.env())
    direct = await world.wait_for_ssh(pod_id)
    assert direct["host"] == "127.0.0.1"
    assert direct["username"] == "root"
    config = world.ssh_config(direct)

    # Real OpenSSH, pinned host key, the run's key only; sh runs in the pod's home.
    done = await world.ssh(config, f"cd {RUN_DIR} && pwd && . .pod/job.env && echo $HF_HOME")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == [
        str(world.pods.home(pod_id) / RUN_DIR),
        "/root/.cache/huggingface",
    ]
    # stdin in, stdout and stderr out, exit status back.
    done = await world.ssh(config, "cat > got; wc -c < got; echo oops >&2; exit 3", b"12345")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (3, b"5", b"oops\n")
    assert (world.pods.home(pod_id) / "got").read_bytes() == b"12345"

    assert await world.verdict(pod_id) == "ready\n"
    installed = world.pods.root(pod_id) / "etc" / "ssh" / "overbrainer_host_ed25519_key"
    assert installed.read_text() == world.keys.host_private_key
    # Neither the host key nor the pod's API key reached the container's output.
    log = world.pods.container_log(pod_id)
    assert "starting the watchdog" in log and "verdict: ready" in log
    assert world.keys.host_private_key.splitlines()[4] not in log
    assert world.fake.pod_scoped_key(pod_id) not in log
    # The watchdog read its pod with the pod's own key.
    assert any(
        r.auth == f"pod:{pod_id}" and r.method == "GET" and r.status == 200
        for r in world.fake.requests
    )


async def test_the_pod_refuses_another_client_key_and_another_host_key_is_refused(world):
    pod_id = await world.create_pod(world.env())
    direct = await world.wait_for_ssh(pod_id)
    stranger = write_run_keys(world.tmp / "stranger" / "ssh", RUN)
    config = world.ssh_config(direct, stranger)
    done = await world.ssh(config, "echo in")
    # The stranger pins its own host key: the pod's is refused before any login.
    assert done.returncode == 255
    assert b"Host key verification failed" in done.stderr

    # The pod's real host key pinned, but a client key it does not know.
    pinned = " ".join(world.keys.host_public_key.split()[:2])
    (stranger.ssh_dir / "known_hosts").write_text(f"[{direct['host']}]:{direct['port']} {pinned}\n")
    done = await world.ssh(config, "echo in")
    assert done.returncode == 255
    assert b"Permission denied" in done.stderr
    assert done.stdout == b""


def _asyncssh_run(host: str, port: int, keys: RunKeys, user: str, command: str) -> str:
    """What the pods' executor does: asyncssh, one client key, exactly one host key."""

    async def main() -> str:
        known = asyncssh.import_known_hosts(
            f"[{host}]:{port} " + " ".join(keys.host_public_key.split()[:2]) + "\n"
        )
        async with asyncssh.connect(
            host,
            port,
            username=user,
            client_keys=[str(keys.client_key_path)],
            known_hosts=known,
            agent_path=None,
            config=None,
        ) as conn:
            result = await conn.run(command, check=True)
            return str(result.stdout)

    return asyncio.run(main())


async def test_an_asyncssh_client_with_the_pinned_key_runs_commands(world):
    pod_id = await world.create_pod(world.env())
    direct = await world.wait_for_ssh(pod_id)
    out = await trio.to_thread.run_sync(
        _asyncssh_run, direct["host"], direct["port"], world.keys, "root", "echo $HOME; id -un"
    )
    assert out.splitlines()[0] == str(world.pods.home(pod_id))
    # Another user name is refused even with the right key.
    with pytest.raises(asyncssh.PermissionDenied):
        await trio.to_thread.run_sync(
            _asyncssh_run, direct["host"], direct["port"], world.keys, "admin", "true"
        )


async def test_deleting_the_pod_ends_its_ssh_server_and_its_watchdog(world):
    pod_id = await world.create_pod(world.env())
    direct = await world.wait_for_ssh(pod_id)
    assert await world.verdict(pod_id) == "ready\n"
    # A detached job in the pod, as the job wrapper leaves one.
    config = world.ssh_config(direct)
    done = await world.ssh(
        config, "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > sleeper.pid"
    )
    assert done.returncode == 0, done.stderr
    sleeper = int((world.pods.home(pod_id) / "sleeper.pid").read_text())
    async with world.client() as client:
        assert (await client.delete(f"/pods/{pod_id}")).status_code == 204
    boot = world.pods.current(pod_id)
    with trio.fail_after(10):
        await boot.done.wait()
        while _alive(sleeper):
            await trio.sleep(0.05)
    done = await world.ssh(config, "echo in")
    assert done.returncode == 255


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_failed_bootstrap_has_the_watchdog_delete_the_pod(world):
    env = world.env()
    del env["OVERBRAINER_HOST_KEY_B64"]
    pod_id = await world.create_pod(env)
    await world.wait_for_ssh(pod_id)
    with trio.fail_after(10):
        while world.fake.status(pod_id) != "TERMINATED":
            await trio.sleep(0.05)
    failed = world.pods.path(pod_id, f"{RUN_DIR}/.pod/bootstrap_failed").read_text()
    assert failed == "no host key: OVERBRAINER_HOST_KEY_B64 is not set\n"
    assert world.pods.current(pod_id).bootstrap_failed == failed.strip()
    # Its endpoint refuses connections: no sshd ever ran.
    assert world.pods.current(pod_id).ssh is None
    assert any(
        r.auth == f"pod:{pod_id}" and r.method == "DELETE" and r.status == 204
        for r in world.fake.requests
    )


async def test_a_create_without_our_scripts_still_boots_with_the_packaged_ones(world):
    env = world.env()
    del env["OVERBRAINER_BOOTSTRAP_SH"]
    del env["OVERBRAINER_WATCHDOG_SH"]
    pod_id = await world.create_pod(env)
    await world.wait_for_ssh(pod_id)
    assert await world.verdict(pod_id) == "ready\n"


async def test_absolute_pod_paths_stay_inside_the_pods_directory(world):
    run_dir = f"/workspace/overbrainer/runs/{RUN}"
    machine_had_workspace = os.path.exists("/workspace/overbrainer/runs")
    pod_id = await world.create_pod(world.env(OVERBRAINER_RUN_DIR=run_dir))
    direct = await world.wait_for_ssh(pod_id)
    config = world.ssh_config(direct)
    assert await world.verdict(pod_id, f"{run_dir}/.pod/watchdog") == "ready\n"
    done = await world.ssh(config, f"cat {run_dir}/.pod/watchdog && touch {run_dir}/.pod/x")
    assert (done.returncode, done.stdout) == (0, b"ready\n"), done.stderr
    assert world.pods.path(pod_id, f"{run_dir}/.pod/x").exists()
    assert world.pods.path(pod_id, run_dir) == world.pods.root(pod_id) / run_dir.lstrip("/")
    if not machine_had_workspace:
        assert not os.path.exists("/workspace/overbrainer/runs")


async def test_a_restarted_pod_whose_old_container_is_slow_to_stop_comes_back_whole(
    world, monkeypatch
):
    # Under load the old boot's end (its processes killed by directory) used to overlap
    # the new boot and kill its bootstrap: Runpod then showed an endpoint that refused
    # every connection (`train attach` to a restarted pod failed). A stop held back for a
    # moment makes that overlap certain.
    slow = FakePods._stop

    async def held_back(self: FakePods, boot: Any, grace: float = 0.3) -> None:
        await trio.sleep(1.0)
        await slow(self, boot, grace)

    monkeypatch.setattr(FakePods, "_stop", held_back)
    pod_id = await world.create_pod(world.env())
    first = await world.wait_for_ssh(pod_id)
    async with world.client() as client:
        answer = await client.post(f"/pods/{pod_id}/action", json={"action": "restart"})
        assert answer.status_code == 200, answer.text
        with trio.fail_after(20):
            while True:
                pod = (await client.get(f"/pods/{pod_id}")).json()
                if pod["status"] == "RUNNING" and pod["ssh"]["direct"]:
                    break
                await trio.sleep(0.05)
    direct = pod["ssh"]["direct"]
    assert len(world.pods.boots[pod_id]) == 2
    config = world.ssh_config(direct)
    done = await world.ssh(config, "echo in")
    assert (done.returncode, done.stdout) == (0, b"in\n"), (first, direct, done.stderr)
    assert world.pods.current(pod_id).container.returncode is None  # its watchdog runs
