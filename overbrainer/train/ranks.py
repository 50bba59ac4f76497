"""How the lines of a job of several processes say which process printed them.

The job's launcher (torchrun) runs one worker per process and, with ``--tee``, copies
every line a worker prints to the job's log prefixed by the worker's role (``--role``) and
local rank: ``[rank1]:loss 1.23``. ``runs logs RUN --rank K`` reads back the lines of one.
"""

RANK_ROLE = "rank"
"""The role the launcher gives every worker (``--role``), so that the prefix reads
``[rank0]:``."""


def rank_prefix(rank: int) -> bytes:
    """The prefix of the lines the worker of local rank ``rank`` printed."""
    return f"[{RANK_ROLE}{rank}]:".encode("ascii")
