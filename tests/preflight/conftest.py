"""Fixtures for the preflight tests: the POSIX shells the probe must behave the same under."""

from tests.exec.conftest import shell, shells

__all__ = ["shell", "shells"]
