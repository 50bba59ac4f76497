"""The pod's watchdog script under sh, dash and busybox sh, against the fake API on loopback.

Real clock and real processes; fractions of a second stand for the minutes of a real pod,
and a few seconds for the half hour of a cost cap.
"""

import json
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import trio

from overbrainer.runpod.clocks import parse_http_date
from overbrainer.runpod.pod_scripts import COST_CAP_NEAR, WATCHDOG, script_text
from overbrainer.testing.faketime import Jumping, skewed
from overbrainer.testing.runpod_api import FAKE_URL, FakeRunpod, serve_loopback
from overbrainer.testing.sshd import free_port

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
    files: tuple[str, ...] = (),
    watch_ps: bool = False,
    clock: dict[str, str] | None = None,
    **settings: str,
) -> AsyncIterator[Watchdog]:
    """Run the packaged watchdog.sh for ``pod_id``; ``files`` are markers to create first;
    ``clock`` is libfaketime's environment for the pod's clock (see :func:`pod_clock`)."""
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
        "OVERBRAINER_MAX_SECONDS": "3600",
        "OVERBRAINER_BOOT_GRACE": "60",
        "OVERBRAINER_RETRIEVE_GRACE": "60",
        "OVERBRAINER_INTERVAL": INTERVAL,
        "OVERBRAINER_READ_ATTEMPTS": "3",
        "OVERBRAINER_RETRY_DELAY": "0.1",
        "OVERBRAINER_HTTP_TIMEOUT": "5",
        "OVERBRAINER_KEEP": "0",
        **(clock or {}),
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


@pytest.mark.parametrize("value", ["", "1h", "-5"])
async def test_a_missing_bound_fails_the_verdict_and_deletes_the_pod(tmp_path, api, value):
    pod_id = await api.create_pod()
    async with watchdog(tmp_path, ("dash",), api, pod_id, OVERBRAINER_MAX_SECONDS=value) as dog:
        await _deleted(api, dog, pod_id)
        assert dog.verdict() == "failed bad settings: OVERBRAINER_MAX_SECONDS\n"
    assert "bad settings OVERBRAINER_MAX_SECONDS" in dog.log()


# --- the rules -------------------------------------------------------------------------


def _delete_times(api: Api, pod_id: str) -> list[float]:
    return [
        r.time
        for r in api.fake.requests
        if r.method == "DELETE" and r.path == f"/pods/{pod_id}" and r.auth != "account"
    ]


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_deletes_max_seconds_after_the_pods_creation_by_runpods_clock(tmp_path, api, shell):
    pod_id = await api.create_pod()
    created = trio.current_time()
    # The image took its time: the watchdog starts 2 s after the pod's creation. A running
    # job does not hold the pod past its deadline.
    await trio.sleep(2.0)
    async with watchdog(
        tmp_path, shell, api, pod_id, files=("job.pid",), OVERBRAINER_MAX_SECONDS="4"
    ) as dog:
        await _until(dog.verdict)
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id, timeout=8.0)
    # 4 s after the creation, not after the watchdog's start (6 s): Runpod's Date and
    # createdAt have whole seconds, so the age it reads is right to within a second.
    deleted = _delete_times(api, pod_id)[0] - created
    assert 2.9 < deleted < 5.6, deleted
    log = dog.log()
    assert re.search(rf"pod {pod_id} was created [123]s before Runpod's answer", log), log
    assert "deleted by 4s after its creation, counted on the pod" in log
    assert "deleting pod" in log and "past the deadline, 4s after the pod's creation" in log
    assert api.calls(pod_id)[-2:] == [f"DELETE /pods/{pod_id} 204", f"DELETE /pods/{pod_id} 404"]
    assert f"pod {pod_id} is gone (HTTP 404)" in log


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_an_older_createdat_inside_the_pods_answer_does_not_shorten_the_bound(
    tmp_path, api, shell
):
    # Objects inside a pod's answer may have their own createdAt, before the pod's own or
    # after it in the text: the pod's is the latest. (Not a `cluster`: that would make the
    # pod a cluster's member, whose watchdog deletes its cluster.)
    pod_id = await api.create_pod()
    created = trio.current_time()
    made = api.fake.wall(api.fake.pod(pod_id).created_at).isoformat().replace("+00:00", "Z")
    answer = {
        "machine": {"id": "m1", "createdAt": "2020-01-01T00:00:00Z"},
        "id": pod_id,
        "createdAt": made,
        "template": {"id": "t1", "createdAt": "2019-06-01T00:00:00.5Z"},
    }
    api.fake.fail_next("GET /pods/{id}", 200, raw_body=json.dumps(answer).encode())
    async with watchdog(
        tmp_path, shell, api, pod_id, files=("job.pid",), OVERBRAINER_MAX_SECONDS="3"
    ) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        await trio.sleep(1.0)
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id, timeout=8.0)
    deleted = _delete_times(api, pod_id)[0] - created
    assert 1.9 < deleted < 4.6, deleted
    assert f"(createdAt {made}, Date " in dog.log()


