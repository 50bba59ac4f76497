"""``runs ls`` and ``runs show``: the runs view and one run's record, read without any
network.

Kept free of cyclopts (and of everything a listing does not need): the command line reaches
these through ``overbrainer/cli/fast_path.py`` without building the command tree, and the
commands declared in ``runs_cmd.py`` call them too.
"""

import contextlib
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from overbrainer.cli.common import open_store, print_json
from overbrainer.cli.context import current
from overbrainer.cli.listing import listing, resolve_run
from overbrainer.events.actor import this_host
from overbrainer.events.states import RunState
from overbrainer.plurals import plural, word

if TYPE_CHECKING:
    from overbrainer.events.aggregate import RunLog
    from overbrainer.projections.chart import Series
    from overbrainer.projections.live import Standing
    from overbrainer.projections.spend import Spend


def clock() -> datetime:
    """This machine's time now (tests replace it)."""
    return datetime.now(UTC)


def spend_text(state: Any, now: datetime, here: bool = False) -> str:
    """What the run's pods cost: ``$0.42`` as Runpod billed it, ``~$0.42`` where it is
    overbrainer's estimate (see ``projections/spend.py``).

    The estimate of a pod that may still bill compares this machine's clock with Runpod's
    ``createdAt``: when a command on this machine (``here``: the run was started from it)
    recorded its clock being off Runpod's, the offset is taken out (no network here to ask
    Runpod's time).
    """
    from overbrainer.projections.spend import run_spend

    return run_spend(state, now, here=here).text()


_SINCE = {"h": 1, "d": 24, "w": 24 * 7}


def parse_since(text: str) -> timedelta:
    """``12h``, ``7d``, ``30d``, ``2w``: a whole number of hours, days or weeks."""
    from overbrainer.errors import UsageError

    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    if unit not in _SINCE or not number.isdigit() or not 0 < int(number) <= 100_000:
        raise UsageError(
            f"--since takes a whole number of hours, days or weeks, like 12h, 7d or 30d "
            f"(not {text!r})"
        )
    return timedelta(hours=int(number) * _SINCE[unit])


def _created_since(state: Any, cutoff: datetime) -> bool:
    from overbrainer.utc import parse_utc

    moment = parse_utc(state.run.created_at)
    return moment is not None and moment >= cutoff


def total_line(spends: "list[Spend]", since: str) -> str:
    """The last line of ``runs ls --since``: what the runs listed cost, and how much of it
    is an estimate."""
    from overbrainer.projections.spend import money

    total = sum(s.total for s in spends)
    estimated = sum(s.estimated for s in spends)
    line = f"total {money(total)} for {plural(len(spends), 'run')} created in the last {since}"
    unknown = sum(s.unknown for s in spends)
    pods = sum(s.pods for s in spends)
    if pods == 0:
        # Runs on this machine or over SSH: nothing was billed, nor estimated.
        return line + f": no Runpod pod among {word(len(spends), 'it', 'them')}"
    if estimated > 0 or unknown:
        line += f", {money(estimated)} of it estimated (`overbrainer pod billing` reads what "
        line += "Runpod billed)"
    else:
        line += f", all as Runpod billed it for {word(pods, 'its pod', 'their pods')}"
    if unknown:
        line += f"; the cost of {plural(unknown, 'pod')} is unknown"
    return line


def _budget_text(invocation: Any, states: "Sequence[RunLog]", now: datetime) -> str:
    """``; this month (Dec 2026) $12.00 of the monthly budget $100.00, $88.00 left`` when
    ``[project] monthly_budget_usd`` is set (every run of the store counts), else empty."""
    from overbrainer.cli.common import monthly_budget

    budget = monthly_budget(invocation)
    if budget is None:
        return ""
    from overbrainer.projections.budget import month_name, month_spend, month_text

    return "; " + month_text(month_spend(states, now), budget, month_name(now))


_VOLUME_LIMIT = 15.0  # seconds for reading what Runpod billed for the project's volumes


