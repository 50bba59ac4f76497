"""``train``, ``train attach`` and ``train cancel`` on a Runpod target, on trio's MockClock:
the fake Runpod API in-process, the pod's machine in memory with a scripted job
(:class:`JobNetwork`), the real event store. Hours of training run in milliseconds."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from overbrainer.errors import Interrupted, OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.aggregate import PodView
from overbrainer.exec.base import Executor
from overbrainer.runpod import messages
from overbrainer.runpod.messages import Ending
from overbrainer.runpod.pod_scripts import RETRIEVED
from overbrainer.runpod.timing import Timing
from overbrainer.targets.runpod.following import DEADLINE_SLACK
from overbrainer.targets.runpod.pods import PodAccess
from overbrainer.targets.runpod.target import timing_for
from overbrainer.testing.fake_executor import CANARY_KEY, POD_HOST
from overbrainer.testing.pod_training import (
    A40,
    HF_CANARY,
    JobScript,
    Train,
    interrupt_when,
    training,
)
from overbrainer.train.axolotl import model_ready_command

FOREVER = 10**9


def _names(t: Train, run_id: str) -> list[str]:
    return t.rig.names(run_id)


# --- a whole run -----------------------------------------------------------------------


async def test_a_whole_run_trains_retrieves_and_deletes_its_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        marked_before_delete: list[bool] = []
        inner = t.rig.spy

        class Spy(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                if request.method == "DELETE":
                    run_id = t.run_id()
                    marker = f"runs/{run_id}/{RETRIEVED}"
                    marked_before_delete.append(marker in t.machine().files)
                assert inner is not None
                return await inner.handle_async_request(request)

        t.rig.context.client._http._transport = Spy()  # type: ignore[attr-defined]
        start = trio.current_time()
        code = await t.train()
        run_id = t.run_id()

        assert code == 0
        assert _names(t, run_id) == [
            "run.Created",
            "pod.KeysGenerated",
            "pod.AttemptSent",
            "pod.AttemptResolved",
            "pod.Created",
            "pod.EndpointSeen",
            "pod.Ready",
            "run.JobStarted",
            "pod.JobRunning",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        state = t.rig.state(run_id)
        pod_id = t.pod_id(run_id)
        assert state.run.state == "succeeded"
        assert state.pod.status == "deleted" and state.pod.deleted_by == "client"
        assert state.pod.delete_reason == "retrieved"
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        # `.pod/retrieved` was on the pod when the delete left.
        assert marked_before_delete == [True]
        # Uptime and spend: about 5 job minutes plus the boot, at $0.40/h.
        assert state.pod.uptime_seconds is not None and 300 < state.pod.uptime_seconds < 400
        assert state.pod.spend == pytest.approx(0.40 * state.pod.uptime_seconds / 3600, rel=1e-3)
        assert f"spend ${state.pod.spend:.2f}" in t.err()
        assert f"pod {pod_id} deleted (by overbrainer)" in t.err()
        assert t.out().strip().splitlines()[-1] == (
            f"train: run {run_id} succeeded; step 5/5, epoch 1, loss 1.167; "
            f"output in {t.rig.project}/runs/{run_id}/output"
        )
        run_dir = tmp_path / "runs" / run_id
        assert (run_dir / "output" / "adapter_model.safetensors").read_bytes() == b"w" * 64
        assert (run_dir / "watchdog.log").read_text() == "watchdog: guarding the pod\n"
        assert not (run_dir / "ssh" / "id_ed25519").exists()  # no pod left to log in to
        assert trio.current_time() - start < 400
        # The job ran the model step, then the trainer, through the pod's job environment,
        # the venv first on PATH.
        ((_, commands),) = t.machine().spawned
        with_job_env = [
            "sh",
            "-c",
            '. ./.pod/job.env && PATH="$1/bin:$PATH" && export PATH && shift && exec "$@"',
            "sh",
            "/workspace/axolotl-venv",
        ]
        assert commands == [
            [
                *with_job_env,
                *model_ready_command("/workspace/axolotl-venv/bin/python", t.settings.training),
            ],
            [*with_job_env, "/workspace/axolotl-venv/bin/axolotl", "train", "axolotl.yaml"],
        ]
        story = t.story(run_id)
        for said in (
            f"created run {run_id}: lora of Qwen/Qwen3-0.6B on target gpu (runpod)",
            f"created pod {pod_id} ({A40}, ",
            f"the job runs on pod {pod_id}",
            "every checksum verified",
            "run succeeded",
            f"deleting pod {pod_id} (retrieved)",
            f"pod {pod_id} deleted (by overbrainer) after ",
        ):
            assert said in story, said


# --- Ctrl-C ----------------------------------------------------------------------------


async def test_ctrl_c_after_the_job_started_detaches_and_attach_finishes_the_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=60, step_seconds=60.0)
        run = t.command()
        interrupts = run.session.interrupts

        def job_running() -> bool:
            runs = tmp_path / "runs"
            return runs.exists() and any(
                t.rig.state(r.name).pod.status == "job_running" for r in runs.iterdir()
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(interrupt_when, interrupts, job_running)
            with pytest.raises(Interrupted) as caught:
                await t.train(run=run)
        run_id = t.run_id()
        state = t.rig.state(run_id)
        pod_id = t.pod_id(run_id)
        assert caught.value.exit_code == 130
        assert str(caught.value) == (
            f"interrupted: run {run_id} keeps running on pod {pod_id} ($0.40/h); follow it "
            f"again with `overbrainer train attach {run_id}`, or delete the pod with "
            f"`overbrainer pod rm {run_id}`. The watchdog deletes the pod 30 min after the job "
            f"ends if its results are not retrieved, and by {state.pod.deadline} in any case."
        )
        assert _names(t, run_id)[-2:] == ["pod.JobRunning", "run.Detached"]
        assert state.run.state == "running" and state.pod.status == "job_running"
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert "cancelled" not in str(t.machine().files.keys())

        code = await t.command().attach(t.rig.state(run_id))
        state = t.rig.state(run_id)
        assert code == 0
        assert state.run.state == "succeeded" and state.pod.status == "deleted"
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        assert _names(t, run_id)[-7:] == [
            "run.Detached",
            "run.Followed",  # attach claims the run
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        assert t.out().strip().splitlines()[-1].startswith(f"train: run {run_id} succeeded")
        story = t.story(run_id)
        assert "stopped following (interrupted); the job keeps running" in story
        assert f"pod {pod_id} deleted (by overbrainer)" in story


async def test_ctrl_c_once_the_pod_is_ready_but_before_the_job_deletes_the_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run = t.command()
        connect = t.network.connect

        def ctrl_c_once_ready(
            access: PodAccess,
        ) -> contextlib.AbstractAsyncContextManager[Executor]:
            # The job's connection opens once the pod is ready: Ctrl-C comes right then.
            if t.rig.state(t.run_id()).pod.status == "ready":
                run.session.interrupts.interrupt()
            return connect(access)

        run.ctx.connect = ctrl_c_once_ready
        with pytest.raises(Interrupted) as caught:
            await t.train(run=run)
        run_id = t.run_id()
        assert str(caught.value) == (
            f"interrupted: run {run_id} stopped before its job started; it has no pod left"
        )
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and state.run.job is None
        assert t.machine().spawned == []
        assert state.pod.delete_reason == "interrupted" and not state.pod.may_bill()
        assert _names(t, run_id)[-4:] == [
            "pod.Deleting",
            "pod.Deleted",
            "run.Interrupted",
            "run.Ended",
        ]


async def test_a_job_that_cannot_start_deletes_its_pod_and_fails_the_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.spawn_error = "setsid is not installed on this host"
        with pytest.raises(OverbrainerError, match="setsid is not installed"):
            await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and "could not start" in (state.run.message or "")
        assert state.pod.status == "deleted" and state.pod.delete_reason == "failed"
        assert t.rig.fake.live_pods() == []


# --- the pod's end ---------------------------------------------------------------------


async def test_the_client_deletes_a_pod_past_its_deadline_and_fails_the_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        with pytest.raises(OverbrainerError) as caught:
            await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        pod_id = t.pod_id(run_id)
        deleted_at = t.request_times("DELETE", f"/pods/{pod_id}")
        created_at = t.request_times("POST", "/pods")[0]
        assert len(deleted_at) == 1
        # Two hours (max_hours) plus the slack after the create, not before.
        assert 2 * 3600 + DEADLINE_SLACK <= deleted_at[0] - created_at < 2 * 3600 + 400
        assert state.run.state == "failed" and state.pod.delete_reason == "deadline"
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        assert str(caught.value) == (
            f"run {run_id} failed: the job was still running 5 min past the deadline of pod "
            f"{pod_id} ({state.pod.deadline}, max_hours = 2); overbrainer deleted the pod; "
            "raise max_hours of target gpu in overbrainer.toml if the job needs longer"
        )
        assert t.out().strip().splitlines()[-1].startswith(f"train: run {run_id} failed")
        assert _names(t, run_id)[-4:] == [
            "pod.Deleting",
            "pod.Deleted",
            "run.Ended",
            "run.NoteAdded",
        ]
        story = t.story(run_id)
        assert f"deleting pod {pod_id} (deadline)" in story
        assert "run failed: the job was still running 5 min past the deadline" in story
        assert "note: artifacts not retrieved: the pod passed its deadline" in story
        # Following never called the API: only the delete came after the job started.
        after_start = [
            r for r in t.rig.fake.requests if r.time > created_at + 600 and r.method == "GET"
        ]
        assert all(r.time >= deleted_at[0] for r in after_start)


async def test_a_watch_that_loses_a_deleted_pod_fails_the_run_once_it_is_confirmed_gone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        # A target that recovers nothing (recoveries: tests/runpod/test_recovery_*.py).
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        t.network.script = JobScript(steps=60, step_seconds=60.0)

        async def pod_vanishes() -> None:
            while not t.network.machines or not t.machine().spawned:
                await trio.sleep(5)
            await trio.sleep(600)
            t.rig.fake.vanish(t.rig.fake.live_pods()[0].id)
            t.machine().down = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pod_vanishes)
            with pytest.raises(OverbrainerError) as caught:
                await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        assert str(caught.value) == (
            f"run {run_id} failed: pod {pod_id} no longer exists (Runpod answered 'no such "
            "pod' again and again and no longer lists it), and its job went with it; start "
            "again with `overbrainer train`"
        )
        state = t.rig.state(run_id)
        assert state.run.state == "failed"
        assert state.run.message == f"pod {pod_id} no longer exists; the job went with it"
        assert state.pod.status == "deleted" and state.pod.deleted_by == "found_gone"
        # Three reads said "no such pod", 10 s apart, then a listing without it.
        reads = t.request_times("GET", f"/pods/{pod_id}")[-3:]
        assert [round(b - a) for a, b in itertools.pairwise(reads)] == [10, 10]
        assert t.request_times("GET", "/pods")[-1] >= reads[-1]
        assert "warning: cannot reach" in t.err()  # the lost polls were warned about
        assert f"pod {pod_id} deleted (found gone)" in t.story(run_id)


async def test_a_pod_that_looks_gone_once_is_not_gone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        # A target that recovers none: following stops, saying the pod is still there (one
        # that recovers looks again for unreachable_minutes: test_recovery_loopback.py).
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        t.network.script = JobScript(steps=60, step_seconds=60.0)

        async def network_blip() -> None:
            while not t.network.machines or not t.machine().spawned:
                await trio.sleep(5)
            await trio.sleep(600)
            pod_id = t.rig.fake.live_pods()[0].id
            t.rig.fake.fail_next("GET /pods/{id}", 404, pod_id=pod_id)
            t.machine().down = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(network_blip)
            with pytest.raises(OverbrainerError) as caught:
                await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        message = str(caught.value)
        assert f"`overbrainer train attach {run_id}`" in message
        assert f"pod {pod_id} ($0.40/h) is still there" in message
        state = t.rig.state(run_id)
        assert state.run.state == "running" and state.pod.status == "job_running"
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert _names(t, run_id)[-1] == "run.Detached"
        assert "pod unreachable" in t.story(run_id)

        t.machine().down = False
        assert await t.command().attach(t.rig.state(run_id)) == 0
        assert t.rig.state(run_id).run.state == "succeeded"
        assert t.rig.fake.status(pod_id) == "TERMINATED"


@pytest.mark.parametrize("broken", ["fail", "corrupt"])
async def test_results_not_retrieved_leave_the_pod_awaiting_then_attach_collects(
    tmp_path: Path, broken: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.downloads = broken
        with pytest.raises(OverbrainerError) as caught:
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        # A would-be success stays running so attach retries; the pod waits for it.
        assert state.run.state == "running" and state.pod.status == "awaiting_retrieval"
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert f"`overbrainer train attach {run_id}`" in str(caught.value)
        err = t.err()
        assert (
            f"the results of run {run_id} are not home" in err
            and f"pod {pod_id} ($0.40/h) is left running" in err
            and f"`overbrainer pod rm {run_id}`" in err
            and "The watchdog deletes it 30 min after the job ended" in err
        )
        assert "pod.Deleting" not in _names(t, run_id)
        files = t.machine().files
        assert f"runs/{run_id}/{RETRIEVED}" not in files

        t.network.downloads = None
        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded" and state.run.artifacts is not None
        assert state.pod.status == "deleted" and t.rig.fake.status(pod_id) == "TERMINATED"
        assert _names(t, run_id)[-7:] == [
            "pod.AwaitingRetrieval",
            "run.ArtifactsRetrieved",
            "run.NoteCleared",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        assert "awaits retrieval of the results" in t.story(run_id)


async def test_a_failed_run_whose_results_were_not_retrieved_is_collected_by_attach(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.script = JobScript(exit_code=3)
        t.network.downloads = "fail"
        with pytest.raises(OverbrainerError, match="the job exited with code 3"):
            await t.train()
        run_id = t.run_id()
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and (state.run.note or "").startswith(
            "artifacts not retrieved"
        )
        assert state.pod.status == "awaiting_retrieval"
        t.network.downloads = None
        with pytest.raises(OverbrainerError, match="the job exited with code 3") as caught:
            await t.command().attach(t.rig.state(run_id))
        assert "artifacts not retrieved" not in str(caught.value)
        state = t.rig.state(run_id)
        assert state.run.note is None and state.run.artifacts is not None
        assert state.pod.status == "deleted"


async def test_a_pod_that_cannot_be_deleted_still_prints_the_outcome_and_its_error_wins(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path, delete_confirm=30.0) as t:
        t.rig.fake.linger_next_delete(FOREVER)
        with pytest.raises(OverbrainerError) as caught:
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        assert t.out().strip().splitlines()[-1].startswith(f"train: run {run_id} succeeded")
        message = str(caught.value)
        assert message.startswith(f"run {run_id} ended, but not its pod: pod {pod_id}")
        assert "may still bill" in message and f"`overbrainer pod rm {run_id}`" in message
        assert t.rig.state(run_id).pod.may_bill()

        # The next train warns about it, from one listing, and never deletes it.
        listings = len(t.request_times("GET", "/pods"))
        deletes = len(t.request_times("DELETE", f"/pods/{pod_id}"))
        t.network.script = JobScript(steps=1)
        await t.train()
        assert (
            f"warning: pod {pod_id} of run {run_id} ($0.40/h) is ended but not deleted: "
            f"nothing will delete it; remove it with `overbrainer pod rm {run_id} --force`"
        ) in t.err()
        assert len(t.request_times("DELETE", f"/pods/{pod_id}")) == deletes
        second = t.run_id()
        first_create = t.request_times("POST", "/pods")[-1]
        before = [x for x in t.request_times("GET", "/pods")[listings:] if x <= first_create]
        assert len(before) == 1
        assert second != run_id


# --- --keep-pod ------------------------------------------------------------------------


async def test_keep_pod_warns_with_the_rate_keeps_the_pod_and_says_how_to_reach_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        assert await t.train(keep=True) == 0
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        err = t.err()
        assert (
            f"warning: --keep-pod: pod {pod_id} is kept with no time limit, at $0.40/h, even "
            f"once the run ends; nothing deletes it but `overbrainer pod rm {run_id}`"
        ) in err
        assert (
            f"warning: pod {pod_id} kept (--keep-pod): `ssh -F runs/{run_id}/ssh/config "
            f"overbrainer-{run_id}`; remove it with `overbrainer pod rm {run_id}`; nothing "
            "deletes it automatically"
        ) in err
        # The warning comes once the job started, not before.
        assert err.index("run.JobStarted") < err.index("--keep-pod: pod")
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded" and state.pod.status == "kept"
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert "pod.Deleting" not in _names(t, run_id)
        assert _names(t, run_id)[-1] == "pod.Kept"
        assert f"pod {pod_id} kept (--keep-pod); only `pod rm` removes it" in t.story(run_id)
        assert (tmp_path / "runs" / run_id / "ssh" / "id_ed25519").exists()
        assert f"runs/{run_id}/{RETRIEVED}" not in t.machine().files

        # attach of the kept run: nothing to collect, the pod stays.
        assert await t.command().attach(t.rig.state(run_id)) == 0
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert "pod.Deleting" not in _names(t, run_id)


async def test_keep_pod_ctrl_c_names_the_ssh_command_and_past_the_deadline_nothing_deletes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=200, step_seconds=60.0)  # 3 h 20, past max_hours
        run = t.command()

        def job_running() -> bool:
            runs = tmp_path / "runs"
            return runs.exists() and any(
                t.rig.state(r.name).pod.status == "job_running" for r in runs.iterdir()
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(interrupt_when, run.session.interrupts, job_running)
            with pytest.raises(Interrupted) as caught:
                await t.train(keep=True, run=run)
        run_id = t.run_id()
        assert str(caught.value).endswith(
            "The pod is kept with no time limit (--keep-pod): "
            f"`ssh -F runs/{run_id}/ssh/config overbrainer-{run_id}`."
        )
        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded" and state.pod.status == "kept"
        assert t.rig.fake.status(t.pod_id(run_id)) == "RUNNING"


# --- attach and cancel -----------------------------------------------------------------


async def test_attach_reconnects_through_a_changed_endpoint(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        # The pod came back on another port (a restart of its host, say).
        machine = t.network.machines.pop((POD_HOST, 22000))
        t.network.machines[(POD_HOST, 23456)] = machine
        t.rig.fake.set_ssh_endpoint(pod_id, POD_HOST, 23456)

        assert await t.command().attach(t.rig.state(run_id)) == 0
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded"
        assert state.pod.endpoint == {"host": POD_HOST, "port": 23456, "user": "root"}
        seen = t.rig.events(run_id, ev.EndpointSeen)
        assert [e.port for e in seen] == [22000, 23456]  # type: ignore[attr-defined]
        config = (tmp_path / "runs" / run_id / "ssh" / "config").read_text()
        assert "Port 23456" in config and "Port 22000" not in config
        assert f"pod {pod_id} answers SSH at root@{POD_HOST}:23456" in t.story(run_id)


def _just_started(t: Train, pod_id: str) -> None:
    """The pod's current boot reached RUNNING now, as after a restart."""
    pod = t.rig.fake.pods[pod_id]
    pod.boot_at = trio.current_time() - pod.boot_provisioning - pod.boot_starting


