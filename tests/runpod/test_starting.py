"""A run still starting its pod, and the other commands that act on it:
whether its starter is provably gone (a pure table), ``pod ls``/``train`` calling it
abandoned, ``pod rm``/``train attach``/``train cancel`` ending it without ``--force``, a
cancel relayed through the log to the walk, and ``pod rm --force`` under a walk.

On the MockClock rig of ``test_train_pod``: every command runs in this process, so a dead
starter is scripted (``rig.gone``) and another host's starter is another store's actor."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import store as store_module
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.aggregate import RunLog
from overbrainer.events.store import RunStore
from overbrainer.runpod.orphans import Note
from overbrainer.runpod.timing import Timing
from overbrainer.session.journal import Journal
from overbrainer.session.limits import START_LIMIT
from overbrainer.targets.runpod.podrm import list_rows, remove_run_pods
from overbrainer.targets.runpod.provision import provision
from overbrainer.targets.runpod.starting import LEASE_MARGIN, judge, lease_seconds
from overbrainer.testing.fake_executor import run_inline
from overbrainer.testing.pod_training import Train, training

HERE = {"command": "train", "user": "alice", "host": "laptop-a", "pid": 42}
TEAM = {"command": "pod ls", "user": "bob", "host": "laptop-b", "pid": 7}
NEIGHBOUR = {"command": "pod ls", "user": "alice", "host": "laptop-a", "pid": 43}
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def _preparing(run_id: str = "20260301-120000-abcd") -> RunLog:
    state = RunLog()
    state.apply(
        ev.RunCreated(
            run_id=run_id, target="gpu", kind="runpod", remote_dir="r", settings_digest=""
        ),
        _at(0),
    )
    return state


def _alive(verdict: bool | None) -> Callable[[object], bool | None]:
    return lambda actor: verdict


# --- the decision, as a table ------------------------------------------------------------

LEASE = 40 * 60.0


@pytest.mark.parametrize(
    ("alive", "records", "now", "verdict", "why"),
    [
        # On this host the process table decides, whatever the times.
        (False, [(HERE, _at(0))], 1, "abandoned", "its process is gone"),
        (True, [(HERE, _at(0))], 600, "starting", "its process runs"),
        # On another host: the lease, from the starter's own latest event.
        (None, [(HERE, _at(0)), (HERE, _at(30))], 60, "starting", "recorded an event 30 min"),
        (None, [(HERE, _at(0)), (HERE, _at(10))], 51, "abandoned", "nothing for 41 min"),
        # Another command's events are no sign of the starter's life.
        (None, [(HERE, _at(0)), (TEAM, _at(50))], 41, "abandoned", "past its 40 min lease"),
    ],
)
def test_whether_a_starter_is_provably_gone(
    alive: bool | None,
    records: list[tuple[dict[str, object], str]],
    now: float,
    verdict: str,
    why: str,
) -> None:
    start = judge(
        _preparing(), records, now=T0 + timedelta(minutes=now), lease=LEASE, alive=_alive(alive)
    )
    assert start is not None
    assert (start.verdict, start.starter) == (verdict, HERE)
    assert why in start.why
    assert start.who() == "`train` (pid 42 on host laptop-a)"


@pytest.mark.parametrize(
    ("records", "offsets", "now", "verdict", "why"),
    [
        # The starter's host 3 h behind Runpod's clock, as it recorded: its last event,
        # 3 h 30 min ago by its times, was 30 min ago (taken as it is, a live start would
        # be ended and its pod deleted under it).
        ([(HERE, _at(-180)), (HERE, _at(-150))], [(HERE, -10800.0)], 60, "starting", "30 min"),
        # 2 h ahead: its last event reads 79 min in the future, but is 41 min old (taken as
        # it is, the start would never be abandoned: a pod billing to its boot grace).
        ([(HERE, _at(120)), (HERE, _at(130))], [(HERE, 7200.0)], 51, "abandoned", "41 min"),
        # An offset recorded by another command on the starter's host is its clock's too…
        ([(HERE, _at(-180)), (HERE, _at(-150))], [(NEIGHBOUR, -10800.0)], 60, "starting", "30"),
        # … one recorded on another host is not, nor is an older one of the same host.
        ([(HERE, _at(-180)), (HERE, _at(-150))], [(TEAM, -10800.0)], 60, "abandoned", "210 min"),
        (
            [(HERE, _at(0)), (HERE, _at(10))],
            [(HERE, -10800.0), (NEIGHBOUR, 0.0)],
            51,
            "abandoned",
            "41 min",
        ),
    ],
)
def test_a_starter_on_another_host_is_judged_on_runpods_clock(
    records: list[tuple[dict[str, object], str]],
    offsets: list[tuple[dict[str, object], float]],
    now: float,
    verdict: str,
    why: str,
) -> None:
    start = judge(
        _preparing(),
        records,
        now=T0 + timedelta(minutes=now),
        lease=LEASE,
        alive=_alive(None),
        offsets=offsets,
    )
    assert start is not None
    assert (start.verdict, start.starter) == (verdict, HERE)
    assert why in start.why


@pytest.mark.parametrize(("silent", "verdict"), [(40 + 59, "starting"), (40 + 61, "abandoned")])
def test_the_upload_to_a_runs_network_volume_before_its_create_lengthens_the_lease(
    silent: float, verdict: str
) -> None:
    # The walk recorded that the run's files may take an hour to go up to its volume, a
    # step that appends nothing: the starter's silence is allowed that hour more.
    state = _preparing()
    attached = ev.VolumeAttached(
        volume_id="v1", volume_name="cache", data_center="US-KS-2", created=True,
        fill_seconds=3600.0,
    )  # fmt: skip
    state.apply(attached, _at(0))
    start = judge(
        state,
        [(HERE, _at(0))],
        now=T0 + timedelta(minutes=silent),
        lease=LEASE,
        alive=_alive(None),
    )
    assert start is not None
    assert start.verdict == verdict, start.why
    if verdict == "abandoned":
        assert "past its 100 min lease" in start.why


def test_only_a_run_preparing_has_a_start() -> None:
    state = _preparing()
    state.apply(ev.JobStarted(job_dir="r", pid=5), _at(1))
    assert judge(state, [(HERE, _at(0))], now=T0, lease=LEASE, alive=_alive(False)) is None


def test_the_lease_bounds_every_wait_of_a_walk_between_two_appends() -> None:
    timing = Timing()
    lease = lease_seconds(timing, START_LIMIT)
    for wait in (
        timing.ssh_within,
        timing.verdict_within,
        timing.create_limit,
        timing.max_retry_after,
        timing.delete_limit,
        START_LIMIT,
    ):
        assert lease >= wait + LEASE_MARGIN
    assert lease == 45 * 60  # 15 + 3 + 2 + 5 + 5 + 5 min, and 10 min for clocks


# --- a run whose starter died --------------------------------------------------------------


async def _starting(t: Train) -> tuple[str, str]:
    """A run whose pod is ready and whose `train` then died (a pod billing, the run
    preparing): its ID and its pod's."""
    run_id = await t.rig.new_run()
    ready = await provision(t.rig.context, run_id, t.spec, keep=False)
    t.rig.gone.add(os.getpid())  # the process that was starting it is gone
    return run_id, ready.pod_id


