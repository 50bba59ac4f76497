"""``events RUN``, declared for cyclopts (its help, its options); done in ``events_read.py``."""

from typing import Annotated

from cyclopts import Parameter

from overbrainer.cli.common import JSON_HELP, RUN_HELP


def events(
    run: Annotated[str, Parameter(help=RUN_HELP)],
    /,
    *,
    json: Annotated[bool, Parameter(negative=(), help=JSON_HELP)] = False,
    at: Annotated[
        int | None, Parameter(help="Print the run and pod as they were after event N.")
    ] = None,
    follow: Annotated[
        bool,
        Parameter(
            negative=(),
            help="Keep printing events as they are appended, until the run "
            "has ended and no pod of it may bill.",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        Parameter(
            name=["--verbose", "-v"],
            negative=(),
            help="Also print each event's fields and who appended it.",
        ),
    ] = False,
) -> int:
    """Replay a run's events: sequence, UTC time, name and what happened (with -v, the
    fields and the actor too).

    --follow keeps printing events as other processes append them (woken by the server's
    notifications on a PostgreSQL store), until the run has ended and no pod of it may bill
    (or Ctrl-C).
    """
    from overbrainer.cli.events_read import replay

    return replay(run, json=json, at=at, follow=follow, verbose=verbose)