async def test_without_runpods_date_it_counts_from_its_own_start(tmp_path, api):
    pod_id = await api.create_pod()
    created = trio.current_time()
    await trio.sleep(1.0)
    api.fake.send_date = False
    started = trio.current_time()
    async with watchdog(
        tmp_path, ("dash",), api, pod_id, files=("job.pid",), OVERBRAINER_MAX_SECONDS="1.5"
    ) as dog:
        await _deleted(api, dog, pod_id)
    deleted = _delete_times(api, pod_id)[0]
    assert deleted - started >= 1.5 and deleted - created >= 2.5
    assert "Runpod's answer does not tell the pod's age" in dog.log()
    assert "past the deadline, 1.500s after the watchdog started" in dog.log()


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


# --- the pod's own clock ---------------------------------------------------------------


def _stamps(log: str) -> list[datetime]:
    """The times of the watchdog's log lines (the pod's wall clock)."""
    return [
        datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00"))
        for line in log.splitlines()
        if line[:1].isdigit()
    ]


@pytest.mark.parametrize(
    ("shell", "clock"),
    [*((shell, "jumps 2h") for shell in SHELLS), (("dash",), "3h behind"), (("dash",), "2y ahead")],
    ids=[*(f"{name}-jumps" for name in SHELL_IDS), "dash-behind", "dash-ahead"],
)
async def test_the_pods_own_clock_neither_shortens_nor_stretches_the_bound(
    tmp_path, api, shell, clock
):
    jumping = Jumping(tmp_path / "faketime") if clock == "jumps 2h" else None
    env = (
        jumping.env
        if jumping is not None
        else skewed({"3h behind": "-3h", "2y ahead": "+730d"}[clock])
    )
    pod_id = await api.create_pod()
    created = trio.current_time()
    real = datetime.now(UTC)
    async with watchdog(
        tmp_path, shell, api, pod_id, files=("job.pid",), OVERBRAINER_MAX_SECONDS="4", clock=env
    ) as dog:
        await _until(dog.verdict)
        if jumping is not None:
            jumping.jump("+2h")  # a wall clock that counted would delete at once
        await trio.sleep(1.6)
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id, timeout=8.0)
    deleted = _delete_times(api, pod_id)[0] - created
    assert 2.9 < deleted < 5.6, deleted
    log = dog.log()
    assert "past the deadline, 4s after the pod's creation" in log
    # The pod's clock really was off (the log's times are its wall clock's).
    stamps = _stamps(log)
    expected = {"3h behind": -3 * 3600, "2y ahead": 730 * 86400}
    if jumping is not None:
        assert abs((stamps[0] - real).total_seconds()) < 60
        assert 2 * 3600 - 60 < (stamps[-1] - stamps[0]).total_seconds() < 2 * 3600 + 60
    else:
        assert abs((stamps[0] - real).total_seconds() - expected[clock]) < 60


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
def test_dates_are_read_as_python_reads_them(tmp_path, shell):
    # The watchdog's own date arithmetic, taken out of the script and run in each shell.
    text = script_text(WATCHDOG)
    functions = []
    for name in ("to_ms", "digits", "epoch"):
        start = text.index(f"\n{name}() {{\n") + 1
        functions.append(text[start : text.index("\n}\n", start) + 3])
    h = timedelta(hours=1)
    table: list[tuple[str, datetime | None]] = [
        ("2026-03-13T20:00:00Z", datetime(2026, 3, 13, 20, tzinfo=UTC)),
        ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=UTC)),
        ("2026-03-13T20:00:00.123456Z", datetime(2026, 3, 13, 20, tzinfo=UTC)),
        ("2026-03-13 21:30:00+01:30", datetime(2026, 3, 13, 20, tzinfo=UTC)),
        ("2026-03-13T15:00:00-0500", datetime(2026, 3, 13, 20, tzinfo=UTC)),
        ("2000-02-29T12:00:00Z", datetime(2000, 2, 29, 12, tzinfo=UTC)),
        ("2100-03-01T00:00:00z", datetime(2100, 3, 1, tzinfo=UTC)),
        ("2026-03-13T20:00:00", datetime(2026, 3, 13, 20, tzinfo=UTC)),  # UTC, as parsed above
        ("Fri, 13 Mar 2026 20:00:00 GMT", datetime(2026, 3, 13, 20, tzinfo=UTC)),
        ("Sun, 08 Feb 2026 08:09:09 GMT", datetime(2026, 2, 8, 8, 9, 9, tzinfo=UTC)),
        ("Thu, 29 Feb 2024 23:59:59 GMT", datetime(2024, 2, 29, 23, 59, 59, tzinfo=UTC)),
        ("Mon, 01 Dec 2025 00:00:00 GMT", datetime(2025, 12, 1, tzinfo=UTC)),
        ("2026-12-31T23:30:00-01:00", datetime(2027, 1, 1, tzinfo=UTC) + 0.5 * h),
        ("garbage", None),
        ("", None),
        ("2026-13-01T00:00:00Z", None),
        ("2026-03-13T24:00:00Z", None),
        ("2026-03-13T20:00:00 +0000 UTC", None),
        ("Fri, 13 Mar 2026 20:00:00 PST", None),
        ("Fri, 13 Foo 2026 20:00:00 GMT", None),
    ]
    script = tmp_path / "dates.sh"
    script.write_text(
        "".join(functions)
        + 'for t in "$@"; do if epoch "$t"; then echo "$epoch"; else echo bad; fi; done\n'
    )
    done = subprocess.run(
        [*shell, str(script), *(text for text, _ in table)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        str(int(moment.timestamp())) if moment else "bad" for _, moment in table
    ]
    # The HTTP dates as the client reads them, too.
    for text, moment in table:
        if text.endswith("GMT") and moment is not None:
            assert parse_http_date(text) == moment
    assert done.stderr == ""


# --- the cost cap ------------------------------------------------------------------------
# A pod on a $2/h GPU with a $1 cap is deleted 30 min after its creation; here, 450 times
# faster: a $900/h GPU and a $1 cap, deleted 4 s after its creation.

A40 = "NVIDIA A40"


async def _priced(price: float) -> AsyncIterator[Api]:
    fake = FakeRunpod(provisioning_seconds=0.0, starting_seconds=0.0, gpu_prices={A40: price})
    account = fake.add_account(balance=1e6)
    async with serve_loopback(fake) as base:
        yield Api(fake, base, account)


@pytest.fixture
async def priced_api() -> AsyncIterator[Api]:
    """Pods bill $900/h: a $1 cap is reached 4 s after a pod's creation."""
    async for made in _priced(900.0):
        yield made


@pytest.fixture
async def free_api() -> AsyncIterator[Api]:
    """Pods whose answer gives no rate (a cost of 0)."""
    async for made in _priced(0.0):
        yield made


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_pod_is_deleted_when_it_has_cost_its_cap_after_saying_it_is_near(
    tmp_path, priced_api, shell
):
    api = priced_api
    pod_id = await api.create_pod()
    created = trio.current_time()
    # The image took its time: the watchdog starts 1 s after the pod's creation. A running
    # job does not hold the pod past its cap, and nothing else guards it (no overbrainer).
    await trio.sleep(1.0)
    async with watchdog(
        tmp_path, shell, api, pod_id, files=("job.pid",), OVERBRAINER_MAX_COST_USD="1"
    ) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id, timeout=8.0)
    # $1 at $900/h is 4 s after the creation, counted from Runpod's createdAt and Date
    # (whole seconds: right to within a second), checked every INTERVAL.
    deleted = _delete_times(api, pod_id)[0] - created
    assert 4.0 - 1.0 - float(INTERVAL) < deleted < 4.0 + 1.0 + 3 * float(INTERVAL), deleted
    log = dog.log()
    assert (
        "cost cap $1.00 at $900.00/h (the pod's rate by Runpod): near at 3.800s, deleted by "
        "4s after the pod's creation, counted on the pod" in log
    ), log
    near = log.index("cost_cap_near: the pod has cost 95 % of its cap of $1.00 at $900.00/h")
    deleting = log.index(
        f"deleting pod {pod_id}: cost_cap: the pod has cost its cap of $1.00 at $900.00/h, "
        "4s after the pod's creation"
    )
    assert near < deleting
    assert log.count("cost_cap_near:") == 1
    cap, rate, age = (dog.run_dir / COST_CAP_NEAR).read_text().split()
    assert (cap, rate) == ("1000000", "900000000") and 3800 <= int(age) < 4000


