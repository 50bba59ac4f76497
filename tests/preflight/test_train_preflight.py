"""``train`` and ``train --check`` through the real ``overbrainer`` command: every problem a
run would fail on is named before the run exists, and a failed preflight creates no run.

The local target runs the stand-in trainer from a venv (tests/runs/conftest.py); the Runpod
target talks to the fake Runpod API on loopback HTTP (its GPU catalog included)."""

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from overbrainer.config.template import project_files
from overbrainer.testing.fake_executor import CANARY_KEY
from overbrainer.testing.runpod_api import FakeRunpod, serve_loopback
from tests.runs.conftest import ROOT, Project, project

__all__ = ["project"]

BAD_LINE = '{"messages": [{"role": "user", "content": "only a question"}]}'


def no_runs(project: Project) -> None:
    """``runs ls`` lists no run, and no run directory exists."""
    listed = project.run("runs", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == ""
    assert project.runs() == []


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr
    return stderr.splitlines()


# --- the local target -------------------------------------------------------------------


def test_check_prints_every_check_and_creates_nothing(project: Project) -> None:
    done = project.run("train", "--check")
    assert done.returncode == 0, done.stderr
    venv = project.env["OVERBRAINER_TARGETS__LOCAL__VENV"]
    lines = done.stdout.splitlines()
    assert lines[0] == "preflight of target local (local, native):"
    assert lines[1] == "  ok       configuration  overbrainer.toml: target local (local, native)"
    assert lines[2] == (
        "  ok       data           data/train.jsonl: 4 examples (4 with reasoning); no eval set"
    )
    assert lines[3].startswith(f"  ok       trainer        {venv}/bin/axolotl on this machine")
    assert "(interpreter python3 starts)" in lines[3]  # the stand-in's #!/usr/bin/env python3
    assert lines[4].startswith(
        "  ok       parallelism    one process per GPU the job sees, ddp: the base weights fit "
        "one GPU: about 2.3 GiB per GPU"
    )
    assert lines[5] == (
        "  ok       run files      runs/ (to be created), .overbrainer/ (to be created): writable"
    )
    assert lines[6] == "train --check: every check passed on target local (local, native)"
    assert done.stderr == ""
    assert sorted(p.name for p in project.path.iterdir()) == [
        ".env.example", ".gitignore", "data", "overbrainer.toml",
    ]  # fmt: skip


def test_a_missing_data_file_creates_no_run(project: Project) -> None:
    (project.path / "data" / "train.jsonl").unlink()
    done = project.run("train")
    assert done.returncode == 1
    lines = error_lines(done.stderr)
    assert lines[0] == "error: preflight found 1 problem; no run was created:"
    assert lines[1].startswith("  data/train.jsonl is missing: put the training examples there")
    assert lines[2] == (
        "fix it, then run `overbrainer train` again (`overbrainer train --check` checks without "
        "training)"
    )
    no_runs(project)


def test_a_broken_data_file_creates_no_run_and_names_each_line(project: Project) -> None:
    train = project.path / "data" / "train.jsonl"
    train.write_text(train.read_text() + BAD_LINE + "\n{not json\n")
    (project.path / "data" / "eval.jsonl").write_text('{"messages": "none"}\n')
    done = project.run("train")
    assert done.returncode == 1
    assert error_lines(done.stderr)[:4] == [
        "error: preflight found 3 problems; no run was created:",
        '  data/train.jsonl:5: no assistant turn (role "assistant"): only assistant turns are '
        "trained on, so this example would teach nothing",
        "  data/train.jsonl:6: not valid JSON (Expecting property name enclosed in double quotes "
        "at column 2)",
        '  data/eval.jsonl:1: "messages" must be a non-empty list of turns',
    ]
    no_runs(project)


def test_a_missing_trainer_creates_no_run(project: Project, tmp_path: Path) -> None:
    gone = tmp_path / "no-such-venv"
    done = project.run("train", OVERBRAINER_TARGETS__LOCAL__VENV=str(gone))
    assert done.returncode == 1
    assert error_lines(done.stderr)[1] == (
        f"  {gone}/bin/axolotl does not exist on this machine: install Axolotl in that venv (pip "
        "install axolotl), or set targets.local.venv to the venv that holds bin/axolotl"
    )
    no_runs(project)


def test_a_venv_whose_python_is_gone_creates_no_run(project: Project, tmp_path: Path) -> None:
    venv = tmp_path / "moved-venv"
    (venv / "bin").mkdir(parents=True)
    axolotl = venv / "bin" / "axolotl"
    axolotl.write_text("#!/old/place/venv/bin/python3.12\nimport axolotl\n")
    axolotl.chmod(0o755)
    done = project.run("train", "--check", OVERBRAINER_TARGETS__LOCAL__VENV=str(venv))
    assert done.returncode == 1
    assert "  PROBLEM  trainer" in done.stdout
    assert (
        f"{axolotl} on this machine starts with `#!/old/place/venv/bin/python3.12`, but "
        "/old/place/venv/bin/python3.12 is not there"
    ) in done.stdout
    assert error_lines(done.stderr) == [
        "error: train --check: 1 problem (listed above); fix it, then run `overbrainer train "
        "--check` again"
    ]
    no_runs(project)


def test_every_problem_is_named_at_once(project: Project, tmp_path: Path) -> None:
    (project.path / "data" / "train.jsonl").write_text(BAD_LINE + "\n")
    done = project.run(
        "train",
        OVERBRAINER_TARGETS__LOCAL__VENV=str(tmp_path / "nowhere"),
        OVERBRAINER_TRAINING__EPOCHS="0",
    )
    assert done.returncode == 1
    lines = error_lines(done.stderr)
    assert lines[0] == "error: preflight found 2 problems; no run was created:"
    assert lines[1].startswith("  training.epochs")
    assert lines[2].startswith("  data/train.jsonl:1: no assistant turn")
    # The trainer is not checked against a configuration that has problems.
    assert "nowhere" not in done.stderr
    checked = project.run("train", "--check", OVERBRAINER_TRAINING__EPOCHS="0")
    assert "  skipped  target" in checked.stdout
    no_runs(project)


def test_keep_pod_on_a_machine_target_is_a_usage_error(project: Project) -> None:
    done = project.run("train", "--keep-pod")
    assert done.returncode == 2
    assert "--keep-pod applies only to a Runpod target; target local is local" in done.stderr
    # Refused before anything happens: not even the preflight (whose problem this is not).
    broken = project.run("train", "--keep-pod", OVERBRAINER_TARGETS__LOCAL__VENV="/nowhere")
    assert broken.returncode == 2 and "preflight" not in broken.stderr + broken.stdout
    no_runs(project)


def test_a_passing_preflight_trains(project: Project) -> None:
    done = project.run("train")
    assert done.returncode == 0, done.stderr
    (run_id,) = project.runs()
    assert project.run_json(run_id)["state"] == "succeeded"
    assert "preflight" not in done.stderr  # quiet when everything passed


# --- the Runpod target --------------------------------------------------------------------

RUNPOD_TOML = """\
[training]
target = "gpu"
base_model = "Qwen/Qwen3-0.6B"
adapter = "lora"

[targets.gpu]
kind = "runpod"
gpu_types = {gpu_types}
max_hours = 1
"""


@asynccontextmanager
async def runpod_project(
    tmp_path: Path, gpu_types: list[str], fake: FakeRunpod | None = None
) -> AsyncIterator[tuple[FakeRunpod, Project]]:
    """The fake Runpod API on loopback and a project whose target ``gpu`` uses it."""
    fake = fake or FakeRunpod()
    fake.add_account(CANARY_KEY)
    path = tmp_path / "project"
    for name, text in project_files().items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    (path / "overbrainer.toml").write_text(RUNPOD_TOML.format(gpu_types=json.dumps(gpu_types)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERBRAINER_", "FAKE_"))}
    async with serve_loopback(fake) as base_url:
        env.update(
            OVERBRAINER_RUNPOD__API_KEY=CANARY_KEY,
            OVERBRAINER_RUNPOD__BASE_URL=base_url,
            PYTHONPATH=str(ROOT),
        )
        yield fake, Project(path, env)


async def run(project: Project, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """``overbrainer -C PROJECT ARGS`` in a real process, while the fake keeps serving."""
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", "overbrainer", "-C", str(project.path), *args],
            env={**project.env, **extra},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


async def test_an_unknown_gpu_type_creates_no_run_and_no_pod(tmp_path: Path) -> None:
    wanted = ["NVIDIA A40", "RTX 4090", "NVIDIA RTX 9999"]
    async with runpod_project(tmp_path, wanted) as (fake, project):
        done = await run(project, "train")
        listed = await run(project, "runs", "ls", "--json")
    assert done.returncode == 1
    assert error_lines(done.stderr) == [
        "error: preflight found 2 problems; no run was created:",
        '  targets.gpu.gpu_types[1]: "RTX 4090" is not a GPU type in Runpod\'s catalog; did you '
        'mean "NVIDIA GeForce RTX 4090" (its catalog name is "RTX 4090")?',
        '  targets.gpu.gpu_types[2]: "NVIDIA RTX 9999" is not a GPU type in Runpod\'s catalog; '
        'close ones: "NVIDIA GeForce RTX 4090"',
        "fix them, then run `overbrainer train` again (`overbrainer train --check` checks without "
        "training)",
    ]
    assert listed.returncode == 0 and listed.stdout == ""
    assert project.runs() == []
    assert fake.create_requests() == []
    asked = [(r.method, r.path) for r in fake.requests]
    assert asked == [("GET", "/pods"), ("GET", "/catalog/gpus")]
    assert CANARY_KEY not in done.stdout + done.stderr


async def test_check_on_runpod_shows_the_key_the_gpus_and_the_default_image(
    tmp_path: Path,
) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40", "NVIDIA GeForce RTX 4090"]) as (
        fake,
        project,
    ):
        done = await run(project, "train", "--check")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    base = project.env["OVERBRAINER_RUNPOD__BASE_URL"]
    assert lines[:3] == [
        "preflight of target gpu (runpod):",
        "  ok       configuration  overbrainer.toml: target gpu (runpod)",
        "  ok       data           data/train.jsonl: 4 examples (4 with reasoning); no eval set",
    ]
    assert lines[3] == f"  ok       runpod key     accepted by {base} (0 pods on the account)"
    assert lines[4] == (
        "  ok       gpu types      in Runpod's catalog: NVIDIA A40 (48 GB, $0.40/h per GPU); "
        "NVIDIA GeForce RTX 4090 (24 GB, $0.69/h per GPU)"
    )
    assert lines[5] == (
        "  ok       pod image      axolotlai/axolotl-cloud-term:0.19.0-py3.12-cu130-2.12.1"
        "@sha256:f7b94da82913… (the default image, pinned by digest)"
    )
    assert lines[6] == "  ok       parallelism    1 process: nothing to share"
    assert lines[7] == (
        "  ok       run files      runs/ (to be created), .overbrainer/ (to be created): writable"
    )
    assert lines[8] == "train --check: every check passed on target gpu (runpod)"
    assert fake.create_requests() == [] and project.runs() == []
    assert CANARY_KEY not in done.stdout + done.stderr


async def test_a_refused_or_missing_key_creates_no_run(tmp_path: Path) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        refused = await run(project, "train", OVERBRAINER_RUNPOD__API_KEY="rpa_not_a_key")
        missing = await run(project, "train", OVERBRAINER_RUNPOD__API_KEY="")
    assert refused.returncode == 1
    assert (
        "  OVERBRAINER_RUNPOD__API_KEY: Runpod refused the key (HTTP 401); create a key at "
        "https://www.runpod.io/console/user/settings"
    ) in refused.stderr
    assert missing.returncode == 1
    assert "  OVERBRAINER_RUNPOD__API_KEY: not set;" in missing.stderr
    assert "rpa_not_a_key" not in refused.stdout + refused.stderr
    assert project.runs() == [] and fake.create_requests() == []


async def test_ctrl_c_during_the_preflight_creates_no_run(tmp_path: Path) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        fake.fail_next("GET /pods", timeout=True, stall_seconds=3600)
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "overbrainer", "-C", str(project.path), "train"],
            env=project.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with trio.fail_after(60):
            while not any(r.path == "/pods" for r in fake.requests):
                await trio.sleep(0.02)
            process.send_signal(signal.SIGINT)
            await process.wait()
            assert process.stderr is not None
            err = (await process.stderr.receive_some(65536)).decode()
    assert process.returncode == 130, err
    assert err.splitlines() == [
        "error: interrupted during the preflight checks: no run was created; start one with "
        "`overbrainer train`"
    ]
    assert project.runs() == [] and fake.create_requests() == []


AUTO_TOML = RUNPOD_TOML.replace("gpu_types = {gpu_types}", 'gpu_types = "auto"') + (
    "min_vram_gb = 40\nmax_price_per_hour = {price}\n{extra}"
)


async def test_check_on_auto_shows_the_candidates_it_would_try(tmp_path: Path) -> None:
    async with runpod_project(tmp_path, []) as (fake, project):
        (project.path / "overbrainer.toml").write_text(
            AUTO_TOML.format(price=1.5, extra="max_cost_usd = 0.6\n")
        )
        done = await run(project, "train", "--check")
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "gpu candidates" in x]
    # The A40's max_hours (1 h at $0.40/h) fits max_cost_usd $0.60 whole; the RTX 4090 has
    # 24 GB, the H100 costs $2.99/h.
    assert line == (
        "  ok       gpu candidates  would try, in order: NVIDIA A40 ($0.40/h, stock high); "
        "2 left out: NVIDIA GeForce RTX 4090 (24 GB < min_vram_gb 40); NVIDIA H100 80GB HBM3 "
        "($2.99/h > max_price_per_hour $1.50)"
    )
    assert not [x for x in done.stdout.splitlines() if "gpu types " in x]
    queries = [r.query for r in fake.requests if r.path == "/catalog/gpus"]
    assert queries == [
        {"include": "AVAILABILITY", "product": "POD", "cloud": "SECURE", "count": "1"}
    ]
    assert fake.create_requests() == [] and project.runs() == []


async def test_check_of_a_cluster_reads_cluster_stock_and_prices_every_node(
    tmp_path: Path,
) -> None:
    async with runpod_project(tmp_path, []) as (fake, project):
        (project.path / "overbrainer.toml").write_text(
            AUTO_TOML.format(price=1.5, extra="nodes = 2\nmax_cost_usd = 0.9\n")
        )
        done = await run(project, "train", "--check")
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "gpu candidates" in x]
    # Two nodes of one A40 each bill $0.80/h together: the price counts every node.
    assert line.startswith(
        "  ok       gpu candidates  a cluster of 2 pods of 1 GPU(s) each (prices for every "
        "node, stock for clusters); would try, in order: NVIDIA A40 ($0.80/h, stock "
    )
    queries = [r.query for r in fake.requests if r.path == "/catalog/gpus"]
    assert queries == [
        {"include": "AVAILABILITY", "product": "CLUSTER", "cloud": "SECURE", "count": "1"}
    ]
    assert fake.create_requests() == [] and project.runs() == []


