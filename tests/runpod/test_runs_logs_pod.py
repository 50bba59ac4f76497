"""``runs logs`` of a Runpod run through the real command: the job's log read on the pod,
the pod's own log from Runpod's API, and ``train`` showing the image pull while the pod
boots — against the fake API on loopback with a living fake pod."""

from pathlib import Path

import trio

from overbrainer.lifecycle.logs import LOG_FILE
from overbrainer.testing.fake_executor import PINNED_IMAGE
from tests.runpod.test_train_loopback import world


async def test_runs_logs_reads_the_job_on_its_pod_and_the_pods_own_log(tmp_path: Path) -> None:
    async with world(tmp_path, steps=300, step_seconds=0.05, provisioning_seconds=1.5) as w:
        async with trio.open_nursery() as nursery:
            trained: list[object] = []

            async def train() -> None:
                trained.append(await w.run("train"))

            nursery.start_soon(train)
            run_id = await w.wait_for("job_running")
            pod_id = str(w.pod_json(run_id)["pod_id"])
            on_pod = w.pod_run_dir(pod_id, run_id) / LOG_FILE
            with trio.fail_after(20):
                while not on_pod.is_file() or not on_pod.stat().st_size:
                    await trio.sleep(0.05)
            read = await w.run("runs", "logs", run_id, "--tail", "1")
            assert read.returncode == 0, read.stderr
            assert read.stdout.count("\n") == 1 and read.stdout in on_pod.read_text()
            assert not (w.project / "runs" / run_id / LOG_FILE).exists()  # read on the pod

            system = await w.run("runs", "logs", run_id, "--pod", "--source", "system")
            assert system.returncode == 0, system.stderr
            lines = system.stdout.splitlines()
            assert lines[0].endswith(f" Pulling image {PINNED_IMAGE}")
            assert any(" Downloading " in line for line in lines)
            assert lines[-1].split("Z ", 1)[1] == f"start container overbrainer-{run_id}-1"
            both = await w.run("runs", "logs", run_id, "--pod", "--tail", "3")
            assert both.returncode == 0, both.stderr
            assert len(both.stdout.splitlines()) == 3
            assert all(" [system] " in t or " [container] " in t for t in both.stdout.splitlines())

            followed = await w.run("runs", "logs", run_id, "--follow", timeout=90)
            assert followed.returncode == 0, followed.stderr
            assert followed.stdout.endswith("training done; model saved to output\n")
        (done,) = trained
        assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
        # While the pod booted, train said what its host was doing.
        err = done.stderr  # type: ignore[attr-defined]
        assert f"pod {pod_id}: Pulling image " in err or f"pod {pod_id}: pulling the image" in err
        assert f"pod {pod_id}: image pulled; starting the container" in err
        # The run ended with its log home: read here; the pod is gone, and its own log too.
        home = await w.run("runs", "logs", run_id, "--tail", "1")
        assert home.stdout == "[stand-in axolotl] training done; model saved to output\n"
        gone = await w.run("runs", "logs", run_id, "--pod")
        assert gone.returncode == 1
        assert gone.stderr == (
            f"error: Runpod does not know pod {pod_id} (deleted): its own log is gone with it\n"
        )
