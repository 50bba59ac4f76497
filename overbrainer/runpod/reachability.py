"""Telling "Runpod cannot be reached from here" apart from "Runpod failed to answer".

A name that does not resolve, a refused connection or a network with no route are states
of this machine's network (offline, a typo in the API's address, a proxy that is not
running): retrying them for a minute only hides the cause. :func:`unreachable_reason`
finds such a cause under an httpx transport error; the client then fails at once
(``RunpodUnreachable``, or ``CreateNotSent`` for a create) with :func:`unreachable_text`,
which names the host and the fix, instead of retrying as it does a 5xx or a connection cut
in the middle. Nothing of such a request reached Runpod, so even a create that failed so
is known not to have created a pod.
"""

import errno
import socket
from collections.abc import Iterator

import httpx

__all__ = ["unreachable_reason", "unreachable_text"]

# Connect failures that say this machine has no way to the host (not a slow or busy one).
_NO_ROUTE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN})


def unreachable_text(reason: str, base_url_hint: str = "") -> str:
    """What the user reads: ``cannot reach Runpod (REASON): check the network``, and where
    the API's address is set when it is not Runpod's own (``base_url_hint``)."""
    text = f"cannot reach Runpod ({reason}): check the network"
    if base_url_hint:
        text += f" and {base_url_hint}"
    return text


def unreachable_reason(error: httpx.TransportError, host: str, port: int | None) -> str | None:
    """Why ``host`` cannot be reached, when ``error`` (a failed connect) says it cannot be
    reached at all; None for any other failure (a timeout, a reset, a TLS error), which
    may pass and is retried."""
    if not isinstance(error, httpx.ConnectError):
        return None
    causes = list(_causes(error))
    where = host if port is None else f"{host}:{port}"
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return f"{host} does not resolve"
    # trio tries each address of the host; every one must have failed the same way.
    leaves = [c for c in causes if isinstance(c, OSError) and c.errno is not None]
    if leaves and all(isinstance(c, ConnectionRefusedError) for c in leaves):
        return f"{where} refused the connection"
    if leaves and all(c.errno in _NO_ROUTE for c in leaves):
        return f"no route to {host}: the network is down or unreachable"
    return None


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything under it: its causes, contexts and grouped exceptions."""
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
