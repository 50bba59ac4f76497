"""How long each shielded step of a run may take, in seconds.

The lifecycle waits this long for a step Ctrl-C does not stop; a pod's lease and deadline
count them, so that no step outlives what bounds the pod it runs on.
"""

START_LIMIT = 300.0
"""Uploading the run and spawning its job, until the start is recorded."""
CANCEL_LIMIT = 60.0
"""Stopping a job."""
COLLECT_LIMIT = 3600.0
"""Bringing a job's results home."""
