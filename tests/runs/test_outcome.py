"""What a job's end means for its run (``lifecycle.outcome.judge``), as a table."""

import pytest

from overbrainer.events.types import RunState
from overbrainer.exec.base import JobState, JobStatus
from overbrainer.lifecycle.outcome import Verdict, judge
from overbrainer.train.metrics import MetricsEvent, MetricsSummary

RUN = "20260101-000000-ab12"
LOG = f"see runs/{RUN}/job.log"
WROTE = MetricsSummary(lines=3)
NOTHING = MetricsSummary()
ONLY_MALFORMED = MetricsSummary(lines=2, malformed=2)
SOME_MALFORMED = MetricsSummary(lines=3, malformed=2)


@pytest.mark.parametrize(
    ("job", "summary", "has_output", "verdict"),
    [
        pytest.param(
            JobState(JobStatus.exited, 0),
            WROTE,
            True,
            Verdict(RunState.succeeded, None, 0),
            id="exit-0-metrics-output",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            SOME_MALFORMED,
            True,
            Verdict(RunState.succeeded, None, 0),
            id="one-good-line-is-enough",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40),
            True,
            Verdict(RunState.stopped, "saved checkpoint-40 and stopped, as asked", 0),
            id="stopped-as-asked",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40, stopped_reason="deadline"),
            True,
            Verdict(
                RunState.stopped,
                "saved checkpoint-40 and stopped, as its pod's watchdog asked, before the "
                "pod's deadline",
                0,
            ),
            id="stopped-before-the-deadline",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40, stopped_reason="cost_cap"),
            True,
            Verdict(
                RunState.stopped,
                "saved checkpoint-40 and stopped, as its pod's watchdog asked, at 95 % of "
                "the pod's cost cap",
                0,
            ),
            id="stopped-at-the-cost-cap",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40, stopped_reason="stall"),
            True,
            Verdict(
                RunState.stopped,
                "saved checkpoint-40 and stopped, as its pod's watchdog asked, as the job had "
                "written no metrics line for too long",
                0,
            ),
            id="stopped-as-stalled",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40, stopped_reason="whatever"),
            True,
            Verdict(RunState.stopped, "saved checkpoint-40 and stopped, as asked", 0),
            id="an-unknown-reason-is-not-shown",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary(lines=4, stopped_step=40, merge_skipped=True),
            True,
            Verdict(
                RunState.stopped,
                "saved checkpoint-40 and stopped, as asked; the adapter was not merged, its "
                "training stopped before its end: merge it as it is with `axolotl merge-lora "
                f"axolotl.yaml` in runs/{RUN}, or train it to the end, merged then, with "
                f"`overbrainer train --resume-from {RUN}`",
                0,
            ),
            id="stopped-merge-skipped",
        ),
        pytest.param(
            JobState(JobStatus.exited, 1),
            MetricsSummary(lines=4, stopped_step=40),
            True,
            Verdict(RunState.failed, f"the job exited with code 1; {LOG}", 1),
            id="stopped-then-failed",
        ),
        pytest.param(
            JobState(JobStatus.cancelled),
            MetricsSummary(lines=4, stopped_step=40),
            True,
            Verdict(RunState.cancelled, "cancelled", None),
            id="stopped-then-cancelled",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            WROTE,
            False,
            Verdict(RunState.failed, f"the job exited 0 but left nothing under output/; {LOG}", 0),
            id="no-output",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            NOTHING,
            True,
            Verdict(
                RunState.failed,
                "the job exited 0 without writing any metrics: the metrics plugin was not "
                f"loaded; {LOG}",
                0,
            ),
            id="no-metrics",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            MetricsSummary().with_events([MetricsEvent(event="phase", phase="merging")]),
            True,
            Verdict(
                RunState.failed,
                "the job exited 0 without writing any metrics: the metrics plugin was not "
                f"loaded; {LOG}",
                0,
            ),
            id="only-the-merge-phase-line",
        ),
        pytest.param(
            JobState(JobStatus.exited, 0),
            ONLY_MALFORMED,
            True,
            Verdict(
                RunState.failed,
                "the job exited 0 without writing any metrics: the metrics plugin was not "
                f"loaded; {LOG}",
                0,
            ),
            id="only-malformed-metrics",
        ),
        pytest.param(
            JobState(JobStatus.exited, 3),
            WROTE,
            True,
            Verdict(RunState.failed, f"the job exited with code 3; {LOG}", 3),
            id="exit-3",
        ),
        pytest.param(
            JobState(JobStatus.exited, None),
            WROTE,
            True,
            Verdict(RunState.failed, f"the job's exit code is unreadable; {LOG}", None),
            id="exit-code-unreadable",
        ),
        pytest.param(
            JobState(JobStatus.cancelled),
            WROTE,
            True,
            Verdict(RunState.cancelled, "cancelled", None),
            id="cancelled",
        ),
        pytest.param(
            JobState(JobStatus.cancelled),
            NOTHING,
            False,
            Verdict(RunState.cancelled, "cancelled", None),
            id="cancelled-with-nothing",
        ),
        pytest.param(
            JobState(JobStatus.lost),
            WROTE,
            True,
            Verdict(
                RunState.failed,
                "the job vanished without an exit code (lost: killed, or its machine "
                f"restarted); {LOG}",
                None,
            ),
            id="lost",
        ),
    ],
)
def test_judge(job: JobState, summary: MetricsSummary, has_output: bool, verdict: Verdict) -> None:
    assert judge(job, summary, has_output=has_output, run_id=RUN) == verdict


def test_a_stop_whose_checkpoint_did_not_come_home_never_says_it_was_saved() -> None:
    verdict = judge(
        JobState(JobStatus.exited, 0),
        MetricsSummary(lines=4, stopped_step=40),
        has_output=True,
        run_id=RUN,
        checkpoint_home=False,
    )
    assert verdict == Verdict(
        RunState.stopped,
        "stopped at step 40, as asked, but no checkpoint-40 came home (the job left none in "
        "output/): there is nothing to resume from",
        0,
    )
    assert "saved" not in (verdict.message or "")


@pytest.mark.parametrize("status", [JobStatus.running, JobStatus.cancelling])
def test_a_job_that_has_not_ended_is_not_judged(status: JobStatus) -> None:
    with pytest.raises(ValueError, match="has not ended"):
        judge(JobState(status), WROTE, has_output=True, run_id=RUN)
