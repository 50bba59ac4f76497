"""The event store's failures, apart from the store so that its PostgreSQL side (``pg.py``,
which ``store.py`` loads) and a plain reader of the log raise them without the store."""

from overbrainer.errors import OverbrainerError


class StoreError(OverbrainerError):
    """The event store cannot be reached or used."""


class UnknownRun(OverbrainerError):
    """No run with that ID in this store."""
