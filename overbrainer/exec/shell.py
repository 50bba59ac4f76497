"""Building shell text from validated parts.

Every command overbrainer runs on a target, and every line of a job's ``job.cmds``, is
built here: each word is checked, then single-quoted. A value that cannot be passed safely
(a line break or a NUL) is refused, and the error names the value, never shows it — the
value may be a secret.
"""

import re
from collections.abc import Sequence

from overbrainer.errors import OverbrainerError

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Paths and image references: what the configuration accepts, nothing a shell treats
# specially and no whitespace.
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:@+=,%-]+$")
_CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_UNSAFE_CHARS = ("\n", "\r", "\0")


class UnsafeValue(OverbrainerError):
    """A value that cannot be passed safely to a shell or a target."""


def check_value(value: str, *, name: str) -> str:
    """Return ``value`` if it holds no line break and no NUL; refuse it naming ``name``."""
    if any(char in value for char in _UNSAFE_CHARS):
        raise UnsafeValue(
            f"{name} contains a line break or a NUL character and cannot be passed "
            "safely to the target; remove it and try again"
        )
    return value


def quote(value: str, *, name: str) -> str:
    """``value`` as one single-quoted POSIX shell word (checked first, see `check_value`)."""
    check_value(value, name=name)
    return "'" + value.replace("'", "'\\''") + "'"


def build_command(argv: Sequence[str], *, name: str) -> str:
    """One shell command line from ``argv``: every word checked and quoted.

    ``name`` says what the command is (``"training command 1"``); an unsafe word is
    refused as ``<name>, word <n>``.
    """
    if not argv:
        raise UnsafeValue(f"{name} is empty: there is nothing to run")
    return " ".join(quote(word, name=f"{name}, word {i}") for i, word in enumerate(argv, 1))


def check_env_name(env_name: str, *, name: str) -> str:
    """Return ``env_name`` if it is a portable environment variable name."""
    if not _ENV_NAME.match(env_name):
        shown = env_name if _SAFE_WORD.match(env_name) else "(unprintable)"
        raise UnsafeValue(
            f"{name}: {shown!r} is not a valid environment variable name "
            "(letters, digits and '_', not starting with a digit)"
        )
    return env_name


def check_safe_word(value: str, *, name: str) -> str:
    """Return ``value`` if it is a path or image reference safe on any shell command line.

    Safe: letters, digits and ``_ . / : @ + = , % -``; no ``..`` component and no
    leading ``-`` (it would read as an option).
    """
    if (
        not value
        or not _SAFE_WORD.match(value)
        or value.startswith("-")
        or ".." in value.split("/")
    ):
        raise UnsafeValue(
            f"{name} may only use letters, digits and _ . / : @ + = , % - "
            "(no spaces, quotes, '..' or leading '-')"
        )
    return value


def check_rel_path(value: str, *, name: str) -> str:
    """Return ``value`` if it is a safe path *relative* to an executor's root.

    Besides `check_safe_word`: not absolute, no empty or ``.`` component, so the path
    can never leave the root.
    """
    check_safe_word(value, name=name)
    parts = value.split("/")
    if value.startswith("/") or any(part in ("", ".") for part in parts):
        raise UnsafeValue(f"{name} must be a relative path like runs/ID without empty or '.' parts")
    return value


def check_container_name(value: str, *, name: str = "the container name") -> str:
    """Return ``value`` if docker and podman accept it as a container name."""
    if not _CONTAINER_NAME.match(value):
        raise UnsafeValue(
            f"{name} may only use letters, digits and _ . - (starting with a letter or digit)"
        )
    return value
