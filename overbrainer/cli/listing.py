"""Every run of the project from the runs view (no network but the team store's), and a
run named on the command line by its ID, a unique prefix or suffix of it, or its directory."""

from collections.abc import Mapping
from typing import Any

from overbrainer.cli.common import open_store, require_project, store_url
from overbrainer.cli.context import Invocation
from overbrainer.errors import OverbrainerError, UsageError

_SHOWN = 8  # candidates named when a reference is ambiguous


def _latest_position(url: str | None, environ: Mapping[str, str]) -> int | None:
    """The team store's newest log position, asked without opening the store (None: not
    known so)."""
    if url is None:  # the project's own SQLite log: the PostgreSQL driver module stays unloaded
        return None
    from overbrainer.events.pg import is_driver_missing, is_postgres_url, missing_driver, parse_url

    if not is_postgres_url(url):
        return None
    target = parse_url(url, environ)
    try:
        from overbrainer.events.pg_recorder import latest_position
    except ImportError as error:
        if not is_driver_missing(error):
            raise
        raise missing_driver() from None
    return latest_position(target)


def listing(invocation: Invocation) -> tuple[list[Any], dict[str, str]]:
    """Every run's state from the view, caught up with the store first when it lags, and
    the host each run was created on.

    On a team store the view is trusted as it is when its position is the log's newest
    (one short query through eventsourcing's recorder, see ``pg_recorder.latest_position``): the
    store itself is opened only when another checkout appended since.
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


def _exists(invocation: Invocation, run_id: str) -> bool:
    """Whether the store holds a run of exactly this ID (its own stream only is read)."""
    store = open_store(invocation, read_only=True)
    try:
        return store.origin(run_id) is not None
    finally:
        store.close()


def resolve_run(invocation: Invocation, text: str) -> str:
    """The ID of the run ``text`` names: a run ID, a unique prefix or suffix of one
    (``20260101-12``, ``ab12``) or a path to its directory (``runs/<id>/``).

    A full run ID, or the exact ID of a run of the store, is taken as it is (the store
    says if it has no such run); anything else is looked up among the project's runs: none,
    or more than one, is an error naming them.
    """
    from overbrainer.events.ids import check_run_id, looks_like_run_id, matching_runs, run_ref

    ref = check_run_id(run_ref(text))
    if looks_like_run_id(ref) or _exists(invocation, ref):
        return ref
    states, _ = listing(invocation)
    found = matching_runs(ref, [state.run.run_id for state in states])
    if len(found) == 1:
        return found[0]
    if not found:
        if not states:
            from overbrainer.cli.unlogged import check_listing

            check_listing(invocation)
        raise OverbrainerError(
            f"no run of this project has an ID that is, starts or ends with {ref!r}; list "
            "them with `overbrainer runs ls`"
        )
    shown = ", ".join(found[:_SHOWN]) + (
        f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    )
    raise UsageError(f"{ref!r} names {len(found)} runs: {shown}; give more of the run's ID")
