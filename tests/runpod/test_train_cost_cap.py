"""A run's cost cap while ``train`` follows it, on trio's MockClock: the fake Runpod API
in-process, the pod's machine in memory with a scripted job. A $2/h pod with
``max_cost_usd = 1`` costs its cap 30 min after its creation; its watchdog (the real script,
tested on loopback in ``test_watchdog_cost_cap.py``) deletes it then, and the follower
stops the job first, brings its results so far home and deletes the pod (``cost_cap``)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.cli.main import main
from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.runpod import cost_cap
from overbrainer.runpod.pod_scripts import ENV_MAX_COST
from overbrainer.testing.pod_training import A40, JobScript, Train, training

CAP_SECONDS = 30 * 60.0  # $1 at $2/h


def _capped(t: Train, cap: float = 1.0, price: float = 2.0) -> None:
    fake = t.rig.fake
    # The catalog lists the type cheaper than its pods bill (a pod's real rate may differ
    # from the list price): the cap pays for the whole max_hours at the list price, so the
    # pod is created with its full bound, and the cap is reached at the rate it bills.
    listed = min(price, cap / t.spec.max_hours)
    fake.add_gpu_type(dataclasses.replace(fake.gpu_types[A40], price=listed, billed_price=price))
    t.spec = t.spec.model_copy(update={"max_cost_usd": cap})


async def test_following_stops_at_the_cap_retrieves_the_results_so_far_and_deletes_the_pod(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    async with training(tmp_path) as t:
        _capped(t)
        # 100 min of training, saving its adapter every 10 min: the cap comes first.
        t.network.script = JobScript(steps=100, step_seconds=60.0, ends=False, saves_every=10)
        with pytest.raises(OverbrainerError) as caught:
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        state = t.rig.state(run_id)
        # The pod was asked for with its cap, for its watchdog.
        (body,) = t.rig.creates()
        assert isinstance(body["env"], dict) and body["env"][ENV_MAX_COST] == "1"
        (sent,) = t.rig.events(run_id, ev.AttemptSent)
        assert isinstance(sent, ev.AttemptSent) and sent.max_cost_usd == 1.0
        # Deleted once the cap was near (95 %: 28.5 min), before the cap (30 min), by
        # overbrainer, with the reason cost_cap.
        (created,) = t.request_times("POST", "/pods")
        (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
        assert 0.95 * CAP_SECONDS <= deleted - created < CAP_SECONDS
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        assert state.pod.delete_reason == "cost_cap" and state.pod.deleted_by == "client"
        assert state.pod.cost_cap_near
        # The run failed, saying why; its results so far are home and verified.
        assert state.run.state == "failed"
        assert state.run.message is not None and state.run.message.startswith(
            f"cost_cap: pod {pod_id} was about to reach its cost cap (max_cost_usd = $1.00 "
            "at $2.00/h, reached 30 min after its creation)"
        )
        assert state.run.artifacts is not None and state.run.note is None, state.run.note
        home = tmp_path / "runs" / run_id
        assert (home / "output" / "adapter_model.safetensors").read_text() == "step 20\n"
        lines = (home / "metrics.jsonl").read_text().splitlines()
        assert len(lines) >= 28  # begin, then a step a minute up to the stop
        error = str(caught.value)
        assert error.startswith(f"run {run_id} failed: cost_cap: pod {pod_id}")
        assert error.endswith(
            "raise max_cost_usd of target gpu in overbrainer.toml if the job needs more"
        )
        names = t.rig.names(run_id)
        assert names.index("pod.CostCapNear") < names.index("pod.Deleting")
        # The results came home before the pod was deleted.
        assert names[-5:] == [
            "pod.CostCapNear",
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
        ]
        story = t.story(run_id)
        assert f"pod {pod_id} has cost 95 % of its cap of $1.00 at $2.00/h (cost_cap_near)" in story
        assert f"deleting pod {pod_id} (cost cap)" in story
        assert "run failed: cost_cap: " in story
        out = t.out() + t.err()
        assert "is about to reach its cost cap" in out
        assert t.out().strip().splitlines()[-1].startswith(f"train: run {run_id} failed")
    capsys.readouterr()
    assert main(["-C", str(tmp_path), "runs", "show", run_id]) == 0
    shown = capsys.readouterr().out
    assert "cost_cap" in shown


async def test_attach_past_the_cap_to_a_running_job_ends_it_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _capped(t)
        run_id = await t.detached_run(JobScript(steps=100, step_seconds=60.0, ends=False))
        await trio.sleep(29 * 60)  # overbrainer was gone: only the watchdog bound the pod
        attached = trio.current_time()
        with pytest.raises(OverbrainerError, match="failed: cost_cap: "):
            await t.command().attach(t.rig.state(run_id))
        pod_id = t.pod_id(run_id)
        (deleted,) = t.request_times("DELETE", f"/pods/{pod_id}")
        assert deleted - attached < 60
        state = t.rig.state(run_id)
        assert state.pod.delete_reason == "cost_cap" and state.run.artifacts is not None


async def test_a_kept_pod_has_no_cost_cap_and_says_so(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _capped(t)
        t.network.script = JobScript(steps=50, step_seconds=60.0)  # 50 min: past the cap
        assert await t.train(keep=True) == 0
        run_id = t.run_id()
        state = t.rig.state(run_id)
        assert state.run.state == "succeeded" and state.pod.status == "kept"
        assert t.request_times("DELETE", f"/pods/{t.pod_id(run_id)}") == []
        assert "pod.CostCapNear" not in t.rig.names(run_id)
        assert (
            "is kept with no time limit and no cost limit (max_cost_usd = $1.00 is not "
            "enforced on a kept pod)" in t.err() + t.out()
        )


def test_a_run_without_a_cap_has_no_cost_bound() -> None:
    from overbrainer.events.aggregate import PodView

    pod = PodView(pod_id="p", cost_per_hour=2.0, created_at="2026-01-01T10:00:00Z")
    pod.attempts.append({"pod_id": "p", "max_cost_usd": None})
    assert cost_cap.follow_until(pod) is None


async def test_a_pod_its_watchdog_deleted_at_the_cap_is_recorded_so_when_attached_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _capped(t)
        run_id = await t.detached_run(JobScript(steps=100, step_seconds=60.0, ends=False))
        pod_id = t.pod_id(run_id)
        # overbrainer was gone: the pod's watchdog deleted it at its cap (30 min at $2/h).
        await trio.sleep(31 * 60)
        t.rig.fake.vanish(pod_id)
        with contextlib.suppress(OverbrainerError):
            await t.command().attach(t.rig.state(run_id))
        state = t.rig.state(run_id)
        deleted = t.rig.events(run_id, ev.PodDeleted)
        assert [(e.by, e.reason) for e in deleted if isinstance(e, ev.PodDeleted)] == [
            ("watchdog", "cost_cap")
        ]
        assert state.run.state == "failed" and state.pod.delete_reason == "cost_cap"
        assert "reached its cost cap and its watchdog deleted it" in (state.run.message or "")
        assert f"pod {pod_id} deleted (by its watchdog at its cost cap)" in t.story(run_id)
        assert "its watchdog deleted it at its cost cap: max_cost_usd = $1.00 at $2.00/h" in (
            t.out() + t.err()
        )


async def test_a_pod_gone_before_its_bounds_is_found_gone_not_blamed_on_its_watchdog(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        _capped(t)
        run_id = await t.detached_run(JobScript(steps=100, step_seconds=60.0, ends=False))
        pod_id = t.pod_id(run_id)
        await trio.sleep(10 * 60)
        t.rig.fake.vanish(pod_id)  # Runpod lost it: no bound had passed
        with contextlib.suppress(OverbrainerError):
            await t.command().attach(t.rig.state(run_id))
        deleted = t.rig.events(run_id, ev.PodDeleted)
        assert [(e.by, e.reason) for e in deleted if isinstance(e, ev.PodDeleted)] == [
            ("found_gone", None)
        ]
        assert t.rig.state(run_id).pod.delete_reason is None