async def test_check_says_how_long_the_run_would_wait_for_capacity(tmp_path: Path) -> None:
    async with runpod_project(tmp_path, []) as (fake, project):
        (project.path / "overbrainer.toml").write_text(
            AUTO_TOML.format(price=1.5, extra='wait_for_capacity = "30m"\n')
        )
        done = await run(project, "train", "--check")
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "capacity wait" in x]
    assert " ".join(line.split()) == (
        "ok capacity wait when no GPU type has capacity, waits up to 30m00s for some, trying "
        'them all again meanwhile (targets.gpu.wait_for_capacity = "30m")'
    )
    assert fake.create_requests() == [] and project.runs() == []


@pytest.mark.parametrize(
    ("price", "extra", "words"),
    [
        (
            0.3,
            "",
            "the cheapest that would qualify without that limit is NVIDIA A40 (48 GB, "
            "$0.40/h per GPU): set targets.gpu.max_price_per_hour = 0.4",
        ),
        (
            1.5,
            "max_cost_usd = 0.25\n",
            "the cheapest is 1 × NVIDIA A40 at $0.40/h; set targets.gpu.max_cost_usd = 0.4 or "
            "more for one hour",
        ),
    ],
)
async def test_auto_with_no_candidate_creates_no_run_and_no_pod(
    tmp_path: Path, price: float, extra: str, words: str
) -> None:
    async with runpod_project(tmp_path, []) as (fake, project):
        (project.path / "overbrainer.toml").write_text(AUTO_TOML.format(price=price, extra=extra))
        done = await run(project, "train")
    assert done.returncode == 1
    assert "error: preflight found 1 problem; no run was created:" in done.stderr
    assert words in " ".join(done.stderr.split())
    assert fake.create_requests() == [] and project.runs() == []


