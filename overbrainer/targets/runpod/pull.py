"""While a pod boots, what its host says of it: the image pull's progress from the pod's
``system`` log (``GET /pods/{id}/logs``), shown instead of a silent wait.

Only shown: nothing is decided on it, and a log that cannot be read (an API without the
endpoint, a stream that drops) costs only the display.
"""

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from overbrainer.front.console import Front
from overbrainer.runpod.client import RunpodClient, RunpodError
from overbrainer.runpod.pod_logs import TAIL_MAX, Pull

T = TypeVar("T")

_GIVE_UP = 3
"""Failed reads of the log in a row after which it is no longer tried (for this pod)."""


async def show_pull(
    client: RunpodClient, pod_id: str, front: Front, *, retry_after: float = 5.0
) -> None:
    """Show pod ``pod_id``'s image pull and container start as they happen, until
    cancelled. Never raises (but ``Cancelled``)."""
    pull = Pull()
    cursor: str | None = None
    failures = 0
    while failures < _GIVE_UP:
        try:
            async with client.pod_logs(
                pod_id, source="system", tail=TAIL_MAX, last_event_id=cursor
            ) as stream:
                failures = 0
                while (batch := await stream.next_lines()) is not None:
                    before = pull
                    for line in batch:
                        pull = pull.seen(line.line)
                    cursor = stream.cursor or cursor
                    if batch:
                        milestone = (pull.pulled, pull.started) != (before.pulled, before.started)
                        front.status(f"pod {pod_id}: {pull.text()}", milestone=milestone)
        except RunpodError:
            failures += 1
        await trio.sleep(retry_after)


async def while_showing(work: Callable[[], Awaitable[T]], show: Callable[[], Awaitable[None]]) -> T:
    """``work()``'s result, with ``show()`` running beside it until it ends; what ``work``
    raises is raised as it is (not in an exception group)."""
    result: list[T] = []
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(show)
        try:
            result.append(await work())
        except BaseException as error:
            # Raised again below, outside the nursery, so callers can catch it as is.
            failure = error
        finally:
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result[0]
