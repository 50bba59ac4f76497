"""One test per defect the reliability campaigns found, named after its scenario.

The end-to-end ones run the real ``overbrainer`` with a checkpoint plan (see
``overbrainer/front/fault_injection.py``): a SIGINT, a SIGKILL or a fault delivered at one
append, deterministically.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from overbrainer.errors import OverbrainerError
from overbrainer.events import types as ev
from overbrainer.events.actor import Actor, starter_alive
from overbrainer.events.aggregate import RunLog
from overbrainer.events.errors import StoreError
from overbrainer.events.store import RunStore
from overbrainer.exec.base import JobStatus
from overbrainer.exec.local import LocalExecutor
from overbrainer.front.console import Front
from overbrainer.front.interrupts import Interrupts
from overbrainer.lifecycle import service
from overbrainer.lifecycle.recover import settle_start
from overbrainer.lifecycle.service import Job
from overbrainer.projections.view import RunsView, view_path
from overbrainer.runpod.client import CreateFailed, CreatePod, RunpodClient
from overbrainer.session.journal import Journal
from overbrainer.session.session import Session
from overbrainer.targets.runpod.delete import DeleteUnconfirmed, delete_pod
from overbrainer.targets.runpod.podrm import remove_run_pods
from overbrainer.targets.runpod.provision import ProvisionInterrupted, provision
from overbrainer.testing.fake_executor import PINNED_IMAGE, PodRig, pod_rig, runpod_target
from reliability.machine import read_trace
from reliability.store_faults import disk_full
from reliability.world import MachineWorld, Project, case_project

A40 = "NVIDIA A40"
RUN = "20260101-000000-abcd"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MachineWorld]:
    """A local-target template project (the stand-in trainer), copied for each test."""
    with MachineWorld("local", tmp_path_factory.mktemp("world")) as made:
        yield made


@pytest.fixture
def project(world: MachineWorld, request: pytest.FixtureRequest) -> Iterator[Project]:
    with case_project(world, request.node.name[:60]) as made:
        yield made


def _run_json(project: Project, run_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.path / "runs" / run_id / "run.json").read_text())
    return data


def _events(project: Project, run_id: str) -> list[str]:
    done = project.run("events", run_id, "--json")
    assert done.code == 0, done.err
    return [json.loads(line)["event"] for line in done.out.splitlines()]


# --- Ctrl-C -----------------------------------------------------------------------------


def test_ctrl_c_while_the_run_is_being_created_fails_it_with_exit_130(project: Project) -> None:
    # Noted during run.Created's append, the Ctrl-C used to escape as a traceback (exit 1)
    # and leave the run preparing for ever.
    done = project.run("train", plan={"at": "append-after run.Created", "action": "sigint"})
    assert done.code == 130, done.err
    assert "Traceback" not in done.err
    assert "stopped before its job started" in done.err
    (run_id,) = project.runs()
    run = _run_json(project, run_id)
    assert (run["state"], run["job"]) == ("failed", None)
    assert run["interrupted_stage"] == "connecting to the target"


def test_a_ctrl_c_as_the_command_closes_is_not_reported_as_an_interruption(
    project: Project,
) -> None:
    # A Ctrl-C arriving once the run had succeeded, while the command closed its Ctrl-C
    # receiver, used to come back as KeyboardInterrupt: "error: interrupted", exit 130.
    trace = project.path.parent / "trace.jsonl"
    assert project.run("train", plan={"trace": str(trace)}).code == 0
    closing = [key for key in read_trace(trace) if ":_listening:" in key][-1]
    done = project.run("train", plan={"at": closing, "action": "sigint2"})
    assert done.code == 0, done.err
    assert "succeeded" in done.out
    assert "interrupted" not in done.err


# --- crashes ----------------------------------------------------------------------------


def test_a_crash_after_an_append_leaves_projections_the_next_read_rebuilds(
    project: Project,
) -> None:
    done = project.run("train", plan={"at": "append-after run.Ended", "action": "kill"})
    assert done.code == -9
    (run_id,) = project.runs()
    assert _run_json(project, run_id)["state"] == "running"  # the cache is behind the log
    attach = project.run("train", "attach", run_id)
    assert attach.code == 0, attach.err
    assert _run_json(project, run_id)["state"] == "succeeded"


def test_a_crash_between_spawning_the_job_and_recording_it_is_adopted_by_attach(
    project: Project,
) -> None:
    done = project.run("train", plan={"at": "append-before run.JobStarted", "action": "kill"})
    assert done.code == -9
    (run_id,) = project.runs()
    assert _run_json(project, run_id)["state"] == "preparing"
    assert (project.job_dir(run_id) / "job.pid").exists()  # a job the log does not know
    attach = project.run("train", "attach", run_id)
    assert attach.code == 0, attach.err
    assert "which is gone; its job" in attach.err
    assert _run_json(project, run_id)["state"] == "succeeded"
    assert _events(project, run_id)[:2] == ["run.Created", "run.JobStarted"]


def test_a_crash_before_the_job_was_spawned_is_ended_by_attach(project: Project) -> None:
    done = project.run("train", plan={"at": "append-after run.Created", "action": "kill"})
    assert done.code == -9
    (run_id,) = project.runs()
    attach = project.run("train", "attach", run_id)
    assert attach.code == 1
    assert "Traceback" not in attach.err
    run = _run_json(project, run_id)
    assert run["state"] == "failed"
    assert "stopped before the run's job started (killed or crashed)" in run["message"]


def test_attach_leaves_a_run_whose_starter_still_runs_alone() -> None:
    here = socket.gethostname()
    alive = subprocess.Popen(["sh", "-c", "sleep 30; true", "overbrainer"])
    try:
        deadline = time.monotonic() + 5  # until the child has exec'd its command line
        while not starter_alive({"host": here, "pid": alive.pid}):
            assert time.monotonic() < deadline, "a live starter is taken for a dead one"
            time.sleep(0.01)
        assert starter_alive({"host": "another-host", "pid": alive.pid}) is None
    finally:
        alive.kill()
        alive.wait()
    assert starter_alive({"host": here, "pid": alive.pid}) is False


async def test_adopting_a_job_stopped_because_its_start_was_not_recorded_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import overbrainer.lifecycle.recover as recover

    monkeypatch.setattr(recover, "starter_alive", lambda actor: False)  # its starter died
    store = RunStore(None, tmp_path, Actor.here("train"))
    try:
        journal = Journal(store, tmp_path)
        session = Session(journal, Front(_Sink(), _Sink()), Interrupts(), tmp_path)
        state = await journal.create(
            ev.RunCreated(
                run_id=RUN,
                target="local",
                kind="local",
                remote_dir=f"runs/{RUN}",
                settings_digest="",
            )
        )
        job_dir = tmp_path / "runs" / RUN
        (job_dir / "job.pid").write_text("999999\n")
        (job_dir / "cancelled").write_text("now\n")  # stopped, as service.start does
        executor = LocalExecutor(tmp_path)
        settled = await settle_start(session, Job(RUN, executor, f"runs/{RUN}", True), state)
        await executor.aclose()
    finally:
        store.close()
    assert (settled.run.state, settled.run.job) == ("failed", None)
    assert "its job was stopped because its start could not be recorded" in str(settled.run.message)


# --- the store failing --------------------------------------------------------------------


def test_a_full_disk_after_an_append_warns_instead_of_crashing(project: Project) -> None:
    # Writing run.json after a stored append used to raise OSError: a traceback, and a
    # saved append reported as lost.
    pause = project.path.parent / "paused"
    plan = {"at": "append-after run.Created", "action": "pause", "pause_file": str(pause)}
    process = project.start("train", plan=plan)
    project.wait_for(pause.exists, timeout=30, what="the pause")
    disk_full(project)
    pause.unlink()
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    assert "Traceback" not in err
    assert "could not be rewritten" in err and "the next command that reads the run" in err
    (run_id,) = project.runs()
    show = project.run("runs", "show", run_id)  # a later read rebuilds the projections
    assert show.code == 0
    assert _run_json(project, run_id)["run_id"] == run_id


def test_a_run_whose_end_could_not_be_recorded_after_its_retrieval_is_not_retrieved_again(
    project: Project,
) -> None:
    # The disk filled up between recording the retrieval and recording the run's end: the
    # attach that ends the run downloaded the results again and recorded a second
    # retrieval (found by the new "no fact twice" invariant).
    pause = project.path.parent / "paused"
    plan = {"at": "append-before run.Ended", "action": "pause", "pause_file": str(pause)}
    process = project.start("train", plan=plan)
    project.wait_for(pause.exists, timeout=60, what="the pause")
    disk_full(project)
    pause.unlink()
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    (run_id,) = project.runs()
    assert _events(project, run_id).count("run.ArtifactsRetrieved") == 1
    attach = project.run("train", "attach", run_id)
    assert attach.code == 0, attach.err
    assert _events(project, run_id).count("run.ArtifactsRetrieved") == 1
    assert _run_json(project, run_id)["state"] == "succeeded"


async def test_results_at_home_that_changed_since_their_retrieval_are_collected_again(
    tmp_path: Path,
) -> None:
    from overbrainer.exec.manifest import local_manifest

    home = tmp_path / "runs" / RUN
    (home / "output").mkdir(parents=True)
    (home / "output" / "adapter.bin").write_bytes(b"weights")
    (home / "metrics.jsonl").write_text("{}\n")
    manifest = local_manifest(home, service.RETRIEVED_PATHS)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    state = RunLog()
    state.apply(
        ev.RunCreated(run_id=RUN, target="box", kind="ssh", remote_dir="r", settings_digest=""),
        "2026-01-01T00:00:00Z",
    )
    state.apply(ev.JobStarted(job_dir="r", pid=5), "2026-01-01T00:00:01Z")
    state.apply(
        ev.ArtifactsRetrieved(files=2, bytes=9, manifest_digest=digest), "2026-01-01T00:01:00Z"
    )
    session = Session(
        Journal(RunStore(None, tmp_path, Actor.here("t")), tmp_path),
        Front(_Sink(), _Sink(), terminal=False),  # type: ignore[arg-type]
        Interrupts(),
        tmp_path,
    )
    kept = await service._home_as_recorded(session, RUN, state)
    assert kept is not None and (kept.ok, kept.files, kept.has_output) == (True, 2, True)
    (home / "output" / "adapter.bin").write_bytes(b"damaged")
    assert await service._home_as_recorded(session, RUN, state) is None


class _Sink:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _FailingJournal(Journal):
    async def append(self, run_id: str, decide: Any) -> Any:
        raise StoreError(f"run {run_id} not updated: database is locked")


async def test_a_job_whose_start_cannot_be_recorded_is_stopped(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        journal = _FailingJournal(store, tmp_path)
        session = Session(journal, Front(_Sink(), _Sink()), Interrupts(), tmp_path)
        executor = LocalExecutor(tmp_path, cancel_grace=1)
        (tmp_path / "runs" / RUN).mkdir(parents=True)
        job = Job(RUN, executor, f"runs/{RUN}", in_place=True)
        with pytest.raises(OverbrainerError, match="was stopped: its start could not be"):
            await service.start(session, job, [["sleep", "30"]], env={}, secrets={})
        state = await executor.status(f"runs/{RUN}")
        assert state.status is JobStatus.cancelled
        await executor.aclose()
    finally:
        store.close()


class _UnwritableHome:
    location = "this machine"

    async def manifest(self, remote_dir: str, paths: Sequence[str]) -> dict[str, str]:
        return {"output/a": "0" * 64}

    async def download(self, remote_dir: str, paths: Sequence[str], local_dir: Path) -> None:
        raise OSError(27, "File too large")


async def test_a_download_that_cannot_be_written_home_is_a_failed_retrieval(
    tmp_path: Path,
) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        session = Session(Journal(store, tmp_path), Front(_Sink(), _Sink()), Interrupts(), tmp_path)
        job = Job(RUN, _UnwritableHome(), f"runs/{RUN}")  # type: ignore[arg-type]
        retrieval = await service.collect(session, job)
    finally:
        store.close()
    assert not retrieval.ok
    assert f"cannot write the results into runs/{RUN}" in retrieval.problem


async def test_a_damaged_runs_view_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    store = RunStore(None, tmp_path, Actor.here("test"))
    try:
        await Journal(store, tmp_path).create(
            ev.RunCreated(
                run_id=RUN, target="local", kind="local", remote_dir="r", settings_digest=""
            )
        )
        path = view_path(tmp_path)
        path.write_bytes(b"not a database at all")
        view = RunsView(path, str(store.url))
        view.catch_up(store)
        assert [s.run.run_id for s in view.runs()] == [RUN]
        view._db.execute("UPDATE runs SET state='{garbage'")  # a row edited by hand
        view._db.commit()
        assert [s.run.state for s in view.runs()] == ["preparing"]
        view.close()
    finally:
        store.close()


# --- Runpod -------------------------------------------------------------------------------


async def test_a_create_answered_by_a_proxy_404_names_the_base_url_not_the_volume() -> None:
    def nginx(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="<html>404 Not Found</html>")

    spec = CreatePod(
        name="overbrainer-x-1", image=PINNED_IMAGE, gpu_type=A40, gpu_count=1, disk_gb=20
    )
    async with RunpodClient(
        "rpa_key", "http://runpod.test/v2", transport=httpx.MockTransport(nginx)
    ) as client:
        with pytest.raises(CreateFailed) as caught:
            await client.create_pod(spec)
    assert "OVERBRAINER_RUNPOD__BASE_URL" in str(caught.value)
    assert "network_volume_id" not in str(caught.value)
    assert not caught.value.ambiguous


async def _created_pod(rig: PodRig, run_id: str, name: str) -> str:
    return (await rig.create_pod(name, run_id, args="sleep infinity")).id


async def test_a_delete_whose_confirmation_cannot_read_runpod_says_so(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        pod_id = await _created_pod(rig, run_id, f"overbrainer-{run_id}-1")
        rig.fake.fail_next("GET /pods/{id}", 500, times=10_000)
        with pytest.raises(DeleteUnconfirmed) as caught:
            await delete_pod(rig.context, run_id, pod_id, "requested")
    assert "could not be read to confirm it was gone" in str(caught.value)
    assert "still showed it" not in str(caught.value)


async def test_pod_rm_resolves_a_create_whose_command_died_before_the_answer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        name = f"overbrainer-{run_id}-1"
        # The command sent the create and died: the log has the attempt, Runpod the pod.
        await rig.journal.append(
            run_id,
            [ev.AttemptSent(n=1, pod_name=name, gpu_type=A40, deadline="2030-01-01T00:00:00Z")],
        )
        pod_id = await _created_pod(rig, run_id, name)
        assert rig.state(run_id).pod.may_bill()
        removal = await remove_run_pods(rig.context, run_id, force=True)
        state = rig.state(run_id)
        assert [d.pod_id for d in removal.deleted] == [pod_id]
        assert rig.fake.live_pods() == []
        assert state.pod.attempts[0]["result"] == "deleted"
        assert not state.pod.may_bill()
        assert state.run.state == "failed"


async def test_ctrl_c_while_the_attempt_is_recorded_sends_no_create(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with pod_rig(tmp_path) as rig:
        run_id = await rig.new_run()
        real = rig.journal.append

        async def append(run: str, decide: Any) -> Any:
            state = await real(run, decide)
            if state.pod.status == "creating":
                rig.interrupts.interrupt()  # Ctrl-C just as the attempt was recorded
            return state

        rig.journal.append = append  # type: ignore[method-assign]
        with pytest.raises(ProvisionInterrupted):
            await provision(rig.context, run_id, runpod_target([A40]), keep=False)
        assert rig.fake.create_requests() == []
        state = rig.state(run_id)
        assert state.pod.attempts[0]["result"] == "not_sent"
        assert not state.pod.may_bill()


def test_attach_of_a_runpod_run_left_starting_points_to_cancel_and_pod_rm() -> None:
    # A run whose starter may still be alive is left to it, with the ways to end it; one
    # whose starter is provably gone is ended by attach itself (tests/runpod/test_starting).
    from overbrainer.targets.runpod.podrm import still_starting
    from overbrainer.targets.runpod.starting import Start

    starter = {"command": "train", "host": "laptop-a", "pid": 42}
    said = still_starting(Start(RUN, "starting", starter, "its process runs"))
    assert said.startswith(
        f"run {RUN} is still starting its pod: `train` (pid 42 on host laptop-a) is at it "
        "(its process runs)"
    )
    assert f"`overbrainer train cancel {RUN}`" in said
    assert f"`overbrainer pod rm {RUN} --force`" in said
