"""The decisions of ``overbrainer.events.decisions``, as tables: a run's state in, the events
to append (or a verdict) out. No I/O: each state is a fold of events."""

from collections.abc import Callable
from typing import Any

import pytest

from overbrainer.events import decisions as d
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog, fold
from overbrainer.events.types import RunState

AT = "2026-01-01T00:00:00.000000Z"


def log(*events: ev.Event) -> RunLog:
    """The state after ``events``."""
    return fold((event, AT) for event in events)


CREATED = ev.RunCreated(
    run_id="20260101-000000-ab12",
    target="gpu",
    kind="runpod",
    remote_dir="runs/20260101-000000-ab12",
    settings_digest="d",
)
STARTED = ev.JobStarted(job_dir="runs/x", pid=42)
SENT = ev.AttemptSent(n=1, pod_name="overbrainer-x-1", gpu_type="A40")
POD = ev.PodCreated(pod_id="p1", gpu_type="A40", cost_per_hour=0.5)
ASKED = ev.CancelRequested(relay="asked")
TAKEN = ev.CancelRequested(relay="taken")
FAILED = ev.RunEnded(state=RunState.failed, message="boom")
NOTE = ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: the link dropped")
HOME = ev.ArtifactsRetrieved(files=3, bytes=10, manifest_digest="m")

PREPARING = log(CREATED)
RUNNING = log(CREATED, STARTED)
ENDED = log(CREATED, FAILED)
ENDED_RUNNING = log(CREATED, STARTED, FAILED)
WITH_POD = log(CREATED, SENT, POD)
POD_RUNNING = log(CREATED, SENT, POD, STARTED)
POD_DELETING = log(CREATED, SENT, POD, STARTED, ev.PodDeleting(pod_id="p1", reason="requested"))
POD_DELETED = log(
    CREATED,
    SENT,
    POD,
    STARTED,
    ev.PodDeleting(pod_id="p1", reason="requested"),
    ev.PodDeleted(pod_id="p1", by="client"),
)
TAKEN_LOG = log(CREATED, STARTED, ASKED, TAKEN)
STOP = ev.StopRequested(relay="asked")
STOP_TAKEN = ev.StopRequested(relay="taken")
STOP_ASKED = log(CREATED, STARTED, STOP)
PREPARING_DELETING = log(CREATED, SENT, POD, ev.PodDeleting(pod_id="p1", reason="failed"))


def applies(state: RunLog, events: list[ev.Event]) -> None:
    """What a decision returns always follows from the state it was given."""
    trial = state.copy()
    for event in events:
        trial.apply(event, AT)


P5 = "output/checkpoint-5"
CKPT_5 = ev.CheckpointRetrieved(step=5, path=P5)
PRUNED_5 = ev.CheckpointPruned(step=5, path=P5)
HOME_5 = log(CREATED, STARTED, CKPT_5)


LOST_1 = ev.Recovering(reason="pod p1 no longer exists", attempt=1, max_recoveries=3, pod_id="p1")
BACK_1 = ev.Recovered(attempt=1, pod_id="p2", resumed_step=5, lost_steps=2)
RECOVERING = log(CREATED, SENT, POD, STARTED, ev.PodDeleted(pod_id="p1", by="found_gone"), LOST_1)
RECOVERED_JOB = log(
    CREATED,
    SENT,
    POD,
    STARTED,
    ev.PodDeleted(pod_id="p1", by="found_gone"),
    LOST_1,
    ev.AttemptSent(n=2, pod_name="overbrainer-x-2", gpu_type="A40"),
    ev.PodCreated(pod_id="p2", gpu_type="A40", cost_per_hour=0.5),
    ev.JobStarted(job_dir="runs/x", pid=43),
)


def log_recovered() -> RunLog:
    state = RECOVERED_JOB.copy()
    state.apply(BACK_1, AT)
    return state