def _volumes_text(
    invocation: Any, states: "Sequence[RunLog]", runs_total: float, span: timedelta, now: datetime
) -> str:
    """``; network volume cache: $0.12 as Runpod billed it since 2026-11-26 00:00 UTC
    ($0.54 with the runs)`` when runs of the project attached a network volume: the one read of the
    network a listing makes, and only then (Runpod bills a volume by the month, not by
    run). Empty when none did."""
    volumes = {
        str(s.pod.volume["id"]): str(s.pod.volume["name"])
        for s in states
        if s.pod.volume is not None
    }
    if not volumes:
        return ""
    import trio

    from overbrainer.config.load import load_settings
    from overbrainer.errors import OverbrainerError
    from overbrainer.projections.spend import money
    from overbrainer.runpod.client import RunpodClient
    from overbrainer.targets.runpod.volume_cmds import volume_spend

    names = ", ".join(sorted(set(volumes.values())))
    which = f"network {word(len(volumes), 'volume', 'volumes')} {names}"

    async def read() -> tuple[float, datetime]:
        settings = load_settings(invocation.project_dir, invocation.environ())
        key = settings.require_runpod_api_key()
        with trio.fail_after(_VOLUME_LIMIT):
            async with RunpodClient(
                key, settings.runpod.base_url, timeout=5.0, max_retry_seconds=3.0
            ) as client:
                return await volume_spend(client, volumes, now - span, now)

    try:
        amount, start = trio.run(read)
    except (OverbrainerError, trio.TooSlowError) as error:
        reason = "Runpod did not answer in time" if isinstance(error, trio.TooSlowError) else error
        return f"; what {which} cost is unknown ({reason})"
    since = start.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    return (
        f"; {which}: {money(amount)} as Runpod billed it since {since} UTC "
        f"({money(amount + runs_total)} with the runs)"
    )


def _progress(standing: "Standing | None") -> str:
    if standing is None or standing.summary.step is None:
        return ""
    step, total = standing.summary.step, standing.summary.max_steps
    if total:
        return f"{step}/{total} ({100 * step / total:.0f}%)"
    return str(step)


def _eta_text(state: Any, standing: "Standing | None", now: datetime) -> str:
    """The ETA of a run in progress, or how old what is known of it is."""
    from overbrainer.projections.live import STALE_SECONDS
    from overbrainer.projections.words import duration_text

    if state.run.state != RunState.running or standing is None:
        return ""
    eta = standing.eta_at(now)
    if eta is not None:
        return duration_text(eta)
    age = standing.age(now)
    return f"seen {duration_text(age)} ago" if age is not None and age > STALE_SECONDS else ""


def _row(state: Any, now: datetime, host: str, project: Path) -> dict[str, Any]:
    from overbrainer.projections.files import run_dir
    from overbrainer.projections.live import ended_job
    from overbrainer.projections.live import standing as standing_of
    from overbrainer.projections.spend import run_spend

    run, pod = state.run, state.pod
    directory = run_dir(project, run.run_id)
    standing = standing_of(state, directory)
    ended = ended_job(state, directory, here=host in ("", this_host()))
    spend = run_spend(state, now, here=host == this_host())
    row = {
        "id": run.run_id,
        "host": host,
        "state": run.state,
        "target": run.target,
        "kind": run.kind,
        "created": run.created_at,
        "progress": _progress(standing),
        "pod": pod.pod_id or "",
        "pod_status": pod.status if pod.pod_id else "",
        "spend": spend.text(),
        **spend.to_json(),
        "note": run.note or "",
        "files_removed": run.files_removed is not None,
        # The checkpoint `train --resume-from RUN` starts from, and where this run started.
        "checkpoint_step": run.checkpoint["step"] if run.checkpoint else None,
        "resumed_from": (
            f"{run.resumed_from['run']}:{run.resumed_from['step']}" if run.resumed_from else ""
        ),
        # How often the run went on, on a new pod, its pod lost (of how many allowed).
        "recoveries": len(run.recoveries),
        "max_recoveries": run.max_recoveries,
    }
    row.update(standing.to_json(now) if standing is not None else dict.fromkeys(_STANDING_KEYS))
    # A job that ended with nobody following it: no ETA, and the run is not shown running.
    row["job_ended"] = ended.to_json() if ended is not None else None
    row["eta"] = "" if ended is not None else _eta_text(state, standing, now)
    if ended is not None:
        row["eta_seconds"] = None
    return row


_STANDING_KEYS = (
    "step",
    "max_steps",
    "percent",
    "epoch",
    "loss",
    "eval_loss",
    "eta_seconds",
    "seen_at",
)


