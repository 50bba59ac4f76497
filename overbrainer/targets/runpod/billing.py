"""Reading what Runpod billed for a run's pods that are gone, and recording it
(``pod.Billed``) beside overbrainer's own estimate.

Which pods, over which window and when a read is final: ``overbrainer.runpod.billing``.
A read that fails, or finds nothing yet, is not an error of the run: the amount stays
unknown (or not final) and a later ``overbrainer pod billing`` reads it again. Reads are
bounded in time (:data:`READ_LIMIT`) and stop at the first Ctrl-C: a run's end never
waits on Runpod's billing.
"""

from dataclasses import dataclass
from functools import partial

import trio

from overbrainer.errors import OverbrainerError
from overbrainer.events import decisions
from overbrainer.events import types as ev
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import UnknownRun
from overbrainer.runpod import billing
from overbrainer.runpod.client import RunpodError
from overbrainer.runpod.models import ClusterBilling, PodBilling
from overbrainer.targets.runpod.pods import PodContext
from overbrainer.utc import iso_utc

__all__ = ["READ_LIMIT", "Reading", "after_end", "read_billing"]

READ_LIMIT = 20.0
"""The most seconds one command spends reading billing after a run's pod is gone."""


@dataclass(frozen=True)
class Reading:
    """What one read of a pod's billing came to: ``amount`` recorded (final or not), or
    nothing (``amount`` None) with the reason in ``problem``; ``failed``: Runpod could not
    be read (rather than having nothing to say yet)."""

    run_id: str
    pod_id: str
    amount: float | None
    final: bool
    problem: str = ""
    failed: bool = False


async def read_billing(
    ctx: PodContext, run_id: str, *, only: str | None = None, limit: float = READ_LIMIT
) -> list[Reading]:
    """Read and record what Runpod billed for every pod of run ``run_id`` recorded gone
    whose billed amount is not final (``only``: that pod alone), within ``limit`` seconds.

    An empty answer records nothing (Runpod has not billed the pod yet, as far as it says);
    an answer whose window falls short of the one asked is recorded as not final.

    Raises:
        StoreError: the log could not be read or written.
    """
    journal = ctx.session.journal
    state = await journal.state(run_id)
    found: list[Reading] = []
    asks = billing.asks(state, ctx.server_now(), only)
    with trio.move_on_after(limit) as scope:
        for ask in asks:
            # A cluster's primary stands for the cluster, which Runpod bills as one.
            cluster = state.pod.costs.get(ask.pod_id, {}).get("cluster")
            try:
                answer: PodBilling | ClusterBilling
                if cluster is None:
                    answer = await ctx.client.pod_billing(
                        ask.pod_id, ask.start, ask.end, bucket=ask.bucket
                    )
                    billed_id = ask.pod_id
                    mine = any(r.pod_id == billed_id for r in answer.records)
                else:
                    answer = await ctx.client.cluster_billing(
                        ask.start, ask.end, bucket=ask.bucket, cluster_id=str(cluster)
                    )
                    billed_id = str(cluster)
                    mine = any(r.cluster_id == billed_id for r in answer.records)
            except RunpodError as error:
                found.append(Reading(run_id, ask.pod_id, None, False, str(error), failed=True))
                continue
            if not mine:
                found.append(
                    Reading(run_id, ask.pod_id, None, False, "Runpod shows no billing for it yet")
                )
                continue
            read_at = ctx.server_now()
            whole = answer.start <= ask.start and answer.end >= ask.end
            billed = ev.PodBilled(
                pod_id=ask.pod_id,
                amount=round(answer.amount(billed_id), 6),
                period_start=iso_utc(answer.start),
                period_end=iso_utc(answer.end),
                final=whole and billing.is_final(ask.ended, read_at),
                read_at=iso_utc(read_at),
            )
            await journal.append(run_id, partial(_billed, billed))
            found.append(Reading(run_id, ask.pod_id, billed.amount, billed.final))
    if scope.cancelled_caught:
        done = {r.pod_id for r in found}
        found += [
            Reading(run_id, a.pod_id, None, False, f"no answer within {limit:g} s", failed=True)
            for a in asks
            if a.pod_id not in done
        ]
    return found


def _billed(billed: ev.PodBilled, now: RunLog) -> list[ev.Event]:
    return decisions.pod_billed(now, billed)


async def after_end(ctx: PodContext, run_id: str) -> None:
    """Once a run's pods are gone: read their billing, as far as :data:`READ_LIMIT` and
    Ctrl-C allow; what cannot be read is said, with the command that reads it later."""
    front = ctx.session.front
    try:
        done = await ctx.session.interrupts.race(lambda: read_billing(ctx, run_id))
    except UnknownRun:
        return  # a run of another store (`pod rm --force`): nothing to record it in
    except OverbrainerError as error:
        front.info(f"what Runpod billed for run {run_id} is not recorded: {error}")
        return
    readings = done.value if done is not None else []
    missing = [r for r in readings if r.amount is None]
    if done is None or missing:
        why = f" ({missing[0].problem})" if missing and missing[0].problem else ""
        front.info(
            f"what Runpod billed for run {run_id} is not known yet{why}: "
            f"`overbrainer pod billing {run_id}` reads it later"
        )
