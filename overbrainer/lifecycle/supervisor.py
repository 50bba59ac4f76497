"""``overbrainer supervise``: follow every unfinished run of the store, now and later.

Each pass reads from the log which runs some command still has to act on
(:func:`needs_following`) and follows each one not followed yet by this supervisor, as
``train attach`` does (the caller's ``follow``): a running job is followed to its end and
its results come home, an ended run's results are collected, a run left starting by a
dead command is settled. ``train attach``'s claim (``lifecycle/claim.py``) keeps a run
that another live process follows out of it; the supervisor says so once and looks again
at the next pass. Nothing is held but what the log says, so a supervisor restarted goes
on where the last one stopped. A signal stops every follow (each records that it
detached; the jobs keep running) and the supervisor with them.
"""

from collections.abc import Awaitable, Callable
from functools import partial

import trio

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events.actor import starter_alive
from overbrainer.events.aggregate import RunLog
from overbrainer.events.claims import who
from overbrainer.events.types import PodState, RunState
from overbrainer.lifecycle.claim import Alive, FollowedElsewhere
from overbrainer.lifecycle.elsewhere import lives_elsewhere
from overbrainer.plurals import plural
from overbrainer.projections.summary import nothing_left
from overbrainer.session.session import Session

POLL_SECONDS = 30.0
"""How often a supervisor looks for new unfinished runs, by default."""

Follow = Callable[[RunLog], Awaitable[int]]
"""Follows one recorded run as ``train attach`` does; its exit code."""


def needs_following(state: RunLog) -> bool:
    """Whether some command still has to act on the run: it has not ended (its job to
    follow, or its start to settle), or it ended with its results not home or a pod of
    it that may bill (not a kept one: only ``pod rm`` ends that). A run whose files were
    removed from this machine is no longer this project's to collect."""
    run = state.run
    if run.files_removed is not None:
        return False
    if not state.final:
        return True
    if run.job is None:
        return False  # nothing to collect; a pod of it is `pod rm`'s
    home = run.artifacts is not None and not run.note
    if home and state.pod.status == PodState.kept:
        return False
    return not nothing_left(state)


class Supervisor:
    """One ``overbrainer supervise``: passes over the store's unfinished runs."""

    def __init__(
        self,
        session: Session,
        follow: Follow,
        *,
        poll: float = POLL_SECONDS,
        once: bool = False,
        alive: Alive = starter_alive,
    ) -> None:
        self.session, self.follow, self.poll, self.once = session, follow, poll, once
        self.alive = alive
        self._busy: set[str] = set()
        # What was last said of each run left alone, said again only when it changes.
        self._said: dict[str, str] = {}
        self.followed = 0
        self.failed = 0
        self.left = 0  # runs whose following a signal stopped

    async def run(self) -> int:
        """Pass after pass until a signal (or, ``once``, until the runs of the first pass
        are done); the exit code."""
        front = self.session.front
        interrupts = self.session.interrupts
        async with trio.open_nursery() as nursery:
            while not interrupts.interrupted:
                await self._pass(nursery)
                if self.once:
                    break
                if await interrupts.race(partial(trio.sleep, self.poll)) is None:
                    break
        if interrupts.interrupted:
            left = (
                f"; the jobs of {plural(self.left, 'run')} it followed keep running: "
                "`overbrainer supervise` follows them again"
                if self.left
                else ""
            )
            front.result(f"supervise: stopped ({interrupts.reason}){left}")
            return 0
        if self.once:
            front.result(
                f"supervise: followed {plural(self.followed, 'run')}"
                + (f", {self.failed} of them with a problem" if self.failed else "")
            )
        return 1 if self.failed else 0

    async def _pass(self, nursery: trio.Nursery) -> None:
        found = await self.session.journal.matching(needs_following)
        for run_id in sorted(found):
            state = found[run_id]
            if run_id in self._busy:
                continue
            if lives_elsewhere(self.session, state):
                self._say(
                    run_id,
                    f"run {run_id} lives in another checkout: the supervisor there follows it",
                )
                continue
            starting = self._still_starting(state, await self._last_actor(run_id))
            if starting:
                self._say(run_id, starting)
                continue
            self._busy.add(run_id)
            nursery.start_soon(self._one, state)

    async def _last_actor(self, run_id: str) -> dict[str, object]:
        records = await self.session.journal.history(run_id)
        return records[-1].actor if records else {}

    def _still_starting(self, state: RunLog, last: dict[str, object]) -> str:
        """Why a run left starting is not settled now (empty: it may be), as
        ``lifecycle/recover.py`` would refuse it, but said once instead of raised."""
        if state.run.state != RunState.preparing or self.alive(last) is False:
            return ""
        return f"run {state.run.run_id} is being started by {who(last)}; it is left to it"

    async def _one(self, state: RunLog) -> None:
        run_id = state.run.run_id
        front = self.session.front
        try:
            await self.follow(state)
            self._said.pop(run_id, None)
            self.followed += 1
        except FollowedElsewhere as error:
            self._say(run_id, str(error))
        except Interrupted as stopped:
            # The follow recorded its detach; where the job runs is said once here.
            self.left += 1
            front.warn(str(stopped))
        except OverbrainerError as error:
            self.failed += 1
            # Tried again at the next pass (once a minute at most is enough to read).
            if self._said.get(run_id) != str(error):
                front.warn(f"supervise: run {run_id}: {error}")
                self._said[run_id] = str(error)
        finally:
            self._busy.discard(run_id)

    def _say(self, run_id: str, text: str) -> None:
        if self._said.get(run_id) != text:
            self._said[run_id] = text
            self.session.front.info(f"supervise: {text}")