def list_runs(
    *,
    json: bool = False,
    state: Sequence[str] | None = None,
    last: int | None = None,
    since: str | None = None,
    all_runs: bool = False,
) -> int:
    """``runs ls``: one line per run (see its help in ``runs_cmd.py``); a run whose files
    were removed only with ``all_runs``."""
    from overbrainer.errors import UsageError
    from overbrainer.projections.words import pod_status_text

    if last is not None and last < 1:
        raise UsageError("--last takes a number of runs, 1 or more")
    span = parse_since(since) if since is not None else None
    invocation = current()
    states, hosts = listing(invocation)
    if not states:
        # "No runs" from a log emptied or replaced while runs/ holds runs is refused.
        from overbrainer.cli.unlogged import check_listing

        check_listing(invocation)
    now = clock()
    every = states  # the month's spend counts every run, its files removed or not
    removed = sum(1 for s in states if s.run.files_removed is not None)
    if not all_runs:
        states = [s for s in states if s.run.files_removed is None]
    if span is not None:
        states = [s for s in states if _created_since(s, now - span)]
    if state:
        states = [s for s in states if s.run.state in state]
    if last is not None:
        states = states[-last:]
    rows = [_row(s, now, hosts.get(s.run.run_id, ""), invocation.project_dir) for s in states]
    if json:
        for row in rows:
            print_json(row)
        return 0
    if not rows:
        if state or last is not None or since is not None:
            print("no run matches: `overbrainer runs ls` lists them all", file=sys.stderr)
        elif removed:
            print(
                f"no runs with files here: the files of {removed} were removed "
                "(`overbrainer runs ls --all` lists them too)",
                file=sys.stderr,
            )
        else:
            print("no runs yet: start one with `overbrainer train`", file=sys.stderr)
        return 0
    heads = ["RUN", "STATE", "TARGET", "CREATED", "PROGRESS", "LOSS", "ETA", "POD", "SPEND"]
    # The host (as actors record it) only matters once some run was started elsewhere.
    here = this_host()
    with_host = any(r["host"] not in ("", here) for r in rows)
    table = [
        [
            r["id"],
            *([r["host"] or "?"] if with_host else []),
            state_text(r),
            r["target"],
            (r["created"] or "")[:16].replace("T", " "),
            r["progress"],
            _loss_text(r["loss"]),
            r["eta"],
            f"{r['pod']} {pod_status_text(r['pod_status'])}" if r["pod"] else "",
            r["spend"],
        ]
        for r in rows
    ]
    if with_host:
        heads.insert(1, "HOST")
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads)]
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table]
    if since is not None:
        from overbrainer.projections.spend import run_spend

        spends = [run_spend(s, now, here=hosts.get(s.run.run_id, "") == here) for s in states]
        line = total_line(spends, since.strip()) + _budget_text(invocation, every, now)
        if span is not None:
            line += _volumes_text(invocation, every, sum(s.total for s in spends), span, now)
        out.append(line)
    sys.stdout.write("\n".join(out) + "\n")
    _ended_notes(rows)
    return 0


def _ended_notes(rows: list[dict[str, Any]]) -> None:
    """Under the table, on stderr: each run whose job ended unfollowed, and the command
    that collects it."""
    ended = [r for r in rows if r["job_ended"] is not None]
    if not ended:
        return
    from overbrainer.exec.markers import JobEnd
    from overbrainer.projections.live import collect_hint

    sys.stdout.flush()
    for r in ended:
        end = r["job_ended"]
        text = JobEnd(end["how"], end["exit_code"], None).text()
        print(
            f"run {r['id']}: its job {text}; not collected yet: {collect_hint(r['id'])}",
            file=sys.stderr,
        )


_ENDED_WORDS = {"exited": "ended", "cancelled": "cancelled", "lost": "lost"}


def state_text(row: dict[str, Any]) -> str:
    """The run's state, with the step of the checkpoint it can be resumed from; for a run
    whose job ended unfollowed, that (the log says running until it is collected)."""
    end = row.get("job_ended")
    if end is not None:
        code = end["exit_code"]
        how = _ENDED_WORDS[end["how"]] + (f" (exit {code})" if code not in (0, None) else "")
        return f"job {how}, not collected"
    step = row["checkpoint_step"]
    if row.get("recoveries") and row["state"] in (RunState.preparing, RunState.running):
        # A run starting a pod again after its pod was lost goes on: it is running.
        return f"running (recovery {row['recoveries']}/{row['max_recoveries']})"
    if row["files_removed"]:
        return f"{row['state']} (files removed)"
    return f"{row['state']} (checkpoint {step})" if step is not None else str(row["state"])


def _loss_text(loss: object) -> str:
    from overbrainer.train.metrics import format_loss

    if isinstance(loss, int | float):
        return format_loss(float(loss))
    return str(loss) if loss is not None else ""


