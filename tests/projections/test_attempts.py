"""A recovered run's metrics lines, joined across its attempts into one series: the pure
join (a table), and the files a follower keeps for each attempt, read back as one curve."""

from pathlib import Path

import pytest

from overbrainer.projections.attempts import Attempt, join_attempts, resumed_line
from overbrainer.projections.curves import curves_of
from overbrainer.projections.live import (
    METRICS_FILE,
    SEEN_FILE,
    LiveFiles,
    attempts_seen,
    curve_events,
    seen_file,
)
from overbrainer.train.metrics import MetricsEvent, MetricsSummary


def begin(time: float) -> MetricsEvent:
    return MetricsEvent(event="begin", time=time, max_steps=10)


def log(step: int, loss: float | None = None, *, eval_loss: float | None = None) -> MetricsEvent:
    return MetricsEvent(event="log", step=step, loss=loss, eval_loss=eval_loss)


def logs(first: int, last: int, attempt: int) -> list[MetricsEvent]:
    """Steps ``first``..``last``, their loss telling the attempt that logged them."""
    return [log(step, attempt + step / 100) for step in range(first, last + 1)]


def steps(events: list[MetricsEvent]) -> list[tuple[str, int | None]]:
    return [(e.event, e.step) for e in events]


PHASE = MetricsEvent(event="phase", phase="merging")
B = ("begin", None)


def L(*numbers: int) -> list[tuple[str, int | None]]:
    """Log lines of ``numbers``, as :func:`steps` gives them (short: the table reads it)."""
    return [("log", n) for n in numbers]


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        pytest.param([], [], id="no attempt"),
        pytest.param(
            [Attempt([begin(0), *logs(1, 3, 0), PHASE])],
            [B, *L(1, 2, 3), ("phase", None)],
            id="one attempt: as it is",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 5, 0)]), Attempt([begin(9), *logs(4, 6, 1)], 3)],
            [B, *L(1, 2, 3), B, *L(4, 5, 6)],
            id="steps past the resumed one were lost: dropped",
        ),
        pytest.param(
            [
                Attempt([begin(0), *logs(1, 4, 0)]),
                Attempt([begin(5), *logs(3, 7, 1)], 2),
                Attempt([begin(9), *logs(6, 8, 2)], 5),
            ],
            [B, *L(1, 2), B, *L(3, 4, 5), B, *L(6, 7, 8)],
            id="three attempts",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 4, 0), PHASE]), Attempt(logs(3, 4, 1), 2)],
            [B, *L(1, 2, 3, 4)],
            id="what came after the lost steps goes with them",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 4, 0)]), Attempt([begin(5), *logs(3, 5, 1)])],
            [B, *L(1, 2), B, *L(3, 4, 5)],
            id="resume step unknown: just before the next attempt's first step",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 4, 0)]), Attempt([begin(5)])],
            [B, *L(1, 2, 3, 4), B],
            id="resume step unknown, nothing logged yet: nothing cut",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 4, 0)]), Attempt([begin(5)], 2)],
            [B, *L(1, 2), B],
            id="resumed, nothing logged yet: the lost steps dropped already",
        ),
        pytest.param(
            [Attempt([begin(0), *logs(1, 4, 0)]), Attempt([begin(5), *logs(1, 2, 1)], 0)],
            [B, B, *L(1, 2)],
            id="resumed from the start: every earlier step was lost",
        ),
        pytest.param(
            [Attempt([]), Attempt([begin(5), *logs(4, 5, 1)], 3)],
            [B, *L(4, 5)],
            id="an earlier attempt whose lines were not seen here",
        ),
    ],
)
def test_join_attempts_keeps_each_attempt_up_to_where_the_next_resumed(
    attempts: list[Attempt], expected: list[tuple[str, int | None]]
) -> None:
    assert steps(join_attempts(attempts)) == expected


def test_the_joined_losses_are_each_steps_from_the_attempt_that_kept_it() -> None:
    joined = join_attempts(
        [
            Attempt([*logs(1, 4, 0), log(4, eval_loss=0.9), *logs(5, 5, 0)]),
            Attempt([*logs(4, 6, 1), log(6, eval_loss=0.5), *logs(7, 7, 1)], 3),
            Attempt(logs(7, 9, 2), 6),
        ]
    )
    curves = curves_of(joined)
    assert curves.loss == (
        (1.0, 0.01),
        (2.0, 0.02),
        (3.0, 0.03),
        (4.0, 1.04),
        (5.0, 1.05),
        (6.0, 1.06),
        (7.0, 2.07),
        (8.0, 2.08),
        (9.0, 2.09),
    )
    assert curves.eval_loss == ((6.0, 0.5),)