# --- many GPUs --------------------------------------------------------------------------


async def test_an_explicit_parallelism_that_cannot_fit_creates_no_run_and_no_pod(
    tmp_path: Path,
) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40", "NVIDIA GeForce RTX 4090"]) as (
        fake,
        project,
    ):
        done = await run(
            project,
            "train",
            OVERBRAINER_TRAINING__BASE_MODEL="meta-llama/Llama-3.1-8B",
            OVERBRAINER_TRAINING__ADAPTER="full",
            OVERBRAINER_TRAINING__PARALLELISM="zero2",
            OVERBRAINER_TARGETS__GPU__GPU_COUNT="8",
        )
    assert done.returncode == 1
    # The smallest of gpu_types is the one that may be rented: an RTX 4090, 24 GB.
    assert (
        '  training.parallelism = "zero2" needs about 34.5 GiB per GPU for 8B parameters '
        "(full), and a GPU has 24 GiB (NVIDIA GeForce RTX 4090 in Runpod's catalog, the "
        'smallest of gpu_types): set parallelism = "zero3" (or "fsdp") (about 18.9 GiB per '
        'GPU) or "auto"'
    ) in done.stderr
    assert fake.create_requests() == [] and project.runs() == []


async def test_check_says_what_auto_chose_for_the_pods_gpus(tmp_path: Path) -> None:
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        done = await run(
            project,
            "train",
            "--check",
            OVERBRAINER_TRAINING__BASE_MODEL="meta-llama/Llama-3.1-8B",
            OVERBRAINER_TRAINING__ADAPTER="full",
            OVERBRAINER_TARGETS__GPU__GPU_COUNT="8",
        )
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "parallelism" in line]
    assert line.startswith(
        "  ok       parallelism    8 processes, zero2: the model fits one GPU once its optimizer "
        "state is sharded: about 34.5 GiB per GPU, and a GPU has 48 GiB (NVIDIA A40 in "
        "Runpod's catalog)"
    )
    assert fake.create_requests() == []