async def test_the_deadline_still_comes_first_when_it_is_earlier(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_SECONDS="2",
        OVERBRAINER_MAX_COST_USD="1",
    ) as dog:
        await _deleted(api, dog, pod_id, timeout=8.0)
    log = dog.log()
    assert "past the deadline, 2s after the pod's creation" in log
    assert "cost_cap" not in log.split("deleting pod")[1]
    assert not (dog.run_dir / COST_CAP_NEAR).exists()


@pytest.mark.parametrize("value", ["", "abc", "0", "-1", "1e3", "2000000", "0.0000001"])
async def test_a_bad_cap_deletes_the_pod_at_once(tmp_path, priced_api, value):
    api = priced_api
    pod_id = await api.create_pod()
    start = trio.current_time()
    async with watchdog(
        tmp_path, ("dash",), api, pod_id, files=("job.pid",), OVERBRAINER_MAX_COST_USD=value
    ) as dog:
        await _deleted(api, dog, pod_id)
        assert dog.verdict() == "failed bad settings: OVERBRAINER_MAX_COST_USD\n"
    assert _delete_times(api, pod_id)[0] - start < 2.0
    assert "bad settings OVERBRAINER_MAX_COST_USD" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_cap_without_a_rate_deletes_the_pod_at_once(tmp_path, free_api, shell):
    pod_id = await free_api.create_pod()
    async with watchdog(
        tmp_path, shell, free_api, pod_id, files=("job.pid",), OVERBRAINER_MAX_COST_USD="1"
    ) as dog:
        await _deleted(free_api, dog, pod_id)
        assert dog.verdict() == (
            "failed bad settings: OVERBRAINER_MAX_COST_USD (no rate to count it at)\n"
        )
    assert "the pod's rate is unknown" in dog.log()


