"""Fake clusters come to life: each member of a cluster created on the fake API (served on
loopback) is a living fake pod with its own SSH server, its real bootstrap and watchdog,
and Runpod's cluster variables with loopback addresses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.fakes.pod_world import PodWorld, pod_world

RUN = "20260101-120000-cd34"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[PodWorld]:
    async with pod_world(tmp_path, RUN) as w:
        yield w


async def test_each_member_lives_with_its_own_ssh_server_and_the_cluster_variables(world):
    cluster_id = await world.create_cluster(world.env(), 3)
    members = await world.members_up(cluster_id)
    ports = {m["ssh"]["direct"]["port"] for m in members}
    assert len(ports) == 3  # a server of its own each
    primary_port = None
    for rank, member in enumerate(members):
        done = await world.ssh(member["ssh"]["direct"], "pwd; echo in")
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().split() == [str(world.pods.home(member["id"])), "in"]
        assert await world.verdict(member["id"]) == "ready\n"
        env = world.pods.current(member["id"]).env
        assert env["NODE_RANK"] == str(rank)
        assert env["NUM_NODES"] == "3"
        assert env["NUM_TRAINERS"] == "2"
        assert env["WORLD_SIZE"] == "6"
        assert env["PRIMARY_ADDR"] == env["MASTER_ADDR"] == env["NODE_ADDR"] == "127.0.0.1"
        assert env["PRIMARY_PORT"] == env["MASTER_PORT"]
        assert env["HOST_NODE_ADDR"] == f"127.0.0.1:{env['PRIMARY_PORT']}"
        primary_port = primary_port or env["PRIMARY_PORT"]
        assert env["PRIMARY_PORT"] == primary_port  # one rendezvous port per cluster
        # What the container really started with (the bootstrap execs the watchdog).
        started = _process_env(world.pods.current(member["id"]).container.pid)
        assert started["NODE_RANK"] == str(rank)
        assert started["PRIMARY_PORT"] == primary_port
    # The port is free for rank 0 to listen on, and reached by the others at 127.0.0.1.
    assert primary_port is not None
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", int(primary_port)))
    listener.close()


async def test_deleting_the_cluster_ends_every_member(world):
    cluster_id = await world.create_cluster(world.env(), 2)
    members = await world.members_up(cluster_id)
    async with world.client() as client:
        assert (await client.delete(f"/clusters/{cluster_id}")).status_code == 204
        assert (await client.get(f"/clusters/{cluster_id}")).status_code == 404
    with trio.fail_after(15):
        for member in members:
            await world.pods.current(member["id"]).gone.wait()
    for member in members:
        assert world.fake.status(member["id"]) == "TERMINATED"
        done = await world.ssh(member["ssh"]["direct"], "echo in")
        assert done.returncode == 255


@pytest.mark.parametrize("cue", ["fail", "vanish"])
async def test_a_member_that_fails_or_vanishes_ends_alone(world, cue: str):
    cluster_id = await world.create_cluster(world.env(), 3)
    members = await world.members_up(cluster_id)
    lost = members[1]
    if cue == "fail":
        await world.fake.fail_member(cluster_id, 1)
    else:
        world.fake.vanish_member(cluster_id, 1)
    async with world.client() as client:
        listed = (await client.get(f"/clusters/{cluster_id}/pods")).json()["pods"]
        shown = (await client.get(f"/clusters/{cluster_id}")).json()["pods"]
    with trio.fail_after(15):
        await world.pods.current(lost["id"]).gone.wait()
    assert (await world.ssh(lost["ssh"]["direct"], "echo in")).returncode == 255
    statuses = {p["id"]: p["status"] for p in listed}
    if cue == "fail":
        assert statuses[lost["id"]] == "EXITED"
        assert shown == {"total": 3, "byStatus": {"RUNNING": 2, "EXITED": 1}}
    else:
        assert lost["id"] not in statuses
        assert shown == {"total": 2, "byStatus": {"RUNNING": 2}}
    for other in (members[0], members[2]):
        assert statuses[other["id"]] == "RUNNING"
        done = await world.ssh(other["ssh"]["direct"], "echo still")
        assert done.returncode == 0 and done.stdout == b"still\n"


def _process_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}
