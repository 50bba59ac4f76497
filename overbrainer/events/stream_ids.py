"""The ID of a run's event stream, derived from the run ID, so any process finds a run's
stream from its ID. Apart from ``stream.py`` (which needs eventsourcing), so a plain reader
of the log finds a stream without importing it."""

from typing import TYPE_CHECKING

from overbrainer.plain_hashes import sha1_digest

if TYPE_CHECKING:
    import uuid

_NAMESPACE = "5f1a4a3e-6a0b-4f8e-9a86-0b5d3c1f2e77"
_NAMESPACE_BYTES = bytes.fromhex(_NAMESPACE.replace("-", ""))


def stream_key(run_id: str) -> str:
    """The run's stream ID as 32 hex digits: the name-based (SHA-1, version 5) UUID of
    ``run_id`` in overbrainer's namespace, computed as RFC 4122 says without the ``uuid``
    module or hashlib (a read command needs only these digits)."""
    digest = bytearray(sha1_digest(_NAMESPACE_BYTES + run_id.encode())[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    return digest.hex()


def stream_id(run_id: str) -> "uuid.UUID":
    """The aggregate ID of run ``run_id``."""
    import uuid

    return uuid.UUID(hex=stream_key(run_id))