async def test_item_5_pod_ls_and_train_call_a_run_whose_starter_died_abandoned(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id, pod_id = await _starting(t)
        rows = await list_rows(t.rig.context, {run_id: t.rig.state(run_id)})
        assert [(r.run_id, r.pod_id, r.note) for r in rows] == [(run_id, pod_id, Note.abandoned)]
        assert Note.abandoned.value == "abandoned while starting"

        await t.command().warn_orphans()
        assert (
            f"warning: pod {pod_id} of run {run_id} ($0.40/h) was abandoned while starting: "
            f"the `overbrainer train` starting it is gone, and only its watchdog's boot grace "
            f"bounds it; end the run with `overbrainer pod rm {run_id}`"
        ) in t.err()

        # Alive, the same run is in progress, and pod rm keeps its hands off.
        t.rig.gone.clear()
        rows = await list_rows(t.rig.context, {run_id: t.rig.state(run_id)})
        assert [r.note for r in rows] == [Note.in_progress]
        with pytest.raises(OverbrainerError) as refused:
            await remove_run_pods(t.rig.context, run_id, force=False)
        assert str(refused.value).startswith(
            f"run {run_id} is still starting its pod: `test` (pid {os.getpid()} on host "
        )
        assert f"Stop it with `overbrainer train cancel {run_id}`" in str(refused.value)
        assert t.rig.fake.status(pod_id) == "RUNNING"


@pytest.mark.parametrize("command", ["pod rm", "train attach", "train cancel"])
async def test_item_5_an_abandoned_start_is_ended_without_force(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, command: str
) -> None:
    async with training(tmp_path) as t:
        run_id, pod_id = await _starting(t)
        state = t.rig.state(run_id)
        code: int | None = None
        if command == "pod rm":
            removal = await remove_run_pods(t.rig.context, run_id, force=False)
            assert [d.pod_id for d in removal.deleted] == [pod_id] and not removal.problems()
        elif command == "train attach":
            with pytest.raises(OverbrainerError) as failed:
                await t.command().attach_starting(state)
            assert str(failed.value).startswith(f"run {run_id} failed: abandoned while starting")
        else:
            code = await t.command().cancel_starting(state)
            assert t.out().strip().splitlines()[-1] == f"train: run {run_id} cancelled"
        state = t.rig.state(run_id)
        assert state.run.state == ("cancelled" if command == "train cancel" else "failed")
        assert code in (None, 0)
        assert state.run.message == (
            f"abandoned while starting its pod: `test` (pid {os.getpid()} on host "
            f"{Actor.here('x').host}) is gone (its process is gone); `overbrainer {command}"
            + ("" if command == "pod rm" else f" {run_id}")
            + "` deleted its pods"
        )
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        assert not state.pod.may_bill()
        assert t.rig.names(run_id).count("pod.Deleting") == 1


async def test_item_5_a_start_on_another_host_is_abandoned_once_silent_past_its_lease(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        laptop = Actor(command="train", user="carol", host="laptop-c", pid=99, version="0")
        theirs = RunStore(None, t.rig.project, laptop)
        try:
            run_id = "20260301-120000-beef"
            journal = Journal(theirs, t.rig.project, runner=run_inline)
            await journal.create(
                ev.RunCreated(
                    run_id=run_id, target="gpu", kind="runpod", remote_dir="r", settings_digest=""
                )
            )
            await journal.append(run_id, [ev.KeysGenerated(host_public_key="ssh-ed25519 AAAA")])
        finally:
            theirs.close()
        t.rig.context.alive = lambda actor: None if actor.get("host") == "laptop-c" else True
        state = t.rig.state(run_id)
        command = t.command()
        with pytest.raises(OverbrainerError, match="is still starting its pod"):
            await command.attach_starting(state)
        lease = lease_seconds(t.rig.context.timing, START_LIMIT)
        await trio.sleep(lease + 60)
        with pytest.raises(OverbrainerError) as failed:
            await t.command().attach_starting(t.rig.state(run_id))
        assert (
            "`train` (pid 99 on host laptop-c) is gone (it has recorded nothing for 46 min, "
            in (str(failed.value))
        )
        assert t.rig.state(run_id).run.state == "failed"


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(-3.0, 0.0), (2.0, 0.0), (0.0, 3.0), (0.0, -3.0)],
    ids=["their-clock-3h-behind", "their-clock-2h-ahead", "our-clock-3h-ahead", "ours-behind"],
)
async def test_a_start_on_another_host_is_judged_on_runpods_clock_whatever_the_hosts_clocks(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
    theirs: float,
    ours: float,
) -> None:
    # Their clock hours off: they recorded the offset (their `train` does, before its
    # create), and their events carry their times. Ours off: Runpod's Date says the time.
    async with training(tmp_path) as t:
        laptop = Actor(command="train", user="carol", host="laptop-c", pid=99, version="0")
        theirs_store = RunStore(None, t.rig.project, laptop)
        run_id = "20260301-120000-beef"
        with monkeypatch.context() as their_clock:
            their_clock.setattr(store_module, "datetime", _shifted(theirs))
            try:
                journal = Journal(theirs_store, t.rig.project, runner=run_inline)
                await journal.create(
                    ev.RunCreated(
                        run_id=run_id,
                        target="gpu",
                        kind="runpod",
                        remote_dir="r",
                        settings_digest="",
                    )
                )
                records: list[ev.Event] = [ev.KeysGenerated(host_public_key="ssh-ed25519 AAAA")]
                if theirs:
                    records.insert(0, ev.ClockOffset(offset_seconds=theirs * 3600))
                await journal.append(run_id, records)
            finally:
                theirs_store.close()
        right = t.rig.context.clock
        t.rig.context.clock = lambda: right() + timedelta(hours=ours)
        t.rig.context.alive = lambda actor: None if actor.get("host") == "laptop-c" else True
        with pytest.raises(OverbrainerError, match="is still starting its pod"):
            await t.command().attach_starting(t.rig.state(run_id))
        assert t.rig.state(run_id).run.state == "preparing"
        await trio.sleep(lease_seconds(t.rig.context.timing, START_LIMIT) + 60)
        with pytest.raises(OverbrainerError) as failed:
            await t.command().attach_starting(t.rig.state(run_id))
        assert "(it has recorded nothing for 46 min, " in str(failed.value)
        assert t.rig.state(run_id).run.state == "failed"


