"""The pod's watchdog script under sh, dash and busybox sh, against the fake API on loopback.

Real clock and real processes; fractions of a second stand for the minutes of a real pod.
"""

import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import trio

from overbrainer.runpod.pod_scripts import WATCHDOG, script_text
from tests.fakes.fake_pod import free_port
from tests.fakes.runpod_api import FAKE_URL, FakeRunpod, serve_loopback

SHELLS = [("sh",), ("dash",), ("busybox", "sh")]
SHELL_IDS = ["sh", "dash", "busybox"]
INTERVAL = "0.1"
CANARY = "rpa_CANARY0123456789abcdef"


@dataclass
class Api:
    fake: FakeRunpod
    base: str
    account: str

    async def create_pod(self) -> str:
        body = {
            "name": "overbrainer-20260101-120000-ab12-1",
            "image": "example/axolotl:latest",
            "gpu": {"id": "NVIDIA A40", "count": 1},
            "ports": ["22/tcp"],
            "env": {"OVERBRAINER_RUN": "20260101-120000-ab12"},
        }
        async with httpx.AsyncClient(transport=self.fake.transport()) as client:
            answer = await client.post(
                FAKE_URL + "/pods", json=body, headers={"Authorization": f"Bearer {self.account}"}
            )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def calls(self, pod_id: str) -> list[str]:
        """The watchdog's requests for ``pod_id``: method, path, action, status."""
        out = []
        for request in self.fake.requests:
            if pod_id not in request.path or request.auth == "account":
                continue
            action = f" {request.json['action']}" if isinstance(request.json, dict) else ""
            out.append(f"{request.method} {request.path}{action} {request.status}")
        return out


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    fake = FakeRunpod(provisioning_seconds=0.0, starting_seconds=0.0)
    account = fake.add_account()
    async with serve_loopback(fake) as base:
        yield Api(fake, base, account)


@dataclass
class Watchdog:
    process: trio.Process
    run_dir: Path
    out: Path
    key: str
    seen_in_ps: list[str] = field(default_factory=list)

    @property
    def pod_dir(self) -> Path:
        return self.run_dir / ".pod"

    def verdict(self) -> str | None:
        path = self.pod_dir / "watchdog"
        return path.read_text() if path.exists() else None

    def log(self) -> str:
        path = self.pod_dir / "watchdog.log"
        return path.read_text() if path.exists() else ""

    def stdout(self) -> str:
        return self.out.read_text()

    def assert_key_never_shown(self) -> None:
        assert self.key not in self.stdout()
        assert self.key not in self.log()
        assert self.key not in (self.verdict() or "")
        assert self.seen_in_ps == []


async def _until(check: Callable[[], object], timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.02)


