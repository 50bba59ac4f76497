"""``pod ls`` and ``pod rm RUN [--force]``: the account's overbrainer pods and clusters, and
deleting every pod and cluster of a run (the logic is ``overbrainer.targets.runpod.podrm``);
``pod billing [RUN…]``: what Runpod billed for runs' pods that are gone
(``overbrainer.targets.runpod.billing``)."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from overbrainer.cli.context import current
from overbrainer.cli.declare import command, group

if TYPE_CHECKING:
    from overbrainer.events.aggregate import RunLog
    from overbrainer.events.errors import UnknownRun
    from overbrainer.front.console import Front
    from overbrainer.targets.runpod.pods import PodContext

app = group("pod")
app.command("overbrainer.cli.catalog_cmd:gpus", name="gpus")
app.command("overbrainer.cli.catalog_cmd:datacenters", name="datacenters")


@asynccontextmanager
async def pod_context(
    *, read_only: bool = False, unchanged: str = "nothing was changed"
) -> AsyncIterator["tuple[PodContext, Front]"]:
    """Settings, store (``read_only`` for a listing: it reads on a read-only disk, and its
    API client gives up within seconds), front end, journal, Ctrl-C controller and Runpod
    client. ``unchanged`` says what Runpod being unreachable left as it was, and what
    to do then."""
    from overbrainer.config.load import load_settings
    from overbrainer.errors import OverbrainerError
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore
    from overbrainer.front.console import Front
    from overbrainer.front.interrupts import open_interrupts
    from overbrainer.runpod.client import RunpodApiError, RunpodUnreachable
    from overbrainer.session.journal import Journal
    from overbrainer.session.session import Session
    from overbrainer.targets.runpod.target import open_pod_context

    invocation = current()
    settings = load_settings(invocation.project_dir, invocation.environ())
    settings.require_runpod_api_key()
    front = Front()
    store = RunStore(
        settings.store.url,
        invocation.project_dir,
        Actor.here(invocation.command),
        environ=invocation.environ(),
        read_only=read_only,
    )
    try:
        journal = Journal(store, invocation.project_dir, listener=front.event, others=front.other)
        async with open_interrupts(front.notice) as interrupts:
            session = Session(journal, front, interrupts, invocation.project_dir)
            async with open_pod_context(
                session, settings, quick=read_only, on_wait=front.notice
            ) as ctx:
                try:
                    yield ctx, front
                except RunpodUnreachable as error:
                    # It names the cause and the fix; nothing could reach Runpod.
                    raise OverbrainerError(f"{error}; {unchanged}") from None
                except RunpodApiError as error:
                    if not read_only or error.status is not None:
                        raise
                    # No answer at all: the network, a proxy, or the API's address.
                    raise OverbrainerError(
                        f"{error}; check this machine's network connection and the Runpod "
                        f"API's address ({settings.runpod.base_url}: [runpod] base_url, or "
                        "OVERBRAINER_RUNPOD__BASE_URL); nothing was changed"
                    ) from None
    finally:
        front.close()
        store.close()


@command(app, "pod", "ls")
async def ls(*, json: bool = False) -> int:
    import sys

    from overbrainer.cli.common import print_json
    from overbrainer.targets.runpod.podrm import list_rows, row_json, table

    async with pod_context(read_only=True) as (ctx, front):
        recorded = await ctx.session.journal.may_bill()
        listed = await ctx.session.interrupts.race(lambda: list_rows(ctx, recorded))
        if listed is None:
            from overbrainer.errors import Interrupted

            raise Interrupted("interrupted: no pod was listed")
        found = listed.value
        if json:
            for row in found:
                print_json(row_json(row))
            return 0
        if not found:
            print("no overbrainer pod on this Runpod account", file=sys.stderr)
            return 0
        front.result(table(found))
    return 0


@command(app, "pod", "rm")
async def rm(
    run: str,
    /,
    *,
    force: bool = False,
) -> int:
    from overbrainer.errors import OverbrainerError, UsageError
    from overbrainer.events.ids import check_run_id, looks_like_run_id, matching_runs, run_ref
    from overbrainer.targets.runpod.podrm import (
        deleted_line,
        never_had_pod,
        not_in_store,
        remove_run_pods,
    )

    run = check_run_id(run_ref(run))
    if not looks_like_run_id(run):
        # A prefix or suffix of a run of this store (a run not in it needs its whole ID).
        from overbrainer.cli.listing import listing

        states, _ = listing(current())
        found = matching_runs(run, [state.run.run_id for state in states])
        if len(found) > 1:
            raise UsageError(
                f"{run!r} names {len(found)} runs: {', '.join(found[:8])}; give "
                "more of the run's ID"
            )
        run = found[0] if found else run
    if not looks_like_run_id(run):
        # A cluster's member is refused naming its cluster and the command deleting it.
        refusal = await _member_refusal(run)
        if refusal is not None:
            raise UsageError(refusal)
        # A pod ID would pass as a name: pod rm acts on a run's pods, never on one pod.
        raise UsageError(
            f"{run!r} is not a run ID: pod rm takes the run ID (like 20260101-120000-ab12) "
            "whose pods to delete, never a pod ID; `overbrainer pod ls` shows each pod's run"
        )
    # What the log alone answers needs no API key (nor Runpod).
    state = _logged_states([run]).get(run)
    if state is None and not force:
        raise _unknown(run, not_in_store(run))
    never = never_had_pod(state) if state is not None else None
    if never is not None:
        from overbrainer.front.console import Front

        Front().result(f"pod rm: run {run} never had a pod ({never}); nothing to delete")
        return 0
    unchanged = (
        f"no pod of run {run} was deleted: run `overbrainer pod rm {run}"
        f"{' --force' if force else ''}` again once Runpod can be reached"
    )
    async with pod_context(unchanged=unchanged) as (ctx, front):
        removal = await remove_run_pods(ctx, run, force=force)
        for deleted in removal.removed:
            front.result(deleted_line(run, deleted))
        if removal.deleted:
            from overbrainer.targets.runpod.billing import after_end

            await after_end(ctx, run)
        problems = removal.problems()
        if problems:
            raise OverbrainerError("; ".join(problems))
        if not removal.removed:
            front.result(f"pod rm: run {run} has no pod left")
        return ctx.session.interrupts.finish(0)


async def _member_refusal(pod_id: str) -> str | None:
    """Why ``pod rm`` refuses ``pod_id`` when the account lists it as a cluster's member;
    None when it does not, or when Runpod cannot tell (no key, out of reach: the plain
    refusal of a name that is not a run ID says enough)."""
    from overbrainer.errors import OverbrainerError
    from overbrainer.targets.runpod.podrm import member_refusal

    try:
        async with pod_context(read_only=True) as (ctx, _front):
            return await member_refusal(ctx, pod_id)
    except OverbrainerError:
        return None


def _unknown(run_id: str, text: str) -> "UnknownRun":
    """The error for a run this store does not hold, keeping the run and the store so that
    the project's runs/ can tell more (a log emptied or replaced)."""
    from overbrainer.cli.common import store_url
    from overbrainer.events.errors import UnknownRun
    from overbrainer.events.locations import describe_store

    error = UnknownRun(text)
    error.run_id, error.where = run_id, describe_store(store_url(current()))
    return error


