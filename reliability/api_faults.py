"""Faults of the Runpod API: every endpoint the client uses × every way an answer goes
wrong, once (a blip the client must ride out) and for good (an outage it must report).

Each case runs on trio's MockClock against the fake Runpod API in-process and the pod
machines in memory (``overbrainer/testing/fake_executor.py``), through the real
provisioning walk and the real pod deletion: create a run's pod, wait until it is ready,
end it. Hours of retries and waits run in milliseconds. After the fault, what a user does
next — ``pod rm``, here the same delete-and-confirm primitive — runs with the API healthy
again.

Invariants: the walk ends with a pod or with an error the CLI reports (an
``OverbrainerError``, never another exception, never a canary key in its text); every pod
alive on the account is in the run's log with the bound its watchdog enforces; after the
recovery no pod of the run is left billing; the projections equal the fold of the log.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reliability.core import Case

ENDPOINTS = ("POST /pods", "GET /pods", "GET /pods/{id}", "DELETE /pods/{id}")
KINDS = (
    "429 Retry-After",
    "500",
    "503",
    "timeout",
    "connection reset",
    "malformed JSON",
    "404 not Runpod's",
    "unknown status",
)
SPANS = ("once", "always")
# One answer that ends a pod's walk by design: a delete that a proxy answers with its own
# 404 is not retried (the pod may still be there, and the user is told to `pod rm` it).
_FATAL_ONCE = {("DELETE /pods/{id}", "404 not Runpod's"), ("POST /pods", "404 not Runpod's")}
_ALWAYS = 10_000
_SHOW_ERRORS = bool(os.environ.get("RELIABILITY_SHOW_ERRORS"))


def _route(method: str, path: str) -> str:
    parts = path.removeprefix("/v2").strip("/").split("/")
    if len(parts) >= 2:
        parts[1] = "{id}"
    return f"{method} /" + "/".join(parts)


def _faulty_transport(inner: Any, route: str, kind: str, times: int) -> Any:
    import httpx

    class Faulty(httpx.AsyncBaseTransport):
        """The fake's transport with one kind of fault on one route, ``times`` times."""

        def __init__(self) -> None:
            self.left = times
            self.hits = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if self.left <= 0 or _route(request.method, request.url.path) != route:
                return await inner.handle_async_request(request)
            self.left -= 1
            self.hits += 1
            return await _misbehave(inner, request, kind)

    return Faulty()


