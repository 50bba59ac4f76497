"""What a Runpod run costs beyond its job, training on a Runpod pod.

On the in-process fake Runpod API and an in-memory pod, on trio's MockClock, one whole
`train` whose job takes one hour, with the production timing (polls, confirmation): the
seconds billed beyond the job (the create to the confirmed delete, minus the job) beside
the floor (the fake pod's boot to a ready watchdog, plus the retrieval), and the API calls
of the run, in all and outside readiness polling. On the MockClock the hour takes a few
seconds of real time, so ``--quick`` runs it whole too.
"""

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio
import trio.testing

from overbrainer.lifecycle.service import POLL_SECONDS
from overbrainer.testing import pod_training as harness

JOB_SECONDS = 3600.0


@dataclass
class Figures:
    """One measured run."""

    billed: float
    job: float
    boot: float
    retrieval: float
    calls: int
    readiness: int


async def _measure(project: Path) -> Figures:
    spawned: list[float] = []
    original = harness.JobExecutor.spawn

    async def spawn(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        spawned.append(trio.current_time())
        return await original(self, *args, **kwargs)

    harness.JobExecutor.spawn = spawn  # type: ignore[method-assign]
    try:
        async with harness.training(project) as t:
            t.network.script = harness.JobScript(steps=60, step_seconds=JOB_SECONDS / 60)
            fake = t.rig.fake
            # The production pace of following.
            command = harness.PodCommand(t.rig.context, t.settings, t.spec, poll=POLL_SECONDS)
            assert await command.train("gpu", keep=False) == 0
            confirmed = trio.current_time()
            requests = list(fake.requests)
            (pod,) = fake.pods.values()
            created = next(r.time for r in requests if r.method == "POST")
            deleted = next(r.time for r in requests if r.method == "DELETE")
            ready_at = pod.running_since() + 3.0  # the rig's watchdog says ready 3 s later
            readiness = sum(
                1
                for r in requests
                if r.method == "GET" and r.path == f"/pods/{pod.id}" and r.time <= ready_at + 10
            )
            job_end = spawned[0] + JOB_SECONDS
            return Figures(
                billed=confirmed - created,
                job=JOB_SECONDS,
                boot=ready_at - created,
                retrieval=max(0.0, deleted - job_end - 1.0),  # after the last 1 s poll
                calls=len(requests),
                readiness=readiness,
            )
    finally:
        harness.JobExecutor.spawn = original  # type: ignore[method-assign]


def run(
    progress: Callable[[str], None] | None = None, *, quick: bool = False
) -> list[tuple[str, str, str, str]]:
    """The figures, each beside its floor and aim (the same with ``quick``)."""
    if progress is not None:
        progress("pod: one 1 h train on the fake Runpod API, on the MockClock")
    with tempfile.TemporaryDirectory() as directory:
        figures = trio.run(
            _measure, Path(directory), clock=trio.testing.MockClock(autojump_threshold=0)
        )
    beyond = figures.billed - figures.job
    floor = figures.boot + figures.retrieval
    outside = figures.calls - figures.readiness
    return [
        (
            "pod: billed beyond a 1 h job",
            f"{beyond:.0f} s",
            f"{floor:.0f} s (boot {figures.boot:.0f} s + retrieval {figures.retrieval:.0f} s)",
            f"<= {floor + 15:.0f} s",
        ),
        (
            "pod: API calls per run",
            f"{figures.calls} ({outside} outside readiness polling)",
            f"{figures.readiness} readiness polls",
            "< 100 outside readiness polling",
        ),
    ]


if __name__ == "__main__":
    for row in run():
        print(" | ".join(row))
