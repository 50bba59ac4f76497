"""The node-lost campaign: ``train`` on a Runpod cluster of two pods (the fake API's
TRAINING cluster, its members living fake pods on loopback) whose node 1 is lost at each
phase of the run — it vanishes (Runpod lost its machine: a 404 from then on, everything
in it ending) or fails (its container exits: EXITED) — while ``train`` is held at a
checkpoint of the traced cluster run:

- ``booting``: while provisioning waits for the cluster's other nodes to be ready;
- ``ready``: every node ranked and ready (``pod.ClusterRanked``), before the job;
- ``job``: the job running on every node, followed;
- ``retrieval``: the job ended, its results coming home from rank 0.

What a careful user expects, asserted: before the job, no job runs on a cluster short of a
node — provisioning gives that cluster up, deleted whole, and the run goes on on another
(it succeeds) or fails saying why; once the job runs, the run fails naming the node
(``the job on node 1 …``), never succeeds on half a cluster; while the results come home
(rank 0 holds them all), the run succeeds with them home or fails naming the node. In
every case ``train`` itself deletes every cluster it made, every member confirmed gone
(no ``pod rm`` needed), says what happened, and the Runpod target's invariants hold
(``pods.py``: every pod known and guarded, projections equal to the log, every request
the published schema allows, no secret anywhere).

By default each phase once, the two ways taking turns; ``--full``: both ways at each.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from reliability.core import UNREACHED, Case
from reliability.invariants import check_outputs, log_state
from reliability.machine import Pauser, read_trace
from reliability.pods import CLUSTER_TRAIN, NODES
from reliability.recovery import OBSERVED
from reliability.world import Done, Project

# A job of two seconds or so, long enough to be lost while it runs.
KNOBS = {
    "FAKE_AXOLOTL_STEPS": "20",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.1",
    "FAKE_AXOLOTL_SAVE_EVERY": "5",
}
LOST_RANK = 1

PHASES = {
    "booting": "while the cluster's nodes boot",
    "ready": "with every node ready, before the job",
    "job": "while the job runs",
    "retrieval": "while the results come home",
}


def phase_key(phase: str, keys: list[str]) -> str | None:
    """The checkpoint of the traced cluster run at which ``phase`` is reached."""

    def first(*marks: str) -> str | None:
        return next((k for k in keys if all(m in k for m in marks)), None)

    if phase == "booting":
        # Provisioning booting a node other than the primary (else any await of the wait).
        return first("_Walk._boot_nodes", "_Walk._boot:") or first("_Walk._boot_nodes")
    if phase == "ready":
        return first("append-after pod.ClusterRanked")
    if phase == "job":
        # The first await of following once the job is recorded running on every node.
        after = (
            keys[keys.index("append-after pod.JobRunning") :]
            if "append-after pod.JobRunning" in keys
            else []
        )
        return next((k for k in after if "run.py:_watch" in k), None)
    if phase == "retrieval":
        return first("service.py:collect.<locals>.bring_home")
    raise ValueError(phase)


@dataclass(frozen=True)
class Loss:
    """Node :data:`LOST_RANK` lost at ``phase``: ``vanish`` or ``fail``."""

    phase: str
    how: str

    @property
    def title(self) -> str:
        verb = "vanishes" if self.how == "vanish" else "fails (its container exits)"
        return f"node {LOST_RANK} {verb} {PHASES[self.phase]}"


def losses(full: bool) -> list[Loss]:
    """Each phase once, the ways in turn; ``full``: every phase both ways."""
    if full:
        return [Loss(phase, how) for phase in PHASES for how in ("vanish", "fail")]
    ways = ("vanish", "fail")
    return [Loss(phase, ways[i % 2]) for i, phase in enumerate(PHASES)]


def cases(world: Any, keys: list[str], *, full: bool = False) -> list[Case]:
    """The node-lost cases on the Runpod world (``keys``: the traced cluster run)."""
    out = []
    for loss in losses(full):
        key = phase_key(loss.phase, keys)
        name = f"runpod {CLUSTER_TRAIN}: {loss.title}"
        if key is None:
            out.append(Case("node-lost", name, partial(_missing, loss.phase), weight=1.0))
            continue
        out.append(Case("node-lost", name, partial(_case, world, loss, key), weight=8.0))
    return out


def _missing(phase: str) -> list[str]:
    return [f"harness: the traced cluster run passes no checkpoint of phase {phase!r}"]


# --- a case ---------------------------------------------------------------------------


def _lose(world: Any, project: Project, loss: Loss) -> None:
    """Lose node :data:`LOST_RANK` of the cluster the project's run has now."""
    import trio

    (run_id,) = project.runs()
    live = [c for c in world.clusters(run_id) if c["live"]]
    if not live:
        raise RuntimeError(f"run {run_id} has no live cluster to lose a node of")
    cluster_id = live[-1]["id"]

    async def lose() -> None:
        if loss.how == "fail":
            await world.fake.fail_member(cluster_id, LOST_RANK)
            return
        # The fake applies a vanishing at its next request; a machine lost ends what runs
        # on it at once (its SSH server, its job), so the fake pod is ended now.
        pod = world.fake.member(cluster_id, LOST_RANK)
        world.fake.vanish(pod.id)
        await world.pods.on_deleted(pod)

    trio.from_thread.run(lose, trio_token=world.trio_token)


