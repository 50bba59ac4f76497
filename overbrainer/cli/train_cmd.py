"""``train``, ``train attach RUN`` and ``train cancel RUN``."""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated

from cyclopts import App, Parameter

from overbrainer.cli.context import current

if TYPE_CHECKING:
    from overbrainer.config.model import Settings
    from overbrainer.events.aggregate import RunLog
    from overbrainer.runs.service import Session

    Act = Callable[[Session, Settings, RunLog], Awaitable[int]]

app = App(
    name="train",
    help="Create a run, start its job on the target, follow it to its end and bring the "
    "results home verified.",
)


@asynccontextmanager
async def _session() -> AsyncIterator["tuple[Settings, Session]"]:
    """Settings, store, front end, journal and Ctrl-C controller for one train command."""
    from overbrainer.config.load import load_settings
    from overbrainer.events.actor import Actor
    from overbrainer.events.journal import Journal
    from overbrainer.events.store import RunStore
    from overbrainer.front.console import Front
    from overbrainer.front.interrupts import open_interrupts
    from overbrainer.runs.service import Session

    invocation = current()
    settings = load_settings(invocation.project_dir, invocation.environ())
    front = Front()
    store = RunStore(
        settings.store.url,
        invocation.project_dir,
        Actor.here(invocation.command),
        environ=invocation.environ(),  # PGPASSWORD may come from the project's .env
    )
    try:
        journal = Journal(store, invocation.project_dir, listener=front.event, others=front.other)
        async with open_interrupts(front.notice) as interrupts:
            try:
                yield settings, Session(journal, front, interrupts, invocation.project_dir)
            finally:
                front.close()
    finally:
        store.close()


async def _with_run(run: str, name: str) -> int:
    from overbrainer.runs.ids import check_run_id

    check_run_id(run)
    async with _session() as (settings, session):
        state = await session.journal.state(run)
        from overbrainer.runs import elsewhere

        if elsewhere.lives_elsewhere(session, state):
            # A team store: the run's job is reached from the checkout that started it.
            if name == "attach":
                code = await elsewhere.attach_elsewhere(session, state)
            else:
                code = await elsewhere.cancel_elsewhere(
                    session, state, follower_poll=_follower_poll(settings, state)
                )
        else:
            code = await _act(name, state.run.kind)(session, settings, state)
        return session.interrupts.finish(code)


def _follower_poll(settings: "Settings", state: "RunLog") -> float:
    """How often the command following ``state``'s run reads the log (its status poll)."""
    if state.run.kind == "runpod":
        from overbrainer.runpod.train import follow_poll

        return follow_poll(settings)
    from overbrainer.runs.service import POLL_SECONDS

    return POLL_SECONDS


@app.default
async def train(
    *,
    target: Annotated[
        str | None, Parameter(help="The target to train on (default: training.target).")
    ] = None,
    keep_pod: Annotated[
        bool,
        Parameter(
            negative=(),
            help="Runpod only: keep the pod once the job started, until `overbrainer pod rm RUN`.",
        ),
    ] = False,
) -> int:
    """Create a run, start its job, follow it to the end, retrieve and verify the results."""
    from overbrainer.config.model import RunpodTarget
    from overbrainer.errors import UsageError
    from overbrainer.runs import machine

    async with _session() as (settings, session):
        name = target or settings.training.target
        spec = settings.target_of(name)
        if isinstance(spec, RunpodTarget):
            from overbrainer.runpod.train import train as train_on_pod

            code = await train_on_pod(session, settings, name, spec, keep=keep_pod)
            return session.interrupts.finish(code)
        if keep_pod:
            raise UsageError(
                f"--keep-pod applies only to a Runpod target; target {name} is {spec.kind}"
            )
        _warn_template(session, settings)
        code = await machine.train(session, settings, machine.plan_for(settings, name))
        return session.interrupts.finish(code)


def _warn_template(session: "Session", settings: "Settings") -> None:
    from overbrainer.train.axolotl import reasoning_template_warning

    warning = reasoning_template_warning(settings.training)
    if warning:
        session.front.warn(warning)


def _act(name: str, kind: str) -> "Act":
    if kind == "runpod":
        from overbrainer.runpod import train as pod_train

        return pod_train.attach if name == "attach" else pod_train.cancel
    from overbrainer.runs import machine

    return machine.attach if name == "attach" else machine.cancel


@app.command(name="attach")
async def attach(run: str) -> int:
    """Follow a started run again (after Ctrl-C, a lost connection, a reboot), then retrieve
    its results and end its pod."""
    return await _with_run(run, "attach")


@app.command(name="cancel")
async def cancel(run: str) -> int:
    """Stop the run's job, retrieve what it left, end its pod."""
    return await _with_run(run, "cancel")