def _scan_ps(secret: str, found: list[str]) -> None:
    """Look for ``secret`` on every process's command line, as `ps` would show it."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if secret in cmdline:
            found.append(cmdline)


@asynccontextmanager
async def watchdog(
    tmp_path: Path,
    shell: tuple[str, ...],
    api: Api,
    pod_id: str,
    *,
    key: str | None = None,
    base: str | None = None,
    deadline_in: float = 3600.0,
    files: tuple[str, ...] = (),
    watch_ps: bool = False,
    **settings: str,
) -> AsyncIterator[Watchdog]:
    """Run the packaged watchdog.sh for ``pod_id``; ``files`` are markers to create first."""
    script = tmp_path / WATCHDOG
    script.write_text(script_text(WATCHDOG))
    run_dir = tmp_path / "run"
    (run_dir / ".pod").mkdir(parents=True)
    for name in files:
        (run_dir / name).write_text("1\n")
    scoped = api.fake.pod_scoped_key(pod_id) if key is None else key
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "RUNPOD_POD_ID": pod_id,
        "OVERBRAINER_API_BASE": base or api.base,
        "OVERBRAINER_RUN_DIR": str(run_dir),
        "OVERBRAINER_RUN": "20260101-120000-ab12",
        "OVERBRAINER_DEADLINE": f"{time.time() + deadline_in:.3f}",
        "OVERBRAINER_BOOT_GRACE": "60",
        "OVERBRAINER_RETRIEVE_GRACE": "60",
        "OVERBRAINER_INTERVAL": INTERVAL,
        "OVERBRAINER_READ_ATTEMPTS": "3",
        "OVERBRAINER_RETRY_DELAY": "0.1",
        "OVERBRAINER_HTTP_TIMEOUT": "5",
        "OVERBRAINER_KEEP": "0",
        **settings,
    }
    if scoped:
        env["RUNPOD_API_KEY"] = scoped
    out = tmp_path / "stdout"
    with out.open("wb") as sink:
        process = await trio.lowlevel.open_process(
            [*shell, str(script)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    dog = Watchdog(process, run_dir, out, scoped or CANARY)
    try:
        async with trio.open_nursery() as nursery:
            if watch_ps and scoped:

                async def scan() -> None:
                    while True:
                        _scan_ps(scoped, dog.seen_in_ps)
                        await trio.sleep(0.005)

                nursery.start_soon(scan)
            yield dog
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.terminate()
        with trio.move_on_after(5) as scope:
            await process.wait()
        if scope.cancelled_caught:
            process.kill()
            await process.wait()
    dog.assert_key_never_shown()


async def _deleted(api: Api, dog: Watchdog, pod_id: str, timeout: float = 5.0) -> None:
    """Wait until the pod is gone and the watchdog, seeing it gone, has ended."""
    await _until(lambda: api.fake.status(pod_id) == "TERMINATED", timeout)
    with trio.fail_after(5):
        assert await dog.process.wait() == 0


# --- the verdict ---------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_pod_scoped_key_that_reads_its_pod_is_ready(tmp_path, api, shell):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, shell, api, pod_id, watch_ps=True) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        # A few checks go by: it keeps guarding, deletes nothing.
        await trio.sleep(0.4)
        assert dog.process.returncode is None
        assert api.fake.status(pod_id) == "RUNNING"
    assert api.calls(pod_id) == [f"GET /pods/{pod_id} 200"]
    assert "verdict: ready" in dog.log()
    assert "verdict: ready" in dog.stdout()
    assert "waiting up to 60s for the job to start" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_missing_key_fails_without_asking_and_stays_up(tmp_path, api, shell):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, shell, api, pod_id, key="") as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "failed missing key: RUNPOD_API_KEY is not set\n"
        await trio.sleep(0.3)
        assert dog.process.returncode is None
    assert api.calls(pod_id) == []


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_refused_key_fails_and_is_never_shown(tmp_path, api, shell):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, shell, api, pod_id, key=CANARY, watch_ps=True) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "failed refused key (HTTP 401)\n"
    assert api.calls(pod_id) == [f"GET /pods/{pod_id} 401"]
    assert api.fake.status(pod_id) == "RUNNING"


async def test_another_pods_key_is_refused(tmp_path, api):
    pod_id = await api.create_pod()
    other = await api.create_pod()
    key = api.fake.pod_scoped_key(other)
    async with watchdog(tmp_path, ("dash",), api, pod_id, key=key) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "failed refused key (HTTP 403)\n"


async def test_a_pod_the_api_does_not_know_is_not_found(tmp_path, api):
    pod_id = await api.create_pod()
    # The account's key, for a pod id that does not exist: Runpod's own 404.
    async with watchdog(tmp_path, ("dash",), api, "nosuchpod0000", key=api.account) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "failed pod not found (HTTP 404)\n"
    assert api.fake.status(pod_id) == "RUNNING"


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_an_unreachable_api_fails_after_retries(tmp_path, api, shell):
    pod_id = await api.create_pod()
    closed = f"http://127.0.0.1:{free_port()}/v2"
    async with watchdog(tmp_path, shell, api, pod_id, base=closed) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == (
            "failed unreachable after 3 attempts (last: no answer (curl exit status 7))\n"
        )
    assert dog.log().count("retrying in 0.1s") == 2


async def test_transient_failures_are_retried_before_the_verdict(tmp_path, api):
    pod_id = await api.create_pod()
    api.fake.fail_next("GET /pods/{id}", 503)
    api.fake.fail_next("GET /pods/{id}", 429, retry_after=0)
    async with watchdog(tmp_path, ("dash",), api, pod_id) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
    assert api.calls(pod_id) == [
        f"GET /pods/{pod_id} 503",
        f"GET /pods/{pod_id} 429",
        f"GET /pods/{pod_id} 200",
    ]
    assert "HTTP 503; retrying in 0.1s (1 of 3)" in dog.log()
    assert "HTTP 429; retrying in 0s (2 of 3)" in dog.log()


async def test_a_missing_deadline_fails_the_verdict_and_deletes_the_pod(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, ("dash",), api, pod_id, OVERBRAINER_DEADLINE="") as dog:
        await _deleted(api, dog, pod_id)
        assert dog.verdict() == "failed bad settings: OVERBRAINER_DEADLINE\n"
    assert "bad settings OVERBRAINER_DEADLINE" in dog.log()


# --- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_deletes_at_the_deadline(tmp_path, api, shell):
    pod_id = await api.create_pod()
    # A running job does not hold the pod past its deadline.
    async with watchdog(tmp_path, shell, api, pod_id, deadline_in=0.6, files=("job.pid",)) as dog:
        await _until(dog.verdict)
        await trio.sleep(0.2)
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id)
    assert "deleting pod" in dog.log() and "past the deadline" in dog.log()
    assert api.calls(pod_id)[-2:] == [f"DELETE /pods/{pod_id} 204", f"DELETE /pods/{pod_id} 404"]
    assert f"pod {pod_id} is gone (HTTP 404)" in dog.log()


async def test_deletes_after_max_hours_since_it_started_even_with_a_late_deadline(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path, ("dash",), api, pod_id, files=("job.pid",), OVERBRAINER_MAX_SECONDS="0.5"
    ) as dog:
        await _deleted(api, dog, pod_id)
    assert "past the deadline, 0.500s after the watchdog started" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_deletes_after_the_boot_grace_when_no_job_started(tmp_path, api, shell):
    pod_id = await api.create_pod()
    started = trio.current_time()
    async with watchdog(tmp_path, shell, api, pod_id, OVERBRAINER_BOOT_GRACE="0.6") as dog:
        await _deleted(api, dog, pod_id)
    assert trio.current_time() - started >= 0.6
    assert "no job started within the boot grace (0.600s)" in dog.log()


async def test_a_started_job_is_not_deleted_for_the_boot_grace(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path, ("dash",), api, pod_id, files=("job.pid",), OVERBRAINER_BOOT_GRACE="0.2"
    ) as dog:
        await _until(dog.verdict)
        await trio.sleep(0.6)
        assert api.fake.status(pod_id) == "RUNNING"
    assert "the job is running" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
@pytest.mark.parametrize("marker", ["exit_code", "cancelled"])
async def test_deletes_an_ended_job_not_retrieved_within_the_retrieve_grace(
    tmp_path, api, shell, marker
):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        files=("job.pid", marker),
        OVERBRAINER_RETRIEVE_GRACE="0.5",
    ) as dog:
        await _until(dog.verdict)
        await trio.sleep(0.2)
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id)
    assert "the job ended: waiting up to 0.500s for its results to be retrieved" in dog.log()
    assert "not retrieved within 0.500s" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_deletes_at_once_when_the_results_are_retrieved(tmp_path, api, shell):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, shell, api, pod_id, files=("job.pid", "exit_code")) as dog:
        await _until(dog.verdict)
        await trio.sleep(0.3)
        assert api.fake.status(pod_id) == "RUNNING"
        (dog.pod_dir / "retrieved").write_text("")
        retrieved_at = trio.current_time()
        await _deleted(api, dog, pod_id)
        assert trio.current_time() - retrieved_at < 2.0
    assert "the results were retrieved" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_deletes_at_once_after_a_failed_bootstrap(tmp_path, api, shell):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, shell, api, pod_id, files=(".pod/bootstrap_failed",)) as dog:
        await _deleted(api, dog, pod_id, timeout=2.0)
    assert "deleting pod" in dog.log()
    assert "the bootstrap failed: 1" in dog.log()


async def test_a_bootstrap_failure_handed_over_in_the_environment_deletes_at_once(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("busybox", "sh"),
        api,
        pod_id,
        OVERBRAINER_BOOTSTRAP_FAILED="sshd did not start (exit status 1)",
    ) as dog:
        await _deleted(api, dog, pod_id, timeout=2.0)
    assert "the bootstrap failed: sshd did not start (exit status 1)" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_kept_pod_whose_job_started_is_never_deleted(tmp_path, api, shell):
    pod_id = await api.create_pod()
    # Every other rule would delete it: past the deadline, retrieved, ended long ago.
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        deadline_in=-10,
        files=("job.pid", "exit_code", ".pod/retrieved"),
        OVERBRAINER_KEEP="1",
        OVERBRAINER_RETRIEVE_GRACE="0",
        OVERBRAINER_BOOT_GRACE="0",
        OVERBRAINER_MAX_SECONDS="0.1",
    ) as dog:
        await _until(dog.verdict)
        await trio.sleep(0.8)
        assert api.fake.status(pod_id) == "RUNNING"
        assert dog.process.returncode is None
    assert api.calls(pod_id) == [f"GET /pods/{pod_id} 200"]
    assert dog.log().count("never deleted by the watchdog") == 1


async def test_a_kept_pod_is_guarded_until_its_job_starts(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path, ("dash",), api, pod_id, OVERBRAINER_KEEP="1", OVERBRAINER_BOOT_GRACE="0.3"
    ) as dog:
        await _deleted(api, dog, pod_id)
    assert "no job started within the boot grace" in dog.log()


# --- how it deletes --------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_failed_delete_falls_back_to_terminate(tmp_path, api, shell):
    pod_id = await api.create_pod()
    api.fake.fail_next("DELETE /pods/{id}", 500)
    async with watchdog(tmp_path, shell, api, pod_id, files=(".pod/retrieved",)) as dog:
        await _deleted(api, dog, pod_id)
    assert api.calls(pod_id)[1:3] == [
        f"DELETE /pods/{pod_id} 500",
        f"POST /pods/{pod_id}/action terminate 204",
    ]
    assert "delete failed (HTTP 500); trying the terminate action" in dog.log()
    assert f"pod {pod_id} terminated (HTTP 204)" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_then_stop_and_a_failed_round_is_retried_at_the_next_check(tmp_path, api, shell):
    pod_id = await api.create_pod()
    # First round: delete, terminate and stop all fail. Second: delete fails, terminate
    # fails, stop works. Third: the delete works.
    api.fake.fail_next("DELETE /pods/{id}", 503, times=2)
    api.fake.fail_next("POST /pods/{id}/action", 500, times=3)
    async with watchdog(tmp_path, shell, api, pod_id, files=(".pod/bootstrap_failed",)) as dog:
        await _deleted(api, dog, pod_id)
    assert api.calls(pod_id) == [
        f"GET /pods/{pod_id} 200",
        f"DELETE /pods/{pod_id} 503",
        f"POST /pods/{pod_id}/action terminate 500",
        f"POST /pods/{pod_id}/action stop 500",
        f"DELETE /pods/{pod_id} 503",
        f"POST /pods/{pod_id}/action terminate 500",
        f"POST /pods/{pod_id}/action stop 200",
        f"DELETE /pods/{pod_id} 204",
        f"DELETE /pods/{pod_id} 404",
    ]
    log = dog.log()
    assert "stop failed (HTTP 500); trying again at the next check in 0.1s" in log
    assert "stopped (HTTP 200); its disk still bills" in log


async def test_a_404_that_is_not_runpods_does_not_count_as_gone(tmp_path, api):
    pod_id = await api.create_pod()
    api.fake.fail_next("DELETE /pods/{id}", 404, raw_body=b"<html>not here</html>")
    api.fake.fail_next("POST /pods/{id}/action", 502, times=2)
    async with watchdog(tmp_path, ("dash",), api, pod_id, files=(".pod/retrieved",)) as dog:
        await _deleted(api, dog, pod_id)
    assert api.calls(pod_id)[1:5] == [
        f"DELETE /pods/{pod_id} 404",
        f"POST /pods/{pod_id}/action terminate 502",
        f"POST /pods/{pod_id}/action stop 502",
        f"DELETE /pods/{pod_id} 204",
    ]


async def test_an_image_without_curl_fails_the_verdict(tmp_path, api):
    pod_id = await api.create_pod()
    # Every tool of the machine but curl.
    tools = tmp_path / "bin"
    tools.mkdir()
    for directory in ("/usr/bin", "/bin"):
        for name in os.listdir(directory):
            if name != "curl" and not (tools / name).exists():
                (tools / name).symlink_to(os.path.join(directory, name))
    async with watchdog(tmp_path, ("dash",), api, pod_id, PATH=str(tools)) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == (
            "failed missing curl: the image has no curl to reach Runpod's API\n"
        )
        await trio.sleep(0.3)
        assert dog.process.returncode is None
    assert api.calls(pod_id) == []
