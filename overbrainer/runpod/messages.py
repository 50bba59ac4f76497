"""What a Runpod run tells its user about its pod, as pure functions.

Each names the run, the pod and its hourly rate, and gives the exact next command. No I/O,
no trio: cheap to import and tested on its own. (The message of a run interrupted before
its job started is :func:`overbrainer.runpod.decide.interrupted_before_job`.)
"""

from enum import StrEnum

from overbrainer.events.aggregate import PodView
from overbrainer.runpod.cost_cap import max_cost
from overbrainer.runpod.decide import rate_text


class Ending(StrEnum):
    """What became of a run's pod once its job ended."""

    deleted = "deleted"
    kept = "kept"
    awaiting_retrieval = "awaiting_retrieval"


def attach_hint(run_id: str) -> str:
    """How to follow a run again (the same words as on every other target)."""
    return f"follow it again with `overbrainer train attach {run_id}`"


def pod_name(pod: PodView) -> str:
    """The pod's ID, or ``(none)`` before Runpod gave one."""
    return pod.pod_id or "(none)"


def rate(pod: PodView) -> str:
    """`` ($0.53/h)``, or nothing when Runpod gave no rate."""
    return rate_text(pod.cost_per_hour)


def ssh_command(run_id: str) -> str:
    """How a person reaches the run's pod: its own key, its pinned host key, nothing else."""
    return f"ssh -F runs/{run_id}/ssh/config overbrainer-{run_id}"


def pod_rm(run_id: str) -> str:
    """The command that deletes every pod of the run."""
    return f"`overbrainer pod rm {run_id}`"


def keep_warning(pod: PodView, run_id: str) -> str:
    """The ``--keep-pod`` warning, once the job started (before that, the pod was guarded)."""
    hourly = (
        f"at ${pod.cost_per_hour:.2f}/h"
        if pod.cost_per_hour is not None
        else "at an hourly rate Runpod did not give"
    )
    capped = ""
    cap = max_cost(pod)
    if cap is not None:
        capped = f" and no cost limit (max_cost_usd = ${cap:.2f} is not enforced on a kept pod)"
    return (
        f"--keep-pod: pod {pod_name(pod)} is kept with no time limit{capped}, {hourly}, even "
        f"once the run ends; nothing deletes it but {pod_rm(run_id)}"
    )


def job_on_pod(pod: PodView, run_id: str) -> str:
    """Where the job of a run runs, and how to reach or remove it (context for an error
    once the job started: the pod bills)."""
    return (
        f"the job of run {run_id} runs on pod {pod_name(pod)}{rate(pod)}; "
        f"{attach_hint(run_id)}, or delete the pod with {pod_rm(run_id)}"
    )


def guard(pod: PodView, run_id: str, retrieve_grace_minutes: int) -> str:
    """What bounds the cost of a pod left running: the watchdog, or nothing (``--keep-pod``)."""
    if pod.keep:
        return f"The pod is kept with no time limit (--keep-pod): `{ssh_command(run_id)}`."
    return (
        f"The watchdog deletes the pod {retrieve_grace_minutes} min after the job ends if its "
        f"results are not retrieved, and by {pod.deadline or 'its deadline'} in any case."
    )


def detached(pod: PodView, run_id: str, retrieve_grace_minutes: int) -> str:
    """The message of a run left running on its pod after Ctrl-C."""
    return (
        f"interrupted: run {run_id} keeps running on pod {pod_name(pod)}{rate(pod)}; "
        f"{attach_hint(run_id)}, or delete the pod with {pod_rm(run_id)}. "
        f"{guard(pod, run_id, retrieve_grace_minutes)}"
    )


def awaiting_retrieval(
    pod: PodView, run_id: str, retrieve_grace_minutes: int, problem: str = ""
) -> str:
    """What is said of a pod left for the watchdog because the results are not home."""
    why = f" ({problem})" if problem else ""
    return (
        f"the results of run {run_id} are not home{why}: pod {pod_name(pod)}{rate(pod)} is "
        f"left running so they can be collected with `overbrainer train attach {run_id}`; "
        f"delete it now with {pod_rm(run_id)}. The watchdog deletes it "
        f"{retrieve_grace_minutes} min after the job ended, and by "
        f"{pod.deadline or 'its deadline'} in any case"
    )


def gone_before_results(pod: PodView, run_id: str, problem: str = "") -> str:
    """What is said when the results did not come home and the pod is gone with them."""
    why = f" ({problem})" if problem else ""
    return (
        f"the results of run {run_id} are not home{why}, and pod {pod_name(pod)} is gone: "
        f"what was not home went with it. `overbrainer train attach {run_id}` settles the "
        f"run: on a target that recovers runs (max_recoveries) it goes on, on a new pod, "
        f"from the newest checkpoint home"
    )


def report_line(pod: PodView, ending: Ending, run_id: str) -> str | None:
    """What to say of the pod once the job ended. Nothing for a deleted pod, which its
    events already reported (uptime and spend), nor for one awaiting retrieval, which
    ending it reported: how to reach a kept pod, results retrieved or not, is said here."""
    if ending is not Ending.kept:
        return None
    return (
        f"pod {pod_name(pod)} kept (--keep-pod): `{ssh_command(run_id)}`; remove it with "
        f"{pod_rm(run_id)}; nothing deletes it automatically"
    )


def stopped(pod: PodView, run_id: str, status: str) -> str:
    """A pod Runpod shows stopped: nothing on it can be reached, and its disk still bills."""
    return (
        f"pod {pod_name(pod)} of run {run_id} is stopped ({status}): its job cannot be "
        f"reached, and a stopped pod still bills its disk; delete it with {pod_rm(run_id)}"
    )


def not_reachable_yet(pod: PodView, run_id: str, status: str) -> str:
    """A pod that shows no SSH endpoint (it is restarting, say)."""
    return (
        f"pod {pod_name(pod)} of run {run_id} is {status} and shows no SSH endpoint yet; try "
        f"`overbrainer train attach {run_id}` again in a minute, or delete the pod with "
        f"{pod_rm(run_id)}"
    )
