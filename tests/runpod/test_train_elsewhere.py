"""``train cancel`` and ``train attach`` of a run whose files live in another checkout (a team
store): the cancel is asked through the log and taken by whatever follows the run there.

On the MockClock rig of ``test_train_pod``: checkout A trains on the fake Runpod; checkout B
shares A's store (its own actor, its own project directory without the run's files)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.store import RunStore
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import elsewhere
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.testing.fake_executor import run_inline
from overbrainer.testing.pod_training import JobScript, Train, training

BOB = Actor(command="train cancel", user="bob", host="workstation-b", pid=77, version="0.3.0")


class Checkout:
    """Checkout B: the same store as A, another project directory, another actor."""

    def __init__(self, t: Train, path: Path) -> None:
        path.mkdir()
        self.store = RunStore(None, t.rig.project, BOB)  # A's store file, B's actor
        self.out, self.err = io.StringIO(), io.StringIO()
        front = Front(self.out, self.err, terminal=False)
        journal = Journal(self.store, path, listener=front.event, runner=run_inline)
        self.session = Session(journal, front, Interrupts(front.notice), path)

    async def cancel(self, run_id: str) -> int:
        state = await self.session.journal.state(run_id)
        assert elsewhere.lives_elsewhere(self.session, state)
        return await elsewhere.cancel_elsewhere(self.session, state, follower_poll=10.0)

    async def stop(self, run_id: str, within: float = 300.0) -> int:
        state = await self.session.journal.state(run_id)
        assert elsewhere.lives_elsewhere(self.session, state)
        return await elsewhere.stop_elsewhere(
            self.session, state, follower_poll=10.0, within=within
        )


def _stops(t: Train, run_id: str) -> list[tuple[str, str]]:
    return [
        (r.event.relay, r.actor["host"])
        for r in t.rig.store.history(run_id)
        if isinstance(r.event, ev.StopRequested)
    ]


def _cancels(t: Train, run_id: str) -> list[tuple[str, str]]:
    return [
        (r.event.relay, r.actor["host"])
        for r in t.rig.store.history(run_id)
        if isinstance(r.event, ev.CancelRequested)
    ]


async def test_the_command_following_the_run_takes_a_cancel_asked_from_another_checkout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        t.network.script = JobScript(steps=30)
        b = Checkout(t, tmp_path / "b")
        codes: dict[str, int] = {}

        async def train_in_a() -> None:
            with pytest.raises(OverbrainerError) as ended:
                await t.train()
            assert str(ended.value) == f"run {t.run_id()} cancelled"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(train_in_a)
            while not (t.known or t._runs()) or t.rig.state(t.run_id()).pod.status != (
                "job_running"
            ):
                await trio.sleep(1)
            run_id = t.run_id()
            await trio.sleep(120)  # two steps in
            codes["b"] = await b.cancel(run_id)

        pod_id = t.pod_id(run_id)
        here = Actor.here("test").host
        assert codes["b"] == 0
        assert _cancels(t, run_id) == [("asked", "workstation-b"), ("taken", here)]
        names = t.rig.names(run_id)
        assert names[-7:] == [
            "run.CancelRequested",
            "run.CancelRequested",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        seqs = [r.seq for r in t.rig.store.history(run_id)]
        assert seqs == list(range(1, len(seqs) + 1))  # one stream, nothing lost or doubled
        state = t.rig.state(run_id)
        assert state.run.state == "cancelled" and not state.run.cancel_pending
        assert state.pod.status == "deleted" and t.rig.fake.status(pod_id) == "TERMINATED"
        # Each side told its user what happened, and who did it.
        assert (
            f"train: cancel of run {run_id} requested by `train cancel` as bob on host "
            f"workstation-b: stopping its job on " in t.err()
        )
        assert t.out().strip().splitlines()[-1].startswith(f"train: run {run_id} cancelled")
        assert f"run {run_id} lives on host {here} (started by `test`" in b.err.getvalue()
        assert b.out.getvalue().strip() == (
            f"train: run {run_id} cancelled by the command following it on host {here}"
        )
        # Both checkouts agree on the end (B's projections written from the same log).
        assert b.store.get(run_id).to_json() == state.to_json()


def state_user(t: Train, run_id: str) -> str:
    origin = t.rig.store.origin(run_id)
    assert origin is not None
    return str(origin.actor["user"])


async def test_a_cancel_nobody_takes_says_where_to_go_then_attach_there_takes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        b = Checkout(t, tmp_path / "b")
        asked_at = trio.current_time()
        with pytest.raises(OverbrainerError) as refused:
            await b.cancel(run_id)
        waited = trio.current_time() - asked_at
        assert 105 <= waited < 110  # 5 s + ten of the follower's 10 s polls
        message = str(refused.value)
        here = Actor.here("test").host
        assert f"the cancel of run {run_id} is recorded, but no command is following" in message
        assert f"on host {here}" in message
        assert f"`overbrainer train attach {run_id}` stops its job" in message
        assert f"its pod {pod_id} bills, bounded by its watchdog (" in message
        assert t.rig.state(run_id).run.cancel_pending

        # A second cancel joins the first request instead of asking twice.
        with pytest.raises(OverbrainerError):
            await b.cancel(run_id)
        assert _cancels(t, run_id) == [("asked", "workstation-b")]

        # The next attach in A takes it.
        with pytest.raises(OverbrainerError) as ended:
            await t.command().attach(t.rig.state(run_id))
        assert str(ended.value) == f"run {run_id} cancelled"
        state = t.rig.state(run_id)
        assert state.run.state == "cancelled" and state.pod.status == "deleted"
        assert _cancels(t, run_id) == [("asked", "workstation-b"), ("taken", here)]
        assert t.rig.fake.status(pod_id) == "TERMINATED"


async def test_ctrl_c_while_waiting_keeps_the_request(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        run_id = await t.detached_run(JobScript(steps=30))
        b = Checkout(t, tmp_path / "b")
        async with trio.open_nursery() as nursery:

            async def ctrl_c() -> None:
                await trio.sleep(30)
                b.session.interrupts.interrupt()

            nursery.start_soon(ctrl_c)
            with pytest.raises(Interrupted) as stopped:
                await b.cancel(run_id)
        assert f"the cancel of run {run_id} stays requested" in str(stopped.value)
        assert f"`overbrainer events {run_id} --follow`" in str(stopped.value)
        assert t.rig.state(run_id).run.cancel_pending


async def test_attach_from_another_checkout_names_the_host_or_reports_the_end(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        run_id = await t.detached_run(JobScript(steps=3, step_seconds=1))
        b = Checkout(t, tmp_path / "b")
        state = await b.session.journal.state(run_id)
        with pytest.raises(OverbrainerError) as refused:
            await elsewhere.attach_elsewhere(b.session, state)
        here = Actor.here("test").host
        assert f"run {run_id} lives on host {here}" in str(refused.value)
        assert f"`overbrainer train attach {run_id}` in that checkout" in str(refused.value)
        assert f"`overbrainer train cancel {run_id}`" in str(refused.value)

        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = await b.session.journal.state(run_id)
        assert await elsewhere.attach_elsewhere(b.session, state) == 0
        assert b.out.getvalue().strip() == (
            f"train: run {run_id} succeeded; it ran from host {here} (started by `test` as "
            f"{state_user(t, run_id)}), where its output is (runs/{run_id}/output)"
        )
        # B's cancel of the ended run changes nothing.
        before = len(t.rig.store.history(run_id))
        assert await b.cancel(run_id) == 0
        assert b.out.getvalue().strip().splitlines()[-1] == (
            f"train: run {run_id} had already ended (succeeded)"
        )
        assert len(t.rig.store.history(run_id)) == before


# --- train stop from another checkout ------------------------------------------------------


async def _while_training(t: Train, act: Callable[[str], Awaitable[None]]) -> None:
    """``train`` in A; ``act(run_id)`` once its job has run two steps; A's end as it comes."""

    async def train_in_a() -> None:
        with contextlib.suppress(OverbrainerError):
            await t.train()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(train_in_a)
        while not (t.known or t._runs()) or t.rig.state(t.run_id()).pod.status != ("job_running"):
            await trio.sleep(1)
        await trio.sleep(120)  # two steps in
        await act(t.run_id())