@pytest.mark.parametrize("command", ["attach", "cancel"])
async def test_attach_waits_for_a_just_restarted_pod_that_refuses_ssh_for_a_while(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, command: str
) -> None:
    # Runpod shows a restarted pod RUNNING, with its endpoint, while its sshd is not up:
    # attach (and cancel) used to give up at the first refused connection.
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        _just_started(t, pod_id)
        machine = t.network.machines[(POD_HOST, 22000)]
        machine.reachable_at = trio.current_time() + 240
        asked, before, reached = trio.current_time(), machine.connects, []

        async def watch() -> None:
            while machine.connects == before:
                await trio.sleep(1)
            reached.append(trio.current_time() - asked)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            if command == "attach":
                assert await t.command().attach(t.rig.state(run_id)) == 0
                assert t.rig.state(run_id).run.state == "succeeded"
            else:
                assert await t.command().cancel(t.rig.state(run_id)) == 0
                assert t.rig.state(run_id).run.state == "cancelled"
        assert 240 <= reached[0] < 240 + 10  # reached once it answered (tried every 5 s)
        assert (
            f"pod {pod_id} of run {run_id} does not answer SSH at {POD_HOST}:22000 yet (cannot "
            f"reach host root@{POD_HOST}:22000: connection refused); it may be starting: "
            "trying again for up to 15m00s"
        ) in t.err()


