"""Where a project's event store is: its SQLite file, and how messages name it. Apart from
the store, so a reader of the log or the runs view finds it without the store's code and its
event types."""

from pathlib import Path

from overbrainer.errors import OverbrainerError


def default_sqlite_path(project_dir: Path) -> Path:
    """Where a project's log lives unless ``[store] url`` says otherwise."""
    return project_dir / ".overbrainer" / "events.sqlite"


def sqlite_path(url: str | None, project_dir: Path) -> Path | None:
    """The SQLite file of the store at ``url`` (None: the project's), or None when the
    store is not SQLite."""
    if url is None:
        return default_sqlite_path(project_dir)
    if not url.startswith("sqlite:"):
        return None
    rest = url[len("sqlite:") :]
    rest = rest[2:] if rest.startswith("//") else rest
    return Path(rest) if Path(rest).is_absolute() else project_dir / rest


def describe_store(url: str | None) -> str:
    """The store's location for messages (never a password)."""
    if url is None:
        return ".overbrainer/events.sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        from overbrainer.events.pg import parse_url

        try:
            return parse_url(url, {}).describe
        except OverbrainerError:
            return "PostgreSQL (a malformed [store] url)"
    return url
