"""Real S3-compatible servers on loopback (moto's server), started once per test session
when a test asks for one.

``strict_s3`` checks every request's AWS Signature V4 against the key of an IAM user made
for the session (moto's IAM authentication, on after the three requests that make the
user); ``open_s3`` accepts any key, so a test may sign with canary values.
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from overbrainer.runpod.sigv4 import Credentials, sign


@dataclass(frozen=True)
class S3Server:
    """A running moto server: its URL, its log, and a key it accepts."""

    url: str
    log: Path
    credentials: Credentials

    @property
    def netloc(self) -> str:
        return self.url.split("://", 1)[1]

    def make_bucket(self, name: str, region: str, credentials: Credentials | None = None) -> None:
        """An empty bucket ``name`` (a network volume, for the client) in ``region``: made,
        or emptied when an earlier test of the session made it (the fake's volume ids
        repeat from one test to the next: its randomness is seeded)."""
        body = (
            '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
        ).encode()
        signed = sign(
            credentials or self.credentials,
            method="PUT",
            host=self.netloc,
            encoded_path=f"/{name}",
            payload_sha256=hashlib.sha256(body).hexdigest(),
            region=region,
        )
        answer = httpx.put(f"{self.url}/{name}", content=body, headers=signed.headers)
        if answer.status_code == 409 and "BucketAlreadyOwnedByYou" in answer.text:
            self._empty(name, credentials or self.credentials)
            return
        assert answer.status_code == 200, answer.text

    def _empty(self, name: str, credentials: Credentials) -> None:
        import boto3  # an independent client, to look at and clear the server's state

        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=credentials.access_key,
            aws_secret_access_key=credentials.secret,
        )
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                client.delete_object(Bucket=name, Key=item["Key"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto's server did not start:\n{log.read_text()}")
            time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def strict_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    import boto3  # moto's own client, for the IAM user only

    log = tmp_path_factory.mktemp("moto-strict") / "server.log"
    process, url = _start(log, {"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="overbrainer")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName="overbrainer", PolicyName="volumes", PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName="overbrainer")["AccessKey"]
        yield S3Server(url, log, Credentials(key["AccessKeyId"], key["SecretAccessKey"]))
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def open_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    log = tmp_path_factory.mktemp("moto-open") / "server.log"
    process, url = _start(log, {})
    try:
        yield S3Server(url, log, Credentials("user_any", "rps_any"))
    finally:
        _stop(process)