async def test_the_command_following_the_run_takes_a_stop_asked_from_another_checkout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        t.network.script = JobScript(steps=30)
        b = Checkout(t, tmp_path / "b")
        codes: dict[str, int] = {}

        async def stop(run_id: str) -> None:
            codes["b"] = await b.stop(run_id)

        await _while_training(t, stop)
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        here = Actor.here("test").host
        assert codes["b"] == 0
        assert _stops(t, run_id) == [("asked", "workstation-b"), ("taken", here)]
        state = t.rig.state(run_id)
        assert state.run.state == "stopped" and not state.run.stop_pending
        assert state.run.checkpoint is not None
        step = state.run.checkpoint["step"]
        assert 2 <= step <= 4, step
        names = t.rig.names(run_id)
        assert names[-8:] == [
            "run.StopRequested",
            "run.StopRequested",
            # The stop's checkpoint comes home as soon as it is saved, before the results.
            "run.CheckpointRetrieved",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        assert state.pod.status == "deleted" and t.rig.fake.status(pod_id) == "TERMINATED"
        home = tmp_path / "a" / "runs" / run_id / "output" / f"checkpoint-{step}"
        assert (home / "adapter_model.safetensors").is_file()
        # B said where the run lives and how it ended; A that it had been asked, by whom.
        assert f"run {run_id} lives on host {here} (started by `test`" in b.err.getvalue()
        assert b.out.getvalue().strip() == (
            f"train: run {run_id} stopped (saved checkpoint-{step} and stopped, as asked)"
        )
        assert "workstation-b" in t.err()
        assert f"checkpoint-{step} of run {run_id} is home" in t.out()
        assert b.store.get(run_id).to_json() == state.to_json()


async def test_a_stop_nobody_takes_says_where_to_go_then_attach_there_takes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        b = Checkout(t, tmp_path / "b")
        asked_at = trio.current_time()
        with pytest.raises(OverbrainerError) as refused:
            await b.stop(run_id)
        assert 105 <= trio.current_time() - asked_at < 110  # 5 s + ten 10 s polls
        message = str(refused.value)
        here = Actor.here("test").host
        assert f"the stop of run {run_id} is recorded, but no command is following" in message
        assert f"on host {here}" in message
        assert f"`overbrainer train attach {run_id}` stops its job" in message
        assert f"its pod {pod_id} bills, bounded by its watchdog (" in message
        assert t.rig.state(run_id).run.stop_pending
        # A second stop joins the first request.
        with pytest.raises(OverbrainerError):
            await b.stop(run_id)
        assert _stops(t, run_id) == [("asked", "workstation-b")]

        # The next attach in A takes it: the job saves and stops, the run ends stopped.
        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = t.rig.state(run_id)
        assert state.run.state == "stopped" and state.run.checkpoint is not None
        assert state.pod.status == "deleted"
        assert _stops(t, run_id) == [("asked", "workstation-b"), ("taken", here)]
        # Stopped now: B's stop has nothing left to do.
        before = len(t.rig.store.history(run_id))
        assert await b.stop(run_id) == 0
        assert b.out.getvalue().strip().splitlines()[-1] == (
            f"train: run {run_id} is stopped: nothing to stop"
        )
        assert len(t.rig.store.history(run_id)) == before


async def test_a_job_that_does_not_stop_in_time_is_cancelled_through_the_log(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        t.network.script = JobScript(steps=30, stops=False)
        b = Checkout(t, tmp_path / "b")
        codes: dict[str, int] = {}

        async def stop(run_id: str) -> None:
            codes["b"] = await b.stop(run_id, within=120.0)

        await _while_training(t, stop)
        run_id = t.run_id()
        assert codes["b"] == 1
        state = t.rig.state(run_id)
        assert state.run.state == "cancelled" and state.pod.status == "deleted"
        assert (
            f"the job of run {run_id} did not stop within 2 minutes of the request to save "
            "and stop; asking to cancel it" in b.err.getvalue()
        )
        assert b.out.getvalue().strip() == f"train: run {run_id} cancelled (cancelled)"
        assert [r for r, _ in _cancels(t, run_id)] == ["asked", "taken"]


async def test_ctrl_c_while_waiting_for_a_stop_keeps_the_request(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path / "a") as t:
        run_id = await t.detached_run(JobScript(steps=30))
        b = Checkout(t, tmp_path / "b")
        async with trio.open_nursery() as nursery:

            async def ctrl_c() -> None:
                await trio.sleep(30)
                b.session.interrupts.interrupt()

            nursery.start_soon(ctrl_c)
            with pytest.raises(Interrupted) as stopped:
                await b.stop(run_id)
        assert f"the stop of run {run_id} stays requested" in str(stopped.value)
        assert f"`overbrainer events {run_id} --follow`" in str(stopped.value)
        assert t.rig.state(run_id).run.stop_pending