def _logged_states(run_ids: "list[str]") -> "dict[str, RunLog]":
    """What this project's log says of each run of ``run_ids`` it holds (read only)."""
    from overbrainer.cli.common import open_store

    store = open_store(current(), read_only=True)
    try:
        states = {run_id: store.state(run_id) for run_id in run_ids}
    finally:
        store.close()
    return {run_id: state for run_id, state in states.items() if state.exists}


# --- pod billing ---------------------------------------------------------------------------

_BILLING_LIMIT = 60.0  # seconds for one run's reads, when asked for by name


@command(app, "pod", "billing")
async def billing(
    *runs: str,
    json: bool = False,
) -> int:
    from datetime import UTC, datetime
    from functools import partial

    from overbrainer.cli.common import print_json
    from overbrainer.cli.listing import listing, resolve_run
    from overbrainer.errors import Interrupted, OverbrainerError
    from overbrainer.projections.spend import money
    from overbrainer.runpod.billing import asks
    from overbrainer.targets.runpod.billing import Reading, read_billing
    from overbrainer.targets.runpod.podrm import never_had_pod

    invocation = current()
    if runs:
        run_ids = list(dict.fromkeys(resolve_run(invocation, ref) for ref in runs))
    else:
        listed, _ = listing(invocation)
        run_ids = [
            s.run.run_id
            for s in listed
            if any(
                s.pod.deleted(pod_id) and not cost.get("billed_final")
                for pod_id, cost in s.pod.costs.items()
            )
        ]
    # What the log alone answers needs no API key: runs that never had a pod, and runs
    # with no pod whose billing is left to read (which pods to ask for depends on the log
    # only, not on the time).
    states = _logged_states(run_ids)
    unknown = [run_id for run_id in run_ids if run_id not in states]
    if unknown:
        raise _unknown(
            unknown[0],
            f"run {unknown[0]} is not in this store (another checkout may own it): nothing "
            "of its billing can be recorded here; `overbrainer runs ls` lists this project's runs",
        )
    told: list[str] = []
    for run_id in run_ids:
        never = never_had_pod(states[run_id])
        if never is not None and runs and not json:
            told.append(f"pod billing: run {run_id} never had a pod ({never}): nothing billed")
    run_ids = [r for r in run_ids if asks(states[r], datetime.now(UTC))]
    if not run_ids:
        from overbrainer.front.console import Front

        for line in told:
            Front().result(line)
        if not told and not json:
            which = "these runs" if runs else "this project's runs"
            Front().result(f"pod billing: no pod of {which} is gone with its billing still to read")
        return 0
    readings: list[Reading] = []
    estimates: dict[tuple[str, str], float | None] = {}
    async with pod_context() as (ctx, front):
        for line in told:
            front.result(line)
        for run_id in run_ids:
            done = await ctx.session.interrupts.race(
                partial(read_billing, ctx, run_id, limit=_BILLING_LIMIT)
            )
            if done is None:
                raise Interrupted("interrupted: the billing read so far is recorded")
            readings += done.value
            costs = (await ctx.session.journal.state(run_id)).pod.costs
            for reading in done.value:
                estimates[run_id, reading.pod_id] = costs.get(reading.pod_id, {}).get("estimate")
        for r in readings:
            estimate = estimates.get((r.run_id, r.pod_id))
            if json:
                print_json(
                    {
                        "run": r.run_id,
                        "pod": r.pod_id,
                        "billed_usd": r.amount,
                        "final": r.final,
                        "estimate_usd": estimate,
                        "problem": r.problem or None,
                    }
                )
                continue
            guess = f"; overbrainer estimated ~{money(estimate)}" if estimate is not None else ""
            if r.amount is None:
                said = f"not known yet ({r.problem})"
            elif r.final:
                said = f"Runpod billed {money(r.amount)}"
            else:
                said = f"Runpod billed {money(r.amount)} so far (not final yet)"
            front.result(f"pod billing: pod {r.pod_id} of run {r.run_id}: {said}{guess}")
        if not readings and not json:
            which = "these runs" if runs else "this project's runs"
            front.result(f"pod billing: no pod of {which} is gone with its billing still to read")
        failed = [r for r in readings if r.failed]
        if failed:
            raise OverbrainerError(
                f"{failed[0].problem}; what Runpod billed stays unknown: run `overbrainer pod "
                "billing` again later"
            )
        return ctx.session.interrupts.finish(0)