def _shifted(hours: float) -> type[datetime]:
    """``datetime`` whose ``now`` is ``hours`` away from the real one."""

    class Shifted(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return datetime.now(tz) + timedelta(hours=hours)

    return Shifted


# --- another command acts on a walk -------------------------------------------


async def _train_until(t: Train, ready: Callable[[RunLog], bool]) -> tuple[str, list[str]]:
    """Start `train` in the background; return its run once ``ready`` holds of it, and a
    list that receives the error `train` ends with."""
    errors: list[str] = []

    async def train() -> None:
        try:
            await t.train()
        except OverbrainerError as error:
            errors.append(str(error))

    t.nursery.start_soon(train)
    while True:
        await trio.sleep(0.5)
        if t._runs() - t.known:
            run_id = t.run_id()
            if ready(t.rig.state(run_id)):
                return run_id, errors


@pytest.mark.parametrize("stage", ["booting", "ambiguous create"])
async def test_pod_rm_force_while_train_provisions_stops_it_cleanly(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, stage: str
) -> None:
    async with training(tmp_path) as t:
        async with trio.open_nursery() as t.nursery:  # type: ignore[attr-defined]
            if stage == "ambiguous create":
                # The pod is made but the answer times out: the walk is reconciling when the
                # forced pod rm comes, and may adopt the pod after it.
                t.rig.fake.fail_next("POST /pods", None, succeed=True, timeout=True)
                run_id, errors = await _train_until(t, lambda s: bool(s.pod.attempts))
            else:
                run_id, errors = await _train_until(t, lambda s: s.pod.status == "created")
            removal = await remove_run_pods(t.command().ctx, run_id, force=True)
            assert not removal.problems()
        state = t.rig.state(run_id)
        assert state.run.state == "failed"
        (error,) = errors
        assert error.startswith(f"run {run_id} was failed by `test` as ")
        assert (
            f"its pods were deleted by `overbrainer pod rm {run_id} --force` while this " in error
        )
        assert "Transition" not in error
        for pod in t.rig.fake.pods.values():
            assert t.rig.fake.status(pod.id) == "TERMINATED"
        assert not state.pod.may_bill()
        names = t.rig.names(run_id)
        for pod_id in state.pod.pods:
            deleting = [
                r
                for r in t.rig.store.history(run_id)
                if isinstance(r.event, ev.PodDeleting) and r.event.pod_id == pod_id
            ]
            assert len(deleting) == 1, names
        assert "run.JobStarted" not in names


@pytest.mark.parametrize("stage", ["booting", "waiting out a rate limit"])
async def test_item_5_train_cancel_of_a_provisioning_run_is_taken_by_its_walk(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, stage: str
) -> None:
    async with training(tmp_path) as t:
        async with trio.open_nursery() as t.nursery:  # type: ignore[attr-defined]
            if stage == "waiting out a rate limit":
                t.rig.fake.fail_next("POST /pods", 429, retry_after=120)
                run_id, errors = await _train_until(t, lambda s: bool(s.pod.attempts))
            else:
                run_id, errors = await _train_until(t, lambda s: s.pod.status == "created")
            asked_at = trio.current_time()
            code = await t.command().cancel_starting(t.rig.state(run_id))
            assert trio.current_time() - asked_at < 30  # taken at the walk's next look
        assert code == 0
        assert t.out().strip().splitlines()[-1] == (
            f"train: run {run_id} cancelled by the command starting it, `test` (pid "
            f"{os.getpid()} on host {Actor.here('x').host})"
        )
        (error,) = errors
        assert error.startswith(f"run {run_id} cancelled before its job started by `test` as ")
        state = t.rig.state(run_id)
        assert state.run.state == "cancelled" and not state.run.cancel_pending
        assert [
            r.event.relay
            for r in t.rig.store.history(run_id)
            if isinstance(r.event, ev.CancelRequested)
        ] == ["asked", "taken"]
        for pod in t.rig.fake.pods.values():
            assert t.rig.fake.status(pod.id) == "TERMINATED"
        assert not state.pod.may_bill()
        assert "run.JobStarted" not in t.rig.names(run_id)


@pytest.mark.parametrize("other", ["cancel asked", "run ended"])
async def test_item_5_what_another_command_did_once_the_pod_is_ready_is_seen_before_the_job(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, other: str
) -> None:
    # The walk's last look is at the pod's readiness; the job's start looks again.
    async with training(tmp_path) as t:
        real = t.rig.journal.append

        async def append(run: str, decide: Any) -> Any:
            state = await real(run, decide)
            if state.pod.status == "ready" and not state.final and not state.run.cancel_requested:
                late: ev.Event = (
                    ev.CancelRequested(relay="asked")
                    if other == "cancel asked"
                    else ev.RunEnded(state="failed", message="ended by another command")
                )
                await real(run, [late])  # just after: the walk does not see it
            return state

        t.rig.journal.append = append  # type: ignore[method-assign]
        with pytest.raises(OverbrainerError) as stopped:
            await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        if other == "cancel asked":
            assert str(stopped.value).startswith(f"run {run_id} cancelled before its job started")
            assert state.run.state == "cancelled" and not state.run.cancel_pending
        else:
            assert str(stopped.value).startswith(
                f"run {run_id} was failed by `test` as "
            ) and "while this command was starting its job" in str(stopped.value)
            assert state.run.state == "failed"
        assert "run.JobStarted" not in t.rig.names(run_id)
        assert t.rig.fake.status(_only_pod(t)) == "TERMINATED"
        assert not state.pod.may_bill()
        assert t.rig.names(run_id).count("pod.Deleting") == 1


def _only_pod(t: Train) -> str:
    (pod,) = t.rig.fake.pods.values()
    return pod.id
