"""The Runpod target's cases: the real ``overbrainer`` against the fake Runpod API on
loopback, whose pods come to life as fake pods (a real SSH server, the real bootstrap and
watchdog, the stand-in trainer) — all served from one trio loop on a thread of this
process, so a case can look at the account and act on it (a pod vanishing, its SSH port
changing) at a checkpoint.

Invariants added to the machine targets': every pod that exists on the account with a
run's marker is known to the run's log and, while it lives, guarded (its watchdog runs
with a deadline, or it is kept by request); after ``train attach`` — or ``pod rm``
where the run cannot continue — the run is final and no pod of it bills; no canary key is
in any pod's environment; every request sent for a run (its creates, and each naming one of
its pods or clusters) is one the published schema allows.

Clusters (``cluster train``: ``train`` with ``nodes = 2``): the fake's own records are read
(its default pod listing hides a cluster's members), so every member is one of the run's
pods above; right after the command, a cluster or member still billing is known to the
run's log and only while its job runs and can be followed (``train attach`` finishes it);
after recovery no cluster of the run is live. A checkpoint home is compared with rank 0's
(another node holds only its ranks' parts of each).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from overbrainer.testing.stand_in import TORCHRUN
from reliability.core import UNREACHED, Case
from reliability.invariants import (
    check_checkpoints,
    check_log_facts,
    check_outputs,
    check_projections,
    check_view,
    log_state,
    scan_files,
)
from reliability.machine import SIGNAL_CODES, Pauser, read_trace, said_next_step, short
from reliability.machine import detached_run as machine_detached_run
from reliability.world import (
    CANARIES,
    CANARY_API,
    STAND_IN,
    WRAPPER,
    Project,
    base_env,
    case_dir,
    project_paths,
)

A40 = "NVIDIA A40"
IMAGE = "ghcr.io/example/axolotl@sha256:" + "0" * 64
TOML = f"""

[targets.gpu]
kind = "runpod"
gpu_types = ["{A40}"]
max_hours = 1
image = "{IMAGE}"
retrieve_grace_minutes = 5
"""
# The stand-in trains a little longer on a pod: following polls every quarter second.
# Every run saves checkpoints (every 2 steps), so their retrieval while following — and its
# removal of the older ones — is traced and interrupted like the rest.
_KNOBS = {
    "FAKE_AXOLOTL_STEPS": "5",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.1",
    "FAKE_AXOLOTL_SAVE_EVERY": "2",
}
_ATTACH_KNOBS = {
    "FAKE_AXOLOTL_STEPS": "10",
    "FAKE_AXOLOTL_STEP_SECONDS": "0.2",
    "FAKE_AXOLOTL_SAVE_EVERY": "2",
}


CLUSTER_TRAIN = "cluster train"
"""``train`` on a cluster of :data:`NODES` pods: a command of its own for the cases (traced
apart, its checkpoints numbered apart), ``train`` for the product."""
NODES = 2


def product_command(command: str) -> str:
    """The command a case's command is to the product (``cluster train`` is ``train``)."""
    return "train" if command == CLUSTER_TRAIN else command


