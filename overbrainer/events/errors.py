"""The event store's failure, apart from the store so that its PostgreSQL side (``pg.py``,
which ``store.py`` loads) can raise it without importing the store back."""

from overbrainer.errors import OverbrainerError


class StoreError(OverbrainerError):
    """The event store cannot be reached or used."""
