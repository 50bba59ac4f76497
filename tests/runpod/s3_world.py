"""The fake world's network volumes served by a real S3-compatible server too (moto's, on
loopback: :class:`~tests.runpod.conftest.S3Server`), as Runpod serves each volume as a
bucket: a volume the fake creates gets its bucket (named by the volume's id, in its data
center), and a pod mounting a volume finds there, at each boot, every object the bucket
holds (copied into the volume's directory; one way: what pods write stays off S3).
A volume's bucket is emptied if it is there already: the fake's volume ids repeat from
one test to the next, the server lives for the whole session."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from overbrainer.testing.fake_pod import FakePods
from overbrainer.testing.runpod_api import FakeRunpod, FakeVolume
from tests.runpod.conftest import S3Server


@dataclass(frozen=True)
class Seen:
    """The S3 side when a pod create arrived: each live volume's objects (key: size and
    SHA-256 carried) and the requests moto had answered by then, in order."""

    objects: dict[str, dict[str, dict[str, Any]]]
    requests: list[str]


@dataclass
class S3Volumes:
    """Joins ``fake``'s volumes and ``pods``' mounts to ``server``'s buckets (see the
    module). ``at_create``: what S3 held when each pod create arrived, before it was
    handled (what the volume held through S3 then, :class:`Seen`)."""

    server: S3Server
    fake: FakeRunpod
    pods: FakePods
    at_create: list[Seen] = field(default_factory=list)
    since: int = 0

    def install(self) -> None:
        """Hook the fake and the pods; the requests moto answered before are not this
        world's."""
        self.since = len(self._logged())
        add = self.fake.add_network_volume

        def add_network_volume(*args: Any, **kwargs: Any) -> FakeVolume:
            volume = add(*args, **kwargs)
            self.server.make_bucket(volume.id, volume.data_center)
            return volume

        self.fake.add_network_volume = add_network_volume  # type: ignore[method-assign]
        on_running = self.fake.on_running
        assert on_running is not None

        async def pull_then_boot(pod: Any) -> None:
            for mount in (pod.body.get("mounts") or {}).get("network", []):
                self.pull(str(mount["volumeId"]))
            await on_running(pod)

        self.fake.on_running = pull_then_boot
        handle = self.fake.handle

        async def handle_noting_creates(request: Any) -> Any:
            if request.method == "POST" and request.path.rstrip("/").endswith("/v2/pods"):
                requests = self.requests()
                objects = {v.id: self.objects(v.id) for v in self.fake.live_volumes()}
                self.at_create.append(Seen(objects, requests))
            return await handle(request)

        self.fake.handle = handle_noting_creates  # type: ignore[method-assign]

    def client(self) -> Any:
        import boto3  # moto's own client, to look at the server's state

        return boto3.client(
            "s3",
            endpoint_url=self.server.url,
            region_name="us-east-1",
            aws_access_key_id=self.server.credentials.access_key,
            aws_secret_access_key=self.server.credentials.secret,
        )

    def requests(self) -> list[str]:
        """The requests moto answered since :meth:`install`, as its log says them
        (``PUT /bucket/key 200``), in order."""
        found = []
        for line in self._logged()[self.since :]:
            match = re.search(r'"([A-Z]+) (/[^ ?"]*)[^"]*" (\d{3})', line)
            if match is not None:
                found.append(f"{match.group(1)} {match.group(2)} {match.group(3)}")
        return found

    def _logged(self) -> list[str]:
        return self.server.log.read_text(errors="replace").splitlines()

    def objects(self, bucket: str) -> dict[str, dict[str, Any]]:
        """Every object of ``bucket``: its size and the SHA-256 it carries."""
        client = self.client()
        found: dict[str, dict[str, Any]] = {}
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                head = client.head_object(Bucket=bucket, Key=item["Key"])
                found[item["Key"]] = {
                    "size": head["ContentLength"],
                    "sha256": head.get("Metadata", {}).get("sha256"),
                }
        return found

    def pull(self, volume_id: str) -> None:
        """Copy every object of the volume's bucket into its directory."""
        client = self.client()
        root = self.pods.volume_dir(volume_id)
        for key in self.objects(volume_id):
            target = root / key
            target.parent.mkdir(parents=True, exist_ok=True)
            body: Callable[[], bytes] = client.get_object(Bucket=volume_id, Key=key)["Body"].read
            target.write_bytes(body())
