"""``runs ls`` and ``runs show``: the runs view, read without any network."""

import contextlib
import math
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from cyclopts import App, Parameter

from overbrainer.cli.common import open_store, print_json, require_project, store_url
from overbrainer.cli.context import Invocation, current

app = App(name="runs", help="List and show this project's runs (no network).")


def spend_text(state: Any, now: datetime, here: bool = False) -> str:
    """What the run's pod cost: as recorded, or estimated for a pod that may still bill.

    The estimate compares this machine's clock with Runpod's ``createdAt``: when a command
    on this machine (``here``: the run was started from it) recorded its clock being off
    Runpod's, the offset is taken out (no network here to ask Runpod's time).
    """
    pod = state.pod
    if pod.spend is not None:
        return f"${pod.spend:.2f}"
    if pod.cost_per_hour is not None and pod.created_at and pod.may_bill():
        try:
            started = datetime.fromisoformat(pod.created_at.replace("Z", "+00:00"))
        except ValueError:
            return ""
        offset = state.run.clock_offset if here else None
        if offset is not None and math.isfinite(offset):
            now -= timedelta(seconds=offset)
        hours = max(0.0, (now - started).total_seconds() / 3600)
        return f"~${pod.cost_per_hour * hours:.2f}"
    return ""


def _progress(metrics: dict[str, Any]) -> str:
    step, total = metrics.get("step"), metrics.get("max_steps")
    if step is None:
        return ""
    if total:
        return f"{step}/{total} ({100 * step / total:.0f}%)"
    return str(step)


def _row(state: Any, now: datetime, host: str) -> dict[str, Any]:
    import socket

    run, pod = state.run, state.pod
    return {
        "id": run.run_id,
        "host": host,
        "state": run.state,
        "target": run.target,
        "kind": run.kind,
        "created": run.created_at,
        "progress": _progress(run.metrics),
        "pod": pod.pod_id or "",
        "pod_status": pod.status if pod.pod_id else "",
        "spend": spend_text(state, now, here=host == socket.gethostname()),
        "note": run.note or "",
    }


def _latest_position(url: str | None, environ: Mapping[str, str]) -> int | None:
    """The team store's newest log position, by its cheap path (None: not known so)."""
    from overbrainer.events.pg import is_postgres_url

    if url is None or not is_postgres_url(url):
        return None
    from overbrainer.events.pg import latest_position, parse_url

    return latest_position(parse_url(url, environ))


def _listing(invocation: Invocation) -> tuple[list[Any], dict[str, str]]:
    """Every run's state from the view, caught up with the store first when it lags, and
    the host each run was created on.

    On a team store the view is trusted as it is when its position is the log's newest
    (one short query, see ``pg.latest_position``): the store, its driver and eventsourcing
    are opened only when another checkout appended since.
    """
    from overbrainer.projections.view import RunsView, view_path

    require_project(invocation)
    url = store_url(invocation)
    # Asked before the view is opened: a server that cannot be reached fails the command
    # before anything is written here, as opening the store does.
    latest = _latest_position(url, invocation.environ())
    view = RunsView(view_path(invocation.project_dir), str(url))
    try:
        if latest is not None:
            states = view.runs_at(latest)
            if states is not None:
                return states, view.hosts()
        store = open_store(invocation, read_only=True)
        try:
            view.catch_up(store)
            return view.runs(), view.hosts()
        finally:
            store.close()
    finally:
        view.close()


@app.command(name="ls")
def ls(*, json: Annotated[bool, Parameter(negative=())] = False) -> int:
    """One line per run: id, state, target, created, progress, pod and spend (and the host
    it runs from, when some run of a team store is not this machine's)."""
    import socket

    states, hosts = _listing(current())
    now = datetime.now(UTC)
    rows = [_row(state, now, hosts.get(state.run.run_id, "")) for state in states]
    if json:
        for row in rows:
            print_json(row)
        return 0
    if not rows:
        print("no runs yet: start one with `overbrainer train`", file=sys.stderr)
        return 0
    heads = ["RUN", "STATE", "TARGET", "CREATED", "PROGRESS", "POD", "SPEND"]
    # The host (as actors record it) only matters once some run was started elsewhere.
    here = socket.gethostname()
    with_host = any(r["host"] not in ("", here) for r in rows)
    table = [
        [
            r["id"],
            *([r["host"] or "?"] if with_host else []),
            r["state"],
            r["target"],
            (r["created"] or "")[:16].replace("T", " "),
            r["progress"],
            f"{r['pod']} {r['pod_status']}".strip(),
            r["spend"],
        ]
        for r in rows
    ]
    if with_host:
        heads.insert(1, "HOST")
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads)]
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    out += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


@app.command(name="show")
def show(run: str, *, json: Annotated[bool, Parameter(negative=())] = False) -> int:
    """The run's record, its pod, a metrics summary, where it lives and where its files are."""
    from overbrainer.events.home import has_local_files, run_home
    from overbrainer.events.ids import check_run_id
    from overbrainer.projections.files import run_dir, write_projections

    invocation = current()
    check_run_id(run)
    store = open_store(invocation, read_only=True)
    try:
        state = store.get(run)
        home = run_home(store, state)
    finally:
        store.close()
    directory = run_dir(invocation.project_dir, run)
    local = has_local_files(directory)
    # The cache files may be missing (deleted, or a run started from another checkout).
    # On a read-only or full disk they stay as they are: only caches, the log has it all.
    with contextlib.suppress(OSError):
        write_projections(invocation.project_dir, state)
    data = state.to_json()
    if json:
        data["files"] = str(directory)
        data["local_files"] = local
        data["lives"] = home.to_json() if home is not None else None
        print_json(data)
        return 0
    from overbrainer.projections.summary import summary_lines

    lines = summary_lines(state)
    if home is not None:
        lines.append(
            f"  lives      on host {home.host} (started by `{home.command}` as {home.user}), "
            f"remote dir {home.remote_dir}"
        )
        if (home.last_host, home.last_command) != (home.host, home.command):
            lines.append(
                f"  last       `{home.last_command}` on {home.last_host} at "
                f"{home.last_at[:19].replace('T', ' ')}Z"
            )
    if local or home is None:
        lines.append(f"  files      {directory}")
    else:
        lines.append(
            f"  files      {directory} holds only run.json and pod.json: the run's output and "
            f"ssh/ keys are in the checkout on {home.host} that started it"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
