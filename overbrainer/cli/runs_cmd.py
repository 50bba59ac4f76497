"""The ``runs`` commands: list and show runs, read their logs, compare them, report on
them. ``runs ls`` and ``runs show`` are declared here and done in ``runs_read.py``, which
the command line also reaches without cyclopts."""

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from overbrainer.cli.common import open_store, print_json
from overbrainer.cli.context import current
from overbrainer.cli.declare import command, group
from overbrainer.cli.listing import resolve_run

if TYPE_CHECKING:
    from overbrainer.projections.chart import Series
    from overbrainer.projections.compare import RunFacts

app = group("runs")


_STATES = Literal["preparing", "running", "succeeded", "failed", "cancelled", "stopped"]


@command(app, "runs", "ls")
def ls(
    *,
    json: bool = False,
    state: list[_STATES] | None = None,
    last: int | None = None,
    since: str | None = None,
    all_runs: bool = False,
) -> int:
    from overbrainer.cli.runs_read import list_runs

    return list_runs(json=json, state=state, last=last, since=since, all_runs=all_runs)


@command(app, "runs", "show")
def show(
    run: str,
    /,
    *,
    json: bool = False,
    no_plot: bool = False,
) -> int:
    from overbrainer.cli.runs_read import show_run

    return show_run(run, json=json, no_plot=no_plot)


@command(app, "runs", "logs")
async def logs(
    run: str,
    /,
    *,
    follow: bool = False,
    tail: int | None = None,
    rank: int | None = None,
    node: int | None = None,
    pod: bool = False,
    source: Literal["system", "container"] | None = None,
) -> int:
    from overbrainer.errors import UsageError
    from overbrainer.front.interrupts import open_interrupts, print_notice

    if tail is not None and tail < 0:
        raise UsageError("--tail takes a number of lines, 0 or more")
    if source is not None and not pod:
        raise UsageError("--source goes with --pod (the pod's own log)")
    if rank is not None and rank < 0:
        raise UsageError("--rank takes a process's rank, 0 or more")
    if rank is not None and pod:
        raise UsageError("--rank reads the job's log, --pod the pod's own: give one of them")
    if node is not None and node < 0:
        raise UsageError("--node takes a node of a cluster, 0 or more")
    if node is not None and pod:
        raise UsageError("--node reads a node's job log, --pod the pod's own: give one of them")
    invocation = current()
    run = resolve_run(invocation, run)
    state = _recorded_state(invocation, run)
    if state.run.files_removed is not None and state.run.kind_facts.runs_here and not pod:
        from overbrainer.errors import OverbrainerError

        raise OverbrainerError(
            f"the job's log of run {run} was removed with its files (`overbrainer runs rm`); "
            f"`overbrainer events {run}` still tells what happened"
        )
    if pod and not state.run.kind_facts.rents_pod:
        raise UsageError(
            f"--pod reads a Runpod pod's own log; run {run} ran on target {state.run.target} "
            f"({state.run.kind}): `overbrainer runs logs {run}` reads its job's log"
        )
    if node is not None:
        from overbrainer.targets.runpod.logs import node_pod

        node_pod(state, node)  # a usage error when the run has no such node
    async with open_interrupts(print_notice) as interrupts:
        finished = await interrupts.race(
            lambda: _print_logs(
                state, follow=follow, tail=tail, pod=pod, source=source, rank=rank, node=node
            )
        )
    if finished is None:
        return interrupts.exit_code  # Ctrl-C: the way a --follow ends
    return 0


def _recorded_state(invocation: Any, run: str) -> Any:
    """The run as its log tells it, read once before anything else of the command runs
    (nothing waits on the event loop yet, so the store is read here directly)."""
    store = open_store(invocation, read_only=True)
    try:
        return store.get(run)
    finally:
        store.close()


async def _print_logs(
    state: Any,
    *,
    follow: bool,
    tail: int | None,
    pod: bool,
    source: Any,
    rank: int | None,
    node: int | None = None,
) -> None:
    from overbrainer.lifecycle import logs as job_logs
    from overbrainer.projections.files import run_dir
    from overbrainer.train.ranks import rank_prefix

    only = None if rank is None else rank_prefix(rank)

    invocation = current()
    home_log = run_dir(invocation.project_dir, state.run.run_id) / job_logs.LOG_FILE
    # Only node 0's log comes home: another node's is read on that node.
    where = None if pod or node else job_logs.where_to_read(state, home_log.is_file())
    if where == "here":
        async with job_logs.log_at_home(invocation.project_dir, state.run.run_id) as (
            executor,
            job_dir,
        ):
            await job_logs.print_job_log(
                executor,
                job_dir,
                sys.stdout,
                tail=tail,
                follow=follow and not state.final,
                reading=job_logs.Reading(job_logs.Printer(sys.stdout, only)),
            )
        return
    from overbrainer.config.load import load_settings

    settings = load_settings(invocation.project_dir, invocation.environ())
    reading = job_logs.Reading(job_logs.Printer(sys.stdout, only))

    async def remote() -> None:
        await _print_remote_log(
            invocation,
            settings,
            state,
            reading,
            follow=follow,
            tail=tail,
            pod=pod,
            source=source,
            node=node,
        )

    if pod or node:
        await remote()
    else:
        await job_logs.follow_onto_home(
            remote, invocation.project_dir, state, reading, follow=follow, home_log=home_log
        )


