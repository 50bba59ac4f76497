"""The pieces that put a run's data on the project's network volume by content: blobs
through the S3 API (moto's server on loopback), the links the pod's bootstrap makes (the
real bootstrap against a temporary root), and the run directory's upload without what the
links stand for."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import pytest
import trio

from overbrainer.config.model import RunpodSettings
from overbrainer.exec.local import LocalExecutor
from overbrainer.runpod.keys import RunKeys, write_run_keys
from overbrainer.runpod.pod_scripts import (
    ENV_VOLUME_LINKS,
    UnsafePodValue,
    VolumeLink,
    pod_env,
)
from overbrainer.runpod.s3 import StoredObject, VolumeS3, upload_blobs
from overbrainer.runpod.volume_layout import blob_key, blobs_key, on_pod
from overbrainer.targets.runpod.volume_data import (
    BLOBS_LINK,
    LinkedUpload,
    VolumeData,
    data_files,
)
from overbrainer.testing.fake_executor import FakeExecutor, FakeMachine
from tests.runpod.conftest import S3Server
from tests.runpod.test_bootstrap import RUN, Pod

DC = "EU-RO-1"
_names = itertools.count()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _client(server: S3Server) -> VolumeS3:
    name = f"blobs{next(_names)}x{id(server) % 1000}"
    server.make_bucket(name, DC)
    creds = server.credentials
    return VolumeS3(creds.access_key, creds.secret, name, DC, base_url=server.url)


async def test_blobs_go_up_once_per_content_and_are_verified(
    strict_s3: S3Server, tmp_path: Path
) -> None:
    train, copy, other = (tmp_path / name for name in ("train.jsonl", "same.jsonl", "eval.jsonl"))
    train.write_bytes(b'{"text": "a"}\n' * 50)
    copy.write_bytes(train.read_bytes())  # another name, the same content: one blob
    other.write_bytes(b'{"text": "b"}\n')
    async with _client(strict_s3) as s3:
        first = await upload_blobs(s3, [train, copy, other])
        wanted = [
            StoredObject(blob_key(_sha(p.read_bytes())), p.stat().st_size, _sha(p.read_bytes()))
            for p in (train, other)
        ]
        assert (first.sent, first.skipped) == (tuple(wanted), ())
        for item in wanted:
            assert await s3.head_object(item.key) == item
        again = await upload_blobs(s3, [other, train])
        assert (again.sent, again.skipped) == ((), (wanted[1], wanted[0]))
        # A blob whose object holds something else (a torn or foreign write) is sent again.
        await s3.put_bytes(wanted[1].key, b"not the eval set")
        third = await upload_blobs(s3, [train, other])
        assert (third.sent, third.skipped) == ((wanted[1],), (wanted[0],))
        assert await s3.head_object(wanted[1].key) == wanted[1]


def test_a_volume_link_goes_from_the_run_directory_to_under_the_mount() -> None:
    folder = VolumeLink(BLOBS_LINK, on_pod(blobs_key()), directory=True)
    data = VolumeLink("data/train.jsonl", on_pod(blob_key("a" * 64)))
    assert folder.word() == ".pod/blobs=/runpod-volume/overbrainer/blobs/sha256/"
    assert data.word() == f"data/train.jsonl=/runpod-volume/overbrainer/blobs/sha256/{'a' * 64}"
    for bad in (
        VolumeLink("/etc/passwd", on_pod("x")),
        VolumeLink("../x", on_pod("x")),
        VolumeLink("data/a b", on_pod("x")),
        VolumeLink("data/x", "/etc/passwd"),
        VolumeLink("data/x", "/runpod-volume/../etc"),
        VolumeLink("data/x", "/runpod-volumeX/y"),
    ):
        with pytest.raises(UnsafePodValue):
            bad.word()


@pytest.fixture
def keys(tmp_path: Path) -> RunKeys:
    return write_run_keys(tmp_path / "local" / "runs" / RUN / "ssh", RUN)


def test_the_bootstrap_links_the_run_directory_into_the_volume(
    tmp_path: Path, keys: RunKeys
) -> None:
    pod = Pod(tmp_path / "pod", keys)
    volume = tmp_path / "volume"

    (pod.root / "runpod-volume").parent.mkdir(parents=True)
    (pod.root / "runpod-volume").symlink_to(volume)
    volume.mkdir()
    sha = "b" * 64
    links = [
        VolumeLink(BLOBS_LINK, on_pod(blobs_key()), directory=True),
        VolumeLink("data/train.jsonl", on_pod(blob_key(sha))),
    ]
    pod.env[ENV_VOLUME_LINKS] = " ".join(link.word() for link in links)
    done = pod.run(["sh"])
    assert done.returncode == 7, done.stdout + done.stderr
    assert pod.handed_over()["failed"] == ""
    # The blobs' folder is made on the volume; a data file's link waits for its blob.
    assert (pod.run_dir / ".pod" / "blobs").resolve() == (volume / blobs_key()).resolve()
    assert (volume / blobs_key()).is_dir()
    train = pod.run_dir / "data" / "train.jsonl"
    assert train.is_symlink() and not train.exists()
    (volume / blob_key(sha)).write_text("the data\n")
    assert train.read_text() == "the data\n"
    assert "linked data/train.jsonl to /runpod-volume/overbrainer/blobs/sha256/" in done.stdout


def test_the_bootstrap_refuses_a_link_out_of_the_run_directory(
    tmp_path: Path, keys: RunKeys
) -> None:
    pod = Pod(tmp_path / "pod", keys)
    pod.env[ENV_VOLUME_LINKS] = "../escape=/runpod-volume/x"
    done = pod.run(["sh"])
    assert done.returncode == 7
    assert "OVERBRAINER_VOLUME_LINKS: not a plain path: ../escape" in pod.handed_over()["failed"]
    assert not (pod.run_dir.parent / "escape").exists()


def test_pod_env_carries_the_links_for_the_bootstrap(keys: RunKeys) -> None:
    links = [VolumeLink("data/train.jsonl", on_pod(blob_key("c" * 64)))]
    env = pod_env(
        RUN,
        keys,
        run_dir="runs/x",
        max_hours=1.0,
        boot_grace_seconds=60,
        retrieve_grace_seconds=60,
        keep=False,
        volume_links=links,
    )
    assert env[ENV_VOLUME_LINKS] == links[0].word()
    none = pod_env(
        RUN,
        keys,
        run_dir="runs/x",
        max_hours=1.0,
        boot_grace_seconds=60,
        retrieve_grace_seconds=60,
        keep=False,
    )
    assert ENV_VOLUME_LINKS not in none


async def test_the_run_directory_goes_up_without_the_files_the_pod_links(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for rel, text in {
        "axolotl.yaml": "a",
        "data/train.jsonl": "t",
        "data/eval.jsonl": "e",
        "resume/checkpoint-2/model.bin": "m",
        "ssh/id_ed25519": "PRIVATE",
    }.items():
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text(text)
    files = data_files(run_dir)
    assert [(f.path, f.sha256) for f in files] == [
        ("data/train.jsonl", _sha(b"t")),
        ("data/eval.jsonl", _sha(b"e")),
    ]
    machine = FakeMachine()
    executor = LinkedUpload(
        FakeExecutor(machine), run_dir, frozenset({"data/train.jsonl", "data/eval.jsonl"})
    )
    await executor.upload(run_dir, "runs/r")
    assert machine.files == {
        "runs/r/axolotl.yaml": b"a",
        "runs/r/resume/checkpoint-2/model.bin": b"m",
    }
    # Nothing left behind at home; another directory goes up whole.
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "axolotl.yaml",
        "data",
        "resume",
        "ssh",
    ]
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    (other / "data" / "train.jsonl").write_text("t")
    await executor.upload(other, "runs/o")
    assert machine.files["runs/o/data/train.jsonl"] == b"t"
    await trio.lowlevel.checkpoint()


class _RacedExecutor(LocalExecutor):
    """This machine as the pod, where another run sends the same blobs at the same moment:
    as each upload of this run's ends, the other's half-written copy of each is in place."""

    def __init__(self, root: Path, blobs: Path) -> None:
        super().__init__(root)
        self.blobs = blobs

    async def upload(self, local_dir: Path, remote_dir: str) -> None:
        await super().upload(local_dir, remote_dir)
        for sent in local_dir.iterdir():
            (self.blobs / sent.name).write_bytes(sent.read_bytes()[:3])


async def test_blobs_through_the_pod_are_checked_apart_and_moved_into_place_whole(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home" / RUN
    (home / "data").mkdir(parents=True)
    (home / "data" / "train.jsonl").write_text('{"text": "a"}\n' * 20)
    (home / "data" / "eval.jsonl").write_text('{"text": "b"}\n' * 5)
    # The pod: the run's directory, whose .pod/blobs links to the volume's folder of blobs.
    root, blobs = tmp_path / "pod", tmp_path / "volume" / "blobs"
    remote_dir = f"overbrainer/{RUN}"
    (root / remote_dir / ".pod").mkdir(parents=True)
    blobs.mkdir(parents=True)
    (root / remote_dir / BLOBS_LINK).symlink_to(blobs)
    # An earlier try of this run left a torn blob in its incoming folder.
    leftover = blobs / f".incoming-{RUN}"
    leftover.mkdir()
    (leftover / _sha(b"other")).write_bytes(b"oth")
    said: list[str] = []
    data = VolumeData(RUN, home, RunpodSettings(), said.append)
    await data.before_create("volume1", DC)

    placed = await data.through_pod(_RacedExecutor(root, blobs), str(root), remote_dir)

    assert placed is not None and placed.via == "pod"
    assert [f["sent"] for f in placed.files] == [True, True]
    for rel in ("data/train.jsonl", "data/eval.jsonl"):
        content = (home / rel).read_bytes()
        # Whole, though the other run's half-written copy was there when this one's was
        # checked: the checked copy replaced it at once.
        assert (blobs / _sha(content)).read_bytes() == content
    assert sorted(p.name for p in blobs.iterdir()) == sorted(
        _sha((home / rel).read_bytes()) for rel in ("data/train.jsonl", "data/eval.jsonl")
    )  # the incoming folder gone, the earlier try's torn blob never placed
    assert len(said) == 2 and all("through the pod, verified: sent" in line for line in said)