def test_a_cpu_rehearsal_of_two_processes_refuses_deepspeed(project: Project) -> None:
    config = project.path / "overbrainer.toml"
    config.write_text(
        config.read_text().replace(
            '\n[targets.local]\nkind = "local"',
            '\n[targets.local]\nkind = "local"\ndevice = "cpu"\nprocesses = 2',
        )
    )
    done = project.run("train", "--check", OVERBRAINER_TRAINING__PARALLELISM="zero3")
    assert done.returncode == 1
    assert (
        '  training.parallelism = "zero3" is not run on the CPU: only DDP over gloo is '
        'verified to run Axolotl there; set parallelism = "ddp" or "auto" for this rehearsal'
    ) in done.stdout
    fine = project.run("train", "--check")
    assert fine.returncode == 0, fine.stdout
    assert "  ok       parallelism    2 processes, ddp: on the CPU, over gloo" in fine.stdout


def _nvidia_smi(project: Project, gpus: int) -> dict[str, str]:
    """An ``nvidia-smi`` on the command's PATH that lists ``gpus`` GPUs; the environment."""
    driver = project.path.parent / "driver"
    driver.mkdir(exist_ok=True)
    listing = "".join(f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: GPU-{i})\\n" for i in range(gpus))
    script = driver / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] && printf '{listing}'\n")
    script.chmod(0o755)
    return {"PATH": f"{driver}:{project.env.get('PATH', os.environ['PATH'])}"}


