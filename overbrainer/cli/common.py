"""What several commands share: opening the event store, printing JSON lines."""

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from overbrainer.cli.context import Invocation
from overbrainer.errors import OverbrainerError


def store_url(invocation: Invocation) -> str | None:
    """``[store] url`` (env over file), read leniently so listing runs never needs a valid
    training configuration."""
    environ = invocation.environ()
    if environ.get("OVERBRAINER_STORE__URL"):
        return environ["OVERBRAINER_STORE__URL"]
    path = invocation.project_dir / "overbrainer.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as error:
        raise OverbrainerError(
            f"cannot read {path.name}: {error}; fix it (see `overbrainer config check`)"
        ) from error
    store = data.get("store")
    url = store.get("url") if isinstance(store, dict) else None
    if not (isinstance(url, str) and url):
        return None
    if _has_password(url):
        raise OverbrainerError(
            "[store] url in overbrainer.toml has a password, which the file may not hold; "
            "remove it and put it in ~/.pgpass (host:port:db:user:password, mode 600) or "
            "PGPASSWORD, or set the whole URL in OVERBRAINER_STORE__URL"
        )
    return url


def monthly_budget(invocation: Invocation) -> float | None:
    """``[project] monthly_budget_usd`` (env over file; None: not set), read leniently as
    :func:`store_url` reads the store: listing runs needs no valid training configuration."""
    import math

    name = "OVERBRAINER_PROJECT__MONTHLY_BUDGET_USD"
    value: object = invocation.environ().get(name) or None
    where = name
    if value is None:
        where = "project.monthly_budget_usd in overbrainer.toml"
        try:
            data = tomllib.loads(
                (invocation.project_dir / "overbrainer.toml").read_text(encoding="utf-8")
            )
        except FileNotFoundError:
            return None
        except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as error:
            raise OverbrainerError(
                f"cannot read overbrainer.toml: {error}; fix it (see `overbrainer config check`)"
            ) from error
        project = data.get("project")
        value = project.get("monthly_budget_usd") if isinstance(project, dict) else None
        if value is None:
            return None
    try:
        amount = float(value) if isinstance(value, str | int | float) else math.nan
    except ValueError:
        amount = math.nan
    if isinstance(value, bool) or not (math.isfinite(amount) and amount > 0):
        raise OverbrainerError(
            f"{where}: must be a number of US dollars greater than 0; fix it or remove it "
            "(see `overbrainer config check`)"
        )
    return amount


def _has_password(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password is not None
    except ValueError:
        return False


def open_store(invocation: Invocation, *, read_only: bool = False) -> Any:
    """The run store of the invocation's project, stamped with its actor; ``read_only``
    for commands that only read (nothing is written or created, so they work on a
    read-only or full disk, and outside a project they refuse before anything)."""
    from overbrainer.events.actor import Actor
    from overbrainer.events.store import RunStore

    if read_only:
        require_project(invocation)
    return RunStore(
        store_url(invocation),
        invocation.project_dir,
        Actor.here(invocation.command),
        environ=invocation.environ(),
        read_only=read_only,
    )


def require_project(invocation: Invocation) -> None:
    """Refuse (naming the directory and ``overbrainer init``) when the invocation's
    directory holds no overbrainer project."""
    from overbrainer.config.project import require_project as require

    require(invocation.project_dir)


def print_json(data: Any) -> None:
    """One JSON object on one line of stdout."""
    sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")


def project_path(invocation: Invocation, path: Path) -> str:
    """``path`` relative to the project when it is inside it (shorter messages)."""
    try:
        return str(path.relative_to(invocation.project_dir))
    except ValueError:
        return str(path)