async def _misbehave(inner: Any, request: Any, kind: str) -> Any:
    """Answer ``request`` the way ``kind`` says; the hostile ones let the fake act first
    (the pod is created or deleted, and then the answer is lost or garbled)."""
    import httpx

    def problem(status: int, **headers: str) -> httpx.Response:
        body = {"title": "Error", "status": status, "detail": "scripted fault"}
        return httpx.Response(
            status,
            headers={"content-type": "application/problem+json", **headers},
            content=json.dumps(body).encode(),
            request=request,
        )

    if kind == "429 Retry-After":
        return problem(429, **{"retry-after": "7"})
    if kind in ("500", "503"):
        return problem(int(kind))
    if kind == "404 not Runpod's":
        return httpx.Response(
            404,
            headers={"content-type": "text/html"},
            content=b"<html><body>404 Not Found (nginx)</body></html>",
            request=request,
        )
    answer = await inner.handle_async_request(request)
    if kind == "timeout":
        raise httpx.ReadTimeout("scripted read timeout", request=request)
    if kind == "connection reset":
        raise httpx.ReadError("[Errno 104] Connection reset by peer", request=request)
    body = await answer.aread()
    if kind == "malformed JSON":
        return httpx.Response(
            answer.status_code,
            headers={"content-type": "application/json"},
            content=body[: max(1, len(body) // 2)] or b"{",
            request=request,
        )
    if kind == "unknown status":
        if not body:
            # A bodiless answer (a delete) gets an HTTP status nobody documented.
            return httpx.Response(299, request=request)
        data = json.loads(body)
        for pod in data.get("pods", [data]) if isinstance(data, dict) else []:
            if isinstance(pod, dict) and "status" in pod:
                pod["status"] = "HIBERNATING"
        return httpx.Response(
            answer.status_code,
            headers={"content-type": "application/json"},
            content=json.dumps(data).encode(),
            request=request,
        )
    raise ValueError(kind)


@dataclass
class _Outcome:
    violations: list[str]


def run_fault(endpoint: str, kind: str, span: str) -> list[str]:
    """One case: the walk and the end of a pod with the fault on; recovery; checks."""
    import trio
    import trio.testing

    with tempfile.TemporaryDirectory(prefix="ob-fault-") as tmp:
        project = Path(tmp)
        outcome = _Outcome([])
        trio.run(
            _scenario,
            project,
            endpoint,
            kind,
            _ALWAYS if span == "always" else 1,
            outcome,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
        return outcome.violations


async def _scenario(project: Path, endpoint: str, kind: str, times: int, outcome: _Outcome) -> None:
    from overbrainer.errors import OverbrainerError
    from overbrainer.targets.runpod.delete import delete_pod
    from overbrainer.targets.runpod.provision import open_provisioned
    from overbrainer.testing.fake_executor import CANARY_KEY, pod_rig, runpod_target

    found = outcome.violations
    async with pod_rig(project) as rig:
        assert rig.spy is not None
        faulty = _faulty_transport(rig.spy.inner, endpoint, kind, times)
        rig.spy.inner = faulty
        spec = runpod_target(["NVIDIA A40", "NVIDIA GeForce RTX 4090"])
        run_id = await rig.new_run()
        error: BaseException | None = None
        try:
            async with open_provisioned(rig.context, run_id, spec, keep=False) as ready:
                pod_id = ready.pod.pod_id
            await delete_pod(rig.context, run_id, pod_id, "retrieved")
        except OverbrainerError as failure:
            error = failure
        except Exception as failure:  # the CLI would print a traceback
            found.append(f"an unexpected {type(failure).__name__}: {failure}")
            error = failure
        if faulty.hits == 0:
            found.append(f"harness: the fault on {endpoint} was never hit")
        if error is not None and times == 1 and (endpoint, kind) not in _FATAL_ONCE:
            found.append(f"a single {kind} on {endpoint} failed the pod's walk: {error}")
        if _SHOW_ERRORS and error is not None:
            print(f"      [{endpoint} {kind} x{times}] {error}")
        if error is not None and kind == "404 not Runpod's" and "BASE_URL" not in str(error):
            found.append(
                f"a foreign 404 on {endpoint} is reported without its likely cause: {error}"
            )
        if error is not None and CANARY_KEY in str(error):
            found.append("the error message holds the API key")
        # Before any recovery: every pod alive on the account is known and bounded.
        found += _guarded(rig, run_id)
        # What the user does next (`pod rm`): delete what is left, with the API healthy.
        faulty.left = 0
        state = rig.state(run_id)
        for pod_id, status in state.pod.pods.items():
            if status != "deleted":
                try:
                    await delete_pod(rig.context, run_id, pod_id, "requested", by="pod_rm")
                except OverbrainerError as failure:
                    found.append(f"recovery could not delete pod {pod_id}: {failure}")
        for pod in rig.fake.live_pods():
            found.append(f"pod {pod.id} ({pod.name}) still bills after recovery")
        found += _log_agrees(rig, project, run_id)
        found += _no_secret(project, rig.err.getvalue(), CANARY_KEY)


def _guarded(rig: Any, run_id: str) -> list[str]:
    """Every live pod on the account is this run's, recorded in its log, with the bound its
    watchdog keeps (max_hours from its creation)."""
    from overbrainer.runpod.pod_scripts import ENV_MAX_SECONDS, RUN_MARKER

    found = []
    state = rig.state(run_id)
    for pod in rig.fake.live_pods():
        if pod.env.get(RUN_MARKER) != run_id:
            found.append(f"pod {pod.id} carries no marker of run {run_id}")
        elif pod.id not in state.pod.pods and pod.id not in state.pod.strays:
            found.append(f"pod {pod.id} bills but the log of run {run_id} does not know it")
        elif not pod.env.get(ENV_MAX_SECONDS):
            found.append(f"pod {pod.id} bills with no bound for its watchdog")
        elif not state.pod.may_bill():
            found.append(f"pod {pod.id} bills but the log says no pod of run {run_id} may")
    return found


def _log_agrees(rig: Any, project: Path, run_id: str) -> list[str]:
    from overbrainer.events.aggregate import fold

    records = rig.store.history(run_id)
    state = fold((r.event, r.at) for r in records)
    found = []
    for name, want in (("run.json", state.to_json()["run"]), ("pod.json", state.to_json()["pod"])):
        path = project / "runs" / run_id / name
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            found.append(f"{name} unreadable: {error}")
            continue
        if have != json.loads(json.dumps(want)):
            found.append(f"{name} differs from the fold of run {run_id}'s log")
    return found


def _no_secret(project: Path, output: str, key: str) -> list[str]:
    found = []
    if key in output:
        found.append("the API key was printed")
    for path in project.rglob("*"):
        if path.is_file() and key.encode() in path.read_bytes():
            found.append(f"the API key is in {path.relative_to(project)}")
    return found


def cases() -> list[Case]:
    """Every endpoint × every fault × once/always."""
    out = []
    for endpoint in ENDPOINTS:
        for kind in KINDS:
            for span in SPANS:
                out.append(
                    Case(
                        "faults",
                        f"runpod {endpoint} {kind} {span}",
                        _bind(run_fault, endpoint, kind, span),
                        weight=0.2,
                    )
                )
    return out


def _bind(fn: Callable[..., list[str]], *args: Any) -> Callable[[], list[str]]:
    return lambda: fn(*args)
