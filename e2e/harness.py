"""The e2e suite's worlds and checks: projects that train the tiny model with the real
Axolotl through the real ``overbrainer`` command, on a target of each kind.

- ``local``: this machine, every command under ``unshare -n`` (a network namespace with no
  interface up: no route out, not even loopback), so every local case is also an offline
  machine's run;
- ``ssh``: a real OpenSSH ``sshd`` on loopback (``overbrainer/testing/sshd.py``), the
  client's ``~/.ssh`` in a home of the suite's own;
- ``runpod``: the fake Runpod API with living fake pods (``overbrainer/testing/fake_pod.py``)
  on loopback, whose pods run the real Axolotl environment (the target's ``venv``).

Every target trains on the CPU: ``device = "cpu"`` on local and ssh, the same keys in
``axolotl_extra`` on the pod (a Runpod target has no such option: a pod has a GPU).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.build import Built
from overbrainer.config.axolotl_keys import CPU_KEYS
from overbrainer.exec.manifest import local_manifest
from overbrainer.train.metrics import MetricsEvent, parse_metrics_lines

ROOT = Path(__file__).resolve().parents[1]
INSPECT = ROOT / "e2e" / "inspect_prepared.py"
COMMAND_TIMEOUT = 900.0
FAKE_IMAGE = "example.invalid/axolotl@sha256:" + "0" * 64


@dataclass(frozen=True)
class Case:
    """One training case: what is trained and how the command is driven."""

    name: str
    adapter: str
    merge: bool = False
    interrupt: bool = False  # Ctrl-C while following, the job left running, then attach
    epochs: int = 1
    micro_batch_size: int = 2
    # More than one: a job of that many processes (DDP on gloo; on a pod, as many GPUs).
    processes: int = 1
    # More than one (Runpod only): a cluster of that many pods sharing the processes.
    nodes: int = 1

    @property
    def saved(self) -> str:
        """The phase the plugin writes when training ends."""
        return "saving_model" if self.adapter == "full" else "saving_adapter"


CASES = {
    case.name: case
    for case in (
        Case("lora", "lora"),
        Case("qlora", "qlora"),
        Case("full", "full"),
        Case("lora-merge", "lora", merge=True),
        Case("ctrl-c-attach", "lora", interrupt=True),
        Case("ddp-2", "lora", processes=2),
    )
}


# --- data ------------------------------------------------------------------------------


def conversations(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` conversations, each with reasoning; every fourth has a second exchange."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(2, 29), rng.randint(2, 29)
        messages: list[dict[str, str]] = [
            {"role": "user", "content": f"what is {a} + {b}?"},
            {
                "role": "assistant",
                "content": f"the answer is {a + b}.",
                "reasoning_content": f"first add the tens, then the ones: {a} + {b} = {a + b}.",
            },
        ]
        if index % 4 == 0:
            messages += [
                {"role": "user", "content": f"and {a} * {b}?"},
                {
                    "role": "assistant",
                    "content": f"{a} * {b} = {a * b}.",
                    "reasoning_content": f"multiply {a} by {b}: {a * b}.",
                },
            ]
        rows.append({"messages": messages})
    return rows


def trained_text(conversation: dict[str, Any]) -> str:
    """What the model must be trained on in ``conversation``: each assistant turn's
    reasoning and answer, as the tiny model's chat template renders them, and nothing of
    the user's."""
    return "".join(
        f"<think>\n{m['reasoning_content']}\n</think>\n\n{m['content']}<|im_end|>"
        for m in conversation["messages"]
        if m["role"] == "assistant"
    )


TRAIN = conversations(64, seed=1)
EVAL = conversations(8, seed=2)


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


# --- worlds ----------------------------------------------------------------------------


