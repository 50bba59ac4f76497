"""The ID of a run's event stream, derived from the run ID, so any process finds a run's
stream from its ID."""

import uuid

# overbrainer's namespace for name-based (version 5) UUIDs.
_NAMESPACE = uuid.UUID("5f1a4a3e-6a0b-4f8e-9a86-0b5d3c1f2e77")


def stream_id(run_id: str) -> uuid.UUID:
    """The aggregate ID of run ``run_id``: the version-5 UUID of the ID in our namespace."""
    return uuid.uuid5(_NAMESPACE, run_id)