async def test_attach_gives_up_on_a_pod_long_up_that_refuses_ssh_after_a_few_tries(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        await trio.sleep(3600)  # up for an hour
        t.network.machines[(POD_HOST, 22000)].down = True
        asked = trio.current_time()
        with pytest.raises(OverbrainerError) as failed:
            await t.command().attach(t.rig.state(run_id))
        assert 15 <= trio.current_time() - asked < 30  # connect_attempts × poll
        assert str(failed.value).startswith(
            f"cannot reach pod {pod_id} of run {run_id} at {POD_HOST}:22000 ("
        )
        assert "trying again for up to 15s" in t.err()
        assert t.rig.state(run_id).run.state == "running"


async def test_ctrl_c_while_attach_waits_for_a_pod_to_answer_ssh_says_how_to_go_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        _just_started(t, pod_id)
        t.network.machines[(POD_HOST, 22000)].reachable_at = trio.current_time() + 600
        run = t.command()
        asked = trio.current_time()
        async with trio.open_nursery() as nursery:
            waiting = lambda: "does not answer SSH" in t.err()  # noqa: E731
            nursery.start_soon(interrupt_when, run.session.interrupts, waiting)
            with pytest.raises(Interrupted) as stopped:
                await run.attach(t.rig.state(run_id))
        assert trio.current_time() - asked < 30
        assert str(stopped.value) == (
            f"interrupted while pod {pod_id} of run {run_id} did not answer SSH yet: its job "
            f"keeps running; `overbrainer train attach {run_id}` reaches it again"
        )
        assert t.rig.state(run_id).run.state == "running"


async def test_attach_and_cancel_of_a_run_whose_pod_is_gone_when_its_target_recovers_none(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        # max_recoveries = 0 (one that recovers: tests/runpod/test_recovery_loopback.py).
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        t.rig.fake.vanish(pod_id)

        with pytest.raises(OverbrainerError) as caught:
            await t.command().attach(t.rig.state(run_id))
        assert str(caught.value) == (
            f"run {run_id} failed: pod {pod_id} no longer exists; the job went with it "
            f"(artifacts not retrieved: pod {pod_id} is gone)"
        )
        assert t.out().strip().splitlines()[-1] == f"train: run {run_id} failed"
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and state.pod.deleted_by == "found_gone"
        # Counted until it was found gone: what it cost is in the run's spend.
        (deleted,) = t.rig.events(run_id, ev.PodDeleted)
        assert deleted.uptime_seconds is not None and deleted.uptime_seconds > 0
        assert deleted.spend is not None and deleted.spend > 0
        reads = t.request_times("GET", f"/pods/{pod_id}")
        assert len(reads) >= 4 and reads[-1] - reads[-3] >= 20  # confirmed, not guessed

        with pytest.raises(OverbrainerError) as cancelled:
            await t.command().cancel(t.rig.state(run_id))
        assert str(cancelled.value) == (
            f"run {run_id} has no pod left: nothing to cancel (the run is failed; see "
            f"`overbrainer events {run_id}`)"
        )

        # A run whose pod vanished is failed by cancel too.
        second = await t.detached_run(JobScript(steps=30))
        t.rig.fake.vanish(t.pod_id(second))
        with pytest.raises(OverbrainerError, match="has no pod left: nothing to cancel"):
            await t.command().cancel(t.rig.state(second))
        assert t.rig.state(second).run.state == "failed"
        assert "run.CancelRequested" not in _names(t, second)


async def test_attach_to_a_stopped_pod_points_to_pod_rm_when_its_target_recovers_none(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        # max_recoveries = 0 (one that recovers: tests/runpod/test_recovery_loopback.py).
        t.spec = t.spec.model_copy(update={"max_recoveries": 0})
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        await t.rig.context.client.pod_action(pod_id, "stop")
        with pytest.raises(OverbrainerError) as caught:
            await t.command().attach(t.rig.state(run_id))
        assert str(caught.value) == (
            f"pod {pod_id} of run {run_id} is stopped (EXITED): its job cannot be reached, "
            f"and a stopped pod still bills its disk; delete it with `overbrainer pod rm "
            f"{run_id}`"
        )
        assert t.rig.state(run_id).run.state == "running"


async def test_cancel_stops_the_job_collects_and_deletes_the_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=30))
        pod_id = t.pod_id(run_id)
        assert await t.command().cancel(t.rig.state(run_id)) == 0
        assert t.out().strip().splitlines()[-1] == f"train: run {run_id} cancelled"
        state = t.rig.state(run_id)
        assert state.run.state == "cancelled" and state.pod.status == "deleted"
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        assert _names(t, run_id)[-7:] == [
            "run.Detached",
            "run.CancelRequested",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
        assert "cancel requested" in t.story(run_id)


async def test_cancel_of_a_job_that_already_ended_leaves_it_and_its_pod_alone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=3))
        pod_id = t.pod_id(run_id)
        await trio.sleep(3600)  # the job ended meanwhile
        before = _names(t, run_id)
        assert await t.command().cancel(t.rig.state(run_id)) == 0
        assert t.out().strip().splitlines()[-1] == (
            f"train: the job of run {run_id} had already ended (exited): collect it with "
            f"`overbrainer train attach {run_id}`"
        )
        assert _names(t, run_id) == before
        assert t.rig.fake.status(pod_id) == "RUNNING"

        assert await t.command().attach(t.rig.state(run_id)) == 0
        assert t.rig.state(run_id).run.state == "succeeded"
        assert t.rig.fake.status(pod_id) == "TERMINATED"


