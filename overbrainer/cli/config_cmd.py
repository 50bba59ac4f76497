"""``overbrainer config``, declared for cyclopts (its help, its options); ``config check``
is done in ``config_check.py``."""

from overbrainer.cli.declare import command, group

app = group("config")


@command(app, "config", "check")
def check(*, json: bool = False) -> int:
    from overbrainer.cli.config_check import check_config

    return check_config(json=json)
