"""How the lines of a job of several processes say which process printed them.

The job's launcher (torchrun) runs one worker per process and, with ``--tee``, copies
every line a worker prints to the job's log prefixed by the worker's role (``--role``) and
local rank: ``[rank1]:loss 1.23``. ``runs logs RUN --rank K`` reads back the lines of one.
A job on every node of a cluster prefixes by the global rank instead (node rank × processes
per node + local rank, :data:`GLOBAL_PREFIX_TEMPLATE`), so that a rank's prefix is the same
in whichever node's log its lines are.
"""

RANK_ROLE = "rank"
"""The role the launcher gives every worker (``--role``), so that the prefix reads
``[rank0]:``."""


def rank_prefix(rank: int) -> bytes:
    """The prefix of the lines the worker of local rank ``rank`` printed."""
    return f"[{RANK_ROLE}{rank}]:".encode("ascii")


PREFIX_TEMPLATE_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
"""The variable through which torchrun takes the prefix of a worker's lines (a
``string.Template`` over ``role_name``, ``rank``, the global rank, and ``local_rank``; unset,
torchrun writes ``[${role_name}${local_rank}]:``)."""

GLOBAL_PREFIX_TEMPLATE = "[${role_name}${rank}]:"
"""The prefix of a job on many nodes: the global rank's, as :func:`rank_prefix` reads it."""