def show_run(run: str, /, *, json: bool = False, no_plot: bool = False) -> int:
    """``runs show RUN``: the run's record, pod, progress and files, then its loss curves."""
    from overbrainer.events.home import has_local_files, run_home
    from overbrainer.projections.files import refresh_projections, run_dir

    invocation = current()
    run = resolve_run(invocation, run)
    store = open_store(invocation, read_only=True)
    try:
        state = store.get(run)
        home = run_home(store, state)
    finally:
        store.close()
    directory = run_dir(invocation.project_dir, run)
    local = has_local_files(directory)
    # The cache files may be missing (deleted, or a run started from another checkout) or
    # behind: they are rewritten then, and only then. On a read-only or full disk they stay
    # as they are: only caches, the log has it all.
    with contextlib.suppress(OSError):
        refresh_projections(invocation.project_dir, state)
    from overbrainer.projections.live import standing as standing_of

    standing = standing_of(state, directory) if state.run.state == RunState.running else None
    from overbrainer.projections.live import collect_hint, ended_job

    ended = ended_job(state, directory, here=home is None or home.on_this_host)
    now = datetime.now(UTC)
    data = state.to_json()
    from overbrainer.train.layout import checkpoints_size

    on_disk = checkpoints_size(directory, state.run.checkpoints) if local else None
    data["checkpoints_bytes"] = on_disk
    if json:
        data["progress"] = standing.to_json(now) if standing is not None else None
        data["files"] = str(directory)
        data["local_files"] = local
        data["lives"] = home.to_json() if home is not None else None
        data["job_ended"] = ended.to_json() if ended is not None else None
        print_json(data)
        return 0
    from overbrainer.projections.summary import job_dir_label, summary_lines

    lines = summary_lines(state, on_disk)
    if standing is not None and standing.seen_at is not None:
        from overbrainer.projections.live import standing_text

        lines.insert(1, f"  progress   {standing_text(standing, now, eta=ended is None)}")
    if ended is not None:
        # The log says running until a command collects the run: the job's markers here
        # already know it ended.
        lines.insert(
            1, f"  ended      its job {ended.text()}; not collected yet: {collect_hint(run)}"
        )
    if home is not None:
        lines.append(
            f"  lives      on host {home.host} (started by `{home.command}` as {home.user}), "
            f"{job_dir_label(state.run.kind)} {home.remote_dir}"
        )
        if (home.last_host, home.last_command) != (home.host, home.command):
            lines.append(
                f"  last       `{home.last_command}` on {home.last_host} at "
                f"{home.last_at[:19].replace('T', ' ')}Z"
            )
    if state.run.files_removed is not None:
        pass  # said by the summary: the directory is gone
    elif local or home is None:
        lines.append(f"  files      {directory}")
    else:
        lines.append(
            f"  files      {directory} holds only run.json and pod.json: the run's output and "
            f"ssh/ keys are in the checkout on {home.host} that started it"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    if not no_plot:
        from overbrainer.projections.curves import curves_of
        from overbrainer.projections.live import curve_events

        curves = curves_of(curve_events(directory))
        if not curves.empty:
            sys.stdout.write("\n" + draw(run_series(curves)) + "\n")
    return 0


def run_series(curves: Any, name: str = "") -> "list[Series]":
    """A run's loss and eval loss as chart series (``name`` before each, for several runs)."""
    from overbrainer.projections.chart import Series

    prefix = f"{name} " if name else ""
    found = []
    if curves.loss:
        found.append(Series(f"{prefix}loss", curves.loss, "cyan"))
    if curves.eval_loss:
        found.append(Series(f"{prefix}eval_loss", curves.eval_loss, "magenta", marks=True))
    return found


def draw(series: "list[Series]") -> str:
    """Curves for stdout: drawn to the terminal's width on a terminal (coloured unless
    NO_COLOR is set), a table of their values elsewhere."""
    import os
    import shutil

    from overbrainer.projections.chart import ansi_text, chart, plain_text, table

    if not sys.stdout.isatty():
        return "\n".join(table(series))
    width = shutil.get_terminal_size((100, 24)).columns - 1
    # Without colour each series is drawn with a character of its own (see chart()).
    plain = bool(os.environ.get("NO_COLOR"))
    lines = chart(series, width=max(30, width), height=12, plain=plain)
    return plain_text(lines) if plain else ansi_text(lines)
