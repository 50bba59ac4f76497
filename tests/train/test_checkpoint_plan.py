"""Which checkpoints come home while a job runs, and which leave this machine: tables."""

import pytest

from overbrainer.train.checkpoint_plan import (
    MAX_ATTEMPTS,
    saved_steps,
    should_retry,
    to_fetch,
    to_prune,
)
from overbrainer.train.metrics import MetricsEvent


def test_saved_steps_are_the_announced_ones_only() -> None:
    events = [
        MetricsEvent("begin", max_steps=10),
        MetricsEvent("log", step=1, loss=1.0),  # a folder may exist: not announced
        MetricsEvent("saved", step=2),
        MetricsEvent("saved"),  # no step: nothing to name
        MetricsEvent("saved", step=0),
        MetricsEvent("stopped", step=5),  # an older plugin announced a stop's save so
        MetricsEvent("phase", phase="saving_adapter"),
    ]
    assert saved_steps(events) == {2, 5}


@pytest.mark.parametrize(
    ("saved", "home", "keep", "skip", "after", "want"),
    [
        ([], [], 2, [], 0, []),
        ([10], [], 2, [], 0, [10]),
        # The newest first: a target that dies next loses least.
        ([10, 20], [], 2, [], 0, [20, 10]),
        # Only the last `keep` of those saved and home: older ones would be pruned at once.
        ([10, 20, 30], [], 2, [], 0, [30, 20]),
        ([10, 20, 30], [20], 2, [], 0, [30]),
        ([10, 20, 30], [30], 1, [], 0, []),
        ([10, 20, 30], [10, 20, 30], 2, [], 0, []),
        # Home already, or given up on, or being fetched: not again.
        ([10, 20], [], 2, [20], 0, [10]),
        ([10, 20], [], 2, [10, 20], 0, []),
        # A resumed run's start: that checkpoint is home already.
        ([10, 20], [], 2, [], 10, [20]),
        # A newer one home (fetched first) does not bring an older one back once past keep.
        ([10, 20, 30], [20, 30], 2, [], 0, []),
        ([10, 20, 30], [], 5, [], 0, [30, 20, 10]),
    ],
)
def test_to_fetch(
    saved: list[int],
    home: list[int],
    keep: int,
    skip: list[int],
    after: int,
    want: list[int],
) -> None:
    assert to_fetch(saved, home, keep=keep, skip=skip, after=after) == want


@pytest.mark.parametrize(
    ("home", "keep", "want"),
    [
        ([], 2, []),
        ([10], 2, []),
        ([10, 20], 2, []),
        ([10, 20, 30], 2, [10]),
        ([30, 10, 20, 40], 2, [10, 20]),
        ([10, 20, 30], 1, [10, 20]),
        # The last one always stays.
        ([10, 20], 0, [10]),
    ],
)
def test_to_prune(home: list[int], keep: int, want: list[int]) -> None:
    assert to_prune(home, keep=keep) == want


@pytest.mark.parametrize(
    ("attempts", "want"), [(1, True), (MAX_ATTEMPTS - 1, True), (MAX_ATTEMPTS, False)]
)
def test_a_failing_checkpoint_is_tried_a_bounded_number_of_times(attempts: int, want: bool) -> None:
    assert should_retry(attempts) is want