async def test_without_runpods_rate_the_expected_one_bounds_the_pod(tmp_path, free_api):
    pod_id = await free_api.create_pod()
    created = trio.current_time()
    async with watchdog(
        tmp_path,
        ("dash",),
        free_api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_COST_USD="0.5",
        OVERBRAINER_COST_PER_HOUR="600",
    ) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        await _deleted(free_api, dog, pod_id, timeout=8.0)
    # $0.5 at $600/h: 3 s.
    deleted = _delete_times(free_api, pod_id)[0] - created
    assert 3.0 - 1.0 - float(INTERVAL) < deleted < 3.0 + 1.0 + 3 * float(INTERVAL), deleted
    assert "(the rate overbrainer expected (Runpod's answer gives none))" in dog.log()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_kept_pod_whose_job_started_outlives_its_cap(tmp_path, priced_api, shell):
    api = priced_api
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_KEEP="1",
        OVERBRAINER_MAX_COST_USD="0.25",
    ) as dog:
        await _until(dog.verdict)
        # $0.25 at $900/h is 1 s: well past it, the pod is still there.
        await trio.sleep(3.0)
        assert dog.process.returncode is None
        assert api.fake.status(pod_id) == "RUNNING"
    assert _delete_times(api, pod_id) == []
    assert (
        "this pod is never deleted by the watchdog, not even at its cost cap ($0.25)" in dog.log()
    )