class RunpodWorld:
    """The fake account with living pods, and a template project whose target is it."""

    COMMANDS = ("train", "train attach", "train cancel", "pod rm")
    kind = "runpod"

    def __init__(self, base: Path, subdir: str | None = None) -> None:
        self.base = base
        self.subdir = subdir  # each case's project in a directory of this name
        self.template = base / "template"
        self.url = ""
        self.fake: Any = None
        self.pods: Any = None
        self.trio_token: Any = None
        self._stop: Any = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="fake-runpod")

    # -- the fake's thread --

    def _serve(self) -> None:
        import trio

        try:
            trio.run(self._main)
        except BaseException as error:  # reported by __enter__
            self._failed = error
            self._ready.set()

    async def _main(self) -> None:
        import trio

        from overbrainer.testing.fake_pod import fake_pods
        from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback

        fake = FakeRunpod(provisioning_seconds=0.2, starting_seconds=0.3, seed=None)
        fake.add_account(CANARY_API, balance=100_000.0)
        for gpu in fake.gpu_prices:
            fake.set_capacity(gpu, 10_000)
        async with (
            serve_loopback(fake) as url,
            fake_pods(fake, url, self.base / "pods") as pods,
        ):
            self.fake, self.pods, self.url = fake, pods, url
            self.trio_token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the fake's trio loop (its state is only touched there)."""
        import trio

        return trio.from_thread.run_sync(fn, *args, trio_token=self.trio_token)

    def __enter__(self) -> RunpodWorld:
        import subprocess

        self.base.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        self._ready.wait(60)
        if self._failed is not None or self.trio_token is None:
            raise RuntimeError(f"the fake Runpod did not start: {self._failed!r}")
        subprocess.run(
            [sys.executable, "-m", "overbrainer", "init", str(self.template)],
            env=base_env(),
            capture_output=True,
            check=True,
        )
        toml = self.template / "overbrainer.toml"
        text = toml.read_text().replace('target = "local"', 'target = "gpu"', 1)
        toml.write_text(text + TOML)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            with contextlib.suppress(Exception):
                self.call(self._stop.set)
        self._thread.join(60)

    # -- projects --

    def project(self, name: str) -> Project:
        """A fresh copy of the template for case ``name``."""
        path, venv = project_paths(case_dir(self.base, name), self.subdir)
        shutil.copytree(self.template, path)
        (venv / "bin").mkdir(parents=True)
        wrapper = venv / "bin" / "axolotl"
        wrapper.write_text(WRAPPER % {"python": sys.executable, "stand_in": STAND_IN})
        wrapper.chmod(0o755)
        # The stand-in torchrun beside it: what a cluster's node runs its job with.
        launcher = venv / "bin" / "torchrun"
        launcher.write_text(WRAPPER % {"python": sys.executable, "stand_in": TORCHRUN})
        launcher.chmod(0o755)
        env = base_env()
        env.update(
            {
                "OVERBRAINER_RUNPOD__BASE_URL": self.url,
                "OVERBRAINER_TARGETS__GPU__VENV": str(venv),
            }
        )
        project = Project(name, path, env, "runpod", path, venv)
        project.knobs(**_KNOBS)
        return project

    def account(self, run_id: str) -> list[dict[str, Any]]:
        """The pods on the account carrying ``run_id``'s marker, as the fake sees them."""
        from overbrainer.runpod.pod_scripts import RUN_MARKER

        def look() -> list[dict[str, Any]]:
            out = []
            for pod in self.fake.pods.values():
                if pod.env.get(RUN_MARKER) != run_id:
                    continue
                boots = self.pods.boots.get(pod.id, [])
                out.append(
                    {
                        "id": pod.id,
                        "name": pod.name,
                        "cluster": pod.cluster_id,
                        "rank": pod.rank,
                        "status": self.fake.status(pod.id),
                        "env": pod.env,
                        "watchdog": bool(boots) and boots[-1].container.returncode is None,
                        "booted": bool(boots),
                        "root": self.pods.root(pod.id),
                    }
                )
            return out

        result: list[dict[str, Any]] = self.call(look)
        return result

    def clusters(self, run_id: str) -> list[dict[str, Any]]:
        """The clusters made for ``run_id`` (named as its pods are), as the fake sees them:
        its own records, deleted ones included (the default pod listing hides members)."""

        def look() -> list[dict[str, Any]]:
            live = {cluster.id for cluster in self.fake.live_clusters()}
            return [
                {"id": cluster.id, "name": cluster.name, "live": cluster.id in live}
                for cluster in self.fake.clusters.values()
                if cluster.name.startswith(f"overbrainer-{run_id}-")
            ]

        result: list[dict[str, Any]] = self.call(look)
        return result

    def schema_errors(self, run_id: str) -> list[str]:
        """The requests sent for ``run_id`` (its creates, and every request naming one of
        its pods or clusters) that the published schema refuses."""
        from overbrainer.runpod.pod_scripts import RUN_MARKER

        def look() -> list[str]:
            ids = {pod.id for pod in self.fake.pods.values() if pod.env.get(RUN_MARKER) == run_id}
            ids |= {
                c.id
                for c in self.fake.clusters.values()
                if c.name.startswith(f"overbrainer-{run_id}-")
            }
            found = []
            for request in self.fake.requests:
                if not request.schema_errors:
                    continue
                body = request.json if isinstance(request.json, dict) else {}
                env = body.get("env") if isinstance(body.get("env"), dict) else {}
                named = set(request.path.split("/")) | set(request.query.values())
                if env.get(RUN_MARKER) == run_id or named & ids:
                    found.append(
                        f"run {run_id}: {request.method} {request.path} is not what the "
                        f"published schema allows: {request.schema_errors[:3]}"
                    )
            return found

        result: list[str] = self.call(look)
        return result

    def vanish_pods(self, run_id: str) -> None:
        """Every pod of the run disappears (a 404 from now on), as a machine lost."""
        for pod in self.account(run_id):
            if pod["status"] != "TERMINATED":
                self.call(self.fake.vanish, pod["id"])

    def move_endpoints(self, run_id: str) -> None:
        """Every running pod of the run gets a new SSH port."""
        import trio

        for pod in self.account(run_id):
            if pod["status"] == "RUNNING" and pod["booted"]:
                trio.from_thread.run(
                    _move_endpoint, self.fake, self.pods, pod["id"], trio_token=self.trio_token
                )

    # -- setting up a command --

    def detached_run(self, project: Project) -> str:
        """A run whose job is held running on its pod, and that no command follows (a pod
        takes longer to get there than a machine). The bounds only end a hang: a loaded
        machine (seen at a load of 13 on 2 cores) takes minutes."""
        return machine_detached_run(project, timeout=300)

    def setup(self, project: Project, command: str) -> tuple[tuple[str, ...], str | None]:
        """The arguments of ``command`` on a project made ready for it."""
        if command == "train":
            return ("train",), None
        if command == CLUSTER_TRAIN:
            project.env["OVERBRAINER_TARGETS__GPU__NODES"] = str(NODES)
            return ("train",), None
        if command == "train attach":
            project.knobs(**_ATTACH_KNOBS)
        run_id = self.detached_run(project)
        if command == "pod rm":
            return ("pod", "rm", run_id, "--force"), run_id
        return (*command.split(), run_id), run_id

    # -- tracing and cases --

    def trace(self, command: str, name: str) -> tuple[list[str], list[str]]:
        """Run ``command`` cleanly with a trace plan: its checkpoints and violations."""
        return self.run_case(command, None, "trace", name, None)

    def run_case(
        self,
        command: str,
        key: str | None,
        action: str,
        name: str,
        during: Callable[[Project], None] | None,
        breaks: tuple[str, ...] = (),
        how: str = "epipe",
    ) -> tuple[list[str], list[str]]:
        """Run ``command`` acting ``action`` at ``key`` (``breaks``: the streams broken
        there first, ``how`` as the checkpoint plan says), recover, check."""
        project = self.project(name)
        try:
            args, _ = self.setup(project, command)
            trace_path = project.path.parent / "trace.jsonl"
            plan: dict[str, Any] = {"trace": str(trace_path)}
            if key is not None:
                plan.update(at=key, action=action)
                if breaks:
                    plan.update({"break": list(breaks), "break_how": how})
            pauser = None
            if action == "pause":
                pause_file = project.path.parent / "paused"
                plan["pause_file"] = str(pause_file)
                assert during is not None
                pauser = Pauser(pause_file, lambda: during(project))
            if command == "train attach":
                project.hold.unlink(missing_ok=True)
            runs_before = set(project.runs())
            try:
                done = project.run(*args, plan=plan, timeout=150)
            finally:
                if pauser is not None:
                    pauser.close()
            keys = read_trace(trace_path)
            found: list[str] = []
            if pauser is not None and pauser.error is not None:
                found.append(f"harness: the injected fault failed: {pauser.error!r}")
            reached = key is None or key in keys
            if not reached:
                UNREACHED.append(name)
            allowed = _allowed(product_command(command), action, reached)
            if done.code not in allowed:
                found.append(
                    f"`{' '.join(done.args)}` exited {done.code} (expected {sorted(allowed)}): "
                    f"{done.said()[-700:]}"
                )
            if "stderr" not in breaks:
                found += said_next_step(done, action, sorted(set(project.runs()) - runs_before))
            stopped = action in SIGNAL_CODES
            if product_command(command) == "train" and stopped and key is not None and reached:
                found += self._no_create_after(project, command, key)
            found += self.check_guarded(project)
            found += self.recover_all(project)
            found += check_outputs(project.log)
            found += self.check_after(project, command, action)
            return keys, found
        finally:
            project.hold.unlink(missing_ok=True)
            project.close()

    def _no_create_after(self, project: Project, command: str, key: str) -> list[str]:
        """A Ctrl-C delivered before the create left (in the traced order) means no create
        is sent at all: provisioning checks for Ctrl-C before each create, so none leaves
        after one."""
        from overbrainer.runpod.pod_scripts import RUN_MARKER
        from reliability.machine import TRACED_ORDER

        order = TRACED_ORDER.get(("runpod", command), [])
        first_create = next(
            (i for i, k in enumerate(order) if "create_pod" in k or "create_cluster" in k), None
        )
        if first_create is None or key not in order or order.index(key) >= first_create:
            return []

        def creates() -> list[str]:
            sent = self.fake.create_requests() + self.fake.cluster_create_requests()
            return [
                str((r.json or {}).get("env", {}).get(RUN_MARKER))
                for r in sent
                if isinstance(r.json, dict)
            ]

        sent = self.call(creates)
        return [
            f"run {run_id}: a create was sent after Ctrl-C (delivered at {short(key)})"
            for run_id in project.runs()
            if run_id in sent
        ]

    def check_guarded(self, project: Project) -> list[str]:
        """Right after the command: every pod of its runs is known and bounded."""
        from overbrainer.runpod.pod_scripts import ENV_MAX_SECONDS, ENV_WATCHDOG

        found = []
        for run_id in project.runs():
            state, _ = log_state(project, run_id)
            known = _known(state)
            pods = self.account(run_id)
            jobs = _job_dirs(pods, run_id)
            found += check_checkpoints(
                project.path / "runs" / run_id, run_id, state, jobs, _node_dirs(pods, run_id)
            )
            for pod in pods:
                if pod["status"] == "TERMINATED":
                    continue
                if pod["id"] not in known and pod["name"] not in known:
                    found.append(f"pod {pod['id']} of run {run_id} bills, unknown to its log")
                if not (pod["env"].get(ENV_MAX_SECONDS) and pod["env"].get(ENV_WATCHDOG)):
                    found.append(f"pod {pod['id']} of run {run_id} bills with no watchdog")
                elif pod["booted"] and not pod["watchdog"] and not state.pod.keep:
                    found.append(f"pod {pod['id']} of run {run_id} bills, its watchdog dead")
            found += self._clusters_guarded(run_id, state, pods)
        return found

    def _clusters_guarded(self, run_id: str, state: Any, pods: list[dict[str, Any]]) -> list[str]:
        """A cluster of the run still billing is known to its log (by id, or by the name
        of the attempt that asked for it), and only while the run's job runs and can be
        followed (``train attach``): a run that ended, or whose job never started, left
        none of its nodes billing."""
        found = []
        known = _known(state)
        clusters = self.clusters(run_id)
        recorded = (state.pod.cluster or {}).get("id")
        for cluster in clusters:
            if cluster["live"] and cluster["id"] != recorded and cluster["name"] not in known:
                found.append(f"cluster {cluster['id']} of run {run_id} bills, unknown to its log")
        in_cluster = [p for p in pods if p["cluster"] is not None and p["status"] != "TERMINATED"]
        live = [c["id"] for c in clusters if c["live"]]
        if not (live or in_cluster):
            return found
        followable = not state.final and state.run.job is not None
        if not followable:
            nodes = ", ".join(f"{p['id']} (rank {p['rank']})" for p in in_cluster)
            found.append(
                f"run {run_id} is {state.run.state} with no job to follow, yet its cluster "
                f"{', '.join(live) or '(deleted)'} bills (nodes: {nodes or 'none'})"
            )
        return found

    def recover_all(self, project: Project) -> list[str]:
        """``train attach`` a run that is not final; ``pod rm`` one that cannot go on."""
        project.hold.unlink(missing_ok=True)
        found = []
        for run_id in project.runs():
            state, _ = log_state(project, run_id)
            if not state.exists:
                continue
            if not state.final or state.pod.may_bill():
                done = project.run("train", "attach", run_id, timeout=150)
                if done.code not in (0, 1):
                    found.append(f"recovery `train attach` exited {done.code}: {done.said()}")
            state, _ = log_state(project, run_id)
            live = [p for p in self.account(run_id) if p["status"] != "TERMINATED"]
            if not state.final or live or state.pod.may_bill():
                done = project.run("pod", "rm", run_id, "--force", timeout=150)
                if done.code not in (0, 1):
                    found.append(f"recovery `pod rm --force` exited {done.code}: {done.said()}")
            state, _ = log_state(project, run_id)
            if check_projections(project, run_id, state):
                project.run("runs", "show", run_id, timeout=60)
        return found

    def check_after(self, project: Project, command: str, action: str) -> list[str]:
        """What the project and the fake account show wrong once ``command`` met ``action``
        and recovery ran: each violation said in a line."""
        found: list[str] = []
        states = {}
        # A delete torn by a crash or a fault is sent again, and recorded again.
        one_delete = action not in ("kill", "pause")
        for run_id in project.runs():
            state, records = log_state(project, run_id)
            found += check_log_facts(run_id, records, one_delete=one_delete)
            states[run_id] = state
            if not state.exists:
                found.append(f"runs/{run_id} exists but the log has no run {run_id}")
                continue
            if not state.final:
                found.append(f"run {run_id} is still {state.run.state} after recovery")
            found += check_projections(project, run_id, state)
            known = _known(state)
            pods = self.account(run_id)
            jobs = _job_dirs(pods, run_id)
            found += check_checkpoints(
                project.path / "runs" / run_id, run_id, state, jobs, _node_dirs(pods, run_id)
            )
            for pod in pods:
                if pod["id"] not in known and pod["name"] not in known:
                    found.append(f"pod {pod['id']} of run {run_id} is unknown to its log")
                if pod["status"] != "TERMINATED":
                    found.append(f"pod {pod['id']} of run {run_id} still bills after recovery")
                for canary in CANARIES:
                    if any(canary in value for value in pod["env"].values()):
                        found.append(f"a canary secret is in pod {pod['id']}'s environment")
                # On the pod, the host key is the one private key allowed (the run's client
                # key never leaves runs/<id>/ssh/).
                host_key = str(pod["root"] / "etc" / "ssh" / "overbrainer_host_ed25519_key")
                found += [
                    f"{issue} (on the pod)"
                    for issue in scan_files([pod["root"]], allow_keys_in_ssh=True)
                    if "canary" in issue or not issue.endswith(host_key)
                ]
            found += [
                f"cluster {c['id']} of run {run_id} still bills after recovery"
                for c in self.clusters(run_id)
                if c["live"]
            ]
            found += self.schema_errors(run_id)
            if state.pod.may_bill():
                found.append(f"the log of run {run_id} says a pod of it may still bill")
            found += expected_pod_end(product_command(command), action, state)
        if states:
            found += check_view(project, states)
        found += scan_files([project.path])
        return found

    def ctrl_c_cases(self, once: dict[str, list[str]], twice: dict[str, list[str]]) -> list[Case]:
        """A SIGINT at each of ``once``, two in a row at each of ``twice``."""
        from reliability.machine import checkpoint_index

        cases = []
        for action, keys in (("sigint", once), ("sigint2", twice)):
            for command, found in keys.items():
                for key in found:
                    i = checkpoint_index(self, command, key)
                    slug = f"runpod-{command.replace(' ', '-')}-{action}-{i:02d}"
                    cases.append(
                        Case(
                            "ctrl-c",
                            f"runpod {command} {action} @{i:02d} {short(key)}",
                            self._bind(command, key, action, slug),
                            weight=4.0,
                        )
                    )
        return cases

    def cluster_ctrl_c_cases(
        self, keys: list[str], pod_runs: dict[str, list[str]], full: bool
    ) -> list[Case]:
        """Ctrl-C to ``train`` on a cluster (``keys``, its trace) at the checkpoints a pod's
        commands (``pod_runs``, their traces) never pass: the code new to clusters. By
        default one SIGINT per new code site, two in a row at each new append; ``full``:
        both at every new checkpoint."""
        from reliability.machine import checkpoint_index
        from reliability.plan import code_site, is_append_await

        seen = {code_site(key) for found in pod_runs.values() for key in found}
        new = [key for key in keys if code_site(key) not in seen]
        sites: set[str] = set()
        once, twice = [], []
        for key in new:
            if full:
                once.append(key)
                twice.append(key)
                continue
            site = code_site(key)
            if site in sites or is_append_await(key):
                continue
            sites.add(site)
            once.append(key)
            if key.startswith("append-"):
                twice.append(key)
        cases = []
        for action, found in (("sigint", once), ("sigint2", twice)):
            for key in found:
                i = checkpoint_index(self, CLUSTER_TRAIN, key)
                cases.append(
                    Case(
                        "ctrl-c",
                        f"runpod {CLUSTER_TRAIN} {action} @{i:02d} {short(key)}",
                        self._bind(CLUSTER_TRAIN, key, action, f"runpod-cluster-{action}-{i:02d}"),
                        weight=6.0,
                    )
                )
        return cases

    def crash_cases(self, keys: dict[str, list[str]]) -> list[Case]:
        """A SIGKILL just before and after every append, and inside every API call and
        transfer, at each of ``keys``."""
        from reliability.machine import checkpoint_index, is_transfer_or_call

        cases = []
        for command, found in keys.items():
            for key in found:
                if not (key.startswith("append-") or is_transfer_or_call(key)):
                    continue
                i = checkpoint_index(self, command, key)
                slug = f"runpod-{command.replace(' ', '-')}-kill-{i:02d}"
                cases.append(
                    Case(
                        "crash",
                        f"runpod {command} kill @{i:02d} {short(key)}",
                        self._bind(command, key, "kill", slug),
                        weight=4.0,
                    )
                )
        return cases

    def fault_cases(self, traced: dict[str, list[str]]) -> list[Case]:
        """A pod that disappears at each stage; an endpoint that changes; SSH refused."""
        stages = {
            "provisioning": ("_Walk._boot",),
            "job start": (".spawn:", ".upload:"),
            "follow": ("watch",),
            "retrieval": (".manifest:", ".download:"),
            "ending": ("ending.py", "delete_pod"),
        }
        cases: list[Case] = []
        for command in ("train", "train attach"):
            keys = traced.get(command, [])
            for stage, marks in stages.items():
                key = next(
                    (k for k in keys if k.startswith("await ") and any(m in k for m in marks)),
                    None,
                )
                if key is None:
                    continue
                for label, fault in (
                    ("vanishes", self._vanish_fault),
                    ("changes its SSH endpoint", self._move_fault),
                ):
                    if label.startswith("changes") and stage in ("provisioning", "ending"):
                        continue
                    slug = "-".join(
                        ["runpod-fault", *command.split(), *stage.split(), label.split()[0]]
                    )
                    cases.append(
                        Case(
                            "faults",
                            f"runpod {command}: the pod {label} during {stage} ({short(key)})",
                            self._bind(command, key, "pause", slug, fault),
                            weight=4.0,
                        )
                    )
        return cases

    def store_fault_cases(self) -> list[Case]:
        """The disk full just before the appends that record a pod's life: the attempt,
        the created pod's id, the job's start, the delete."""
        from reliability.store_faults import disk_full

        cases = []
        for append in (
            "pod.AttemptSent",
            "pod.AttemptResolved+pod.Created",
            "run.JobStarted",
            "pod.Deleting",
        ):
            key = f"append-before {append}"
            slug = f"runpod-store-{append.replace('+', '-').replace('.', '-')}"
            cases.append(
                Case(
                    "faults",
                    f"runpod train store disk full @ {key}",
                    self._bind("train", key, "pause", slug, disk_full),
                    weight=4.0,
                )
            )
        return cases

    def _vanish_fault(self, project: Project) -> None:
        for run_id in project.runs():
            self.vanish_pods(run_id)

    def _move_fault(self, project: Project) -> None:
        for run_id in project.runs():
            self.move_endpoints(run_id)

    def _bind(
        self,
        command: str,
        key: str,
        action: str,
        slug: str,
        during: Callable[[Project], None] | None = None,
    ) -> Callable[[], list[str]]:
        return lambda: self.run_case(command, key, action, slug, during)[1]


