"""Parsing metrics.jsonl in chunks, the summary fold and the final train: line."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from overbrainer.train.metrics import (
    MetricsEvent,
    MetricsSummary,
    format_epoch,
    format_loss,
    format_rate,
    milestones,
    parse_metrics_lines,
    summary_line,
)
from overbrainer.train.overbrainer_metrics import metrics_line

BEGIN = metrics_line("begin", time=100.0, max_steps=20).encode()
LOG = metrics_line(
    "log", time=101.0, step=2, epoch=0.1, max_steps=20, loss=1.5, learning_rate=2e-4
).encode()
EVAL = metrics_line("log", time=102.0, step=2, epoch=0.1, max_steps=20, eval_loss=1.7).encode()


def test_complete_lines_only() -> None:
    data = BEGIN + LOG + EVAL[:10]
    events, malformed, consumed = parse_metrics_lines(data)
    assert [event.event for event in events] == ["begin", "log"]
    assert malformed == 0
    assert consumed == len(BEGIN) + len(LOG)
    # The next read starts at the unfinished line and completes it.
    rest = data[consumed:] + EVAL[10:]
    events, malformed, consumed = parse_metrics_lines(rest)
    assert [event.eval_loss for event in events] == [1.7]
    assert consumed == len(rest)


def test_no_newline_at_all_consumes_nothing() -> None:
    assert parse_metrics_lines(LOG[:-1]) == ([], 0, 0)
    assert parse_metrics_lines(b"") == ([], 0, 0)


def test_final_read_takes_the_last_line_too() -> None:
    events, malformed, consumed = parse_metrics_lines(BEGIN + LOG[:-1], final=True)
    assert [event.event for event in events] == ["begin", "log"]
    assert consumed == len(BEGIN) + len(LOG) - 1
    # A line cut in the middle by a killed job counts as malformed.
    events, malformed, consumed = parse_metrics_lines(BEGIN + LOG[:20], final=True)
    assert (len(events), malformed, consumed) == (1, 1, len(BEGIN) + 20)


def test_a_runaway_line_is_given_up_on() -> None:
    data = BEGIN + b"x" * 100
    events, malformed, consumed = parse_metrics_lines(data, max_line=50)
    assert (len(events), malformed, consumed) == (1, 1, len(data))


def test_malformed_lines_are_counted_not_fatal() -> None:
    bad = [
        b"not json\n",
        b"[1, 2]\n",
        b'{"time": 1}\n',
        b'{"event": ""}\n',
        b'{"event": "log", "step": "three"}\n',
        b'{"event": "log", "step": 1.5}\n',
        b'{"event": "log", "loss": true}\n',
        b'{"event": "log", "loss": "NaNa"}\n',
        b"\xff\xfe\n",
    ]
    data = BEGIN + b"".join(bad) + b"\n   \n" + LOG
    events, malformed, consumed = parse_metrics_lines(data)
    assert [event.event for event in events] == ["begin", "log"]
    assert malformed == len(bad)
    assert consumed == len(data)


def test_fields_and_spelled_floats() -> None:
    data = (
        b'{"event":"log","time":5,"step":3.0,"max_steps":9,"epoch":1,"loss":"NaN",'
        b'"eval_loss":"Infinity","grad_norm":"-Infinity","extra":{"a":1}}\n'
        b'{"event":"future_kind","step":4}\r\n'
    )
    (log, future), malformed, _ = parse_metrics_lines(data)
    assert malformed == 0
    assert (log.time, log.step, log.max_steps, log.epoch) == (5.0, 3, 9, 1.0)
    assert log.loss is not None and math.isnan(log.loss)
    assert log.eval_loss == math.inf
    assert log.grad_norm == -math.inf
    assert future == MetricsEvent(event="future_kind", step=4)


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=300))
def test_chunked_reading_never_loses_or_repeats_lines(noise: bytes, cut: int) -> None:
    lines = [BEGIN, LOG, noise.replace(b"\n", b" ") + b"\n", EVAL]
    data = b"".join(lines)
    cut = min(cut, len(data))
    whole, whole_bad, _ = parse_metrics_lines(data)
    first, first_bad, consumed = parse_metrics_lines(data[:cut])
    second, second_bad, _ = parse_metrics_lines(data[consumed:])
    assert first + second == whole
    assert first_bad + second_bad == whole_bad


def _summary() -> MetricsSummary:
    events, malformed, _ = parse_metrics_lines(BEGIN + LOG + EVAL + b"junk\n")
    return MetricsSummary().with_events(events, malformed)


def test_summary_fold_keeps_the_latest_known_values() -> None:
    summary = _summary()
    assert summary.lines == 3
    assert summary.malformed == 1
    assert (summary.step, summary.max_steps, summary.epoch) == (2, 20, 0.1)
    assert summary.loss == 1.5  # the eval line has no loss: the last one stays
    assert summary.eval_loss == 1.7
    assert summary.learning_rate == 2e-4
    assert summary.started_at == 100.0
    assert summary.last_time == 102.0
    assert summary.fraction == 0.1


def test_summary_ignores_unknown_events_values() -> None:
    summary = MetricsSummary().with_event(MetricsEvent(event="future", step=99, loss=0.1))
    assert summary.lines == 1
    assert summary.step is None
    assert summary.loss is None


def test_summary_dict_round_trip() -> None:
    summary = _summary().with_event(MetricsEvent(event="log", loss=math.nan))
    data = summary.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["loss"] == "NaN"
    assert data["step"] == 2
    restored = MetricsSummary.from_dict(data)
    assert restored.loss is not None and math.isnan(restored.loss)
    assert restored.to_dict() == data
    assert MetricsSummary.from_dict({}) == MetricsSummary()
    assert MetricsSummary.from_dict({"step": "x", "lines": 4, "other": 1}).lines == 4


def test_summary_line_full() -> None:
    summary = MetricsSummary(step=120, max_steps=120, epoch=3.0, loss=0.812345, eval_loss=0.9012345)
    line = summary_line(
        "20250101-120000-ab12", "succeeded", summary, "runs/20250101-120000-ab12/output"
    )
    assert line == (
        "train: run 20250101-120000-ab12 succeeded; step 120/120, epoch 3, loss 0.8123, "
        "eval_loss 0.9012; output in runs/20250101-120000-ab12/output"
    )


def test_summary_line_leaves_out_what_is_unknown() -> None:
    run = "20250101-120000-ab12"
    assert summary_line(run, "failed", None, None) == f"train: run {run} failed"
    assert summary_line(run, "failed", MetricsSummary(), None) == f"train: run {run} failed"
    partial = MetricsSummary(step=7, epoch=0.333333, loss=12.3456)
    assert (
        summary_line(run, "cancelled", partial, None)
        == f"train: run {run} cancelled; step 7, epoch 0.33, loss 12.35"
    )
    assert summary_line(run, "succeeded", None, "runs/x/output") == (
        f"train: run {run} succeeded; output in runs/x/output"
    )


def test_number_formats() -> None:
    assert [format_epoch(e) for e in (3.0, 1.5, 0.3333, 0.0, 2.999)] == [
        "3",
        "1.5",
        "0.33",
        "0",
        "3",
    ]
    assert [format_loss(v) for v in (1.23456, 0.0432109, 123.456, math.nan, 1.0, 1234.4)] == [
        "1.235",
        "0.04321",
        "123.5",
        "nan",
        "1.000",
        "1234",
    ]
    assert [format_rate(v) for v in (2e-4, 1.5e-5)] == ["0.0002", "1.5e-05"]


# --- milestones: evaluations at their own steps, phases ---------------------------------


def _line(**fields: object) -> bytes:
    return (json.dumps(fields) + "\n").encode()


def test_phase_lines_are_read_and_a_bad_phase_is_malformed() -> None:
    data = (
        _line(event="phase", time=1.0, phase="saving_adapter")
        + _line(event="phase", time=2.0, phase="Saving; rm -rf /")
        + _line(event="phase", time=3.0, phase=7)
        + _line(event="phase", time=4.0, phase="x" * 41)
    )
    events, malformed, _ = parse_metrics_lines(data)
    assert [e.phase for e in events] == ["saving_adapter"]
    assert malformed == 3


# A real run's lines (as Axolotl 0.19 logs them through the plugin): an evaluation at
# step 0, training steps, evaluations interleaved; all read in one poll.
_RUN = [
    {"event": "begin", "time": 1.0, "max_steps": 4},
    {"event": "log", "time": 1.1, "step": 0, "epoch": 0, "max_steps": 4, "eval_loss": 6.16},
    {"event": "log", "time": 1.2, "step": 1, "epoch": 0.25, "max_steps": 4, "loss": 6.17},
    {"event": "log", "time": 1.3, "step": 2, "epoch": 0.5, "max_steps": 4, "loss": 6.15},
    {"event": "log", "time": 1.4, "step": 2, "epoch": 0.5, "max_steps": 4, "eval_loss": 6.12},
    {"event": "log", "time": 1.5, "step": 3, "epoch": 0.75, "max_steps": 4, "loss": 6.13},
    {"event": "log", "time": 1.6, "step": 4, "epoch": 1.0, "max_steps": 4, "loss": 6.11},
    {"event": "log", "time": 1.7, "step": 4, "epoch": 1.0, "max_steps": 4, "eval_loss": 6.11},
    {"event": "phase", "time": 1.8, "phase": "saving_adapter"},
    {"event": "phase", "time": 9.0, "phase": "merging"},
    {"event": "phase", "time": 9.5, "phase": "some_future_phase"},
]


def test_every_evaluation_is_a_milestone_at_its_own_step() -> None:
    data = b"".join(_line(**fields) for fields in _RUN)
    events, malformed, _ = parse_metrics_lines(data)
    assert malformed == 0
    assert list(milestones(events)) == [
        "eval_loss 6.160 at step 0 (epoch 0)",
        "eval_loss 6.120 at step 2 (epoch 0.5)",
        "eval_loss 6.110 at step 4 (epoch 1)",
        "training ended; saving the adapter",
        "merging the adapter into the base model",
    ]
    # The summary still holds the latest of each value.
    summary = MetricsSummary().with_events(events)
    assert (summary.step, summary.eval_loss, summary.loss) == (4, 6.11, 6.11)


@pytest.mark.parametrize("cut", range(1, 11))
def test_milestones_are_the_same_however_the_file_is_read(cut: int) -> None:
    # Read in two polls cut anywhere: each milestone once, in order, never merged or lost.
    data = b"".join(_line(**fields) for fields in _RUN)
    at = sum(len(_line(**fields)) for fields in _RUN[:cut]) - 3
    first, _, used = parse_metrics_lines(data[:at])
    second, _, _ = parse_metrics_lines(data[used:])
    whole, _, _ = parse_metrics_lines(data)
    assert list(milestones(first)) + list(milestones(second)) == list(milestones(whole))


def test_a_full_fine_tune_saves_the_model() -> None:
    events, _, _ = parse_metrics_lines(_line(event="phase", time=1.0, phase="saving_model"))
    assert list(milestones(events)) == ["training ended; saving the model"]


def test_a_stopped_line_names_the_step_of_its_checkpoint() -> None:
    data = (
        b'{"event":"log","time":1,"step":7,"loss":1.0}\n'
        b'{"event":"stopped","time":2,"step":7}\n'
        b'{"event":"phase","time":3,"phase":"saving_adapter"}\n'
    )
    events, malformed, _ = parse_metrics_lines(data)
    summary = MetricsSummary().with_events(events, malformed)
    assert (summary.stopped_step, summary.step, summary.lines) == (7, 7, 3)
    assert list(milestones(events)) == [
        "stopping at step 7, as asked: the job saves checkpoint-7",
        "training ended; saving the adapter",
    ]
    assert MetricsSummary.from_dict(summary.to_dict()).stopped_step == 7
    assert MetricsSummary().stopped_step is None


def test_a_stopped_line_says_why_when_its_request_did() -> None:
    data = (
        b'{"event":"stopped","time":2,"step":7,"reason":"deadline"}\n'
        b'{"event":"phase","time":3,"phase":"merge_skipped"}\n'
    )
    events, malformed, _ = parse_metrics_lines(data)
    summary = MetricsSummary().with_events(events, malformed)
    assert (summary.stopped_step, summary.stopped_reason, summary.merge_skipped) == (
        7,
        "deadline",
        True,
    )
    assert list(milestones(events)) == [
        "stopping at step 7, as its pod's watchdog asked, before the pod's deadline: the job "
        "saves checkpoint-7",
        "not merging the adapter: its training was stopped before its end",
    ]
    again = MetricsSummary.from_dict(summary.to_dict())
    assert (again.stopped_reason, again.merge_skipped) == ("deadline", True)
    # A reason that is not a plain word is left out; the line still counts.
    events, malformed, _ = parse_metrics_lines(b'{"event":"stopped","step":3,"reason":"<x>"}\n')
    assert malformed == 0 and events[0].reason is None
