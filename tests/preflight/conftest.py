"""Fixtures for the preflight tests: the POSIX shells the probe must behave the same under."""

from tests.exec.conftest import _shells, shell

__all__ = ["_shells", "shell"]