def rows() -> list[Any]:
    """(name, decision on the state, state, expected events)."""
    table: list[tuple[str, Callable[[RunLog], list[ev.Event]], RunLog, list[ev.Event]]] = [
        # a job's start is recorded only on a run still preparing
        ("start_job preparing", lambda s: d.start_job(s, STARTED), PREPARING, [STARTED]),
        ("start_job running", lambda s: d.start_job(s, STARTED), RUNNING, []),
        ("start_job ended", lambda s: d.start_job(s, STARTED), ENDED, []),
        # a run whose job never started fails (or is cancelled), noting a signal's stage
        (
            "fail_before_job",
            lambda s: d.fail_before_job(s, "no data"),
            PREPARING,
            [ev.RunEnded(state=RunState.failed, message="no data")],
        ),
        (
            "fail_before_job interrupted",
            lambda s: d.fail_before_job(s, "stopped", stage="connecting"),
            PREPARING,
            [
                ev.Interrupted(stage="connecting"),
                ev.RunEnded(state=RunState.failed, message="stopped"),
            ],
        ),
        (
            "fail_before_job cancelled",
            lambda s: d.fail_before_job(s, "asked", outcome=RunState.cancelled),
            PREPARING,
            [ev.RunEnded(state=RunState.cancelled, message="asked")],
        ),
        ("fail_before_job started", lambda s: d.fail_before_job(s, "x"), RUNNING, []),
        ("fail_before_job ended", lambda s: d.fail_before_job(s, "x", stage="y"), ENDED, []),
        (
            "interrupted_at preparing",
            lambda s: d.interrupted_at(s, "creating a pod"),
            PREPARING,
            [ev.Interrupted(stage="creating a pod")],
        ),
        ("interrupted_at running", lambda s: d.interrupted_at(s, "x"), RUNNING, []),
        (
            "end_run running",
            lambda s: d.end_run(s, RunState.cancelled, "why"),
            RUNNING,
            [ev.RunEnded(state=RunState.cancelled, message="why")],
        ),
        (
            "end_run preparing",
            lambda s: d.end_run(s, RunState.failed, "why"),
            PREPARING,
            [ev.RunEnded(state=RunState.failed, message="why")],
        ),
        ("end_run ended", lambda s: d.end_run(s, RunState.failed, "why"), ENDED, []),
        # a dead starter's run: its job adopted, or the run failed saying why
        (
            "adopt a running job",
            lambda s: d.adopt_or_fail_start(
                s, job_dir="runs/x", pid=7, container="c", stopped=False, who="`train`"
            ),
            PREPARING,
            [ev.JobStarted(job_dir="runs/x", pid=7, container="c")],
        ),
        (
            "no job to adopt",
            lambda s: d.adopt_or_fail_start(
                s, job_dir="runs/x", pid=None, container=None, stopped=False, who="`train`"
            ),
            PREPARING,
            [
                ev.RunEnded(
                    state=RunState.failed,
                    message="`train` stopped before the run's job started (killed or "
                    "crashed); nothing runs on the target",
                )
            ],
        ),
        (
            "a job stopped as unrecorded",
            lambda s: d.adopt_or_fail_start(
                s, job_dir="runs/x", pid=7, container=None, stopped=True, who="`train`"
            ),
            PREPARING,
            [
                ev.RunEnded(
                    state=RunState.failed,
                    message="`train` stopped before the run's job started (killed or "
                    "crashed); its job was stopped because its start could not be recorded",
                )
            ],
        ),
        (
            "settled meanwhile",
            lambda s: d.adopt_or_fail_start(
                s, job_dir="runs/x", pid=7, container=None, stopped=False, who="w"
            ),
            RUNNING,
            [],
        ),
        # following stops, the job goes on: only for a running run, with its metrics
        (
            "detach running",
            lambda s: d.detach(s, "interrupted"),
            RUNNING,
            [ev.Detached(reason="interrupted", metrics={})],
        ),
        ("detach ended", lambda s: d.detach(s, "interrupted"), ENDED_RUNNING, []),
        ("detach preparing", lambda s: d.detach(s, "interrupted"), PREPARING, []),
        # cancels: once, never over an end
        ("request_cancel", d.request_cancel, RUNNING, [ev.CancelRequested()]),
        ("request_cancel twice", d.request_cancel, log(CREATED, STARTED, ASKED), []),
        ("request_cancel ended", d.request_cancel, ENDED_RUNNING, []),
        ("ask_cancel", d.ask_cancel, RUNNING, [ASKED]),
        ("ask_cancel preparing", d.ask_cancel, PREPARING, [ASKED]),
        ("ask_cancel joined", d.ask_cancel, log(CREATED, STARTED, ev.CancelRequested()), []),
        ("ask_cancel ended", d.ask_cancel, ENDED, []),
        ("ask_cancel_again taken", d.ask_cancel_again, TAKEN_LOG, [ASKED]),
        ("ask_cancel_again pending", d.ask_cancel_again, log(CREATED, STARTED, ASKED), []),
        ("ask_cancel_again ended", d.ask_cancel_again, ENDED_RUNNING, []),
        ("take_cancel pending", d.take_cancel, log(CREATED, STARTED, ASKED), [TAKEN]),
        ("take_cancel none asked", d.take_cancel, RUNNING, []),
        ("take_cancel taken", d.take_cancel, log(CREATED, STARTED, ASKED, TAKEN), []),
        ("take_cancel ended", d.take_cancel, log(CREATED, STARTED, ASKED, FAILED), []),
        # results home: a note that said otherwise is cleared
        (
            "retrieved",
            lambda s: d.retrieved(s, files=3, size=10, digest="m"),
            RUNNING,
            [HOME],
        ),
        (
            "retrieved clears its note",
            lambda s: d.retrieved(s, files=3, size=10, digest="m"),
            log(CREATED, STARTED, NOTE),
            [HOME, ev.NoteCleared()],
        ),
        (
            "retrieved keeps another note",
            lambda s: d.retrieved(s, files=3, size=10, digest="m"),
            log(CREATED, STARTED, ev.NoteAdded(note="something else")),
            [HOME],
        ),
        # the run's end as its job's end decided it
        (
            "record_end succeeded",
            lambda s: d.record_end(
                s, outcome=RunState.succeeded, message=None, exit_code=0, metrics={}, home=True
            ),
            RUNNING,
            [ev.RunEnded(state=RunState.succeeded, exit_code=0)],
        ),
        (
            "record_end succeeded, results not home: stays running, noted",
            lambda s: d.record_end(
                s,
                outcome=RunState.succeeded,
                message=None,
                exit_code=0,
                metrics={"step": 5},
                home=False,
                problem="the link dropped",
            ),
            RUNNING,
            [NOTE],
        ),
        (
            "record_end succeeded, not home, noted already",
            lambda s: d.record_end(
                s,
                outcome=RunState.succeeded,
                message=None,
                exit_code=0,
                metrics={},
                home=False,
                problem="the link dropped",
            ),
            log(CREATED, STARTED, NOTE),
            [],
        ),
        (
            "record_end failed, not home",
            lambda s: d.record_end(
                s,
                outcome=RunState.failed,
                message="exit 1",
                exit_code=1,
                metrics={"step": 2},
                home=False,
                problem="gone",
            ),
            RUNNING,
            [
                ev.RunEnded(
                    state=RunState.failed, message="exit 1", exit_code=1, metrics={"step": 2}
                ),
                ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: gone"),
            ],
        ),
        (
            "record_end failed, not home, a note there",
            lambda s: d.record_end(
                s,
                outcome=RunState.failed,
                message="exit 1",
                exit_code=1,
                metrics={},
                home=False,
                problem="gone",
            ),
            log(CREATED, STARTED, NOTE),
            [ev.RunEnded(state=RunState.failed, message="exit 1", exit_code=1)],
        ),
        (
            "record_end ended meanwhile",
            lambda s: d.record_end(
                s, outcome=RunState.succeeded, message=None, exit_code=0, metrics={}, home=True
            ),
            ENDED_RUNNING,
            [],
        ),
        # a pod found gone: recorded so, and a run still going fails with it
        (
            "pod_gone running",
            lambda s: d.pod_gone(s, "p1"),
            POD_RUNNING,
            [
                ev.PodDeleted(pod_id="p1", by="found_gone"),
                ev.RunEnded(
                    state=RunState.failed,
                    message="pod p1 no longer exists; the job went with it",
                ),
                ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: pod p1 is gone"),
            ],
        ),
        (
            "pod_gone, results home",
            lambda s: d.pod_gone(s, "p1"),
            log(CREATED, SENT, POD, STARTED, HOME),
            [
                ev.PodDeleted(pod_id="p1", by="found_gone"),
                ev.RunEnded(
                    state=RunState.failed,
                    message="pod p1 no longer exists; the job went with it",
                ),
            ],
        ),
        (
            "pod_gone, recorded deleted",
            lambda s: d.pod_gone(s, "p1"),
            log(CREATED, SENT, POD, ev.PodDeleted(pod_id="p1", by="client")),
            [
                ev.RunEnded(
                    state=RunState.failed,
                    message="pod p1 no longer exists; the job went with it",
                ),
                ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: pod p1 is gone"),
            ],
        ),
        (
            "pod_gone, run ended",
            lambda s: d.pod_gone(s, "p1"),
            log(CREATED, SENT, POD, STARTED, FAILED),
            [ev.PodDeleted(pod_id="p1", by="found_gone")],
        ),
        (
            "fail_past_deadline",
            lambda s: d.fail_past_deadline(s, "past it"),
            POD_RUNNING,
            [
                ev.RunEnded(state=RunState.failed, message="past it"),
                ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: the pod passed its deadline"),
            ],
        ),
        (
            "fail_past_deadline, a note there",
            lambda s: d.fail_past_deadline(s, "past it"),
            log(CREATED, SENT, POD, STARTED, NOTE),
            [ev.RunEnded(state=RunState.failed, message="past it")],
        ),
        ("fail_past_deadline ended", lambda s: d.fail_past_deadline(s, "x"), ENDED, []),
        # the pod's own facts
        (
            "pod_job_running",
            lambda s: d.pod_job_running(s, "p1"),
            POD_RUNNING,
            [ev.PodJobRunning(pod_id="p1")],
        ),
        ("pod_job_running, being deleted", lambda s: d.pod_job_running(s, "p1"), POD_DELETING, []),
        ("pod_job_running, deleted", lambda s: d.pod_job_running(s, "p1"), POD_DELETED, []),
        ("pod_job_running, another pod", lambda s: d.pod_job_running(s, "p2"), POD_RUNNING, []),
        (
            "pod_job_running, run ended",
            lambda s: d.pod_job_running(s, "p1"),
            log(CREATED, SENT, POD, STARTED, FAILED),
            [],
        ),
        (
            "endpoint_seen new",
            lambda s: d.endpoint_seen(
                s, ev.EndpointSeen(pod_id="p1", host="h", port=22, user="root")
            ),
            POD_RUNNING,
            [ev.EndpointSeen(pod_id="p1", host="h", port=22, user="root")],
        ),
        (
            "endpoint_seen known",
            lambda s: d.endpoint_seen(
                s, ev.EndpointSeen(pod_id="p1", host="h", port=22, user="root")
            ),
            log(
                CREATED,
                SENT,
                POD,
                STARTED,
                ev.EndpointSeen(pod_id="p1", host="h", port=22, user="root"),
            ),
            [],
        ),
        (
            "endpoint_seen of another pod",
            lambda s: d.endpoint_seen(
                s, ev.EndpointSeen(pod_id="p2", host="h", port=22, user="root")
            ),
            POD_RUNNING,
            [],
        ),
        ("keep_pod", lambda s: d.keep_pod(s, "p1"), POD_RUNNING, [ev.PodKept(pod_id="p1")]),
        (
            "keep_pod kept",
            lambda s: d.keep_pod(s, "p1"),
            log(CREATED, SENT, POD, STARTED, ev.PodKept(pod_id="p1")),
            [],
        ),
        (
            "await_retrieval",
            lambda s: d.await_retrieval(s, "p1", "gone"),
            POD_RUNNING,
            [ev.AwaitingRetrieval(pod_id="p1", detail="gone")],
        ),
        (
            "await_retrieval awaiting",
            lambda s: d.await_retrieval(s, "p1", "gone"),
            log(CREATED, SENT, POD, STARTED, ev.AwaitingRetrieval(pod_id="p1")),
            [],
        ),
        (
            "pod_created new",
            lambda s: d.pod_created(s, "p1", [POD]),
            log(CREATED, SENT),
            [POD],
        ),
        ("pod_created known", lambda s: d.pod_created(s, "p1", [POD]), WITH_POD, []),
        (
            "resolve_attempt open",
            lambda s: d.resolve_attempt(s, ev.AttemptResolved(n=1, result="not_created")),
            log(CREATED, SENT),
            [ev.AttemptResolved(n=1, result="not_created")],
        ),
        (
            "resolve_attempt resolved",
            lambda s: d.resolve_attempt(s, ev.AttemptResolved(n=1, result="not_created")),
            log(CREATED, SENT, ev.AttemptResolved(n=1, result="created", pod_id="p1")),
            [],
        ),
        (
            "resolve_attempt never sent",
            lambda s: d.resolve_attempt(s, ev.AttemptResolved(n=2, result="not_created")),
            log(CREATED, SENT),
            [],
        ),
        # deleting: one Deleting, one Deleted
        (
            "start_delete",
            lambda s: d.start_delete(s, "p1", "retrieved"),
            POD_RUNNING,
            [ev.PodDeleting(pod_id="p1", reason="retrieved")],
        ),
        ("start_delete joined", lambda s: d.start_delete(s, "p1", "retrieved"), POD_DELETING, []),
        ("start_delete deleted", lambda s: d.start_delete(s, "p1", "retrieved"), POD_DELETED, []),
        (
            "start_delete a stray",
            lambda s: d.start_delete(s, "p9", "requested"),
            POD_RUNNING,
            [ev.PodDeleting(pod_id="p9", reason="requested")],
        ),
        (
            "pod_deleted",
            lambda s: d.pod_deleted(s, ev.PodDeleted(pod_id="p1", by="client")),
            POD_DELETING,
            [ev.PodDeleted(pod_id="p1", by="client")],
        ),
        (
            "pod_deleted twice",
            lambda s: d.pod_deleted(s, ev.PodDeleted(pod_id="p1", by="client")),
            POD_DELETED,
            [],
        ),
        (
            "unless_overtaken",
            lambda s: d.unless_overtaken(s, "p1", [ev.PodReady(pod_id="p1", verdict="ready")]),
            WITH_POD,
            [ev.PodReady(pod_id="p1", verdict="ready")],
        ),
        (
            "unless_overtaken: pod being deleted",
            lambda s: d.unless_overtaken(s, "p1", [ev.PodReady(pod_id="p1", verdict="ready")]),
            PREPARING_DELETING,
            [],
        ),
        # save and stop: asked once, of the job itself or of its follower, taken once
        ("request_stop", d.request_stop, RUNNING, [ev.StopRequested()]),
        ("request_stop preparing", d.request_stop, PREPARING, []),
        ("request_stop ended", d.request_stop, ENDED_RUNNING, []),
        ("request_stop again", d.request_stop, STOP_ASKED, []),
        ("ask_stop", d.ask_stop, RUNNING, [ev.StopRequested(relay="asked")]),
        ("ask_stop asked", d.ask_stop, STOP_ASKED, []),
        ("ask_stop written", d.ask_stop, log(CREATED, STARTED, ev.StopRequested()), []),
        ("ask_stop preparing", d.ask_stop, PREPARING, []),
        ("take_stop", d.take_stop, STOP_ASKED, [ev.StopRequested(relay="taken")]),
        ("take_stop taken", d.take_stop, log(CREATED, STARTED, STOP, STOP_TAKEN), []),
        ("take_stop nothing asked", d.take_stop, RUNNING, []),
        ("take_stop ended", d.take_stop, log(CREATED, STARTED, STOP, FAILED), []),
        # a stall: recorded once, of a running job only
        (
            "record_stall",
            lambda s: d.record_stall(s, silent_minutes=20.0, last_step=7, first_line=False),
            RUNNING,
            [ev.Stalled(silent_minutes=20.0, last_step=7)],
        ),
        (
            "record_stall before any line",
            lambda s: d.record_stall(s, silent_minutes=60.0, last_step=None, first_line=True),
            RUNNING,
            [ev.Stalled(silent_minutes=60.0, first_line=True)],
        ),
        (
            "record_stall again",
            lambda s: d.record_stall(s, silent_minutes=21.0, last_step=7, first_line=False),
            log(CREATED, STARTED, ev.Stalled(silent_minutes=20.0, last_step=7)),
            [],
        ),
        (
            "record_stall ended",
            lambda s: d.record_stall(s, silent_minutes=20.0, last_step=7, first_line=False),
            ENDED_RUNNING,
            [],
        ),
        (
            "record_stall preparing",
            lambda s: d.record_stall(s, silent_minutes=20.0, last_step=None, first_line=True),
            PREPARING,
            [],
        ),
        # a stopped job's end: its checkpoint recorded before the end, when home
        (
            "record_end stopped, checkpoint home",
            lambda s: d.record_end(
                s,
                outcome=RunState.stopped,
                message="saved",
                exit_code=0,
                metrics={"step": 5},
                home=True,
                checkpoint=(5, "output/checkpoint-5"),
            ),
            STOP_ASKED,
            [
                ev.CheckpointRetrieved(step=5, path="output/checkpoint-5"),
                ev.RunEnded(
                    state=RunState.stopped, message="saved", exit_code=0, metrics={"step": 5}
                ),
            ],
        ),
        (
            "record_end stopped, nothing saved",
            lambda s: d.record_end(
                s,
                outcome=RunState.stopped,
                message="saved",
                exit_code=0,
                metrics={},
                home=True,
            ),
            RUNNING,
            [ev.RunEnded(state=RunState.stopped, message="saved", exit_code=0)],
        ),
        (
            "record_end stopped, not home: stays running for attach",
            lambda s: d.record_end(
                s,
                outcome=RunState.stopped,
                message="saved",
                exit_code=0,
                metrics={},
                home=False,
                problem="the link dropped",
                checkpoint=(5, "output/checkpoint-5"),
            ),
            RUNNING,
            [NOTE],
        ),
        (
            "record_end stopped, checkpoint home already (fetched as it was saved)",
            lambda s: d.record_end(
                s,
                outcome=RunState.stopped,
                message="saved",
                exit_code=0,
                metrics={},
                home=True,
                checkpoint=(5, "output/checkpoint-5"),
            ),
            log(CREATED, STARTED, CKPT_5),
            [ev.RunEnded(state=RunState.stopped, message="saved", exit_code=0)],
        ),
        # checkpoints brought home while the job runs, and removed from here: once each
        ("checkpoint_home", lambda s: d.checkpoint_home(s, 5, P5), RUNNING, [CKPT_5]),
        ("checkpoint_home again", lambda s: d.checkpoint_home(s, 5, P5), HOME_5, []),
        (
            "checkpoint_home after the end",
            lambda s: d.checkpoint_home(s, 5, P5),
            ENDED_RUNNING,
            [CKPT_5],
        ),
        (
            "checkpoint_home of one pruned before (brought again)",
            lambda s: d.checkpoint_home(s, 5, P5),
            log(CREATED, STARTED, CKPT_5, PRUNED_5),
            [CKPT_5],
        ),
        ("checkpoint_pruned", lambda s: d.checkpoint_pruned(s, 5, P5), HOME_5, [PRUNED_5]),
        (
            "checkpoint_pruned again",
            lambda s: d.checkpoint_pruned(s, 5, P5),
            log(CREATED, STARTED, CKPT_5, PRUNED_5),
            [],
        ),
        ("checkpoint_pruned never home", lambda s: d.checkpoint_pruned(s, 5, P5), RUNNING, []),
        # a pod lost under its job is recorded gone with its spend; the run does not fail
        (
            "pod_lost",
            lambda s: d.pod_lost(s, "p1", 60.0, 0.01),
            POD_RUNNING,
            [ev.PodDeleted(pod_id="p1", by="found_gone", uptime_seconds=60.0, spend=0.01)],
        ),
        ("pod_lost recorded already", lambda s: d.pod_lost(s, "p1", 1.0, 0.1), POD_DELETED, []),
        # a recovery begins on a running run only, once
        ("recovering", lambda s: d.recovering(s, LOST_1), POD_DELETED, [LOST_1]),
        ("recovering again", lambda s: d.recovering(s, LOST_1), RECOVERING, []),
        ("recovering ended", lambda s: d.recovering(s, LOST_1), ENDED_RUNNING, []),
        ("recovering preparing", lambda s: d.recovering(s, LOST_1), PREPARING, []),
        # it is recovered once its job runs on its new pod
        ("recovered", lambda s: d.recovered(s, BACK_1), RECOVERED_JOB, [BACK_1]),
        ("recovered twice", lambda s: d.recovered(s, BACK_1), log_recovered(), []),
        ("recovered before its job", lambda s: d.recovered(s, BACK_1), RECOVERING, []),
        ("recovered never lost", lambda s: d.recovered(s, BACK_1), POD_RUNNING, []),
        # a run not recovered fails, its results not home
        (
            "fail_lost",
            lambda s: d.fail_lost(s, "lost"),
            POD_DELETED,
            [
                ev.RunEnded(state=RunState.failed, message="lost"),
                ev.NoteAdded(note=f"{d.NOT_RETRIEVED}: its pod was lost before the job ended"),
            ],
        ),
        ("fail_lost ended", lambda s: d.fail_lost(s, "lost"), ENDED_RUNNING, []),
    ]
    return [pytest.param(decide, state, want, id=name) for name, decide, state, want in table]