# --- the save before the bound -------------------------------------------------------------
# The watchdog asks a running job to save a checkpoint and stop (the request `train stop`
# writes, read by the metrics plugin after every step) some time before the deadline, and
# when the cost cap is near; once, whatever follows.

STOP_REQUEST = "stop_request"


async def _appeared(path: Path, timeout: float = 8.0) -> float:
    """Wait for ``path`` to exist; the trio time it was seen."""
    await _until(path.exists, timeout)
    return trio.current_time()


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_the_job_is_asked_to_save_once_a_set_time_before_the_deadline(tmp_path, api, shell):
    pod_id = await api.create_pod()
    created = trio.current_time()
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_SECONDS="4",
        OVERBRAINER_SAVE_BEFORE="2",
    ) as dog:
        request = dog.run_dir / STOP_REQUEST
        await _until(dog.verdict)
        asked = await _appeared(request) - created
        # 2 s before the 4 s deadline, counted from Runpod's createdAt (whole seconds).
        assert 2.0 - 1.0 - float(INTERVAL) < asked < 2.0 + 1.0 + 3 * float(INTERVAL), asked
        assert request.read_text() == "deadline\n"
        assert api.fake.status(pod_id) == "RUNNING"
        # The job took the request (the plugin leaves it; here it is gone): never asked again.
        request.unlink()
        await _deleted(api, dog, pod_id, timeout=8.0)
        assert not request.exists()
    log = dog.log()
    assert "the job is asked to save a checkpoint and stop 2s before the deadline" in log
    assert log.count("save_requested") == 1
    assert "save_requested (deadline): the pod's deadline is " in log
    assert "asked the job to save a checkpoint and stop" in log
    assert log.index("save_requested") < log.index("past the deadline")
    assert not list(dog.run_dir.glob(".stop_request*"))


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_the_job_is_asked_to_save_once_when_the_cost_cap_is_near(tmp_path, priced_api, shell):
    api = priced_api
    pod_id = await api.create_pod()
    created = trio.current_time()
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_COST_USD="1",
        OVERBRAINER_SAVE_BEFORE="0",
    ) as dog:
        request = dog.run_dir / STOP_REQUEST
        asked = await _appeared(request) - created
        assert request.read_text() == "cost_cap\n"
        # Near at 95 % of the 4 s the $1 cap buys at $900/h: 3.8 s after the creation.
        assert 3.8 - 1.0 - float(INTERVAL) < asked < 3.8 + 1.0 + 3 * float(INTERVAL), asked
        assert (dog.run_dir / COST_CAP_NEAR).exists()
        request.unlink()
        await _deleted(api, dog, pod_id, timeout=8.0)
        assert not request.exists()
    log = dog.log()
    assert log.count("save_requested") == 1
    assert "save_requested (cost_cap): the pod has cost 95 % of its cap; it is deleted " in log
    assert log.index("cost_cap_near:") < log.index("save_requested") < log.index("deleting pod")
    assert "before the deadline" not in log  # 0: only at the cost cap


async def test_a_request_already_there_is_left_as_it_is(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("busybox", "sh"),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_SECONDS="3",
        OVERBRAINER_SAVE_BEFORE="2",
    ) as dog:
        request = dog.run_dir / STOP_REQUEST
        request.write_text("")  # `train stop` asked first
        await _until(lambda: "save_requested" in dog.log())
        assert request.read_text() == ""
        await _deleted(api, dog, pod_id, timeout=8.0)
    log = dog.log()
    assert log.count("save_requested") == 1
    assert "the job was already asked to save a checkpoint and stop" in log


