"""Which runs' files ``runs rm`` and ``runs gc`` may remove, and why not
(``lifecycle.removal``): pure decisions on folded logs."""

from datetime import UTC, datetime, timedelta

import pytest

from overbrainer.events import types as ev
from overbrainer.events.aggregate import InvalidTransition, RunLog, fold
from overbrainer.lifecycle.removal import best, collect, parse_age, refusal

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def _at(days: float) -> str:
    return (T0 + timedelta(days=days)).isoformat().replace("+00:00", "Z")


def _run(run_id: str, *events: ev.Event, day: float = 0, kind: str = "local") -> RunLog:
    created = ev.RunCreated(
        run_id=run_id, target="t", kind=kind, remote_dir="r", settings_digest="d"
    )
    return fold([(created, _at(day)), *((e, _at(day)) for e in events)])


def _ended(state: str = "succeeded", **metrics: float) -> list[ev.Event]:
    return [ev.JobStarted(job_dir="x", pid=9), ev.RunEnded(state=state, metrics=dict(metrics))]


@pytest.mark.parametrize(
    ("text", "span"),
    [("12h", timedelta(hours=12)), ("30d", timedelta(days=30)), (" 2W ", timedelta(weeks=2))],
)
def test_an_age_is_whole_hours_days_or_weeks(text: str, span: timedelta) -> None:
    assert parse_age(text) == span


@pytest.mark.parametrize("text", ["", "30", "d", "-3d", "1.5d", "0d", "٣d", "30m"])
def test_any_other_age_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ValueError, match=r"^--older-than takes "):
        parse_age(text)


def test_a_run_not_ended_is_refused_with_the_command_that_ends_it() -> None:
    preparing = _run("20260101-100000-aaaa")
    why = refusal(preparing)
    assert why is not None and why.startswith("run 20260101-100000-aaaa is still being prepared")
    running = _run("20260101-100000-aaaa", ev.JobStarted(job_dir="x", pid=9))
    why = refusal(running)
    assert why is not None and "is running" in why
    assert "`overbrainer train cancel 20260101-100000-aaaa`" in why


def test_a_run_whose_pod_was_deleted_may_go_one_whose_pod_may_bill_may_not() -> None:
    pod = [
        ev.AttemptSent(n=1, pod_name="p", gpu_type="A40"),
        ev.AttemptResolved(n=1, result="created", pod_id="k3x9"),
        ev.PodCreated(pod_id="k3x9", gpu_type="A40", cost_per_hour=0.5),
        ev.JobStarted(job_dir="x", pid=9),
    ]
    gone = [ev.PodDeleting(pod_id="k3x9", reason="done"), ev.PodDeleted(pod_id="k3x9", by="client")]
    ended = ev.RunEnded(state="succeeded")
    alive = _run("20260101-100000-aaaa", *pod, ended, kind="runpod")
    assert (refusal(alive) or "").startswith("pod k3x9 (booting) of run")
    assert "`overbrainer pod rm 20260101-100000-aaaa`" in (refusal(alive) or "")
    assert refusal(_run("20260101-100000-aaaa", *pod, *gone, ended, kind="runpod")) is None
    # The log itself refuses the record for a pod that may bill (another command's race).
    with pytest.raises(InvalidTransition):
        alive.apply(ev.FilesRemoved(bytes=1), _at(1))


def test_a_run_of_another_checkout_is_removed_there() -> None:
    done = _run("20260101-100000-aaaa", *_ended())
    assert refusal(done) is None
    assert refusal(done, elsewhere="laptop-b") == (
        "run 20260101-100000-aaaa was started from the checkout on host laptop-b, which "
        "holds its files: run `overbrainer runs rm 20260101-100000-aaaa` there"
    )


def test_the_best_are_the_lowest_final_losses_eval_first_newer_on_a_tie() -> None:
    runs = [
        _run("20260101-100000-0001", *_ended(loss=0.2)),  # no eval loss: its loss counts
        _run("20260101-100000-0002", *_ended(loss=0.1, eval_loss=0.4)),
        _run("20260101-100000-0003", *_ended(eval_loss=0.4)),
        _run("20260101-100000-0004", *_ended("failed", eval_loss=0.01)),  # failed: never
        _run("20260101-100000-0005", *_ended()),  # no loss at all
    ]
    assert best(runs, 2) == ["20260101-100000-0001", "20260101-100000-0003"]
    assert best(runs, 0) == []


def test_gc_takes_the_runs_older_than_the_span_with_files_but_the_best() -> None:
    runs = [
        _run("20260101-100000-0001", *_ended(eval_loss=0.9), day=0),
        _run("20260101-100000-0002", *_ended(eval_loss=0.1), day=1),
        _run("20260101-100000-0003", *_ended(eval_loss=0.5), day=29.5),  # too young
        _run("20260101-100000-0004", *_ended(), ev.FilesRemoved(bytes=5), day=0),  # gone
        _run("20260101-100000-0005", ev.JobStarted(job_dir="x", pid=9), day=0),  # running
    ]
    plan = collect(runs, now=T0 + timedelta(days=30), older_than=timedelta(days=1), keep_best=1)
    assert [s.run.run_id for s in plan.remove] == ["20260101-100000-0001"]
    assert [(left.run_id, left.why[:30]) for left in plan.left] == [
        ("20260101-100000-0002", "among the 1 best (--keep-best)"),
        ("20260101-100000-0005", "run 20260101-100000-0005 is ru"),
    ]
    # A removed run has nothing home: no checkpoint to resume from.
    assert runs[3].run.checkpoint is None and runs[3].run.files_removed == {
        "at": _at(0),
        "bytes": 5,
    }
