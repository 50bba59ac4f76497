"""A fake Runpod account on loopback whose pods and clusters come to life, each pod (and
each member of a cluster) with its own SSH server, the real bootstrap and watchdog: the
world of the tests that drive the fake pods, the fake clusters and their watchdogs through
the API alone, with real OpenSSH as the client."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import trio

from overbrainer.runpod.client import CreateCluster
from overbrainer.runpod.keys import RunKeys, write_run_keys, write_ssh_config
from overbrainer.runpod.pod_scripts import pod_args, pod_env
from overbrainer.testing.fake_pod import FakePods, fake_pods
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback

IMAGE = "example/axolotl@sha256:" + "0" * 64
A40 = "NVIDIA A40"


@dataclass
class PodWorld:
    fake: FakeRunpod
    base: str
    account: str
    pods: FakePods
    keys: RunKeys
    tmp: Path
    run: str

    @property
    def run_dir(self) -> str:
        """The run's directory on a pod, relative to the pod's home."""
        return f"overbrainer/{self.run}"

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base, headers={"Authorization": f"Bearer {self.account}"}
        )

    def env(
        self, *, max_hours: float = 1.0, max_cost_usd: float | None = None, **changes: str
    ) -> dict[str, str]:
        """The container environment overbrainer gives a pod of the run, with ``changes``."""
        env = pod_env(
            self.run,
            self.keys,
            run_dir=self.run_dir,
            max_hours=max_hours,
            boot_grace_seconds=600,
            retrieve_grace_seconds=600,
            keep=False,
            max_cost_usd=max_cost_usd,
        )
        env.update(changes)
        return env

    async def create_pod(self, env: dict[str, str], gpus: int = 1) -> str:
        body = {
            "name": f"overbrainer-{self.run}-1",
            "image": IMAGE,
            "cloud": "SECURE",
            "gpu": {"id": A40, "count": gpus},
            "disk": 50,
            "ports": ["22/tcp"],
            "env": env,
            "args": pod_args(),
        }
        async with self.client() as client:
            answer = await client.post("/pods", json=body)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    async def create_cluster(self, env: dict[str, str], nodes: int, gpus_per_node: int = 2) -> str:
        spec = CreateCluster(
            name=f"overbrainer-{self.run}-1",
            image=IMAGE,
            gpu_type=A40,
            gpus_per_pod=gpus_per_node,
            pod_count=nodes,
            disk_gb=50,
            env=env,
            args=pod_args(),
        )
        async with self.client() as client:
            answer = await client.post("/clusters", json=spec.to_json())
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    async def wait_for_ssh(self, pod_id: str, timeout: float = 10) -> dict[str, Any]:
        """Poll the pod as provisioning would until it shows ``ssh.direct``; that."""
        async with self.client() as client:
            with trio.fail_after(timeout):
                while True:
                    pod = (await client.get(f"/pods/{pod_id}")).json()
                    if pod["status"] == "RUNNING" and pod["ssh"]["direct"]:
                        return dict(pod["ssh"]["direct"])
                    await trio.sleep(0.05)

    async def members_up(self, cluster_id: str) -> list[dict[str, Any]]:
        """Poll the members as provisioning would until each shows ``ssh.direct``; by
        rank."""
        async with self.client() as client:
            with trio.fail_after(20):
                while True:
                    pods = (await client.get(f"/clusters/{cluster_id}/pods")).json()["pods"]
                    if all(p["status"] == "RUNNING" and p["ssh"]["direct"] for p in pods):
                        return sorted(pods, key=lambda p: p["cluster"]["rank"])
                    await trio.sleep(0.05)

    async def verdict(self, pod_id: str, pod_path: str | None = None) -> str:
        """The pod's watchdog verdict (at ``pod_path``, else in the run's directory), once
        written."""
        path = self.pods.path(pod_id, pod_path or f"{self.run_dir}/.pod/watchdog")
        with trio.fail_after(15):
            while not path.exists():
                await trio.sleep(0.05)
        return path.read_text()

    def ssh_config(self, direct: dict[str, Any], keys: RunKeys | None = None) -> Path:
        """An OpenSSH config for the endpoint ``direct``, with the run's keys (or ``keys``)."""
        keys = keys or self.keys
        return write_ssh_config(
            keys.ssh_dir, self.run, direct["host"], direct["port"], direct["username"]
        )

    async def ssh(
        self, to: dict[str, Any] | Path, command: str, stdin: bytes = b""
    ) -> subprocess.CompletedProcess[bytes]:
        """``command`` by real OpenSSH, to the endpoint ``to`` with the run's keys, or by
        the config ``to``."""
        config = to if isinstance(to, Path) else self.ssh_config(to)
        home = self.tmp / "ssh-home"
        home.mkdir(exist_ok=True)
        return await trio.run_process(
            ["ssh", "-F", str(config), f"overbrainer-{self.run}", command],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={"PATH": os.environ["PATH"], "HOME": str(home)},
        )


World = TypeVar("World", bound=PodWorld)


@asynccontextmanager
async def pod_world(
    tmp_path: Path,
    run: str,
    kind: type[World] = PodWorld,  # type: ignore[assignment]
    *,
    shell: tuple[str, ...] = ("sh",),
    gpu_price: float | None = None,
    overrides: dict[str, str] | None = None,
) -> AsyncIterator[World]:
    """The fake API on loopback with living pods whose watchdogs check every 0.2 s, run by
    ``shell``; ``gpu_price``: every GPU's USD/h (the fake's defaults otherwise);
    ``overrides``: variables every container's environment has in place of its own;
    ``kind``: the world's class, a test module's own with its helpers."""
    prices = None if gpu_price is None else {A40: gpu_price}
    fake = FakeRunpod(provisioning_seconds=0.1, starting_seconds=0.1, gpu_prices=prices)
    account = fake.add_account(balance=1e6)
    keys = write_run_keys(tmp_path / "project" / "runs" / run / "ssh", run)
    overrides = {"OVERBRAINER_INTERVAL": "0.2", **(overrides or {})}
    async with (
        serve_loopback(fake) as base,
        fake_pods(fake, base, tmp_path / "pods", shell=shell, overrides=overrides) as pods,
    ):
        yield kind(fake, base, account, pods, keys, tmp_path, run)