@pytest.mark.parametrize("markers", [(), ("job.pid", "exit_code"), ("job.pid", "cancelled")])
async def test_a_job_not_running_is_not_asked(tmp_path, api, markers):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=markers,
        OVERBRAINER_MAX_SECONDS="2",
        OVERBRAINER_SAVE_BEFORE="1.5",
        OVERBRAINER_RETRIEVE_GRACE="60",
    ) as dog:
        await _deleted(api, dog, pod_id, timeout=8.0)
        assert not (dog.run_dir / STOP_REQUEST).exists()
    assert "save_requested" not in dog.log()


async def test_a_job_that_starts_after_the_save_time_is_asked_then(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        OVERBRAINER_MAX_SECONDS="5",
        OVERBRAINER_SAVE_BEFORE="4.5",
    ) as dog:
        await _until(dog.verdict)
        await trio.sleep(1.5)
        assert not (dog.run_dir / STOP_REQUEST).exists()
        (dog.run_dir / "job.pid").write_text("1\n")
        started = trio.current_time()
        assert await _appeared(dog.run_dir / STOP_REQUEST, 2.0) - started < 1.0
        assert api.fake.status(pod_id) == "RUNNING"


@pytest.mark.parametrize("value", ["abc", "4", "9"])
async def test_a_save_time_that_leaves_no_time_asks_nothing_and_the_deadline_holds(
    tmp_path, api, value
):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_MAX_SECONDS="4",
        OVERBRAINER_SAVE_BEFORE=value,
    ) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        await _deleted(api, dog, pod_id, timeout=8.0)
        assert not (dog.run_dir / STOP_REQUEST).exists()
    log = dog.log()
    assert "the job is not asked to save before" in log
    assert "save_requested" not in log
    assert "past the deadline, 4s after the pod's creation" in log


def test_the_watchdog_writes_the_request_where_the_plugin_looks() -> None:
    from overbrainer.train.axolotl import STOP_FILE, job_environment

    assert f"\nSTOP_REQUEST={STOP_FILE}\n" in script_text(WATCHDOG)
    # The job runs in the run directory: the plugin's path is relative to it.
    assert job_environment()["OVERBRAINER_STOP"] == STOP_FILE == STOP_REQUEST


# --- a stalled job, with nothing following it ------------------------------------------

METRICS = "metrics.jsonl"
LINE = '{"event":"log","step":1}\n'


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_hung_job_with_the_laptop_gone_is_asked_to_save_then_its_pod_deleted(
    tmp_path, api, shell
):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        shell,
        api,
        pod_id,
        files=("job.pid", METRICS),
        OVERBRAINER_STALL_SECONDS="1",
        OVERBRAINER_FIRST_STEP_SECONDS="3",
        OVERBRAINER_STALL_GRACE="1",
    ) as dog:
        request = dog.run_dir / STOP_REQUEST
        await _until(dog.verdict)
        # The job wrote its lines, then hangs: nothing grows the metrics file again.
        hung = trio.current_time()
        asked = await _appeared(request) - hung
        assert request.read_text() == "stall\n"
        assert api.fake.status(pod_id) == "RUNNING"
        await _deleted(api, dog, pod_id, timeout=8.0)
        gone = trio.current_time() - hung
    # Asked once the stall bound passed, deleted a grace later: at most stall + grace
    # and a few checks of 0.1 s (and the processes' start).
    assert 1.0 - 2 * float(INTERVAL) <= asked < 1.0 + 1.0, asked
    assert 2.0 - 2 * float(INTERVAL) <= gone < 2.0 + 1.5, gone
    log = dog.log()
    assert "is stalled: asked to save and stop, the pod deleted 1s later" in log
    assert log.count("save_requested (stall): the job wrote no new metrics line for ") == 1
    assert "deleting pod " + pod_id + ": stall: the job wrote no new metrics line for " in log
    assert "and did not stop within 1s of the request to save and stop" in log
    assert log.index("save_requested (stall)") < log.index("deleting pod")


