"""``store migrate --to URL``: copy this checkout's SQLite history into a team store."""

import sys
from typing import TYPE_CHECKING, Annotated

from cyclopts import App, Parameter

from overbrainer.cli.common import JSON_HELP, print_json, store_url
from overbrainer.cli.context import current
from overbrainer.errors import OverbrainerError, UsageError
from overbrainer.plurals import plural, word

if TYPE_CHECKING:
    from overbrainer.events.migrate import Plan, RunPlan
    from overbrainer.events.store import RunStore

app = App(name="store", help="The event store: move this checkout's history to a team store.")


@app.command(name="migrate")
def migrate(
    *,
    to: Annotated[
        str,
        Parameter(help="The team store: postgresql://USER@HOST[:PORT]/DB (no password in it)."),
    ],
    dry_run: Annotated[
        bool, Parameter(negative=(), help="Show what would be copied; copy nothing.")
    ] = False,
    json: Annotated[bool, Parameter(negative=(), help=JSON_HELP)] = False,
) -> int:
    """Copy this checkout's SQLite event log into a PostgreSQL team store.

    Every event keeps its time and actor. Idempotent: a second run copies only what is
    missing. Afterwards each run's event count and last event are compared on both sides.
    """
    from urllib.parse import urlsplit

    from overbrainer.events.actor import Actor
    from overbrainer.events.pg import is_postgres_url
    from overbrainer.events.store import RunStore, default_sqlite_path

    invocation = current()
    if not is_postgres_url(to):
        raise UsageError("--to takes the team store's URL: postgresql://USER@HOST[:PORT]/DB")
    try:
        has_password = urlsplit(to).password is not None
    except ValueError:
        raise UsageError("--to is not a valid postgresql://USER@HOST[:PORT]/DB URL") from None
    if has_password:
        raise UsageError(
            "--to may not hold a password (command lines are visible to other users and kept "
            "in shell history); put it in ~/.pgpass (host:port:db:user:password, mode 600) or "
            "PGPASSWORD, and give --to without it"
        )
    current_url = store_url(invocation)
    source_url = current_url if current_url is None or current_url.startswith("sqlite:") else None
    if source_url is None:
        path = default_sqlite_path(invocation.project_dir)
        if not path.is_file():
            raise OverbrainerError(
                f"no SQLite event log at {path}: this checkout has no local history to migrate"
            )
    environ = invocation.environ()
    actor = Actor.here(invocation.command)
    source = RunStore(source_url, invocation.project_dir, actor, environ=environ, read_only=True)
    try:
        target = RunStore(to, invocation.project_dir, actor, environ=environ)
        try:
            hint = None if current_url == to else to
            return _migrate(source, target, dry_run=dry_run, json=json, hint=hint)
        finally:
            target.close()
    finally:
        source.close()


def _migrate(
    source: "RunStore", target: "RunStore", *, dry_run: bool, json: bool, hint: str | None
) -> int:
    from overbrainer.events import migrate as mig

    plan, by_oid = mig.plan(source, target)
    here, there = source.where, target.where
    if json:
        for run in plan.runs:
            print_json(run.to_json())
    if dry_run:
        if not json:
            _print_plan(plan)
            print(
                f"would copy {plural(plan.to_copy, 'event')} of "
                f"{plural(len(plan.runs_to_copy), 'run')} from {here} to {there} "
                f"({plural(len(plan.runs), 'run')}, {plural(plan.events, 'event')} here)",
                file=sys.stderr,
            )
        _warn_conflicts(plan.conflicts, there)
        return 1 if plan.conflicts else 0

    shown = [0]

    def progress(done: int, total: int) -> None:
        # Only a long copy reports, about every tenth of the way.
        if total >= 5000 and not json and done - shown[0] >= total // 10 and done < total:
            shown[0] = done
            print(f"copied {done}/{total} events…", file=sys.stderr, flush=True)

    copied = mig.copy(source, target, by_oid, progress)
    problems = mig.verify(source, target, by_oid)
    if problems:
        raise mig.MigrationError(
            f"copied {plural(copied, 'event')} to {there}, but verification found differences: "
            + "; ".join(problems[:10])
            + ("; …" if len(problems) > 10 else "")
            + "; run `overbrainer store migrate --dry-run --to URL` to see each run"
        )
    verified = len(plan.runs) - len(plan.conflicts)
    if json:
        print_json(
            {
                "copied": copied,
                "runs": len(plan.runs_to_copy),
                "verified": verified,
                "conflicts": len(plan.conflicts),
            }
        )
    elif copied:
        print(
            f"copied {plural(copied, 'event')} of {plural(len(plan.runs_to_copy), 'run')} from "
            f"{here} to {there}; verified {plural(verified, 'run')}: same event counts, same "
            "last events"
        )
    else:
        print(
            f"nothing to copy: the {plural(verified, 'run')} "
            f"({plural(plan.events, 'event')}) of {here} {word(verified, 'is', 'are all')} in "
            f"{there} already (verified)"
        )
    if hint and not json and not plan.conflicts:
        print(
            f'next: use the team store from this checkout: [store] url = "{hint}" in '
            "overbrainer.toml (or OVERBRAINER_STORE__URL)",
            file=sys.stderr,
        )
    _warn_conflicts(plan.conflicts, there)
    return 1 if plan.conflicts else 0


def _print_plan(plan: "Plan") -> None:
    heads = ["RUN", "HERE", "THERE", "TO COPY"]
    rows = [
        [
            r.run_id,
            str(r.source_events),
            str(r.target_events),
            "conflict" if r.conflict else str(r.to_copy),
        ]
        for r in plan.runs
    ]
    if not rows:
        return
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    sys.stdout.write("\n".join(lines) + "\n")


def _warn_conflicts(conflicts: "list[RunPlan]", there: str) -> None:
    for run in conflicts:
        print(f"error: run {run.run_id} not copied: {run.conflict} ({there})", file=sys.stderr)
