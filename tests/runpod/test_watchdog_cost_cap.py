"""The watchdog's cost cap under sh, dash and busybox sh, against the fake API on loopback.

A pod on a $2/h GPU with a $1 cap is deleted 30 min after its creation; here, 450 times
faster: a $900/h GPU and a $1 cap, deleted 4 s after its creation. Real clock and real
processes, as in ``test_watchdog.py``, whose harness this uses.
"""

from collections.abc import AsyncIterator

import pytest
import trio

from overbrainer.runpod.pod_scripts import COST_CAP_NEAR
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from tests.runpod.test_watchdog import (
    INTERVAL,
    SHELL_IDS,
    SHELLS,
    Api,
    _delete_times,
    _deleted,
    _until,
    watchdog,
)

A40 = "NVIDIA A40"


async def _api(price: float) -> AsyncIterator[Api]:
    fake = FakeRunpod(provisioning_seconds=0.0, starting_seconds=0.0, gpu_prices={A40: price})
    account = fake.add_account(balance=1e6)
    async with serve_loopback(fake) as base:
        yield Api(fake, base, account)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    """Pods bill $900/h: a $1 cap is reached 4 s after a pod's creation."""
    async for made in _api(900.0):
        yield made


@pytest.fixture
async def free_api() -> AsyncIterator[Api]:
    """Pods whose answer gives no rate (a cost of 0)."""
    async for made in _api(0.0):
        yield made


@pytest.mark.parametrize("shell", SHELLS, ids=SHELL_IDS)
async def test_a_pod_is_deleted_when_it_has_cost_its_cap_after_saying_it_is_near(
    tmp_path, api, shell
):
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
async def test_a_bad_cap_deletes_the_pod_at_once(tmp_path, api, value):
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
async def test_a_kept_pod_whose_job_started_outlives_its_cap(tmp_path, api, shell):
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