async def test_a_job_that_keeps_writing_lines_is_never_stalled(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_STALL_SECONDS="0.5",
        OVERBRAINER_FIRST_STEP_SECONDS="0.5",
        OVERBRAINER_STALL_GRACE="0.3",
    ) as dog:
        metrics = dog.run_dir / METRICS
        await _until(dog.verdict)
        for _ in range(12):  # a line every 0.2 s for 2.4 s: more than the bound and grace
            with metrics.open("a") as handle:
                handle.write(LINE)
            await trio.sleep(0.2)
        assert not (dog.run_dir / STOP_REQUEST).exists()
        assert api.fake.status(pod_id) == "RUNNING"
        # Then it hangs.
        await _deleted(api, dog, pod_id, timeout=8.0)
    assert "stall: the job wrote no new metrics line" in dog.log()


async def test_before_its_first_line_a_job_has_the_first_step_allowance(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("busybox", "sh"),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_STALL_SECONDS="0.3",
        OVERBRAINER_FIRST_STEP_SECONDS="2",
        OVERBRAINER_STALL_GRACE="0.3",
    ) as dog:
        started = trio.current_time()
        request = dog.run_dir / STOP_REQUEST
        asked = await _appeared(request) - started
        assert 2.0 - 2 * float(INTERVAL) <= asked < 2.0 + 1.0, asked
        await _deleted(api, dog, pod_id, timeout=8.0)
    assert "stall: no metrics line in the " in dog.log()
    assert "since the job started (bound 2s)" in dog.log()


async def test_a_job_that_writes_again_after_the_request_is_no_longer_stalled(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=("job.pid", METRICS),
        OVERBRAINER_STALL_SECONDS="0.5",
        OVERBRAINER_STALL_GRACE="1.5",
    ) as dog:
        request = dog.run_dir / STOP_REQUEST
        await _appeared(request)
        # It answers: its stopped line (it saves and ends; the retrieve grace rules then).
        with (dog.run_dir / METRICS).open("a") as handle:
            handle.write('{"event":"stopped","step":1}\n')
        await _until(lambda: "no longer stalled" in dog.log())
        assert api.fake.status(pod_id) == "RUNNING"
        (dog.run_dir / "exit_code").write_text("0\n")
        await trio.sleep(2.0)
        assert api.fake.status(pod_id) == "RUNNING"
    assert "deleting pod" not in dog.log()


@pytest.mark.parametrize("value", ["abc", "0", "-1"])
async def test_a_bad_stall_bound_disables_the_rule_and_says_so(tmp_path, api, value):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("dash",),
        api,
        pod_id,
        files=("job.pid", METRICS),
        OVERBRAINER_STALL_SECONDS=value,
    ) as dog:
        await _until(dog.verdict)
        assert dog.verdict() == "ready\n"
        await trio.sleep(0.5)
        assert api.fake.status(pod_id) == "RUNNING"
    assert "OVERBRAINER_STALL_SECONDS is not a positive number of seconds" in dog.log()


async def test_once_training_is_over_saving_and_merging_have_the_first_step_bound(tmp_path, api):
    pod_id = await api.create_pod()
    async with watchdog(
        tmp_path,
        ("busybox", "sh"),
        api,
        pod_id,
        files=("job.pid",),
        OVERBRAINER_STALL_SECONDS="0.4",
        OVERBRAINER_FIRST_STEP_SECONDS="2",
        OVERBRAINER_STALL_GRACE="0.2",
    ) as dog:
        await _until(dog.verdict)
        metrics = dog.run_dir / METRICS
        metrics.write_text(LINE + '{"event":"phase","time":1.0,"phase":"merging"}\n')
        written = trio.current_time()
        request = dog.run_dir / STOP_REQUEST
        asked = await _appeared(request) - written
        assert 2.0 - 2 * float(INTERVAL) <= asked < 2.0 + 1.0, asked
        await _deleted(api, dog, pod_id, timeout=8.0)