def test_more_processes_than_the_machine_has_gpus_are_refused(project: Project) -> None:
    path = _nvidia_smi(project, 1)
    done = project.run("train", "--check", OVERBRAINER_TARGETS__LOCAL__PROCESSES="2", **path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  PROBLEM  gpus           1 GPU on this machine (nvidia-smi)" in done.stdout
    said = "targets.local.processes is 2 but this machine shows 1 GPU: lower it to 1"
    assert said in done.stdout + done.stderr
    no_runs(project)
    fits = project.run("train", "--check", **_nvidia_smi(project, 2))
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert "2 GPUs on this machine (nvidia-smi): the job runs 2 processes" in fits.stdout


async def test_check_says_which_volume_where_and_whether_it_exists_yet(tmp_path: Path) -> None:
    volume = 'volume = "cache"\nvolume_data_center = "US-KS-2"\nvolume_size_gb = 100\n'
    async with runpod_project(tmp_path, ["NVIDIA A40"]) as (fake, project):
        toml = project.path / "overbrainer.toml"
        toml.write_text(toml.read_text() + volume)
        before = await run(project, "train", "--check")
        made = fake.add_network_volume(CANARY_KEY, "cache", size=100, data_center="US-KS-2")
        after = await run(project, "train", "--check")
        fake.add_network_volume(CANARY_KEY, "cache", data_center="US-KS-2")
        twice = await run(project, "train", "--check")
    assert before.returncode == 0, before.stderr
    (line,) = [x for x in before.stdout.splitlines() if "network volume" in x]
    assert " ".join(line.split()) == (
        "ok network volume cache in US-KS-2, mounted at /runpod-volume: not there yet; the first "
        "run creates it (100 GB, $7.00 a month until it is deleted) and every pod of the "
        "target is created in that data center"
    )
    (line,) = [x for x in after.stdout.splitlines() if "network volume" in x]
    assert " ".join(line.split()) == (
        f"ok network volume cache in US-KS-2, mounted at /runpod-volume: exists ({made.id}, "
        "100 GB); what it holds is read through Runpod's S3 API: set "
        "OVERBRAINER_RUNPOD__S3_ACCESS_KEY/__S3_SECRET to see it here"
    )
    assert twice.returncode == 1
    assert "network volumes named 'cache' in US-KS-2" in twice.stdout
    # Looked up, never created: a check creates nothing.
    assert fake.volume_create_requests() == [] and fake.create_requests() == []
    assert project.runs() == []
