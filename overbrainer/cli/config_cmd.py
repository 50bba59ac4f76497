"""``overbrainer config``, declared for cyclopts (its help, its options); ``config check``
is done in ``config_check.py``."""

from typing import Annotated

from cyclopts import App, Parameter

app = App(name="config", help="Inspect the project's configuration.")


@app.command
def check(*, json: Annotated[bool, Parameter(negative=())] = False) -> int:
    """Print the resolved configuration with secrets masked, or every problem at once.

    Reads overbrainer.toml, then the environment and .env (OVERBRAINER_* variables).
    Exit code 1 when anything is wrong.

    Parameters
    ----------
    json
        Print one JSON object instead of text.
    """
    from overbrainer.cli.config_check import check_config

    return check_config(json=json)
