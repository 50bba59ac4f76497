"""Where a run and its pod stand: the states of a run's log, apart from the event
catalogue so that a reader of the runs view (``runs ls``) has them without building every
event type."""

from enum import StrEnum


class RunState(StrEnum):
    """Where a run stands. ``none``: not created (an empty log)."""

    none = "none"
    preparing = "preparing"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    stopped = "stopped"  # asked to save and stop (`train stop`): it can be resumed


FINAL_STATES: frozenset[RunState] = frozenset(
    {RunState.succeeded, RunState.failed, RunState.cancelled, RunState.stopped}
)


class PodState(StrEnum):
    """Where a run's pod stands, as its log tells it (not Runpod's own status)."""

    none = "none"  # no pod yet, or none being created
    creating = "creating"  # a create was sent, not answered yet
    created = "created"
    ready = "ready"  # SSH answered with the pinned key and the watchdog said ready
    job_running = "job_running"
    awaiting_retrieval = "awaiting_retrieval"  # the job ended, its results are not home
    kept = "kept"  # --keep-pod: only `pod rm` deletes it
    deleting = "deleting"  # a delete was recorded before it was sent
    deleted = "deleted"  # confirmed gone
    stray = "stray"  # a pod of the run that is not its current one (a duplicate)


ALIVE: frozenset[PodState] = frozenset(
    {
        PodState.creating,
        PodState.created,
        PodState.ready,
        PodState.job_running,
        PodState.awaiting_retrieval,
        PodState.kept,
        PodState.deleting,
    }
)
"""The pod states in which a pod may exist (and bill)."""
