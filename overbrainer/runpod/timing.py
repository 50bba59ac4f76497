"""How long provisioning and pod deletion wait, poll and retry.

One frozen value holds every interval, so tests shrink them all at once (``Timing.fast()``
on a MockClock, or a few seconds on loopback) and production code never hides a magic
number. No trio, no I/O: cheap to import.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Every wait of the provisioning walk and of deleting a pod, in seconds."""

    poll: float = 5.0
    """Between two reads of a pod (or of its watchdog's verdict) while it boots."""
    ssh_within: float = 15 * 60.0
    """From the create until SSH answers with the pinned host key; later, the pod is
    deleted and the next GPU type is tried."""
    verdict_within: float = 3 * 60.0
    """From SSH's first answer until the watchdog's verdict is written (the watchdog proves
    its key in well under a minute)."""
    reconcile_after: tuple[float, ...] = (5.0, 15.0)
    """After an ambiguous create, when (counted from it) the pods carrying the run's marker
    are listed."""
    resends: int = 2
    """How many times one GPU type is sent again after ambiguous creates that left no pod."""
    rate_limited: int = 5
    """How many 429 answers in a row one GPU type waits out before the walk stops."""
    max_retry_after: float = 300.0
    """The longest ``Retry-After`` waited for; a longer one stops the walk."""
    delete_confirm: float = 60.0
    """How long a deleted pod may still be shown before the delete counts as unconfirmed."""
    delete_poll: float = 3.0
    """Between two looks at a deleted pod until Runpod no longer shows it."""
    gone_checks: int = 3
    """How many 404s in a row "confirmed gone" takes (plus a listing without the pod)."""
    gone_interval: float = 10.0
    """Between two of those 404s."""
    create_limit: float = 120.0
    """The most a create call may take, shielded (the client's own timeout is 30 s)."""
    delete_limit: float = 300.0
    """The most a delete and its confirmation may take, shielded (the client retries a
    delete for up to 120 s, then confirmation takes up to ``delete_confirm``)."""
    connect_attempts: int = 3
    """Attempts to open the job's SSH connection to a pod that was just found ready."""
    watchdog_interval: float | None = None
    """Seconds between the pod watchdog's checks; None keeps the watchdog's own (60 s)."""
    capacity_first: float = 30.0
    """Waiting for capacity (``wait_for_capacity``): the first pause before every GPU type
    is tried again; each next one is twice as long, up to ``capacity_cap``."""
    capacity_cap: float = 300.0
    """The longest pause while waiting for capacity."""

    def walk_limit(self, gpu_types: int, capacity_wait: float = 0.0) -> float:
        """An upper bound of a whole provisioning walk over ``gpu_types`` types, waiting up
        to ``capacity_wait`` seconds for capacity.

        It is the sum of every bound a walk can reach, so the shield around the walk
        never stops it first: it only keeps a runaway bug from holding a command forever.
        While waiting for capacity, every pause but the last is at least
        ``capacity_first``, and each pause is followed by one more walk.
        """
        sends = self.resends + 1
        reconcile = max(self.reconcile_after, default=0.0) + 2 * self.delete_limit
        per_type = (
            sends * (self.create_limit + reconcile)
            + self.rate_limited * (self.max_retry_after + self.create_limit)
            + self.ssh_within
            + self.verdict_within
            + self.connect_attempts * self.poll
            + 2 * self.delete_limit
        )
        walks = 1
        if capacity_wait > 0:
            walks += int(capacity_wait // max(self.capacity_first, 1e-3)) + 2
        walk = max(1, gpu_types) * per_type
        return walks * walk + capacity_wait + 2 * self.delete_limit + 60.0

    @classmethod
    def standard(cls) -> "Timing":
        """The timing of a real pod on Runpod's API."""
        return cls()