# --- secrets ---------------------------------------------------------------------------


async def test_the_api_key_and_the_hf_token_reach_nothing_but_the_job(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        await t.train()
        run_id = t.run_id()
        machine = t.machine()
        assert machine.secrets_seen == {  # type: ignore[attr-defined]
            "HF_TOKEN": HF_CANARY,
            "HUGGING_FACE_HUB_TOKEN": HF_CANARY,
        }
        said = [
            t.out(),
            t.err(),
            json.dumps([r.to_json() for r in t.rig.store.history(run_id)]),
            json.dumps(t.rig.creates()),
            json.dumps(machine.spawned),
            t.story(run_id),
        ]
        for path in tmp_path.rglob("*"):
            if path.is_file() and "ssh" not in path.relative_to(tmp_path).parts:
                said.append(path.read_bytes().decode("utf-8", "replace"))
        for name, data in machine.files.items():
            said.append(name + data.decode("utf-8", "replace"))
        for text in said:
            for secret in (CANARY_KEY, HF_CANARY):
                assert secret[4:16] not in text
            assert "PRIVATE KEY" not in text


async def test_attach_past_the_deadline_collects_an_ended_job_but_deletes_a_running_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        ended = await t.detached_run(JobScript(steps=3))
        await trio.sleep(3 * 3600)  # the watchdog did not delete it (it should have)
        assert await t.command().attach(t.rig.state(ended)) == 0
        state = t.rig.state(ended)
        assert state.run.state == "succeeded" and state.pod.delete_reason == "retrieved"

        running = await t.detached_run(JobScript(steps=200))
        await trio.sleep(3 * 3600)
        start = trio.current_time()
        with pytest.raises(OverbrainerError, match="5 min past the deadline"):
            await t.command().attach(t.rig.state(running))
        state = t.rig.state(running)
        assert state.run.state == "failed" and state.pod.delete_reason == "deadline"
        assert trio.current_time() - start < 60


# --- what the user is told about the pod ----------------------------------------------


def _pod_view(keep: bool) -> PodView:
    return PodView(
        keep=keep,
        pod_id="k3x9abc",
        status="job_running",
        cost_per_hour=0.53,
        deadline="2026-01-01T16:00:00Z",
    )


def test_keep_pod_warns_of_no_time_limit_with_the_rate_and_pod_rm() -> None:
    assert messages.keep_warning(_pod_view(True), "r1") == (
        "--keep-pod: pod k3x9abc is kept with no time limit, at $0.53/h, even once the run "
        "ends; nothing deletes it but `overbrainer pod rm r1`"
    )
    unknown = dataclasses.replace(_pod_view(True), cost_per_hour=None)
    assert "at an hourly rate Runpod did not give" in messages.keep_warning(unknown, "r1")


def test_a_detached_run_names_attach_pod_rm_and_what_bounds_its_pod() -> None:
    assert messages.detached(_pod_view(False), "r1", 60) == (
        "interrupted: run r1 keeps running on pod k3x9abc ($0.53/h); follow it again with "
        "`overbrainer train attach r1`, or delete the pod with `overbrainer pod rm r1`. The "
        "watchdog deletes the pod 60 min after the job ends if its results are not "
        "retrieved, and by 2026-01-01T16:00:00Z in any case."
    )
    assert messages.detached(_pod_view(True), "r1", 60).endswith(
        "The pod is kept with no time limit (--keep-pod): "
        "`ssh -F runs/r1/ssh/config overbrainer-r1`."
    )


def test_a_kept_pod_is_reported_with_its_ssh_command() -> None:
    kept = (
        "pod k3x9abc kept (--keep-pod): `ssh -F runs/r1/ssh/config overbrainer-r1`; remove "
        "it with `overbrainer pod rm r1`; nothing deletes it automatically"
    )
    assert messages.report_line(_pod_view(True), Ending.kept, "r1") == kept
    assert messages.report_line(_pod_view(False), Ending.awaiting_retrieval, "r1") is None
    assert messages.report_line(_pod_view(False), Ending.deleted, "r1") is None


def test_a_loopback_api_is_polled_fast_and_runpod_at_the_spec_pace() -> None:
    assert timing_for("https://api.runpod.io/v2") == Timing.standard()
    fast = timing_for("http://127.0.0.1:8000/v2")
    assert fast.poll < 1 and fast.gone_interval < 1 and fast.gone_checks == 3
    assert timing_for("http://localhost:1/v2").poll == fast.poll
    assert timing_for("https://runpod.example/v2") == Timing.standard()
