"""A pod is deleted in one module (``overbrainer.targets.runpod.delete``), and every reason it
records is produced by some path: one scenario per reason, on trio's MockClock."""

import ast
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import get_args

import pytest
import trio
import trio.testing

import overbrainer
from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.targets.runpod.podrm import remove_run_pods
from overbrainer.targets.runpod.provision import provision
from overbrainer.testing.fake_executor import MachinePlan, PodRig, pod_rig, runpod_target
from overbrainer.testing.pod_training import JobScript, Train, training

A40 = "NVIDIA A40"
RTX = "NVIDIA GeForce RTX 4090"
PACKAGE = Path(overbrainer.__file__).parent


def test_only_the_delete_module_calls_the_clients_deletes_of_pods_and_clusters() -> None:
    callers = set()
    for path in PACKAGE.rglob("*.py"):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue  # the fake Runpod server answers deletes; it sends none
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("delete_pod", "delete_cluster")
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "client"
            ):
                callers.add(path.relative_to(PACKAGE).as_posix())
    assert callers == {"targets/runpod/delete.py"}


def reasons(events: list[ev.Event]) -> list[str]:
    return [e.reason for e in events if isinstance(e, ev.PodDeleting)]


# --- one path per reason ------------------------------------------------------------------


async def _walk(rig: PodRig, run_id: str, *types: str) -> None:
    await provision(rig.context, run_id, runpod_target(types), keep=False)


async def not_ready(tmp_path: Path) -> list[str]:
    """A pod that never answers SSH: deleted, the next GPU type tried."""
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        rig.plans[0] = MachinePlan(no_machine=True)
        await _walk(rig, run_id, RTX, A40)
        return reasons(rig.events(run_id, ev.PodDeleting))


async def refused(tmp_path: Path) -> list[str]:
    """A watchdog that refuses to guard its pod."""
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        rig.plans[0] = MachinePlan(verdict=b"failed cannot read the pod: HTTP 403\n")
        with pytest.raises(OverbrainerError):
            await _walk(rig, run_id, A40)
        return reasons(rig.events(run_id, ev.PodDeleting))


async def duplicate(tmp_path: Path) -> list[str]:
    """An ambiguous create a proxy sent twice: the second pod is a duplicate."""
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        rig.fake.fail_next("POST /pods", 502, succeed=True)
        assert rig.spy is not None
        rig.spy.duplicate_creates = 1
        await _walk(rig, run_id, A40)
        return reasons(rig.events(run_id, ev.PodDeleting))


async def _while_booting(rig: PodRig, run_id: str, act: Callable[[], Awaitable[None]]) -> None:
    """Provision a pod that never gets ready, and ``act`` once it is created."""
    rig.plans[0] = MachinePlan(no_machine=True)

    async def when_created() -> None:
        while rig.state(run_id).pod.pod_id is None:
            await trio.sleep(1)
        await act()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_created)
        with pytest.raises(OverbrainerError):
            await _walk(rig, run_id, A40)


async def interrupted(tmp_path: Path) -> list[str]:
    """Ctrl-C while the pod boots."""
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()

        async def ctrl_c() -> None:
            rig.interrupts.interrupt()

        await _while_booting(rig, run_id, ctrl_c)
        return reasons(rig.events(run_id, ev.PodDeleting))


async def cancelled(tmp_path: Path) -> list[str]:
    """``train cancel`` asked through the log while the pod boots."""
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()

        async def ask() -> None:
            await rig.journal.append(run_id, [ev.CancelRequested(relay="asked")])

        await _while_booting(rig, run_id, ask)
        return reasons(rig.events(run_id, ev.PodDeleting))


async def _trained(t: Train) -> list[str]:
    return reasons(t.rig.events(t.run_id(), ev.PodDeleting))


async def retrieved(tmp_path: Path) -> list[str]:
    """A whole run: its results home, its pod deleted."""
    async with training(tmp_path) as t:
        assert await t.train() == 0
        return await _trained(t)


async def failed(tmp_path: Path) -> list[str]:
    """A job that cannot start on its ready pod."""
    async with training(tmp_path) as t:
        t.network.spawn_error = "setsid is not installed on this host"
        with pytest.raises(OverbrainerError):
            await t.train()
        return await _trained(t)


async def deadline(tmp_path: Path) -> list[str]:
    """A job still followed past its pod's deadline."""
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        with pytest.raises(OverbrainerError):
            await t.train()
        return await _trained(t)


async def cost_cap(tmp_path: Path) -> list[str]:
    """A job still followed as its pod nears its cost cap."""
    async with training(tmp_path) as t:
        # Its pods bill $0.40/h, more than the catalog's list price, which lets the cap pay
        # for the whole max_hours: created with its full bound, the cap comes at 15 min.
        fake = t.rig.fake
        (gpu,) = t.spec.gpu_types
        billed = fake.gpu_prices[gpu]
        listed = 0.1 / t.spec.max_hours
        cheaper = dataclasses.replace(fake.gpu_types[gpu], price=listed, billed_price=billed)
        fake.add_gpu_type(cheaper)
        t.spec = t.spec.model_copy(update={"max_cost_usd": 0.1})  # 15 min at $0.40/h
        t.network.script = JobScript(steps=100, step_seconds=120.0, ends=False)
        with pytest.raises(OverbrainerError):
            await t.train()
        return await _trained(t)


async def requested(tmp_path: Path) -> list[str]:
    """``pod rm`` of a run whose pod was kept."""
    async with training(tmp_path) as t:
        assert await t.train(keep=True) == 0
        removal = await remove_run_pods(t.rig.context, t.run_id(), force=False)
        assert len(removal.deleted) == 1 and not removal.problems()
        return await _trained(t)


async def lost(tmp_path: Path) -> list[str]:
    """A pod stopped under its job: deleted before the run is recovered on a new pod."""
    async with training(tmp_path) as t:
        t.network.script = JobScript(steps=60, step_seconds=60.0)

        async def stop_the_pod() -> None:
            while not t.network.machines or not t.machine().spawned:
                await trio.sleep(5)
            await trio.sleep(600)
            await t.rig.context.client.pod_action(t.rig.fake.live_pods()[0].id, "stop")
            t.machine().down = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_the_pod)
            # Whatever becomes of the recovery (its new pod on the machine now down).
            with contextlib.suppress(OverbrainerError):
                await t.train()
        return await _trained(t)


PATHS: dict[str, Callable[[Path], Awaitable[list[str]]]] = {
    "retrieved": retrieved,
    "interrupted": interrupted,
    "not_ready": not_ready,
    "duplicate": duplicate,
    "deadline": deadline,
    "cost_cap": cost_cap,
    "refused": refused,
    "requested": requested,
    "cancelled": cancelled,
    "failed": failed,
    "lost": lost,
}


def test_every_reason_has_its_path() -> None:
    assert sorted(PATHS) == sorted(get_args(ev.DeleteReason))


@pytest.mark.parametrize("reason", sorted(PATHS))
async def test_a_path_deletes_with_its_reason(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, reason: str
) -> None:
    recorded = await PATHS[reason](tmp_path)
    assert recorded[:1] == [reason]
