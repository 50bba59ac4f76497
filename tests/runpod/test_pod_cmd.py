"""``pod ls`` and ``pod rm``: every note and every rule on trio's MockClock (the fake API
in-process, the real store), then the real commands against the fake API on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor
from overbrainer.events.ids import new_run_id
from overbrainer.events.store import RunStore
from overbrainer.runpod.client import CreateCluster, CreatePod, RunpodClient
from overbrainer.runpod.models import Pod
from overbrainer.runpod.orphans import Note
from overbrainer.runpod.pod_scripts import RUN_MARKER
from overbrainer.targets.runpod.podrm import (
    deleted_line,
    list_rows,
    remove_run_pods,
    row_json,
    table,
)
from overbrainer.targets.runpod.provision import provision
from overbrainer.testing.fake_executor import CANARY_KEY, PINNED_IMAGE, MachinePlan
from overbrainer.testing.pod_training import JobScript, Train, training, write_project
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback

A40 = "NVIDIA A40"
ROOT = Path(__file__).resolve().parents[2]
STRANGER = "20250505-050505-beef"  # a run ID no store here knows


async def _extra_pod(t: Train, name: str, marker: str | None) -> str:
    """A pod created behind overbrainer's back (a stray, a pod of another checkout…)."""
    t.rig.plans[len(t.rig.fake.pods)] = MachinePlan(no_machine=True)
    return (await t.rig.create_pod(name, marker)).id


# --- pod ls ----------------------------------------------------------------------------


async def test_pod_ls_gives_every_kind_of_pod_its_note_and_records_gone_ones(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path, delete_confirm=30.0) as t:
        in_progress = await t.detached_run(JobScript(steps=600))
        await t.train(keep=True)
        kept = t.run_id()
        t.network.script = JobScript(steps=1)
        t.network.downloads = "fail"
        with pytest.raises(OverbrainerError):
            await t.train()
        awaiting = t.run_id()
        t.network.downloads = None
        t.rig.fake.linger_next_delete(10**9)
        with pytest.raises(OverbrainerError, match="ended, but not its pod"):
            await t.train()
        lingering = t.run_id()
        vanished = await t.detached_run(JobScript(steps=600))
        t.rig.fake.vanish(t.pod_id(vanished))
        stray = await _extra_pod(t, f"overbrainer-{kept}-9", kept)
        foreign = await _extra_pod(t, f"overbrainer-{STRANGER}-1", STRANGER)
        unmarked = await _extra_pod(t, "overbrainer-handmade", None)
        await _extra_pod(t, "my-notebook", None)  # not overbrainer's: not listed

        found = await list_rows(t.rig.context, await t.rig.journal.may_bill())
        notes = {(row.run_id, row.pod_id): row.note for row in found}
        assert notes == {
            (in_progress, t.pod_id(in_progress)): Note.in_progress,
            (kept, t.pod_id(kept)): Note.kept,
            (awaiting, t.pod_id(awaiting)): Note.awaiting_retrieval,
            (lingering, t.pod_id(lingering)): Note.ended_not_deleted,
            (kept, stray): Note.stray,
            (STRANGER, foreign): Note.not_in_store,
            (None, unmarked): Note.no_marker,
            (vanished, t.pod_id(vanished)): Note.gone,
        }
        # The gone pod was confirmed (three 404s, then a listing) and recorded deleted.
        state = t.rig.state(vanished)
        assert state.pod.status == "deleted" and state.pod.deleted_by == "found_gone"
        assert f"pod {t.pod_id(vanished)} deleted (found gone)" in t.story(vanished)

        by_pod = {row.pod_id: row for row in found}
        data = row_json(by_pod[t.pod_id(kept)])
        assert data["run"] == kept and data["status"] == "RUNNING" and data["gpu"] == A40
        assert data["cost_per_hour"] == pytest.approx(0.40) and data["note"] == "kept"
        assert isinstance(data["created"], str) and data["created"].endswith("Z")
        assert row_json(by_pod[t.pod_id(vanished)])["status"] == "-"
        text = table(found).splitlines()
        assert text[0].split() == [
            "RUN", "POD", "STATUS", "GPU", "$/H", "CREATED", "STARTED", "BY", "NOTE"
        ]  # fmt: skip
        # Who started each recorded run, and where; nobody known for a run not in the store.
        origin = t.rig.store.origin(kept)
        assert origin is not None
        owner = f"{origin.actor['user']}@{origin.actor['host']}"
        assert data["started_by"] == owner
        assert by_pod[foreign].started_by is None and by_pod[unmarked].started_by is None
        assert any(f" {owner} " in line and line.endswith("in progress") for line in text)
        assert any(
            line.startswith(f"{kept}  {t.pod_id(kept)}") and line.endswith("kept") for line in text
        )
        assert any(line.startswith("-") and "no marker" in line for line in text)
        # Listing never deletes anything.
        assert not [
            r
            for r in t.rig.fake.requests
            if r.method == "DELETE"
            and r.path in (f"/pods/{stray}", f"/pods/{foreign}", f"/pods/{unmarked}")
        ]


