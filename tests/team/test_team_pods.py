"""Team-wide pod safety, for real: two checkouts of one PostgreSQL store and one (fake)
Runpod account, the REAL ``overbrainer`` command in processes. Checkout A runs as host
``laptop-a`` (``tests.fakes.as_host``); checkout B is this machine.

- B sees A's pod in progress, with who started it and where; its ``pod rm`` keeps it and
  names the host; its ``train`` does not call it an orphan; its ``train cancel`` is taken by
  A's follower.
- ``train attach`` in A and ``train cancel`` in B at once: one stream, both agree.
- The database stopped while A trains: a clear error, the pod still guarded by its
  watchdog, and ``train attach`` once the database is back finishes the run.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from tests.fakes.pg import Team
from tests.runpod.test_train_loopback import ROOT, STAND_IN, World, world

LAPTOP = "laptop-a"


@dataclass
class TwoCheckouts:
    """Checkout A (``w.project``, as host laptop-a) and checkout B, one team store."""

    w: World
    b: Path
    env: dict[str, str]

    async def _run(
        self, argv: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        with trio.fail_after(timeout):
            done = await trio.run_process(
                argv,
                env={**self.env, **(env or {})},
                cwd=ROOT,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        return subprocess.CompletedProcess(
            argv, done.returncode, done.stdout.decode(), done.stderr.decode()
        )

    def a_argv(self, *args: str) -> list[str]:
        """``overbrainer -C A ARGS`` on laptop-a."""
        return [
            sys.executable,
            "-m",
            "tests.fakes.as_host",
            LAPTOP,
            "-C",
            str(self.w.project),
            *args,
        ]

    async def in_a(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``overbrainer ARGS`` in checkout A, on laptop-a."""
        return await self._run(self.a_argv(*args), timeout)

    async def in_b(
        self, *args: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``overbrainer ARGS`` in checkout B, on this machine."""
        argv = [sys.executable, "-m", "overbrainer", "-C", str(self.b), *args]
        return await self._run(argv, timeout, env)

    def quick_venv(self) -> dict[str, str]:
        """B's environment for a training of three short steps (A's job is long)."""
        venv = self.b.parent / "venv-b"
        (venv / "bin").mkdir(parents=True, exist_ok=True)
        wrapper = venv / "bin" / "axolotl"
        wrapper.write_text(
            "#!/bin/sh\nFAKE_AXOLOTL_STEPS=3 FAKE_AXOLOTL_STEP_SECONDS=0.05 "
            f'exec {sys.executable} {STAND_IN} "$@"\n'
        )
        wrapper.chmod(0o755)
        return {"OVERBRAINER_TARGETS__GPU__VENV": str(venv)}

    def start_in_a(self, *args: str) -> subprocess.Popen[str]:
        """``overbrainer ARGS`` in checkout A, left running."""
        return subprocess.Popen(
            self.a_argv(*args),
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def events(self, run_id: str) -> list[dict[str, object]]:
        """``events RUN --json`` from B."""
        done = await self.in_b("events", run_id, "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]


@asynccontextmanager
async def two_checkouts(
    team: Team, tmp_path: Path, *, steps: int, step_seconds: float = 0.05
) -> AsyncIterator[TwoCheckouts]:
    async with world(tmp_path, steps=steps, step_seconds=step_seconds) as w:
        b = tmp_path / "b"
        shutil.copytree(w.project, b)
        env = dict(w.env)
        env.update(team.env)
        env["OVERBRAINER_STORE__URL"] = team.url
        yield TwoCheckouts(w, b, env)


async def _job_running(c: TwoCheckouts, timeout: float = 60) -> str:
    run_id = await c.w.wait_for("job_running", timeout=timeout)
    return run_id


async def _finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    with trio.fail_after(timeout):
        while proc.poll() is None:
            await trio.sleep(0.05)
    out, err = proc.communicate()
    return proc.returncode, out, err


def _one_stream(events: list[dict[str, object]]) -> list[str]:
    seqs = [int(str(e["seq"])) for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "one stream: nothing lost or doubled"
    return [str(e["event"]) for e in events]


async def test_a_colleagues_pod_is_in_progress_kept_by_pod_rm_and_its_cancel_is_taken_there(
    team: Team, tmp_path: Path
) -> None:
    me = socket.gethostname()
    async with two_checkouts(team, tmp_path, steps=4000) as c:
        training = c.start_in_a("train")
        try:
            run_id = await _job_running(c)
            pod_id = str(c.w.pod_json(run_id)["pod_id"])
            assert not (c.b / "runs" / run_id).exists()

            # pod ls in B: A's pod is in progress, started by whom, where.
            listed = await c.in_b("pod", "ls", "--json")
            assert listed.returncode == 0, listed.stderr
            rows = [json.loads(line) for line in listed.stdout.splitlines()]
            (row,) = [r for r in rows if r["pod"] == pod_id]
            assert row["run"] == run_id and row["note"] == "in progress"
            assert str(row["started_by"]).endswith(f"@{LAPTOP}")
            table = await c.in_b("pod", "ls")
            (line,) = [x for x in table.stdout.splitlines() if pod_id in x]
            assert f"@{LAPTOP}" in line and line.endswith("in progress")
            shown = await c.in_b("runs", "ls", "--json")
            assert [json.loads(x)["id"] for x in shown.stdout.splitlines()] == [run_id]

            # pod rm in B keeps it, naming the host and what to run; --force is the way past.
            refused = await c.in_b("pod", "rm", run_id)
            assert refused.returncode == 1
            assert f"run {run_id} is in progress on pod {pod_id}" in refused.stderr
            assert f"Stop the run on host {LAPTOP} (where `train` last acted on it)" in (
                refused.stderr
            )
            assert f"`overbrainer train cancel {run_id}`" in refused.stderr
            assert f"`overbrainer pod rm {run_id} --force`" in refused.stderr
            assert c.w.fake.status(pod_id) == "RUNNING"

            # train attach in B: the run lives on laptop-a.
            attach = await c.in_b("train", "attach", run_id)
            assert attach.returncode == 1
            assert f"run {run_id} lives on host {LAPTOP}" in attach.stderr

            # B's own train lists the account first: A's pod is a colleague's run in
            # progress, not a pod nothing will delete (that would be "not in this store").
            trained = await c.in_b("train", timeout=120, env=c.quick_venv())
            assert trained.returncode == 0, trained.stderr
            assert f"pod {pod_id}" not in trained.stderr
            assert "nothing will delete it" not in trained.stderr

            # train cancel in B: asked through the log, taken by A's follower.
            cancelled = await c.in_b("train", "cancel", run_id, timeout=90)
            assert cancelled.returncode == 0, cancelled.stderr
            assert cancelled.stdout.strip() == (
                f"train: run {run_id} cancelled by the command following it on host {LAPTOP}"
            )
            code, _, err = await _finish(training)
            assert code == 1 and f"error: run {run_id} cancelled" in err
            assert "requested by `train cancel` as" in err and f"on host {me}" in err
            assert "Traceback" not in err + cancelled.stderr
        finally:
            training.kill()
            training.wait()
        assert c.w.fake.status(pod_id) == "TERMINATED"
        events = await c.events(run_id)
        names = _one_stream(events)
        cancels = [
            (e["fields"], e["actor"]["host"])  # type: ignore[index]
            for e in events
            if e["event"] == "run.CancelRequested"
        ]
        assert cancels == [({"relay": "asked"}, me), ({"relay": "taken"}, LAPTOP)]
        assert names[-4:] == ["run.Ended", "pod.Deleting", "pod.Deleted", "pod.Billed"]
        assert c.w.run_json(run_id)["state"] == "cancelled"


async def test_attach_in_one_checkout_and_cancel_in_the_other_at_once_agree(
    team: Team, tmp_path: Path
) -> None:
    async with two_checkouts(team, tmp_path, steps=4000) as c:
        training = c.start_in_a("train")
        try:
            run_id = await _job_running(c)
            training.send_signal(signal.SIGINT)  # detached: the job keeps running
            code, _, err = await _finish(training)
            assert code == 130, err
        finally:
            training.kill()
            training.wait()
        pod_id = str(c.w.pod_json(run_id)["pod_id"])

        attach = c.start_in_a("train", "attach", run_id)
        try:
            cancelled = await c.in_b("train", "cancel", run_id, timeout=90)
            code, _, err = await _finish(attach)
        finally:
            attach.kill()
            attach.wait()
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith(f"train: run {run_id} cancelled by the command")
        assert code == 1 and f"error: run {run_id} cancelled" in err, err
        assert "Traceback" not in err + cancelled.stderr
        assert c.w.fake.status(pod_id) == "TERMINATED"

        # One stream, each event once, read alike from both checkouts.
        events = await c.events(run_id)
        names = _one_stream(events)
        from_a = await c.in_a("events", run_id, "--json")
        assert [json.loads(x) for x in from_a.stdout.splitlines()] == events
        assert names.count("run.Ended") == 1 and names.count("pod.Deleted") == 1
        assert names.count("run.CancelRequested") == 2  # asked in B, taken in A
        shown = [
            json.loads((await run("runs", "show", run_id, "--json")).stdout)
            for run in (c.in_a, c.in_b)
        ]
        assert shown[0]["run"] == shown[1]["run"] and shown[0]["pod"] == shown[1]["pod"]
        assert shown[0]["run"]["state"] == "cancelled" and shown[0]["pod"]["status"] == "deleted"


async def test_the_database_stopped_mid_train_fails_plainly_and_attach_finishes_the_run(
    team: Team, tmp_path: Path
) -> None:
    async with two_checkouts(team, tmp_path, steps=40) as c:
        training = c.start_in_a("train")
        where = f"127.0.0.1:{team.cluster.port}/{team.db}"
        try:
            run_id = await _job_running(c)
            pod_id = str(c.w.pod_json(run_id)["pod_id"])
            await trio.to_thread.run_sync(team.cluster.stop)
            code, out, err = await _finish(training)
        finally:
            training.kill()
            training.wait()
            stopped_then = c.w.fake.status(pod_id)
            await trio.to_thread.run_sync(team.cluster.start)
        # The next append (the job's end) could not be recorded: said once, plainly.
        assert code == 1
        assert "Traceback" not in err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and where in errors[0], err
        assert errors[0].startswith(
            f"error: cannot read run {run_id}: cannot reach the event store"
        )
        assert f"`overbrainer train attach {run_id}`" in errors[0]
        assert team.cluster.password not in out + err
        # Following went on without the store, saying so once.
        assert err.count(f"following the job of run {run_id} goes on") == 1
        # Nothing deleted the pod (its end was not recorded): its watchdog guards it.
        assert stopped_then == "RUNNING" and c.w.fake.status(pod_id) == "RUNNING"
        watchdog = (c.w.pod_run_dir(pod_id, run_id) / ".pod" / "watchdog.log").read_text()
        assert f"guarding pod {pod_id} of run {run_id}" in watchdog
        assert "deleting pod" not in watchdog

        # The database is back: attach finishes the run, results home, pod deleted.
        attached = await c.in_a("train", "attach", run_id, timeout=90)
        assert attached.returncode == 0, attached.stderr
        assert attached.stdout.strip().splitlines()[-1].startswith(f"train: run {run_id} succeeded")
        assert (c.w.project / "runs" / run_id / "output" / "adapter_model.safetensors").is_file()
        assert c.w.fake.status(pod_id) == "TERMINATED"
        names = _one_stream(await c.events(run_id))
        assert names[-5:] == [
            "run.ArtifactsRetrieved",
            "run.Ended",
            "pod.Deleting",
            "pod.Deleted",
            "pod.Billed",
        ]
