"""The team-store tests run against the real PostgreSQL server of `tests.fakes.pg`."""

from tests.fakes.pg import pg_cluster, team

__all__ = ["pg_cluster", "team"]