@pytest.mark.parametrize(("decide", "state", "want"), rows())
def test_decision(
    decide: Callable[[RunLog], list[ev.Event]], state: RunLog, want: list[ev.Event]
) -> None:
    before = state.to_json()
    got = decide(state)
    assert got == want
    assert state.to_json() == before  # decisions only read the state
    applies(state, got)


@pytest.mark.parametrize(
    ("state", "live", "want"),
    [
        (PREPARING, None, False),
        (WITH_POD, "p1", False),
        (PREPARING_DELETING, "p1", True),  # another command is deleting the walk's pod
        (PREPARING_DELETING, None, False),  # handed over: the walk's own delete
        (log(CREATED, SENT, POD, ev.PodDeleted(pod_id="p1", by="client")), "p1", True),
        (ENDED, None, True),  # the run ended under the walk
        (log(CREATED, SENT, POD, FAILED), "p1", True),
    ],
)
def test_overtaken(state: RunLog, live: str | None, want: bool) -> None:
    assert d.overtaken(state, live) is want


@pytest.mark.parametrize(
    ("state", "pod_id", "want"),
    [(POD_RUNNING, "p1", False), (POD_DELETING, "p1", True), (POD_DELETED, "p1", False)],
)
def test_joins_delete(state: RunLog, pod_id: str, want: bool) -> None:
    assert d.joins_delete(state, pod_id) is want


@pytest.mark.parametrize(
    ("state", "want"),
    [
        (WITH_POD, d.Before.start),
        (PREPARING, d.Before.start),
        (log(CREATED, SENT, POD, ASKED), d.Before.cancel),
        (log(CREATED, SENT, POD, ASKED, TAKEN), d.Before.start),
        (PREPARING_DELETING, d.Before.overtaken),
        (log(CREATED, SENT, POD, FAILED), d.Before.overtaken),
        (log(CREATED, SENT, POD, ASKED, FAILED), d.Before.overtaken),
    ],
)
def test_before_start(state: RunLog, want: d.Before) -> None:
    assert d.before_start(state) is want