@dataclass
class Project:
    """A case's project and how to run ``overbrainer`` in it."""

    world: World
    case: Case
    path: Path
    env: dict[str, str]
    prefix: list[str] = field(default_factory=list)
    hf_home: Path | None = None  # the job's HF_HOME ([training.env]); None: the case's own

    def argv(self, *args: str) -> list[str]:
        """The command line of ``overbrainer -C PROJECT ARGS``."""
        return [*self.prefix, sys.executable, "-m", "overbrainer", "-C", str(self.path), *args]

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run ``overbrainer ARGS`` to its end."""
        return subprocess.run(
            self.argv(*args),
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def show(self, run_id: str) -> dict[str, Any]:
        """``runs show RUN --json``."""
        done = self.run("runs", "show", run_id, "--json", timeout=60)
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data


def base_env() -> dict[str, str]:
    """This process's environment without overbrainer's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "PYTEST_"))}
    env["TERM"] = "dumb"
    env["PYTHONPATH"] = str(ROOT)
    return env


def training_toml(
    built: Built,
    case: Case,
    target: str,
    case_dir: Path,
    *,
    base_model: str | None = None,
    job_env: dict[str, str] | None = None,
) -> str:
    """``[training]`` of a case: the tiny model (its directory, unless ``base_model`` names
    another), one epoch of 32 steps (unless the case says otherwise), two evaluations per
    epoch; ``job_env`` is ``[training.env]`` (by default, HF_HOME in the case)."""
    if job_env is None:
        job_env = {"HF_HOME": str(case_dir / "hf-home")}
    lines = [
        "[training]",
        f'target = "{target}"',
        f'base_model = "{base_model or built.model}"',
        f'adapter = "{case.adapter}"',
        f"epochs = {case.epochs}",
        "learning_rate = 1e-3",
        "sequence_len = 256",
        f"micro_batch_size = {case.micro_batch_size}",
        "gradient_accumulation_steps = 1",
        "sample_packing = false",
        "evals_per_epoch = 2",
        "lora_r = 4",
        "lora_alpha = 8",
        f"merge = {'true' if case.merge else 'false'}",
        "",
        "# The job's own variables: its Hugging Face and datasets caches in the case.",
        "[training.env]",
        *(f'{key} = "{value}"' for key, value in job_env.items()),
        "",
    ]
    return "\n".join(lines)


class World:
    """A kind of target: its projects, where their jobs live, and what is left after."""

    kind = ""
    target = ""

    def __init__(self, built: Built, base: Path) -> None:
        self.built = built
        self.base = base

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def target_toml(self, case_dir: Path, case: Case) -> str:
        raise NotImplementedError

    def extra_env(self, case_dir: Path) -> dict[str, str]:
        return {}

    def cpu_job_env(self, case: Case) -> dict[str, str]:
        """What the world adds to ``[training.env]`` for the job to train on the CPU."""
        return {}

    def prefix(self, case: Case) -> list[str]:
        return []

    def project(
        self,
        case: Case,
        case_dir: Path,
        *,
        base_model: str | None = None,
        job_env: dict[str, str] | None = None,
    ) -> Project:
        """A fresh project for ``case`` in ``case_dir`` (``base_model`` and ``job_env``:
        see :func:`training_toml`)."""
        path = case_dir / "project"
        (path / "data").mkdir(parents=True)
        (path / "data" / "train.jsonl").write_text(_jsonl(TRAIN))
        (path / "data" / "eval.jsonl").write_text(_jsonl(EVAL))
        cpu = self.cpu_job_env(case)
        if cpu:
            job_env = {**(job_env or {"HF_HOME": str(case_dir / "hf-home")}), **cpu}
        toml = training_toml(
            self.built, case, self.target, case_dir, base_model=base_model, job_env=job_env
        )
        (path / "overbrainer.toml").write_text(toml + self.target_toml(case_dir, case))
        env = {**base_env(), **self.extra_env(case_dir)}
        hf_home = Path(job_env["HF_HOME"]) if job_env and "HF_HOME" in job_env else None
        return Project(self, case, path, env, self.prefix(case), hf_home)

    def job_dir(self, project: Project, run_id: str) -> Path:
        """The run's directory on the target, seen from this machine."""
        raise NotImplementedError

    def check_after(self, project: Project, show: dict[str, Any]) -> None:
        """What the target must look like after a run that succeeded."""


