"""The event store's failures, apart from the store so that its PostgreSQL side (``pg.py``,
which ``store.py`` loads) raises them without a cycle."""

from overbrainer.errors import OverbrainerError


class StoreError(OverbrainerError):
    """The event store cannot be reached or used."""


class UnknownRun(OverbrainerError):
    """No run with that ID in this store."""

    run_id: str | None = None
    where: str | None = None

    @classmethod
    def of(cls, run_id: str, where: str, why: str | None = None) -> "UnknownRun":
        """The error for ``run_id`` missing from the store described as ``where``; ``why``
        (what the project's files tell and what to do) replaces the advice to list the
        runs. It keeps the run and the store, for a caller that can say more."""
        advice = why or "list the runs with `overbrainer runs ls`"
        error = cls(f"no run {run_id} in {where}; {advice}")
        error.run_id, error.where = run_id, where
        return error
