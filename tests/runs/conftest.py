"""A project on this machine whose local target runs the stand-in trainer, and a way to run
the real ``overbrainer`` command against it."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from overbrainer.testing.stand_in import AXOLOTL

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = AXOLOTL


@dataclass
class Project:
    """A project directory and the environment its commands run with."""

    path: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(
        self, *args: str, timeout: float = 60, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        """``overbrainer -C PROJECT ARGS`` in a real process."""
        return subprocess.run(
            [sys.executable, "-m", "overbrainer", "-C", str(self.path), *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        """``overbrainer -C PROJECT ARGS`` in the background (stdout and stderr piped)."""
        return subprocess.Popen(
            [sys.executable, "-m", "overbrainer", "-C", str(self.path), *args],
            env={**self.env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def runs(self) -> list[str]:
        """The run IDs of the project, oldest first: by the creation time in run.json (runs
        created within one second have IDs in random order), a run still without one
        last."""
        directory = self.path / "runs"
        if not directory.exists():
            return []

        def created(run_id: str) -> tuple[str, str]:
            try:
                return (str(self.run_json(run_id).get("created_at") or "~"), run_id)
            except (OSError, ValueError):
                return ("~", run_id)  # being created: the newest

        return sorted((p.name for p in directory.iterdir()), key=created)

    def run_json(self, run_id: str) -> dict[str, object]:
        """``runs/<id>/run.json``."""
        data: dict[str, object] = json.loads((self.path / "runs" / run_id / "run.json").read_text())
        return data

    def wait_for_state(self, state: str, timeout: float = 30) -> str:
        """Wait until the newest run's run.json says ``state``; return its ID."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids = self.runs()
            if ids:
                try:
                    if self.run_json(ids[-1]).get("state") == state:
                        return ids[-1]
                except (OSError, ValueError):
                    pass
            time.sleep(0.05)
        raise AssertionError(f"no run reached {state} in {timeout} s")

    def event_names(self, run_id: str) -> list[str]:
        """The names of the run's events, from ``events RUN --json``."""
        done = self.run("events", run_id, "--json")
        assert done.returncode == 0, done.stderr
        return [json.loads(line)["event"] for line in done.stdout.splitlines()]


def job_pid(project: Project, run_id: str) -> int:
    """The pid (= process group) of the run's job."""
    return int((project.path / "runs" / run_id / "job.pid").read_text().split()[0])


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group, if still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    """``overbrainer init`` in a temporary directory, the local target on the stand-in."""
    with local_project(tmp_path, tmp_path / "project") as made:
        yield made


@contextlib.contextmanager
def local_project(tmp_path: Path, path: Path) -> Iterator[Project]:
    """``overbrainer init`` at ``path``, the local target on the stand-in (its venv in
    ``tmp_path``)."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "axolotl").symlink_to(STAND_IN)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_AXOLOTL_"))
    }
    env.update(
        {
            "OVERBRAINER_TARGETS__LOCAL__VENV": str(venv.parent),
            "FAKE_AXOLOTL_STEP_SECONDS": "0.02",
            "PYTHONPATH": str(ROOT),
        }
    )
    made = Project(path, env)
    init = subprocess.run(
        [sys.executable, "-m", "overbrainer", "init", str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    yield made
    for run_id in made.runs():
        with contextlib.suppress(OSError, ValueError):
            kill_group(job_pid(made, run_id))