async def _print_remote_log(
    invocation: Any,
    settings: Any,
    state: Any,
    reading: Any,
    *,
    follow: bool,
    tail: int | None,
    pod: bool,
    source: Any,
    node: int | None = None,
) -> None:
    """The job's log on the run's target (``node``: that node of its cluster), or
    (``pod``) the pod's own log."""
    from overbrainer.lifecycle import logs as job_logs

    if pod:
        from overbrainer.targets.runpod.logs import print_own_log

        await print_own_log(settings, state, sys.stdout, source=source, tail=tail, follow=follow)
        return
    from overbrainer.targets.choose import reach_to_read

    async with reach_to_read(invocation.project_dir, settings, state, node) as reached:
        await job_logs.print_job_log(
            reached.executor,
            reached.job_dir,
            sys.stdout,
            tail=tail,
            follow=follow,
            poll=reached.poll,
            reading=reading,
        )


def _facts(invocation: Any, refs: "tuple[str, ...] | list[str]") -> "list[RunFacts]":
    """The facts of the runs ``refs`` name, in that order (each named once)."""
    from overbrainer.errors import UsageError
    from overbrainer.projections.compare import gather
    from overbrainer.projections.files import run_dir

    ids = [resolve_run(invocation, ref) for ref in refs]
    twice = sorted({run_id for run_id in ids if ids.count(run_id) > 1})
    if twice:
        raise UsageError(f"run {twice[0]} is named more than once; name each run once")
    store = open_store(invocation, read_only=True)
    try:
        return [
            gather(
                store.get(run_id), store.history(run_id), run_dir(invocation.project_dir, run_id)
            )
            for run_id in ids
        ]
    finally:
        store.close()


def compared_series(runs: "list[RunFacts]", which: str) -> "list[Series]":
    """Each run's ``loss`` or ``eval_loss`` as a series of its own colour, named by its ID."""
    from overbrainer.projections.chart import STYLES, Series

    found = []
    for index, run in enumerate(runs):
        points = run.curves.loss if which == "loss" else run.curves.eval_loss
        if points:
            style = STYLES[index % len(STYLES)]
            found.append(Series(run.run_id, points, style, marks=which == "eval_loss"))
    return found


@command(app, "runs", "compare")
def compare(
    *runs: str,
    json: bool = False,
    no_plot: bool = False,
) -> int:
    from overbrainer.errors import UsageError
    from overbrainer.projections.compare import differing, side_by_side, summary_rows

    if len(runs) < 2:
        raise UsageError("runs compare needs two runs or more: overbrainer runs compare RUN RUN")
    facts = _facts(current(), runs)
    if json:
        differ = dict(differing(facts))
        for index, run in enumerate(facts):
            row: dict[str, Any] = {label: values[index] for label, values in summary_rows(facts)}
            row["id"] = run.run_id
            row["settings_that_differ"] = {key: values[index] for key, values in differ.items()}
            row["loss"] = [list(point) for point in run.curves.loss]
            row["eval_loss"] = [list(point) for point in run.curves.eval_loss]
            print_json(row)
        return 0
    out = side_by_side(facts)
    if not no_plot:
        from overbrainer.cli.runs_read import draw

        for which in ("loss", "eval_loss"):
            series = compared_series(facts, which)
            if series:
                out += ["", f"{which}:", draw(series)]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


@command(app, "runs", "report")
def report(
    *runs: str,
    output: Path | None = None,
) -> int:
    from overbrainer import __version__
    from overbrainer.errors import OverbrainerError, UsageError
    from overbrainer.projections.files import write_text_atomic
    from overbrainer.projections.report import report_html
    from overbrainer.projections.words import shown_path

    if not runs:
        raise UsageError("runs report needs a run: overbrainer runs report RUN [RUN…] [-o FILE]")
    invocation = current()
    facts = _facts(invocation, runs)
    page = report_html(facts, generated_at=datetime.now(UTC), version=__version__)
    if output is None:
        if len(facts) == 1 and facts[0].state.run.files_removed is None:
            output = invocation.project_dir / "runs" / facts[0].run_id / "report.html"
        elif len(facts) == 1:  # its directory was removed (`runs rm`): not made again
            output = invocation.project_dir / "reports" / f"{facts[0].run_id}.html"
        else:
            name = "compare-" + "-".join(f.run_id[-4:] for f in facts) + ".html"
            output = invocation.project_dir / "reports" / name
    shown = shown_path(output, invocation.project_dir)
    try:
        write_text_atomic(Path.cwd() / output, page)
    except OSError as error:
        raise OverbrainerError(
            f"cannot write the report to {shown} ({error.strerror or error}); name another "
            "file with -o FILE"
        ) from None
    print(f"wrote {shown}")
    return 0


@command(app, "runs", "rm")
async def rm(*runs: str) -> int:
    from overbrainer.cli.runs_rm import remove_runs

    return await remove_runs(runs)


@command(app, "runs", "gc")
async def gc(
    *,
    older_than: str,
    keep_best: int = 0,
    delete: bool = False,
    json: bool = False,
) -> int:
    from overbrainer.cli.runs_rm import collect_garbage

    return await collect_garbage(
        older_than=older_than, keep_best=keep_best, delete=delete, json=json
    )