def test_an_attempt_of_a_mirror_says_its_resumed_line_and_keeps_only_the_jobs_lines() -> None:
    attempt = Attempt.of([resumed_line(30), begin(1), *logs(31, 32, 1)])
    assert attempt.resumed == 30
    assert steps(list(attempt.events)) == [("begin", None), ("log", 31), ("log", 32)]
    assert Attempt.of([begin(1)]).resumed is None


# --- the files a follower keeps ---------------------------------------------------------


def follow(run_dir: Path, events: list[MetricsEvent], recovery: int = 0, resumed: int = 0) -> None:
    """A follower of attempt ``recovery`` seeing ``events`` in two reads."""
    files = LiveFiles(run_dir, mirror=True, recovery=recovery, resumed=resumed)
    half = len(events) // 2
    summary = MetricsSummary().with_events(events[:half])
    files.saw(events[:half], summary)
    files.saw(events[half:], summary.with_events(events[half:]))


def write_metrics(run_dir: Path, events: list[MetricsEvent]) -> None:
    (run_dir / METRICS_FILE).write_text("".join(e.to_line() for e in events))


def test_each_attempts_mirror_is_its_own_file_and_the_curve_runs_across_them(
    tmp_path: Path,
) -> None:
    first, second, third = (
        [begin(0), *logs(1, 14, 0)],
        [begin(1), *logs(11, 23, 1)],
        [begin(2), *logs(21, 30, 2)],
    )
    follow(tmp_path, first)
    follow(tmp_path, second, recovery=1, resumed=10)
    follow(tmp_path, third, recovery=2, resumed=20)
    assert (tmp_path / SEEN_FILE).is_file()
    assert (tmp_path / seen_file(2)).read_text().splitlines()[0] == resumed_line(20).to_line()[:-1]
    # Attached again, recovery 2's follower rewrites its own mirror only.
    follow(tmp_path, third, recovery=2, resumed=20)
    curves = curves_of(curve_events(tmp_path))
    assert [int(s) for s, _ in curves.loss] == list(range(1, 31))
    assert [int(loss) for _, loss in curves.loss] == [0] * 10 + [1] * 10 + [2] * 10


def test_the_retrieved_metrics_stand_for_the_last_attempts_mirror_and_keep_the_earlier(
    tmp_path: Path,
) -> None:
    first, last = [begin(0), *logs(1, 14, 0)], [begin(1), *logs(11, 20, 1)]
    follow(tmp_path, first)
    follow(tmp_path, last[:5], recovery=1, resumed=10)  # the follower saw only a part
    write_metrics(tmp_path, last)  # the results came home: the last pod's file
    attempts = attempts_seen(tmp_path)
    assert [a.resumed for a in attempts] == [None, 10]
    assert list(attempts[1].events) == last
    curves = curves_of(curve_events(tmp_path))
    assert [int(s) for s, _ in curves.loss] == list(range(1, 21))
    assert [int(loss) for _, loss in curves.loss] == [0] * 10 + [1] * 10


def test_a_last_attempt_followed_from_elsewhere_still_joins_after_the_mirrored_ones(
    tmp_path: Path,
) -> None:
    follow(tmp_path, [begin(0), *logs(1, 14, 0)])
    write_metrics(tmp_path, [begin(1), *logs(11, 20, 1)])
    curves = curves_of(curve_events(tmp_path))
    assert [int(s) for s, _ in curves.loss] == list(range(1, 21))
    assert [int(loss) for _, loss in curves.loss] == [0] * 10 + [1] * 10


def test_a_run_never_recovered_reads_as_before(tmp_path: Path) -> None:
    events = [begin(0), *logs(1, 5, 0), PHASE]
    assert curve_events(tmp_path) == []
    follow(tmp_path, events[:3])
    assert curve_events(tmp_path) == events[:3]  # in progress: what was seen
    write_metrics(tmp_path, events)
    assert curve_events(tmp_path) == events  # home: the job's own file
    (tmp_path / SEEN_FILE).unlink()
    assert curve_events(tmp_path) == events  # a job on this machine: no mirror
