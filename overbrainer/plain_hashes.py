"""SHA-1 and SHA-256 of a few short strings by CPython's own implementations (those hashlib
itself falls back to), without importing hashlib, which loads OpenSSL: that import alone
costs a read command about a seventh of Python's start-up, to hash a run ID or a store URL.
"""

from importlib import import_module
from typing import Any


def _new(name: str, modules: tuple[str, ...]) -> Any:
    for module in modules:
        try:
            return getattr(import_module(module), name)
        except (ImportError, AttributeError):  # a Python built without it
            continue
    return getattr(import_module("hashlib"), name)


def sha1_digest(data: bytes) -> bytes:
    """The SHA-1 digest of ``data`` (for name-based UUIDs, not for security)."""
    return bytes(_new("sha1", ("_sha1",))(data).digest())


def sha256_hex(data: bytes) -> str:
    """The SHA-256 digest of ``data``, in hex."""
    # _sha2 from Python 3.12, _sha256 before.
    return str(_new("sha256", ("_sha2", "_sha256"))(data).hexdigest())
