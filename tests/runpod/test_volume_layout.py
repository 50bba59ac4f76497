"""The network volume's layout: what each key is for, and keys that cannot be made."""

import pytest

from overbrainer.events.ids import BadRunId
from overbrainer.runpod.volume_layout import (
    VolumePart,
    blob_key,
    hf_home_key,
    on_pod,
    part_of,
    prepared_key,
    run_output_key,
)

DIGEST = "ab" * 32
RUN = "20260101-120000-ab12"


@pytest.mark.parametrize(
    ("key", "part"),
    [
        (f"{hf_home_key()}/hub/models--org--m/blobs/x", VolumePart("cache")),
        (f"{prepared_key()}/3f2a/data.arrow", VolumePart("prepared")),
        (blob_key(DIGEST), VolumePart("data")),
        (
            f"{run_output_key(RUN)}/checkpoint-4/model.safetensors",
            VolumePart("checkpoints", RUN),
        ),
        ("overbrainer/runs", VolumePart("other")),
        ("my-notes/readme.txt", VolumePart("other")),
        ("overbrainer", VolumePart("other")),
        ("/overbrainer/hf/x", VolumePart("cache")),
    ],
)
def test_each_key_of_the_volume_is_classified_by_what_it_holds(key: str, part: VolumePart) -> None:
    assert part_of(key) == part


def test_a_key_is_the_path_under_the_mount_on_the_pod() -> None:
    assert on_pod(hf_home_key()) == "/runpod-volume/overbrainer/hf"
    assert on_pod(f"/{prepared_key()}/") == "/runpod-volume/overbrainer/prepared"


@pytest.mark.parametrize("digest", ["AB" * 32, "ab" * 31, "../" + "a" * 61, ""])
def test_a_blob_key_is_made_only_from_a_sha256_in_lower_case_hex(digest: str) -> None:
    with pytest.raises(ValueError, match="not a SHA-256"):
        blob_key(digest)


def test_a_run_output_key_refuses_a_run_id_that_could_leave_its_folder() -> None:
    with pytest.raises(BadRunId):
        run_output_key("../other")
