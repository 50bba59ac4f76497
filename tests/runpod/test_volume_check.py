"""`train --check` says what the project's network volume holds, read through Runpod's S3
API (moto's server on loopback standing in for it) when its key is set."""

from pathlib import Path

from overbrainer.runpod.s3 import VolumeS3
from overbrainer.testing.fake_executor import CANARY_KEY
from tests.preflight.test_train_preflight import run, runpod_project
from tests.runpod.conftest import S3Server

RUN = "20261201-120000-ab12"


async def test_check_says_what_the_volume_holds_by_part(tmp_path: Path, open_s3: S3Server) -> None:
    volume = 'volume = "cache"\nvolume_data_center = "US-KS-2"\nvolume_size_gb = 20\n'
    keys = {
        "OVERBRAINER_RUNPOD__S3_ACCESS_KEY": "user_check",
        "OVERBRAINER_RUNPOD__S3_SECRET": "rps_check",
        "OVERBRAINER_RUNPOD__S3_BASE_URL": open_s3.url,
    }
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        toml = project.path / "overbrainer.toml"
        toml.write_text(toml.read_text() + volume)
        made = fake.add_network_volume(CANARY_KEY, "cache", size=20, data_center="US-KS-2")
        open_s3.make_bucket(made.id, "US-KS-2")
        empty = await run(project, "train", "--check", **keys)
        held = {
            "overbrainer/hf/hub/models--m/blobs/a": 3_000_000,
            "overbrainer/prepared/data-1/x.arrow": 2_000,
            f"overbrainer/blobs/sha256/{'c' * 64}": 1_000,
            f"overbrainer/runs/{RUN}/output/checkpoint-2/adapter.bin": 50_000,
            "notes.txt": 10,
        }
        async with VolumeS3(
            "user_check", "rps_check", made.id, "US-KS-2", base_url=open_s3.url
        ) as s3:
            for key, size in held.items():
                await s3.put_bytes(key, b"x" * size)
        full = await run(project, "train", "--check", **keys)
    assert empty.returncode == 0 and full.returncode == 0, full.stdout + full.stderr
    (line,) = [x for x in empty.stdout.splitlines() if "network volume" in x]
    assert line.endswith(f"exists ({made.id}, 20 GB); it holds nothing yet"), line
    (line,) = [x for x in full.stdout.splitlines() if "network volume" in x]
    assert " ".join(line.split()).endswith(
        f"exists ({made.id}, 20 GB); holds 3.1 MB: model cache 3.0 MB, prepared data 2.0 kB, "
        "data from home 1.0 kB, the output of 1 run 50.0 kB, files not overbrainer's 10 bytes"
    ), line
    # Neither key is shown.
    assert "rps_check" not in full.stdout + full.stderr
    assert fake.volume_create_requests() == [] and fake.create_requests() == []