class LocalWorld(World):
    """This machine, with no network at all for the command and its job."""

    kind = "local"
    target = "local"

    def target_toml(self, case_dir: Path, case: Case) -> str:
        processes = f"processes = {case.processes}\n" if case.processes > 1 else ""
        return (
            f'[targets.local]\nkind = "local"\nvenv = "{self.built.env}"\ndevice = "cpu"\n'
            + processes
        )

    def prefix(self, case: Case) -> list[str]:
        # Root may make a network namespace; anyone else makes a user namespace first.
        alone = ["unshare", "-n", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]
        if case.processes == 1:
            return alone
        # The processes of one job meet on loopback: up, and still no route out.
        return [*alone, "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]

    def job_dir(self, project: Project, run_id: str) -> Path:
        return project.path / "runs" / run_id


class SshWorld(World):
    """A real OpenSSH server on loopback; the run directories under a link in the SSH
    user's home that points into each case."""

    kind = "ssh"
    target = "box"

    def __init__(self, built: Built, base: Path) -> None:
        super().__init__(built, base)
        self._stack = contextlib.ExitStack()
        self.home = base / "home"
        self._links: list[Path] = []

    def __enter__(self) -> SshWorld:
        from overbrainer.testing.sshd import sshd

        server = self._stack.enter_context(sshd(self.base / "sshd"))
        ssh = self.home / ".ssh"
        ssh.mkdir(parents=True)
        (ssh / "config").write_text(
            "Host box-alias\n"
            "    HostName 127.0.0.1\n"
            f"    Port {server.port}\n"
            f"    User {server.user}\n"
            f"    IdentityFile {server.client_key}\n"
            "    IdentitiesOnly yes\n"
            "    IdentityAgent none\n"
        )
        shutil.copy(server.known_hosts, ssh / "known_hosts")
        return self

    def __exit__(self, *exc: object) -> None:
        for link in self._links:
            link.unlink(missing_ok=True)
        self._stack.close()

    def target_toml(self, case_dir: Path, case: Case) -> str:
        remote = case_dir / "remote"
        remote.mkdir()
        workdir = f"ob-e2e-{uuid.uuid4().hex[:12]}"
        link = Path(pwd.getpwuid(os.getuid()).pw_dir) / workdir
        link.symlink_to(remote)
        self._links.append(link)
        return (
            f'[targets.box]\nkind = "ssh"\nworkdir = "{workdir}"\nvenv = "{self.built.env}"\n'
            'device = "cpu"\n'
        )

    def extra_env(self, case_dir: Path) -> dict[str, str]:
        return {"HOME": str(self.home), "OVERBRAINER_TARGETS__BOX__HOST": "box-alias"}

    def job_dir(self, project: Project, run_id: str) -> Path:
        return project.path.parent / "remote" / "runs" / run_id


class RunpodWorld(World):
    """The fake Runpod API and its living pods, served by a process of their own."""

    kind = "runpod"
    target = "gpu"

    def __init__(self, built: Built, base: Path) -> None:
        super().__init__(built, base)
        self.workspace = base / "pods"
        # A file named after a pod put here makes the server lose that pod (see vanish).
        self._vanish_dir = base / "vanish"
        self._server: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.key = ""

    def __enter__(self) -> RunpodWorld:
        self._vanish_dir.mkdir(parents=True, exist_ok=True)
        out = self.base / "server.out"
        with out.open("wb") as sink, (self.base / "server.err").open("wb") as errors:
            self._server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "overbrainer.testing.fake_pod",
                    "--print-url",
                    "--workspace",
                    str(self.workspace),
                    "--provisioning-seconds",
                    "0.5",
                    "--starting-seconds",
                    "0.5",
                    "--vanish-dir",
                    str(self._vanish_dir),
                ],
                cwd=ROOT,
                env=base_env(),
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=errors,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = out.read_text().splitlines()
            if len(lines) >= 2:
                self.url, self.key = lines[0], lines[1]
                return self
            if self._server.poll() is not None:
                break
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError(
            "the fake Runpod server did not start: " + (self.base / "server.err").read_text()
        )

    def __exit__(self, *exc: object) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.send_signal(signal.SIGTERM)
            try:
                self._server.wait(30)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()

    def vanish(self, pod_id: str, timeout: float = 30.0) -> None:
        """Make the fake Runpod lose ``pod_id``, as Runpod may: the API reads 404 for it
        and everything in it ends. Returns once the server has done it."""
        request = self._vanish_dir / pod_id
        request.touch()
        deadline = time.monotonic() + timeout
        while request.exists():
            assert time.monotonic() < deadline, f"the fake Runpod did not lose pod {pod_id}"
            time.sleep(0.05)

    def target_toml(self, case_dir: Path, case: Case) -> str:
        cpu = "".join(f"{key} = false\n" for key in CPU_KEYS)
        if case.processes > 1:
            # What a CPU target renders for DDP: gloo, and the model loaded on the CPU.
            cpu += 'ddp_backend = "gloo"\nmax_memory = { cpu = "8GiB" }\n'
        return (
            "# A pod has a GPU, so a Runpod target has no device option: these fake pods\n"
            "# train on the CPU, with the keys a CPU target renders.\n"
            f"[training.axolotl_extra]\n{cpu}\n"
            f'[targets.gpu]\nkind = "runpod"\ngpu_types = ["NVIDIA GeForce RTX 4090"]\n'
            f"gpu_count = {case.processes // case.nodes}\n"
            + (f"nodes = {case.nodes}\n" if case.nodes > 1 else "")
            + f'max_hours = 1\nimage = "{FAKE_IMAGE}"\nvenv = "{self.built.env}"\n'
            "retrieve_grace_minutes = 5\n"
        )

    def cpu_job_env(self, case: Case) -> dict[str, str]:
        # What a CPU target sets for a job of many processes (job_environment), which a
        # Runpod target does not: else accelerate sees no GPU and no DDP, each process
        # training alone.
        return {"ACCELERATE_USE_CPU": "true"} if case.processes > 1 else {}

    def extra_env(self, case_dir: Path) -> dict[str, str]:
        return {"OVERBRAINER_RUNPOD__BASE_URL": self.url, "OVERBRAINER_RUNPOD__API_KEY": self.key}

    def job_dir(self, project: Project, run_id: str) -> Path:
        show = project.show(run_id)
        pod, remote = show["pod"]["pod_id"], show["run"]["remote_dir"]
        assert pod and remote, show
        # A fake pod's filesystem is <workspace>/<pod id>; its home is root/ in there.
        rel = remote.lstrip("/") if remote.startswith("/") else f"root/{remote}"
        return self.workspace / pod / rel

    def check_after(self, project: Project, show: dict[str, Any]) -> None:
        assert show["pod"]["status"] == "deleted", show["pod"]
        listing = project.run("pod", "ls", "--json", timeout=120)
        assert listing.returncode == 0, listing.stderr
        live = [json.loads(line) for line in listing.stdout.splitlines() if line.strip()]
        assert not [pod for pod in live if pod.get("run") == show["run"]["run_id"]], live


