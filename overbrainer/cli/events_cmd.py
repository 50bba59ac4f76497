"""``events RUN``, declared for cyclopts (its help, its options); done in ``events_read.py``."""

from overbrainer.cli.declare import command


@command(None, "events")
def events(
    run: str,
    /,
    *,
    json: bool = False,
    at: int | None = None,
    follow: bool = False,
    verbose: bool = False,
) -> int:
    from overbrainer.cli.events_read import replay

    return replay(run, json=json, at=at, follow=follow, verbose=verbose)