def _case(world: Any, loss: Loss, key: str) -> list[str]:
    project = world.project(f"runpod-node-lost-{loss.phase}-{loss.how}")
    try:
        project.knobs(**KNOBS)
        args, _ = world.setup(project, CLUSTER_TRAIN)
        trace_path = project.path.parent / "trace.jsonl"
        pause_file = project.path.parent / "paused"
        plan = {"trace": str(trace_path), "at": key, "action": "pause"}
        plan["pause_file"] = str(pause_file)
        pauser = Pauser(pause_file, lambda: _lose(world, project, loss))
        try:
            done = project.run(*args, plan=plan, timeout=240)
        finally:
            pauser.close()
        found: list[str] = []
        if pauser.error is not None:
            found.append(f"harness: losing node {LOST_RANK} failed: {pauser.error!r}")
        if key not in read_trace(trace_path) or not pauser.ran:
            UNREACHED.append(f"runpod node-lost {loss.phase}-{loss.how}")
        runs = project.runs()
        if len(runs) != 1:
            return [*found, f"expected one run, found {runs}: {done.said()[-700:]}"]
        (run_id,) = runs
        found += _outcome(world, project, run_id, loss, done)
        found += world.check_guarded(project)
        found += world.recover_all(project)
        found += check_outputs(project.log, {"train": {0, 1}, "pod rm": {0, 1}, "runs show": {0}})
        found += world.check_after(project, "train", "node-lost")
        return found
    finally:
        project.hold.unlink(missing_ok=True)
        project.close()


def _outcome(world: Any, project: Project, run_id: str, loss: Loss, done: Done) -> list[str]:
    """What ``train`` came to, as a careful user expects it (see the module docstring),
    before anything else touches the run."""
    state, _ = log_state(project, run_id)
    run = state.run
    found: list[str] = []
    said = f"`train` exited {done.code}, the run {run.state} ({run.message})"
    made = len(world.clusters(run_id))
    OBSERVED.append(f"node-lost {loss.phase}-{loss.how}: {said}; clusters made: {made}")
    if not state.final:
        found.append(f"run {run_id}: {said}: not final once `train` ended")
    node = f"node {LOST_RANK}"
    if loss.phase in ("booting", "ready"):
        if run.job is not None and run.state == "succeeded" and len(world.clusters(run_id)) < 2:
            found.append(f"run {run_id}: {said}: its job ran on a cluster short of {node}")
        if run.state == "failed" and node not in (run.message or ""):
            found.append(f"run {run_id}: {said}: failed not naming {node}")
    elif loss.phase == "job":
        if run.state != "failed":
            found.append(f"run {run_id}: {said}: {node} was lost under its job")
        elif not (run.message or "").startswith(f"the job on {node} "):
            found.append(f"run {run_id}: {said}: its message does not name {node}")
        elif node not in done.err:
            found.append(f"run {run_id}: `train` did not say {node} ended the job: {done.err}")
    elif loss.phase == "retrieval":
        if run.state == "failed" and node not in (run.message or ""):
            found.append(f"run {run_id}: {said}: failed not naming {node}")
        elif run.state not in ("failed", "succeeded"):
            found.append(f"run {run_id}: {said}")
    want = {"succeeded": 0, "failed": 1}.get(run.state)
    if want is not None and done.code != want:
        found.append(f"run {run_id}: {said}; expected exit {want}: {done.said()[-500:]}")
    if len(world.clusters(run_id)) == 0:
        found.append(f"run {run_id}: the fake made no cluster for it")
    # `train` itself deletes every cluster it made, whole, before it ends.
    for cluster in world.clusters(run_id):
        if cluster["live"]:
            found.append(f"run {run_id}: `train` ended ({said}) leaving cluster {cluster['id']}")
    for pod in world.account(run_id):
        if pod["status"] != "TERMINATED":
            found.append(
                f"run {run_id}: `train` ended leaving pod {pod['id']} (rank {pod['rank']}) "
                f"{pod['status']}"
            )
    if len(world.account(run_id)) % NODES:
        found.append(f"run {run_id}: its pods are not whole clusters of {NODES}")
    return found
