"""What takes a network volume's space and which checkpoints on it may go: the pure folds of
an S3 listing behind ``volume ls``, ``volume du`` and ``volume prune``, table by table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from overbrainer.errors import UsageError
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.projections.summary import summary_lines
from overbrainer.runpod.models import NetworkVolume, parse_pod
from overbrainer.runpod.s3 import StoredObject
from overbrainer.runpod.volume_layout import checkpoint_of
from overbrainer.runpod.volume_usage import (
    Checkpoint,
    checkpoints_of,
    monthly_cost,
    prune_plan,
    usage_of,
)
from overbrainer.targets.runpod.volume_cmds import named_volume, runs_by_volume

RUN_A = "20260101-100000-aaaa"
RUN_B = "20260102-100000-bbbb"
NOW = datetime(2026, 6, 1, tzinfo=UTC)
OLD = NOW - timedelta(days=40)
NEW = NOW - timedelta(days=2)


def _obj(key: str, size: int, modified: datetime | None = OLD) -> StoredObject:
    return StoredObject(key, size, modified=modified)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (f"overbrainer/runs/{RUN_A}/output/checkpoint-10/adapter.bin", (RUN_A, 10)),
        (f"overbrainer/runs/{RUN_A}/output/checkpoint-7/sub/dir/x", (RUN_A, 7)),
        # The run's final output beside its checkpoints, a checkpoint-like name elsewhere,
        # a folder with no object in it, and things not overbrainer's are no checkpoint.
        (f"overbrainer/runs/{RUN_A}/output/adapter_model.safetensors", None),
        (f"overbrainer/runs/{RUN_A}/output/checkpoint-x/a", None),
        (f"overbrainer/runs/{RUN_A}/output/checkpoint-10", None),
        (f"overbrainer/runs/{RUN_A}/logs/checkpoint-10/a", None),
        ("mine/runs/x/output/checkpoint-10/a", None),
        ("overbrainer/hf/hub/checkpoint-10/a", None),
    ],
)
def test_a_key_is_a_checkpoints_object_only_under_a_runs_output(
    key: str, expected: tuple[str, int] | None
) -> None:
    found = checkpoint_of(key)
    assert (found[:2] if found else None) == expected
    if found is not None:
        assert found[2] == f"overbrainer/runs/{found[0]}/output/checkpoint-{found[1]}"


def test_the_space_is_told_by_part_and_each_runs_output_by_run() -> None:
    usage = usage_of(
        [
            _obj("overbrainer/hf/hub/models--m/blob", 3000),
            _obj("overbrainer/hf/token", 5),
            _obj("overbrainer/prepared/abc/data.arrow", 500),
            _obj(f"overbrainer/blobs/sha256/{'a' * 64}", 700),
            _obj(f"overbrainer/runs/{RUN_A}/output/checkpoint-10/a", 100),
            _obj(f"overbrainer/runs/{RUN_A}/output/adapter_model.safetensors", 50),
            _obj(f"overbrainer/runs/{RUN_B}/output/checkpoint-5/a", 9),
            _obj("notes.txt", 7),
            _obj("overbrainer/unknown/x", 1),
        ]
    )
    assert (usage.cache, usage.prepared, usage.data, usage.other) == (3005, 500, 700, 8)
    assert usage.runs == {RUN_A: 150, RUN_B: 9}
    assert usage.total == 3005 + 500 + 700 + 8 + 159


def test_a_checkpoint_gathers_its_objects_and_is_as_old_as_its_newest_one() -> None:
    found = checkpoints_of(
        [
            _obj(f"overbrainer/runs/{RUN_A}/output/checkpoint-20/a", 1, OLD),
            _obj(f"overbrainer/runs/{RUN_A}/output/checkpoint-20/b", 2, NEW),
            _obj(f"overbrainer/runs/{RUN_A}/output/checkpoint-3/a", 4, None),
            _obj(f"overbrainer/runs/{RUN_A}/output/adapter_model.safetensors", 8),
        ]
    )
    assert [(c.run_id, c.step, c.size, c.modified) for c in found] == [
        (RUN_A, 3, 4, None),
        (RUN_A, 20, 3, NEW),
    ]
    assert found[1].keys == (
        f"overbrainer/runs/{RUN_A}/output/checkpoint-20/a",
        f"overbrainer/runs/{RUN_A}/output/checkpoint-20/b",
    )


def _ckpt(run_id: str, step: int, modified: datetime | None = OLD) -> Checkpoint:
    prefix = f"overbrainer/runs/{run_id}/output/checkpoint-{step}"
    return Checkpoint(run_id, step, prefix, 100 * step, (f"{prefix}/a",), modified)


@pytest.mark.parametrize(
    ("checkpoints", "live", "finished", "deleted", "why_kept"),
    [
        # A run that succeeded: every old checkpoint goes, the newest too.
        ([_ckpt(RUN_A, 1), _ckpt(RUN_A, 2)], set(), {RUN_A}, [1, 2], {}),
        # A run that did not succeed (stopped, failed, unknown here): its newest stays.
        (
            [_ckpt(RUN_A, 1), _ckpt(RUN_A, 2)],
            set(),
            set(),
            [1],
            {2: "the newest checkpoint of run 20260101-100000-aaaa, which did not finish"},
        ),
        # A run in progress: nothing of it goes, however old.
        (
            [_ckpt(RUN_A, 1), _ckpt(RUN_A, 2)],
            {RUN_A},
            set(),
            [],
            {
                1: "run 20260101-100000-aaaa is in progress",
                2: "run 20260101-100000-aaaa is in progress",
            },
        ),
        # Young enough, or of an age the listing did not say: kept.
        (
            [_ckpt(RUN_A, 1, NEW), _ckpt(RUN_A, 2, None)],
            set(),
            {RUN_A},
            [],
            {1: "not old enough", 2: "its age is unknown"},
        ),
        # The newest of an unfinished run is kept even when it is the only old one.
        ([_ckpt(RUN_A, 5), _ckpt(RUN_A, 9, NEW)], set(), set(), [5], {9: "not old enough"}),
    ],
)
def test_pruning_keeps_what_a_run_in_progress_or_a_resume_needs(
    checkpoints: list[Checkpoint],
    live: set[str],
    finished: set[str],
    deleted: list[int],
    why_kept: dict[int, str],
) -> None:
    plan = prune_plan(
        checkpoints,
        older_than=timedelta(days=30),
        now=NOW,
        live=frozenset(live),
        finished=frozenset(finished),
    )
    assert [c.step for c in plan.delete] == deleted
    assert {c.step: why for c, why in plan.kept} == why_kept
    assert plan.freed == sum(100 * step for step in deleted)


def test_pruning_counts_the_newest_checkpoint_per_run() -> None:
    plan = prune_plan(
        [_ckpt(RUN_A, 1), _ckpt(RUN_A, 2), _ckpt(RUN_B, 1)],
        older_than=timedelta(days=30),
        now=NOW,
        live=frozenset(),
        finished=frozenset(),
    )
    assert [(c.run_id, c.step) for c in plan.delete] == [(RUN_A, 1)]


@pytest.mark.parametrize(("size", "cost"), [(20, 1.40), (100, 7.0), (None, None)])
def test_a_volume_costs_its_size_at_seven_cents_a_gb_a_month(
    size: int | None, cost: float | None
) -> None:
    assert monthly_cost(size) == pytest.approx(cost)


VOLUMES = [
    NetworkVolume("vol1aaaaaa", "cache", 20, "US-KS-2", "STANDARD"),
    NetworkVolume("vol2bbbbbb", "twice", 20, "US-KS-2", "STANDARD"),
    NetworkVolume("vol3cccccc", "twice", 20, "EU-RO-1", "STANDARD"),
]


def test_a_volume_is_named_by_its_name_or_its_id() -> None:
    assert named_volume(VOLUMES, "cache").id == "vol1aaaaaa"
    assert named_volume(VOLUMES, "vol3cccccc").data_center == "EU-RO-1"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("twice", "2 network volumes named 'twice' (vol2bbbbbb in US-KS-2, vol3cccccc in EU-RO-1)"),
        ("none", "no network volume named 'none' (its volumes: cache, twice)"),
    ],
)
def test_an_unknown_or_ambiguous_name_is_a_usage_error(name: str, said: str) -> None:
    with pytest.raises(UsageError) as caught:
        named_volume(VOLUMES, name)
    assert said in str(caught.value)


def _attached(run_id: str, volume_id: str | None) -> RunLog:
    created = ev.RunCreated(
        run_id=run_id,
        target="gpu",
        kind="runpod",
        remote_dir="/workspace/overbrainer",
        settings_digest="d",
        base_model="m",
        adapter="lora",
    )
    events: list[ev.Event] = [created]
    if volume_id is not None:
        events.append(
            ev.VolumeAttached(
                volume_id=volume_id,
                volume_name="cache",
                data_center="US-KS-2",
                created=run_id == RUN_A,
                size_gb=20,
            )
        )
    return fold((e, "2026-01-01T10:00:00Z") for e in events)


def test_the_attached_volume_is_folded_into_the_run_and_told_by_runs_show() -> None:
    state = _attached(RUN_A, "vol1aaaaaa")
    assert state.pod.volume == {
        "id": "vol1aaaaaa",
        "name": "cache",
        "data_center": "US-KS-2",
        "created": True,
        "size_gb": 20,
    }
    assert RunLog.from_json(state.to_json()).pod.volume == state.pod.volume
    assert "  volume     cache (vol1aaaaaa, 20 GB) in US-KS-2, created by this run" in (
        summary_lines(state)
    )
    assert not any(line.startswith("  volume") for line in summary_lines(_attached(RUN_B, None)))


def test_runs_are_grouped_by_the_volume_they_attached() -> None:
    states = [_attached(RUN_A, "vol1aaaaaa"), _attached(RUN_B, "vol1aaaaaa")]
    states.append(_attached("20260103-100000-cccc", None))
    assert runs_by_volume(states) == {"vol1aaaaaa": [RUN_A, RUN_B]}


@pytest.mark.parametrize(
    ("mounts", "expected"),
    [
        ({"network": [{"volumeId": "vol1aaaaaa", "path": "/runpod-volume"}]}, ("vol1aaaaaa",)),
        ({}, ()),
        ({"persistent": {"size": 20, "path": "/workspace"}}, ()),
        ({"network": [{"path": "/x"}, {"volumeId": "bad id!"}]}, ()),
        (None, ()),
    ],
)
def test_a_pod_says_which_network_volumes_it_mounts(
    mounts: object, expected: tuple[str, ...]
) -> None:
    assert parse_pod({"id": "pod1", "mounts": mounts}).network_volumes == expected