async def _move_endpoint(fake: Any, pods: Any, pod_id: str) -> None:
    """The pod's SSH server moves to a new port (its jobs keep running); Runpod shows the
    new endpoint and the old port refuses connections."""
    await pods.move_ssh_server(pod_id)


def _job_dirs(pods: list[dict[str, Any]], run_id: str) -> list[Path]:
    """Where the run's job ran on each of ``pods`` whose checkpoints come home: a pod's,
    a cluster's primary's (rank 0); another node holds only its ranks' parts of each."""
    return [
        pod["root"] / "workspace" / "overbrainer" / "runs" / run_id
        for pod in pods
        if not pod["rank"]
    ]


def _node_dirs(pods: list[dict[str, Any]], run_id: str) -> dict[Path, list[Path]]:
    """For each cluster's primary's job directory, its other nodes' (each holds its own
    ranks' parts of every checkpoint, which come home beside rank 0's)."""

    def job(pod: dict[str, Any]) -> Path:
        return Path(pod["root"]) / "workspace" / "overbrainer" / "runs" / run_id

    return {
        job(primary): [job(p) for p in pods if p["cluster"] == primary["cluster"] and p["rank"]]
        for primary in pods
        if primary["cluster"] is not None and primary["rank"] == 0
    }


def _known(state: Any) -> set[str]:
    """What a run's log knows of its pods: their ids (strays too) and the names of its
    create attempts (a pod whose create was answered after its command died is known by
    the attempt that asked for it)."""
    names = {str(a.get("pod_name")) for a in state.pod.attempts}
    return set(state.pod.pods) | set(state.pod.strays) | names


def _allowed(command: str, action: str, reached: bool) -> set[int]:
    if action == "trace":
        return {0}
    if action == "kill":
        return {-9} if reached else {0}
    if action in SIGNAL_CODES:
        code = SIGNAL_CODES[action]
        return {0, 1, code} if command == "pod rm" else {0, code}
    if action == "none":
        # Only output was lost: the command exits by what became of its run.
        return {0}
    return {0, 1, 130}


def expected_pod_end(command: str, action: str, state: Any) -> list[str]:
    run = state.run
    if not state.final or run.job is None:
        return []
    if action not in ("trace", "none") and action not in SIGNAL_CODES:
        return []
    allowed = {
        "train": {"succeeded"},
        "train attach": {"succeeded"},
        "train cancel": {"cancelled"},
        "pod rm": {"failed", "succeeded"},
    }[command]
    if run.state not in allowed:
        return [f"run {run.run_id} ended {run.state} ({run.message}); expected {sorted(allowed)}"]
    return []