async def test_a_recorded_pod_missing_from_one_listing_is_not_recorded_gone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=600))
        pod_id = t.pod_id(run_id)
        t.rig.fake.fail_next("GET /pods", 200, raw_body=b'{"pods": []}')
        found = await list_rows(t.rig.context, await t.rig.journal.may_bill())
        assert [(row.pod_id, row.note) for row in found] == [(pod_id, Note.in_progress)]
        assert t.rig.state(run_id).pod.status == "job_running"
        assert "pod.Deleted" not in t.rig.names(run_id)


# --- pod rm ----------------------------------------------------------------------------


async def test_pod_rm_of_a_run_not_in_the_store_needs_force(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        foreign = await _extra_pod(t, f"overbrainer-{STRANGER}-1", STRANGER)
        await trio.sleep(3600)
        with pytest.raises(OverbrainerError) as caught:
            await remove_run_pods(t.rig.context, STRANGER, force=False)
        assert str(caught.value) == (
            f"run {STRANGER} is not in this store: another checkout may own it (`overbrainer "
            "pod ls` shows its pods as not in this store). To delete its pods anyway: "
            f"`overbrainer pod rm {STRANGER} --force`"
        )
        assert t.rig.fake.status(foreign) == "RUNNING"

        removal = await remove_run_pods(t.rig.context, STRANGER, force=True)
        (deleted,) = removal.deleted
        assert t.rig.fake.status(foreign) == "TERMINATED"
        assert deleted.uptime_seconds is not None and 3600 <= deleted.uptime_seconds < 3700
        assert deleted.spend == pytest.approx(0.40 * deleted.uptime_seconds / 3600)
        assert deleted_line(STRANGER, deleted) == (
            f"pod rm: deleted pod {foreign} of run {STRANGER} after 1h00m, spend $0.40"
        )


async def test_pod_rm_refuses_a_run_still_starting_its_pod_without_force(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.rig.new_run()
        ready = await provision(t.rig.context, run_id, t.spec, keep=False)
        with pytest.raises(OverbrainerError, match="is still starting its pod") as caught:
            await remove_run_pods(t.rig.context, run_id, force=False)
        assert f"`overbrainer pod rm {run_id} --force`" in str(caught.value)
        assert t.rig.fake.status(ready.pod_id) == "RUNNING"

        removal = await remove_run_pods(t.rig.context, run_id, force=True)
        assert [d.pod_id for d in removal.deleted] == [ready.pod_id]
        assert t.rig.fake.status(ready.pod_id) == "TERMINATED"
        state = t.rig.state(run_id)
        assert state.run.state == "failed" and state.pod.deleted_by == "pod_rm"
        assert state.pod.delete_reason == "requested"


async def test_pod_rm_refuses_a_run_in_progress_whose_pod_is_not_recorded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.rig.new_run()
        await t.rig.journal.append(run_id, [ev.JobStarted(job_dir="runs/x", pid=7)])
        mystery = await _extra_pod(t, f"overbrainer-{run_id}-1", run_id)
        with pytest.raises(OverbrainerError, match="no pod of it is recorded"):
            await remove_run_pods(t.rig.context, run_id, force=False)
        assert t.rig.fake.status(mystery) != "TERMINATED"
        removal = await remove_run_pods(t.rig.context, run_id, force=True)
        assert [d.pod_id for d in removal.deleted] == [mystery]
        assert t.rig.fake.status(mystery) == "TERMINATED"
        assert t.rig.state(run_id).run.state == "failed"


async def test_pod_rm_of_a_run_in_progress_keeps_its_training_pod_and_deletes_the_others(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        run_id = await t.detached_run(JobScript(steps=600))
        pod_id = t.pod_id(run_id)
        stray = await _extra_pod(t, f"overbrainer-{run_id}-7", run_id)

        removal = await remove_run_pods(t.rig.context, run_id, force=False)
        assert removal.kept == pod_id and [d.pod_id for d in removal.deleted] == [stray]
        assert removal.problems() == [
            f"run {run_id} is in progress on pod {pod_id} ($0.40/h): kept it (its other pods "
            f"deleted: {stray}). Stop the run with `overbrainer train cancel {run_id}`, or "
            f"delete its pod anyway with `overbrainer pod rm {run_id} --force`"
        ]
        assert t.rig.fake.status(stray) == "TERMINATED"
        assert t.rig.fake.status(pod_id) == "RUNNING"
        assert t.rig.state(run_id).run.state == "running"

        removal = await remove_run_pods(t.rig.context, run_id, force=True)
        assert [d.pod_id for d in removal.deleted] == [pod_id] and removal.problems() == []
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        state = t.rig.state(run_id)
        assert state.run.state == "failed"
        assert state.run.message == (
            f"its pods were deleted by `overbrainer pod rm {run_id} --force`"
        )
        assert not (tmp_path / "runs" / run_id / "ssh" / "id_ed25519").exists()


async def test_pod_rm_deletes_a_kept_pod_of_an_ended_run_and_prints_uptime_and_spend(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        await t.train(keep=True)
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        await trio.sleep(2 * 3600)  # nothing deletes a kept pod, even past max_hours
        assert t.rig.fake.status(pod_id) == "RUNNING"

        removal = await remove_run_pods(t.rig.context, run_id, force=False)
        (deleted,) = removal.deleted
        assert t.rig.fake.status(pod_id) == "TERMINATED"
        state = t.rig.state(run_id)
        assert state.pod.deleted_by == "pod_rm" and state.run.state == "succeeded"
        assert deleted.uptime_seconds == state.pod.uptime_seconds
        assert deleted.spend == state.pod.spend
        assert deleted_line(run_id, deleted) == (
            f"pod rm: deleted pod {pod_id} of run {run_id} after 2h05m, spend $0.84"
        )
        assert f"pod {pod_id} deleted (by pod rm) after 2h05m" in t.story(run_id)

        again = await remove_run_pods(t.rig.context, run_id, force=False)
        assert again.deleted == () and again.problems() == []


async def test_pod_rm_tries_every_pod_even_when_one_fails(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with training(tmp_path) as t:
        t.network.downloads = "fail"
        t.network.script = JobScript(exit_code=2)
        with pytest.raises(OverbrainerError):
            await t.train()
        run_id = t.run_id()
        pod_id = t.pod_id(run_id)
        stray = await _extra_pod(t, f"overbrainer-{run_id}-5", run_id)
        first, second = sorted([pod_id, stray])
        t.rig.fake.fail_next("DELETE /pods/{id}", 403, pod_id=first)

        removal = await remove_run_pods(t.rig.context, run_id, force=False)
        assert [d.pod_id for d in removal.deleted] == [second]
        (problem,) = removal.problems()
        assert f"cannot delete pod {first} of run {run_id}" in problem
        assert "may still bill" in problem
        assert t.rig.fake.status(second) == "TERMINATED"
        assert t.rig.fake.status(first) != "TERMINATED"

        # Again: the one left is deleted now.
        removal = await remove_run_pods(t.rig.context, run_id, force=False)
        assert [d.pod_id for d in removal.deleted] == [first]
        assert t.rig.fake.live_pods() == []


# --- the real commands -----------------------------------------------------------------


async def _cli(project: Path, base_url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERBRAINER_")}
    env.update(
        OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
        OVERBRAINER_RUNPOD__BASE_URL=base_url,
        PYTHONPATH=str(ROOT),
    )
    return await trio.run_process(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


@dataclass
class Loopback:
    """A project, its store, and the fake API it reaches on loopback."""

    project: Path
    store: RunStore
    fake: FakeRunpod
    base_url: str

    async def cli(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return await _cli(self.project, self.base_url, *args)

    async def ended_run_with_pod(self, client: RunpodClient, run_id: str, n: int = 1) -> Pod:
        """Run ``run_id`` ended (failed) with its pod (attempt ``n``) still on the account,
        as its log records."""
        pod = await client.create_pod(
            CreatePod(
                name=f"overbrainer-{run_id}-{n}",
                image=PINNED_IMAGE,
                gpu_type=A40,
                gpu_count=1,
                disk_gb=20,
                env={RUN_MARKER: run_id},
            )
        )
        self.store.create(
            ev.RunCreated(
                run_id=run_id, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
            )
        )
        self.store.append(
            run_id,
            lambda _s: [
                ev.AttemptSent(
                    n=n, pod_name=pod.name, gpu_type=A40, deadline="2099-01-01T00:00:00Z"
                ),
                ev.AttemptResolved(n=n, result="created", pod_id=pod.id),
                ev.PodCreated(pod_id=pod.id, gpu_type=A40, cost_per_hour=0.4),
                ev.RunEnded(state="failed", message="boom"),
            ],
        )
        return pod

    def assert_clean(self, *done: subprocess.CompletedProcess[bytes]) -> None:
        """No command showed the key or a traceback."""
        for one in done:
            assert CANARY_KEY.encode()[4:16] not in one.stdout + one.stderr
            assert b"Traceback" not in one.stderr


@asynccontextmanager
async def loopback(tmp_path: Path) -> AsyncIterator[Loopback]:
    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    fake = FakeRunpod(provisioning_seconds=0.1, starting_seconds=0.1)
    fake.add_account(CANARY_KEY)
    store = RunStore(None, project, Actor.here("test"))
    try:
        async with serve_loopback(fake) as base_url:
            yield Loopback(project, store, fake, base_url)
    finally:
        store.close()


async def test_pod_ls_and_pod_rm_through_the_real_command(tmp_path: Path) -> None:
    run_id = new_run_id()
    async with loopback(tmp_path) as w:
        async with RunpodClient(CANARY_KEY, w.base_url) as client:
            pod = await w.ended_run_with_pod(client, run_id)
        listed = await w.cli("pod", "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
        assert row["run"] == run_id and row["pod"] == pod.id
        assert row["note"] == "ended but not deleted" and row["gpu"] == A40

        table_out = await w.cli("pod", "ls")
        assert table_out.returncode == 0, table_out.stderr
        lines = table_out.stdout.decode().splitlines()
        assert lines[0].split()[:3] == ["RUN", "POD", "STATUS"]
        assert lines[1].startswith(f"{run_id}  {pod.id}  RUNNING")
        assert lines[1].endswith("ended but not deleted")

        bad = await w.cli("pod", "rm", pod.id)
        assert bad.returncode == 2 and b"is not a run ID" in bad.stderr
        assert b"never a pod ID" in bad.stderr
        assert w.fake.status(pod.id) == "RUNNING"

        removed = await w.cli("pod", "rm", run_id)
        assert removed.returncode == 0, removed.stderr
        out = removed.stdout.decode()
        assert out.startswith(f"pod rm: deleted pod {pod.id} of run {run_id} after ")
        assert ", spend $" in out
        assert b"pod.Deleted" in removed.stderr
        assert w.fake.status(pod.id) == "TERMINATED"

        again = await w.cli("pod", "rm", run_id)
        assert again.returncode == 0
        assert again.stdout.decode().strip() == f"pod rm: run {run_id} has no pod left"

        unknown = await w.cli("pod", "rm", STRANGER)
        assert unknown.returncode == 1
        assert b"is not in this store" in unknown.stderr
        w.assert_clean(listed, table_out, removed, again, unknown)
        state = w.store.get(run_id)
        assert state.pod.deleted_by == "pod_rm"


async def test_pod_ls_and_pod_rm_of_a_cluster_through_the_real_command(tmp_path: Path) -> None:
    run_id = new_run_id()
    async with loopback(tmp_path) as w:
        async with RunpodClient(CANARY_KEY, w.base_url) as client:
            cluster = await client.create_cluster(
                CreateCluster(
                    name=f"overbrainer-{run_id}-1",
                    image=PINNED_IMAGE,
                    gpu_type=A40,
                    gpus_per_pod=1,
                    pod_count=2,
                    disk_gb=20,
                    env={RUN_MARKER: run_id},
                )
            )
            # The run ended with a pod of its own as well (its log records the pod).
            pod = await w.ended_run_with_pod(client, run_id, n=2)
            await trio.sleep(0.5)  # ranks assigned
            members = await client.cluster_pods(cluster.id)
        assert members is not None
        ids = [p.id for p in members]

        listed = await w.cli("pod", "ls", "--json")
        assert listed.returncode == 0, listed.stderr
        alone, row = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (alone["pod"], alone["cluster"]) == (pod.id, None)
        assert (row["run"], row["pod"], row["cluster"]) == (run_id, None, cluster.id)
        assert row["note"] == "ended but not deleted" and row["nodes"] == 2
        assert [(m["pod"], m["rank"]) for m in row["members"]] == [(ids[0], 0), (ids[1], 1)]

        shown = await w.cli("pod", "ls")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.decode().splitlines()
        assert lines[1].startswith(f"{run_id}  {pod.id}")
        assert lines[2].startswith(f"{run_id}  cluster {cluster.id}")
        assert [line.split()[0] for line in lines[3:]] == ids

        refused = await w.cli("pod", "rm", ids[1])
        assert refused.returncode == 2
        assert f"is a member of cluster {cluster.id}".encode() in refused.stderr
        assert f"`overbrainer pod rm {run_id}`".encode() in refused.stderr
        assert len(w.fake.live_clusters()) == 1

        removed = await w.cli("pod", "rm", run_id)
        assert removed.returncode == 0, removed.stderr
        first, second = removed.stdout.decode().splitlines()
        assert first.startswith(
            f"pod rm: deleted cluster {cluster.id} of run {run_id} (pods {', '.join(ids)}) after "
        )
        assert second.startswith(f"pod rm: deleted pod {pod.id} of run {run_id} after ")
        assert w.fake.live_clusters() == [] and w.fake.live_pods() == []
        assert all(w.fake.status(pod_id) == "TERMINATED" for pod_id in ids)

        empty = await w.cli("pod", "ls", "--json")
        assert empty.returncode == 0 and empty.stdout == b""
        w.assert_clean(listed, shown, refused, removed, empty)


async def test_pod_ls_gives_up_on_an_unreachable_api_within_seconds_naming_what_to_check(
    tmp_path: Path,
) -> None:
    import socket
    import time

    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    # A port nothing listens on (refused), and a server that takes the connection and never
    # answers (a proxy or firewall that swallows requests).
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        # Refused: said at once, not retried, naming the address and where it is set.
        url = f"http://127.0.0.1:{refused_port}/v2"
        started = time.monotonic()
        listed = await _cli(project, url, "pod", "ls")
        took = time.monotonic() - started
        assert listed.returncode == 1
        assert took < 9, took
        assert listed.stderr.decode() == (
            f"error: cannot reach Runpod (127.0.0.1:{refused_port} refused the connection): "
            f"check the network and the Runpod API's address ({url}: [runpod] base_url, or "
            "OVERBRAINER_RUNPOD__BASE_URL); nothing was changed\n"
        )
        # Silent: retried within seconds, each wait over a second said as it starts.
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v2"
        started = time.monotonic()
        listed = await _cli(project, url, "pod", "ls")
        took = time.monotonic() - started
        assert listed.returncode == 1
        # One 5 s read timeout and the start on a loaded machine; retries would add 30 s.
        assert took < 15, took
        *waits, err = listed.stderr.decode().splitlines()
        assert err.startswith("error: cannot list pods: ReadTimeout"), err
        assert "check this machine's network connection and the Runpod API's address" in err
        assert f"({url}: [runpod] base_url, or OVERBRAINER_RUNPOD__BASE_URL)" in err
        assert waits and all(
            w == "waiting for 127.0.0.1 to answer (to list pods)" for w in waits
        ), waits
        assert "Traceback" not in listed.stderr.decode()
    finally:
        silent.close()


async def _keyless(project: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The real command with no Runpod key anywhere (nor any other Runpod setting)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERBRAINER_")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="200")
    return await trio.run_process(
        [sys.executable, "-m", "overbrainer", "-C", str(project), *args],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def test_pod_rm_and_billing_of_runs_that_never_had_a_pod_say_so_without_a_key(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    ids: set[str] = set()
    while len(ids) < 3:
        ids.add(new_run_id())
    local, refused, pods = sorted(ids)
    store = RunStore(None, project, Actor.here("test"))
    try:
        store.create(
            ev.RunCreated(
                run_id=local, target="box", kind="local", remote_dir="r", settings_digest="d"
            )
        )
        store.append(local, lambda _s: [ev.RunEnded(state="failed", message="boom")])
        store.create(
            ev.RunCreated(
                run_id=refused, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
            )
        )
        store.append(
            refused,
            lambda _s: [
                ev.AttemptSent(n=1, pod_name=f"overbrainer-{refused}-1", gpu_type=A40),
                ev.AttemptResolved(n=1, result="insufficient_balance"),
                ev.RunEnded(state="failed", message="balance too low"),
            ],
        )
    finally:
        store.close()

    removed = await _keyless(project, "pod", "rm", local)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.decode() == (
        f"pod rm: run {local} never had a pod (it ran on target `box` (local), not on "
        "Runpod); nothing to delete\n"
    )
    removed = await _keyless(project, "pod", "rm", refused)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.decode() == (
        f"pod rm: run {refused} never had a pod (it ended (failed), and Runpod made no pod "
        "for its create); nothing to delete\n"
    )
    billed = await _keyless(project, "pod", "billing", local, refused)
    assert billed.returncode == 0, billed.stderr
    assert billed.stdout.decode().splitlines() == [
        f"pod billing: run {local} never had a pod (it ran on target `box` (local), not on "
        "Runpod): nothing billed",
        f"pod billing: run {refused} never had a pod (it ended (failed), and Runpod made no "
        "pod for its create): nothing billed",
    ]
    every = await _keyless(project, "pod", "billing")
    assert every.returncode == 0, every.stderr
    assert every.stdout.decode() == (
        "pod billing: no pod of this project's runs is gone with its billing still to read\n"
    )
    # A run the store does not hold is refused from the log too, with the way on.
    stranger = await _keyless(project, "pod", "rm", STRANGER)
    assert stranger.returncode == 1
    assert f"run {STRANGER} is not in this store" in stranger.stderr.decode()
    assert b"OVERBRAINER_RUNPOD__API_KEY" not in stranger.stderr

    # A run that had a pod: only Runpod can tell, so the key is asked for.
    store = RunStore(None, project, Actor.here("test"))
    try:
        store.create(
            ev.RunCreated(
                run_id=pods, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
            )
        )
        store.append(
            pods,
            lambda _s: [
                ev.AttemptSent(n=1, pod_name=f"overbrainer-{pods}-1", gpu_type=A40),
                ev.AttemptResolved(n=1, result="created", pod_id="abc123xyz"),
                ev.PodCreated(
                    pod_id="abc123xyz",
                    gpu_type=A40,
                    cost_per_hour=0.4,
                    created_at="2026-01-01T00:00:00Z",
                ),
                ev.PodDeleting(pod_id="abc123xyz", reason="failed"),
                ev.PodDeleted(pod_id="abc123xyz", by="client", uptime_seconds=60, spend=0.01),
                ev.RunEnded(state="failed", message="boom"),
            ],
        )
    finally:
        store.close()
    # Its pod is gone, and what Runpod billed for it is still to read.
    for args in (("pod", "rm", pods), ("pod", "billing", pods, local)):
        asked = await _keyless(project, *args)
        assert asked.returncode != 0, args
        assert b"OVERBRAINER_RUNPOD__API_KEY: not set" in asked.stderr, asked.stderr


async def test_pod_rm_with_runpod_out_of_reach_fails_at_once_naming_the_command_again(
    tmp_path: Path,
) -> None:
    import socket

    project = tmp_path / "project"
    project.mkdir()
    write_project(project)
    run_id = new_run_id()
    store = RunStore(None, project, Actor.here("test"))
    try:
        store.create(
            ev.RunCreated(
                run_id=run_id, target="gpu", kind="runpod", remote_dir="r", settings_digest="d"
            )
        )
        store.append(
            run_id,
            lambda _s: [
                ev.AttemptSent(n=1, pod_name=f"overbrainer-{run_id}-1", gpu_type=A40),
                ev.AttemptResolved(n=1, result="created", pod_id="abc123xyz"),
                ev.PodCreated(pod_id="abc123xyz", gpu_type=A40, cost_per_hour=0.4),
                ev.RunEnded(state="failed", message="boom"),
            ],
        )
    finally:
        store.close()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    url = f"http://127.0.0.1:{port}/v2"
    removed = await _cli(project, url, "pod", "rm", run_id)
    assert removed.returncode == 1
    assert removed.stderr.decode() == (
        f"error: cannot reach Runpod (127.0.0.1:{port} refused the connection): check the "
        f"network and the Runpod API's address ({url}: [runpod] base_url, or "
        f"OVERBRAINER_RUNPOD__BASE_URL); no pod of run {run_id} was deleted: run "
        f"`overbrainer pod rm {run_id}` again once Runpod can be reached\n"
    )
    # The pod still counts as one that may bill: nothing was recorded deleted.
    store = RunStore(None, project, Actor.here("test"))
    try:
        assert store.get(run_id).pod.may_bill()
    finally:
        store.close()