WORLDS: dict[str, type[World]] = {"local": LocalWorld, "ssh": SshWorld, "runpod": RunpodWorld}


# --- driving ---------------------------------------------------------------------------

_CREATED = re.compile(r"created run (\S+):")


def run_id_of(stderr: str) -> str:
    """The run a ``train`` created, from its ``run.Created`` line."""
    found = _CREATED.search(stderr)
    assert found, stderr
    return found.group(1)


def wait_for(path: Path, timeout: float, what: str) -> None:
    """Wait until ``path`` exists (a job's exit code on its target, say)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{what}: {path} did not appear in {timeout:.0f} s"
        time.sleep(0.5)


def train_interrupted(project: Project) -> tuple[str, str]:
    """``train``, a SIGINT to it once its job has started, then (once the job has ended on
    its own) ``train attach``. Returns the run and attach's stderr."""
    err_path = project.path.parent / "train.err"
    with err_path.open("w") as err, (project.path.parent / "train.out").open("w") as out:
        process = subprocess.Popen(
            project.argv("train"), env=project.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
        )
        try:
            deadline = time.monotonic() + 300
            while "run.JobStarted" not in err_path.read_text():
                assert process.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            code = process.wait(120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    stderr = err_path.read_text()
    run_id = run_id_of(stderr)
    assert code == 130, stderr
    assert f"overbrainer train attach {run_id}" in stderr, stderr
    # Ctrl-C stopped following, never the job: it trains on to its end.
    job = project.world.job_dir(project, run_id)
    wait_for(job / "exit_code", COMMAND_TIMEOUT, "the job left running")
    assert (job / "exit_code").read_text().strip() == "0", (job / "job.log").read_text()[-3000:]
    # train attach: where the run stands first, then every evaluation it missed.
    attach = project.run("train", "attach", run_id)
    keep_output(project, "attach", attach)
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert attach.stderr.startswith(
        f"attach: run {run_id} on target {project.world.target} ({project.world.kind}): running"
    ), attach.stderr
    assert f"train: run {run_id} succeeded" in attach.stdout, attach.stdout
    return run_id, attach.stderr


def keep_output(project: Project, name: str, done: subprocess.CompletedProcess[str]) -> None:
    """Keep a command's output beside the case's project, for a look after a failure."""
    (project.path.parent / f"{name}.out").write_text(done.stdout)
    (project.path.parent / f"{name}.err").write_text(done.stderr)


def train_through(project: Project) -> tuple[str, str]:
    """``train`` to its end; the run and its stderr."""
    done = project.run("train")
    keep_output(project, "train", done)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = run_id_of(done.stderr)
    assert f"train: run {run_id} succeeded" in done.stdout, done.stdout
    return run_id, done.stderr


# --- checks ----------------------------------------------------------------------------

_SHOWN_EVAL = re.compile(r"^eval_loss (\S+) at step (\d+) \(epoch [0-9.]+\)$", re.MULTILINE)


def metrics_of(path: Path) -> list[MetricsEvent]:
    """The metrics lines the run brought home, all well-formed."""
    events, malformed, _ = parse_metrics_lines(path.read_bytes(), final=True)
    assert malformed == 0
    return events


def check_run(project: Project, run_id: str, stderr: str) -> None:
    """Everything a successful run must leave: its record, its results home and verified,
    the real plugin's losses, each evaluation shown once at its step, and a dataset that
    trains on the assistant's reasoning and answer only."""
    case = project.case
    show = project.show(run_id)
    run = show["run"]
    assert run["state"] == "succeeded", run

    # The results are home, and every file is the one the target hashed.
    home = project.path / "runs" / run_id
    manifest = local_manifest(home)
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    assert run["artifacts"]["manifest_digest"] == digest, (run["artifacts"], sorted(manifest))
    assert run["artifacts"]["files"] == len(manifest)
    output = home / "output"
    if case.adapter == "full":
        assert (output / "model.safetensors").stat().st_size > 0
        assert (output / "config.json").is_file()
        assert not (output / "adapter_model.safetensors").exists()
    else:
        assert (output / "adapter_model.safetensors").stat().st_size > 0
        assert json.loads((output / "adapter_config.json").read_text())["r"] == 4
    if case.merge:
        assert (output / "merged" / "model.safetensors").stat().st_size > 0
        assert (output / "merged" / "config.json").is_file()
    else:
        assert not (output / "merged").exists()
    assert not any(name.startswith("output/checkpoint-") for name in manifest)
    if case.processes > 1:
        # Every process trained: each one's lines are in the job's log, marked (on a
        # cluster, the log home is node 0's, with its own ranks' lines).
        log = (home / "job.log").read_text()
        for rank in range(case.processes // case.nodes):
            assert f"\n[rank{rank}]:" in log, log[-3000:]
        # One DDP job where the world has accelerate use the CPU (a Runpod world's cluster
        # and many-GPU jobs): transformers warns when a process finds no distributed setup.
        if project.world.cpu_job_env(case):
            assert "parallel_mode != ParallelMode.DISTRIBUTED" not in log, log[-3000:]
        assert run["processes"] == case.processes and run["parallelism"] == "ddp", run

    # Training and evaluation losses, from the real plugin, for every step (written once,
    # by rank 0: the processes share the 32 examples' steps).
    events = metrics_of(home / "metrics.jsonl")
    total = 32 // case.processes
    begin = [e for e in events if e.event == "begin"]
    assert len(begin) == 1 and begin[0].max_steps == total, begin
    steps = [e.step for e in events if e.event == "log" and e.loss is not None]
    assert steps == list(range(1, total + 1)), steps
    evals = [e for e in events if e.event == "log" and e.eval_loss is not None]
    assert len(evals) >= 2 and evals[-1].step == total, evals
    phases = [e.phase for e in events if e.event == "phase"]
    assert phases == [case.saved, *(["merging"] if case.merge else [])], phases
    assert run["metrics"]["loss"] > 0 and run["metrics"]["eval_loss"] > 0, run["metrics"]
    assert run["metrics"]["step"] == total

    # Each evaluation shown once, at the step it was computed at, in order.
    shown = [(float(loss), int(step)) for loss, step in _SHOWN_EVAL.findall(stderr)]
    assert [step for _, step in shown] == [e.step for e in evals], stderr
    for (loss, _), event in zip(shown, evals, strict=True):
        assert event.eval_loss is not None and abs(loss - event.eval_loss) <= 1e-3 * loss
    said = "training ended; saving the " + ("model" if case.adapter == "full" else "adapter")
    assert said in stderr, stderr
    assert ("merging the adapter into the base model" in stderr) == case.merge, stderr
    here = project.world.kind == "local"
    assert ("checking the results" if here else "retrieving the results") in stderr, stderr

    # The job had its own environment: [training.env]'s HF_HOME held its caches.
    hf_home = project.hf_home or project.path.parent / "hf-home"
    assert any(hf_home.iterdir()), "HF_HOME was not the job's"

    check_prepared(project, project.world.job_dir(project, run_id) / "prepared")
    project.world.check_after(project, show)


def check_prepared(project: Project, prepared: Path) -> None:
    """The datasets Axolotl prepared train on each assistant turn's reasoning and answer
    (and its end-of-turn token), and on nothing of the user's."""
    built = project.world.built
    done = subprocess.run(
        [str(built.python), str(INSPECT), str(prepared), str(built.model)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**base_env(), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, list[dict[str, Any]]] = json.loads(done.stdout.splitlines()[-1])
    assert len(report) == 2, list(report)
    got = sorted(sorted(row["trained"] for row in rows) for rows in report.values())
    expected = sorted(sorted(trained_text(c) for c in rows) for rows in (TRAIN, EVAL))
    assert got == expected
    for rows in report.values():
        for row in rows:
            assert row["bad_labels"] == 0, row
            assert "<|im_start|>user" in row["text"] and "user" not in row["trained"], row


@contextlib.contextmanager
def timed(label: str, timings: list[tuple[str, float]]) -> Iterator[None]:
    """Record how long the block took under ``label``."""
    started = time.monotonic()
    try:
        yield
    finally:
        timings.append((label, time.monotonic() - started))
