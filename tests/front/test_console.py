"""The front end's progress lines off a terminal: throttled, milestones (evaluations,
phases) always, the last line once."""

import io

from overbrainer.front.console import Front
from overbrainer.train.metrics import MetricsEvent, MetricsSummary


def summary_at(step: int, eval_loss: float | None = None) -> MetricsSummary:
    begin = MetricsEvent(event="begin", time=0.0, max_steps=10)
    log = MetricsEvent(
        event="log",
        time=float(step),
        step=step,
        max_steps=10,
        epoch=step / 10,
        loss=1.0 / step,
        eval_loss=eval_loss,
    )
    return MetricsSummary().with_events([begin, log])


def test_plain_progress_is_throttled_eval_always_shown_and_the_last_line_printed_once() -> None:
    now = [0.0]
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False, throttle=10.0, clock=lambda: now[0])
    front.progress(MetricsSummary())  # nothing before the first metrics line
    front.progress(summary_at(1))
    now[0] = 3.0
    front.progress(summary_at(2))  # throttled
    front.progress(summary_at(3, eval_loss=0.5))  # throttled too: evaluations are milestones
    front.milestone("eval_loss 0.5 at step 3")  # always shown
    now[0] = 20.0
    front.progress(summary_at(10))
    front.progress_done(summary_at(10))
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("progress: step 1/10 (10%)")
    assert lines[1] == "eval_loss 0.5 at step 3"
    assert lines[2].startswith("progress: step 10/10 (100%)")
    assert len(lines) == 3, lines


def test_the_last_line_is_printed_when_the_throttle_hid_it() -> None:
    now = [0.0]
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False, throttle=10.0, clock=lambda: now[0])
    front.progress(summary_at(1))
    now[0] = 1.0
    front.progress(summary_at(9))
    front.progress_done(summary_at(9))
    lines = err.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "progress: step 1/10 (10%)",
        "progress: step 9/10 (90%)",
    ]


def test_on_a_terminal_progress_is_one_live_line_and_other_lines_go_above_it() -> None:
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=True)
    front.progress(summary_at(1))
    front.progress(summary_at(2, eval_loss=0.25))
    front.milestone("eval_loss 0.25 at step 2")
    front.warn("something to say")
    front.progress_done(summary_at(10))
    text = err.getvalue()
    assert "step 2/10 (20%)" in text  # the live line was drawn
    assert "eval_loss 0.25 at step 2" in text
    assert "warning: something to say" in text
    assert "progress: step 10/10 (100%)" in text.rstrip().splitlines()[-1]


def test_output_off_a_terminal_never_starts_with_an_empty_progress_line() -> None:
    now = [0.0]
    err = io.StringIO()
    front = Front(io.StringIO(), err, terminal=False, throttle=10.0, clock=lambda: now[0])
    begun = MetricsSummary().with_events([MetricsEvent(event="begin", time=0.0, max_steps=10)])
    front.progress(begun)  # the trainer began: no step yet
    now[0] = 1.0
    front.progress(summary_at(1))  # the first step is shown at once, not throttled away
    lines = err.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["progress: step 1/10 (10%)"]
    err.seek(0)
    err.truncate()
    quiet = Front(io.StringIO(), err, terminal=False)
    quiet.progress(begun)
    quiet.progress_done(begun)  # a job that ended before its first step: no empty line
    assert err.getvalue() == ""


def test_the_progress_line_rounds_its_numbers_for_people() -> None:
    from overbrainer.front.progress import progress_text

    summary = summary_at(5).with_events(
        [MetricsEvent(event="log", time=5.0, step=5, max_steps=10, learning_rate=2e-5)]
    )
    assert progress_text(summary, 0.123) == (
        "step 5/10 (50%), epoch 0.5, loss 0.2000, lr 2e-05, ETA 5s, spend $0.12"
    )
