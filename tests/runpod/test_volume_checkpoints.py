"""The pure decisions of checkpoints on a network volume: which come home under
``checkpoints_home``, which checkpoint a recovery tries on the volume, where the pod's
output links to, and what the log records of a checkpoint whole on the volume."""

from __future__ import annotations

import pytest

from overbrainer.config.model import CheckpointsHome
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import InvalidTransition, RunLog
from overbrainer.lifecycle.checkpoints_home import home_due
from overbrainer.targets.runpod.recovery import volume_candidate
from overbrainer.targets.runpod.volume_output import output_link
from overbrainer.testing.fake_executor import runpod_target

AT = "2026-01-01T10:00:00Z"
RUN = "20260101-100000-aaaa"
SOURCE = "20260101-090000-bbbb"


@pytest.mark.parametrize(
    ("policy", "saved", "home", "ended", "due"),
    [
        # all: as without a volume (the newest first, only the last `keep`).
        ("all", {10, 20, 30}, set(), False, [30, 20]),
        ("all", {10, 20, 30}, {30}, True, [20]),
        # last: nothing while the job runs; once it ended, its newest save alone.
        ("last", {10, 20, 30}, set(), False, []),
        ("last", {10, 20, 30}, set(), True, [30]),
        ("last", {10, 20, 30}, {30}, True, []),
        ("last", set(), set(), True, []),
        # none: never.
        ("none", {10, 20, 30}, set(), False, []),
        ("none", {10, 20, 30}, set(), True, []),
    ],
)
def test_checkpoints_home_decides_what_comes_home_and_when(
    policy: CheckpointsHome, saved: set[int], home: set[int], ended: bool, due: list[int]
) -> None:
    assert home_due(policy, saved, home, keep=2, ended=ended) == due


def test_a_checkpoint_given_up_on_is_not_brought_home_at_the_end() -> None:
    assert home_due("last", {10, 20}, set(), keep=2, skip={20}, ended=True) == []


def _state(on_volume: list[tuple[int, str]], resumed: bool = False) -> RunLog:
    state = RunLog()
    created = ev.RunCreated(
        run_id=RUN,
        target="gpu",
        kind="runpod",
        remote_dir="runs/x",
        settings_digest="d",
        resumed_from={"run": SOURCE, "step": 10} if resumed else None,
    )
    state.apply(created, AT)
    for step, digest in on_volume:
        path = f"output/checkpoint-{step}"
        for event in decisions.checkpoint_on_volume(state, step, path, files=3, digest=digest):
            state.apply(event, AT)
    return state


WITH_VOLUME = runpod_target(["A40"], volume="cache", volume_data_center="EU-RO-1")
WITHOUT = runpod_target(["A40"])


@pytest.mark.parametrize(
    ("spec", "on_volume", "home_step", "candidate"),
    [
        (WITH_VOLUME, [(10, "a"), (20, "b")], 10, (20, "b")),
        (WITH_VOLUME, [(10, "a"), (20, "b")], 0, (20, "b")),
        (WITH_VOLUME, [(10, "a"), (20, "b")], 20, (20, "b")),
        # Home has a newer one (the volume's record lags): that one, uploaded.
        (WITH_VOLUME, [(10, "a")], 20, None),
        (WITH_VOLUME, [], 20, None),
        # A target without a volume never looks there.
        (WITHOUT, [(10, "a"), (20, "b")], 0, None),
    ],
)
def test_a_recovery_tries_the_newest_checkpoint_on_the_volume_unless_home_has_a_newer(
    spec: object, on_volume: list[tuple[int, str]], home_step: int, candidate: object
) -> None:
    assert volume_candidate(_state(on_volume), spec, home_step) == candidate  # type: ignore[arg-type]


def test_the_pods_output_links_to_the_runs_folder_on_the_volume_relatively() -> None:
    assert output_link("/workspace/overbrainer", f"runs/{RUN}", RUN) == (
        f"../../../../runpod-volume/overbrainer/runs/{RUN}/output"
    )


def test_a_checkpoint_on_the_volume_is_recorded_once_and_again_only_if_it_changed() -> None:
    state = _state([(20, "b"), (10, "a")])
    assert [c["step"] for c in state.run.volume_checkpoints] == [10, 20]
    assert (
        decisions.checkpoint_on_volume(state, 10, "output/checkpoint-10", files=3, digest="a") == []
    )
    (again,) = decisions.checkpoint_on_volume(
        state, 10, "output/checkpoint-10", files=4, digest="c"
    )
    state.apply(again, AT)
    assert [
        (c["step"], c["manifest_digest"], c["files"]) for c in state.run.volume_checkpoints
    ] == [
        (10, "c", 4),
        (20, "b", 3),
    ]


def test_a_resume_from_the_volume_is_recorded_only_for_the_run_and_step_it_resumes_from() -> None:
    state = _state([], resumed=True)
    (found,) = decisions.resumed_from_volume(state, SOURCE, 10)
    with pytest.raises(InvalidTransition):
        state.copy().apply(ev.ResumedFromVolume(source=SOURCE, step=20), AT)
    state.apply(found, AT)
    assert state.run.resumed_from == {"run": SOURCE, "step": 10, "from_volume": True}
    # Once the job started (or the run ended), nothing more is said of where it began.
    state.apply(ev.JobStarted(job_dir="runs/x", pid=7), AT)
    assert decisions.resumed_from_volume(state, SOURCE, 10) == []
