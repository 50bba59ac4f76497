"""The job's environment reaches the trainer for real, on every runtime: a native job,
a container (``-e NAME``: values never on a command line), and a pod (``[training.env]``
after the pod's own environment file)."""

import os
import subprocess
from pathlib import Path

import pytest

from overbrainer.config.model import Settings
from overbrainer.exec.base import ContainerRuntime, NativeRuntime
from overbrainer.exec.job import render_commands
from overbrainer.targets.runpod.target import pod_commands
from overbrainer.train.axolotl import job_environment, trainer_commands
from tests.train.conftest import settings

NAMES = (
    "HF_HOME",
    "TZ",
    "WANDB_MODE",
    "AXOLOTL_DO_NOT_TRACK",
    "OVERBRAINER_METRICS",
    "OVERBRAINER_STOP",
)
# A stand-in trainer that prints the variables it was given, one NAME=value a line.
SHOW_ENV = "#!/bin/sh\n" + "".join(f'echo "{n}=${{{n}-unset}}"\n' for n in NAMES)
# A stand-in engine: runs the command after the image with only the -e variables set, as
# `docker run` would (from the caller's environment, by name).
FAKE_ENGINE = """#!/bin/sh
passed=""
shift  # run
while [ $# -gt 0 ]; do
    case $1 in
    -e) passed="$passed $2"; shift 2 ;;
    -v|-w|--name) shift 2 ;;
    --gpus) shift 2 ;;
    --rm|--gpus=*) shift ;;
    -*) shift ;;
    *) break ;;
    esac
done
shift  # the image
echo "argv: $*" >>engine.log
keep=""
for name in $passed; do eval "keep=\\"\\$keep $name=\\$$name\\""; done
eval "exec env -i PATH=\\"$PATH\\" $keep \\"\\$@\\""
"""


def _run_job(directory: Path, text: str, extra_path: Path) -> dict[str, str]:
    (directory / "job.cmds").write_text(text)
    env = {"PATH": f"{extra_path}:{os.environ['PATH']}", "HF_HOME": "/inherited"}
    done = subprocess.run(
        ["sh", "-c", ". ./job.cmds"], cwd=directory, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def _bin(tmp_path: Path, name: str, text: str) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    (directory / name).chmod(0o755)
    return directory


TRAINING = settings(env={"HF_HOME": "/scratch/hf", "TZ": "UTC"})
EXPECTED = {
    "HF_HOME": "/scratch/hf",
    "TZ": "UTC",
    "WANDB_MODE": "disabled",
    "AXOLOTL_DO_NOT_TRACK": "1",
    "OVERBRAINER_METRICS": "metrics.jsonl",
    "OVERBRAINER_STOP": "stop_request",
}


def test_a_native_job_gets_training_env_and_overbrainers_own(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _bin(venv, "axolotl", SHOW_ENV)
    text = render_commands(
        trainer_commands(TRAINING),
        env=job_environment(TRAINING),
        secret_names=[],
        runtime=NativeRuntime(venv=str(venv)),
        container=None,
    )
    assert _run_job(tmp_path, text, tmp_path) == EXPECTED


def test_a_container_gets_them_by_name_never_by_value(tmp_path: Path) -> None:
    fakebin = _bin(tmp_path, "docker", FAKE_ENGINE)
    _bin(tmp_path, "axolotl", SHOW_ENV)
    text = render_commands(
        trainer_commands(TRAINING),
        env=job_environment(TRAINING),
        secret_names=[],
        runtime=ContainerRuntime(engine="docker", image="img@sha256:" + "0" * 64),
        container="overbrainer-x",
    )
    assert "'-e' 'HF_HOME'" in text and "'-e' 'TZ'" in text
    assert _run_job(tmp_path, text, fakebin) == EXPECTED
    assert "/scratch/hf" not in (tmp_path / "engine.log").read_text()


@pytest.mark.parametrize("training_env", [{}, {"HF_HOME": "/scratch/hf", "TZ": "UTC"}])
def test_on_a_pod_training_env_wins_over_the_pods_own_file(
    tmp_path: Path, training_env: dict[str, str]
) -> None:
    venv = tmp_path / "venv"
    _bin(venv, "axolotl", SHOW_ENV)
    (tmp_path / ".pod").mkdir()
    # What the pod's bootstrap writes: the image's PATH and HF_HOME.
    (tmp_path / ".pod" / "job.env").write_text(
        f"export PATH='{os.environ['PATH']}'\nexport HF_HOME='/root/.cache/huggingface'\n"
    )
    full = Settings.model_validate(
        {
            "training": {
                "target": "gpu",
                "base_model": "a/b",
                "adapter": "lora",
                "env": training_env,
            },
            "targets": {
                "gpu": {
                    "kind": "runpod",
                    "gpu_types": ["NVIDIA A40"],
                    "max_hours": 1.0,
                    "image": "img@sha256:" + "0" * 64,
                    "venv": str(venv),
                }
            },
        }
    )
    spec = full.targets["gpu"]
    assert spec.kind == "runpod"
    text = render_commands(
        pod_commands(full, spec),
        env=job_environment(full.training),
        secret_names=[],
        runtime=NativeRuntime(),
        container=None,
    )
    seen = _run_job(tmp_path, text, tmp_path)
    assert seen["HF_HOME"] == training_env.get("HF_HOME", "/root/.cache/huggingface")
    assert seen["AXOLOTL_DO_NOT_TRACK"] == "1"
    assert seen["TZ"] == training_env.get("TZ", "unset")


def test_a_pod_of_many_gpus_starts_torchrun_from_its_venv_over_all_of_them() -> None:
    full = Settings.model_validate(
        {
            "training": {"target": "gpu", "base_model": "a/b", "adapter": "lora", "merge": True},
            "targets": {
                "gpu": {
                    "kind": "runpod",
                    "gpu_types": ["NVIDIA A40"],
                    "max_hours": 1.0,
                    "gpu_count": 4,
                    "venv": "/workspace/v",
                }
            },
        }
    )
    spec = full.targets["gpu"]
    assert spec.kind == "runpod"
    model, train, merge = pod_commands(full, spec)
    # First the base model made ready by the venv's Python, then the trainer's commands.
    assert model[5:] == [
        "sh", "-c", model[7], "sh", "/workspace/v/bin/python", "overbrainer_model.py", "a/b",
    ]  # fmt: skip
    assert train[5:] == [
        "/workspace/v/bin/torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "4",
        "--role", "rank", "--tee", "3", "-m", "axolotl.cli.train", "axolotl.yaml",
    ]  # fmt: skip
    assert merge[-3:] == ["/workspace/v/bin/axolotl", "merge-lora", "axolotl.yaml"]
