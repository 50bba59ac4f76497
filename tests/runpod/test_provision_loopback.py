"""Provisioning for real, on the real clock: the fake Runpod API over loopback HTTP, fake
pods running the real bootstrap and watchdog behind a real SSH server, the real SSH
executor in pinned mode, the real event store with its worker thread."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import trio

from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.ids import new_run_id
from overbrainer.events.store import RunStore
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.runpod.client import RunpodClient
from overbrainer.runpod.keys import generate_run_keys
from overbrainer.runpod.timing import Timing
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.targets.runpod.delete import delete_pod
from overbrainer.targets.runpod.pods import PodContext
from overbrainer.targets.runpod.provision import (
    NothingPlaced,
    open_provisioned,
    pinned_ssh,
    provision,
)
from overbrainer.testing.fake_executor import CANARY_KEY, runpod_target
from overbrainer.testing.fake_pod import FakePods, fake_pods
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from overbrainer.testing.sshd import openssh_server

A40 = "NVIDIA A40"

FAST = Timing(
    poll=0.2,
    ssh_within=6.0,
    verdict_within=10.0,
    reconcile_after=(0.5, 1.0),
    delete_confirm=10.0,
    delete_poll=0.2,
    gone_interval=0.2,
    connect_attempts=3,
    watchdog_interval=0.5,
)


@dataclass
class Loop:
    fake: FakeRunpod
    pods: FakePods
    base_url: str
    ctx: PodContext
    store: RunStore
    journal: Journal
    err: io.StringIO
    project: Path

    async def new_run(self) -> str:
        run_id = new_run_id()
        await self.journal.create(
            ev.RunCreated(
                run_id=run_id,
                target="gpu",
                kind="runpod",
                remote_dir=f"runs/{run_id}",
                settings_digest="d",
            )
        )
        return run_id

    def names(self, run_id: str) -> list[str]:
        return [r.event.name for r in self.store.history(run_id)]


@asynccontextmanager
async def loopback(tmp_path: Path, timing: Timing = FAST) -> AsyncIterator[Loop]:
    fake = FakeRunpod(provisioning_seconds=0.2, starting_seconds=0.3)
    fake.add_account(CANARY_KEY)
    project = tmp_path / "project"
    project.mkdir()
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False)
    store = RunStore(None, project, Actor.here("test"))
    journal = Journal(store, project, listener=front.event)
    try:
        async with AsyncExitStack() as stack:
            base_url = await stack.enter_async_context(serve_loopback(fake))
            pods = await stack.enter_async_context(fake_pods(fake, base_url, tmp_path / "pods"))
            client = await stack.enter_async_context(
                RunpodClient(CANARY_KEY, base_url, timeout=10.0)
            )
            session = Session(journal, front, Interrupts(front.notice), project)
            ctx = PodContext(
                client=client,
                session=session,
                timing=timing,
                connect=pinned_ssh(connect_timeout=5.0),
            )
            yield Loop(fake, pods, base_url, ctx, store, journal, err, project)
    finally:
        store.close()


async def test_provisioning_reaches_ready_through_real_ssh_and_the_real_watchdog(
    tmp_path: Path,
) -> None:
    async with loopback(tmp_path) as loop:
        run_id = await loop.new_run()
        spec = runpod_target([A40])
        with trio.fail_after(30):
            async with open_provisioned(
                loop.ctx, run_id, spec, keep=False, api_base=loop.base_url
            ) as ready:
                pod = ready.pod
                assert loop.names(run_id)[-3:] == ["pod.Created", "pod.EndpointSeen", "pod.Ready"]
                assert (pod.endpoint.host, pod.endpoint.port) == (
                    "127.0.0.1",
                    loop.pods.current(pod.pod_id).ssh_port,
                )
                # The job's connection is open: the bootstrap's files are there.
                job_env = await ready.executor.read_file(f"{pod.remote_dir}/.pod/job.env", 0, 4096)
                assert b"export HF_HOME=" in job_env
                verdict = await ready.executor.read_file(f"{pod.remote_dir}/.pod/watchdog", 0, 99)
                assert verdict == b"ready\n"
            await delete_pod(loop.ctx, run_id, pod.pod_id, "requested")
        assert loop.fake.status(pod.pod_id) == "TERMINATED"
        state = loop.store.get(run_id)
        assert state.pod.status == "deleted" and not state.pod.may_bill()
        assert state.pod.deleted_by == "client" and state.pod.spend is not None


async def test_a_pod_answering_with_another_host_key_is_refused(tmp_path: Path) -> None:
    _, _, other_host_key, _ = generate_run_keys("20260101-000000-0000")
    _, somebody, _, _ = generate_run_keys("20260101-000000-0001")
    with openssh_server(tmp_path / "impostor", other_host_key, somebody) as impostor:
        async with loopback(tmp_path, replace(FAST, ssh_within=2.0)) as loop:
            real_hook = loop.fake.on_running

            async def swap(pod: Any) -> None:
                assert real_hook is not None
                await real_hook(pod)
                # Somebody else answers at the pod's address, with another host key.
                loop.fake.set_ssh_endpoint(pod.id, "127.0.0.1", impostor)

            loop.fake.on_running = swap
            run_id = await loop.new_run()
            with trio.fail_after(30), pytest.raises(NothingPlaced) as caught:
                await provision(
                    loop.ctx, run_id, runpod_target([A40]), keep=False, api_base=loop.base_url
                )

            message = str(caught.value)
            assert "not_ready" not in message and "not ready" in message
            assert "did not present the host key pinned for this run" in message
            names = [r.event.name for r in loop.store.history(run_id)]
            assert "pod.EndpointSeen" not in names and "pod.Ready" not in names
            (pod,) = loop.fake.pods.values()
            assert loop.fake.status(pod.id) == "TERMINATED"
            assert "not trusting it" in loop.err.getvalue()
            assert not loop.store.get(run_id).pod.may_bill()
