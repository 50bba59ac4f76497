"""``supervise [--once] [--poll SECONDS]``: follow every unfinished run of the store (the
loop is ``overbrainer.lifecycle.supervisor``'s), each on its own target."""

from typing import TYPE_CHECKING

from overbrainer.cli.declare import command

if TYPE_CHECKING:
    from overbrainer.events.aggregate import RunLog


@command(None, "supervise")
async def supervise(*, once: bool = False, poll: float | None = None) -> int:
    from overbrainer.cli.train_cmd import command_session
    from overbrainer.errors import UsageError
    from overbrainer.lifecycle import run
    from overbrainer.lifecycle.supervisor import POLL_SECONDS, Supervisor
    from overbrainer.targets.choose import target_of_run

    if poll is not None and not poll > 0:
        raise UsageError(f"--poll takes a number of seconds above 0, not {poll:g}")
    async with command_session() as (settings, session):

        async def follow(state: "RunLog") -> int:
            async with target_of_run(session, settings, state) as chosen:
                return await run.attach(session, chosen, state)

        session.front.info(
            "supervise: following every unfinished run of this project"
            + ("" if once else f", looking for new ones every {poll or POLL_SECONDS:g} s")
        )
        return await Supervisor(session, follow, poll=poll or POLL_SECONDS, once=once).run()
