"""A job of many processes: the Axolotl keys of each parallelism, the DeepSpeed configs
shipped and copied into the run, and the commands that start it (torchrun from the
trainer's venv; one per GPU the job sees, counted when it starts)."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from string import Template

import pytest
import yaml

from overbrainer.errors import OverbrainerError
from overbrainer.train.axolotl import (
    CONFIG_FILE,
    deepspeed_source,
    merge_command,
    on_node_zero,
    parallelism_keys,
    prepare_run_dir,
    render_config,
    torchrun_of,
    train_command,
    trainer_commands,
)
from overbrainer.train.parallelism import Choice, Processes, choose
from overbrainer.train.ranks import GLOBAL_PREFIX_TEMPLATE, RANK_ROLE, rank_prefix
from tests.train.conftest import example, settings, write_jsonl

FSDP = {
    "fsdp_version": 2,
    "fsdp_config": {
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "reshard_after_forward": True,
        "state_dict_type": "FULL_STATE_DICT",
        "offload_params": False,
    },
}


@pytest.mark.parametrize(
    ("parallelism", "device", "keys"),
    [
        ("ddp", "auto", {}),
        ("ddp", "cpu", {"ddp_backend": "gloo", "max_memory": {"cpu": "8GiB"}}),
        ("zero2", "auto", {"deepspeed": "./deepspeed/zero2.json"}),
        ("zero3", "auto", {"deepspeed": "./deepspeed/zero3.json"}),
        ("fsdp", "auto", FSDP),
    ],
)
def test_each_parallelism_renders_its_keys(parallelism: str, device: str, keys: dict) -> None:
    choice = Choice(2, parallelism, "why")  # type: ignore[arg-type]
    assert parallelism_keys(choice, device=device) == keys
    cfg = render_config(settings(), has_eval=False, device=device, choice=choice)
    without = render_config(settings(), has_eval=False, device=device)
    assert {k: v for k, v in cfg.items() if k not in without} == keys


@pytest.mark.parametrize("parallelism", ["ddp", "zero2", "zero3", "fsdp"])
def test_one_process_renders_no_parallelism_key(parallelism: str) -> None:
    # A choice of one process has no parallelism; nor does a choice said for one process.
    for choice in (Choice(1, None, "why"), Choice(1, parallelism, "why")):  # type: ignore[arg-type]
        for device in ("auto", "cpu"):
            assert render_config(
                settings(), has_eval=False, device=device, choice=choice
            ) == render_config(settings(), has_eval=False, device=device)


def test_the_cpu_gets_memory_enough_for_the_model() -> None:
    # The recipe's 8 GiB at least, more when the estimate says the model needs more.
    small = choose(
        "auto", base_model="a/Qwen3-0.6B", adapter="lora", processes=2, gpu=None, cpu=True
    )
    big = choose("auto", base_model="a/Qwen3-8B", adapter="full", processes=2, gpu=None, cpu=True)
    assert parallelism_keys(small, device="cpu")["max_memory"] == {"cpu": "8GiB"}
    assert parallelism_keys(big, device="cpu")["max_memory"] == {"cpu": "145GiB"}


def test_the_parallelism_keys_win_over_axolotl_extra() -> None:
    training = settings(axolotl_extra={"deepspeed": "mine.json", "seed": 3})
    cfg = render_config(training, has_eval=False, choice=Choice(4, "zero3", "why"))
    assert cfg["deepspeed"] == "./deepspeed/zero3.json"
    assert cfg["seed"] == 3
    alone = render_config(training, has_eval=False, choice=Choice(1, None, "why"))
    assert alone["deepspeed"] == "mine.json"


def test_a_refused_choice_renders_nothing() -> None:
    refused = Choice(2, "zero3", "why", problem='training.parallelism = "zero3" is not run')
    with pytest.raises(OverbrainerError) as raised:
        render_config(settings(), has_eval=False, device="cpu", choice=refused)
    assert str(raised.value) == 'training.parallelism = "zero3" is not run'


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_the_deepspeed_configs_leave_the_batch_to_axolotl(stage: str) -> None:
    config = json.loads(deepspeed_source(stage))  # type: ignore[arg-type]
    assert config["zero_optimization"]["stage"] == int(stage[-1])
    for key in (
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "gradient_clipping",
    ):
        assert config[key] == "auto", key
    assert config["bf16"] == {"enabled": "auto"}
    if stage == "zero3":
        # The final model is written whole, gathered from the shards.
        assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


@pytest.mark.parametrize(
    ("parallelism", "copied"), [("zero2", True), ("zero3", True), ("ddp", False), ("fsdp", False)]
)
def test_the_run_directory_holds_the_deepspeed_config_it_names(
    tmp_path: Path, parallelism: str, copied: bool
) -> None:
    project = tmp_path / "project"
    write_jsonl(project / "data" / "train.jsonl", [example()])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    choice = Choice(8, parallelism, "why")  # type: ignore[arg-type]
    prepare_run_dir(run_dir, project, settings(), choice=choice)
    cfg = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
    assert (run_dir / "deepspeed").exists() is copied
    if copied:
        named = run_dir / cfg["deepspeed"]
        assert named.read_bytes() == deepspeed_source(parallelism)  # type: ignore[arg-type]


def test_torchrun_comes_from_the_trainers_venv() -> None:
    assert torchrun_of("/opt/venv/bin/axolotl") == "/opt/venv/bin/torchrun"
    assert torchrun_of("axolotl") == "torchrun"


def test_the_commands_of_many_processes() -> None:
    assert trainer_commands(settings(), "/v/bin/axolotl", 1) == [
        ["/v/bin/axolotl", "train", "axolotl.yaml"]
    ]
    assert trainer_commands(settings(merge=True), "/v/bin/axolotl", 4) == [
        [
            "/v/bin/torchrun",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "4",
            "--role",
            "rank",
            "--tee",
            "3",
            "-m",
            "axolotl.cli.train",
            "axolotl.yaml",
        ],
        # The merge stays one process.
        merge_command("/v/bin/axolotl"),
    ]
    per_gpu = train_command("/v/bin/axolotl", "gpu")
    assert per_gpu[:2] == ["sh", "-c"]
    assert per_gpu[3:] == ["sh", "/v/bin/torchrun", "/v/bin/axolotl", "axolotl.yaml", "rank"]


TORCHRUN = (
    "torchrun --standalone --nnodes 1 --nproc-per-node {} --role rank --tee 3 "
    "-m axolotl.cli.train axolotl.yaml"
)


def _fake(path: Path, name: str) -> None:
    path.write_text(f'#!/bin/sh\necho "{name} $*"\n')
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("visible", "smi_gpus", "started"),
    [
        (
            "0,1,2,3",
            None,
            TORCHRUN.format(4),
        ),
        ("2", None, "axolotl train axolotl.yaml"),
        ("", 8, "axolotl train axolotl.yaml"),  # hidden from the job
        (
            None,
            2,
            TORCHRUN.format(2),
        ),
        (None, 1, "axolotl train axolotl.yaml"),
        (None, None, "axolotl train axolotl.yaml"),  # no nvidia-smi: no GPU
    ],
)
def test_one_process_per_gpu_counts_them_when_the_job_starts(
    tmp_path: Path, visible: str | None, smi_gpus: int | None, started: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "tr", "wc", "grep", "printf"):
        found = shutil.which(tool)
        if found is not None:
            os.symlink(found, bin_dir / tool)
    if smi_gpus is not None:
        lines = "".join(f"GPU {i}: NVIDIA H100 (UUID: GPU-{i})\\n" for i in range(smi_gpus))
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{lines}'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    _fake(venv / "axolotl", "axolotl")
    _fake(venv / "torchrun", "torchrun")
    env = {"PATH": str(bin_dir)}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    done = subprocess.run(
        train_command(str(venv / "axolotl"), "gpu"),
        env=env,
        capture_output=True,
        text=True,
        check=True,
        executable=str(bin_dir / "sh"),
    )
    assert done.stdout.strip() == started


NODE = {
    "NUM_NODES": "2",
    "NODE_RANK": "1",
    "PRIMARY_ADDR": "10.65.0.2",
    "PRIMARY_PORT": "29500",
    "NUM_TRAINERS": "8",
}
NODE_TORCHRUN = (
    "torchrun --nnodes 2 --node-rank 1 --nproc-per-node {} --rdzv-id run-7 --rdzv-backend "
    "static --rdzv-endpoint 10.65.0.2:29500 --role rank --tee 3 -m axolotl.cli.train "
    "axolotl.yaml"
)


def _node_job(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    torchrun = venv / "torchrun"
    torchrun.write_text(
        '#!/bin/sh\necho "torchrun $*"\n'
        'echo "NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"\n'
        'echo "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"\n'
    )
    torchrun.chmod(0o755)
    command = [str(torchrun) if word == "/v/bin/torchrun" else word for word in command]
    return subprocess.run(
        command, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("processes", "env", "per_node", "interface"),
    [
        (1, NODE, "1", "ens1"),
        (4, NODE, "4", "ens1"),
        ("gpu", NODE, "8", "ens1"),  # one per GPU of the node: the cluster's NUM_TRAINERS
        ("gpu", {**NODE, "NCCL_SOCKET_IFNAME": "eth9"}, "8", "eth9"),  # the job's own wins
    ],
)
def test_a_nodes_job_joins_the_cluster_by_its_variables_when_it_starts(
    tmp_path: Path, processes: Processes, env: dict[str, str], per_node: str, interface: str
) -> None:
    command = train_command("/v/bin/axolotl", processes, cluster_run="run-7")
    assert command[:2] == ["sh", "-c"]
    assert "/v/bin/torchrun" in command  # the trainer's venv's
    done = _node_job(tmp_path, command, env)
    assert done.returncode == 0, done.stderr
    started, nccl, template = done.stdout.splitlines()
    assert started == NODE_TORCHRUN.format(per_node)
    assert nccl == f"NCCL_SOCKET_IFNAME={interface}"
    # torchrun prefixes each line by the worker's global rank, as `runs logs --rank` reads.
    assert template == "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${role_name}${rank}]:"
    assert Template(GLOBAL_PREFIX_TEMPLATE).substitute(role_name=RANK_ROLE, rank=9) == (
        rank_prefix(9).decode()
    )


@pytest.mark.parametrize(
    ("missing", "processes"),
    [
        ("NUM_NODES", 2),
        ("NODE_RANK", 2),
        ("PRIMARY_ADDR", 2),
        ("PRIMARY_PORT", 2),
        ("NUM_TRAINERS", "gpu"),
    ],
)
def test_a_nodes_job_without_a_cluster_variable_fails_naming_it(
    tmp_path: Path, missing: str, processes: Processes
) -> None:
    env = {k: v for k, v in NODE.items() if k != missing}
    done = _node_job(tmp_path, train_command("/v/bin/axolotl", processes, cluster_run="r"), env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"overbrainer: {missing} is not set" in done.stderr


def test_a_given_process_count_needs_no_num_trainers(tmp_path: Path) -> None:
    env = {k: v for k, v in NODE.items() if k != "NUM_TRAINERS"}
    done = _node_job(tmp_path, train_command("/v/bin/axolotl", 2, cluster_run="run-7"), env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].endswith(NODE_TORCHRUN.format(2))


def test_on_a_cluster_the_merge_runs_on_node_zero_only(tmp_path: Path) -> None:
    commands = trainer_commands(settings(merge=True), "/v/bin/axolotl", 1, cluster_run="run-7")
    assert commands == [
        train_command("/v/bin/axolotl", 1, cluster_run="run-7"),
        on_node_zero(merge_command("/v/bin/axolotl"), "the merge"),
    ]
    echo = on_node_zero(["echo", "merged", "a b"], "the merge")
    for rank, out, err in (
        ("0", "merged a b\n", ""),
        (None, "merged a b\n", ""),  # not a node of a cluster: one machine, node 0
        ("1", "", "overbrainer: node 1 skips the merge (node 0 does it)\n"),
    ):
        env = {"PATH": os.environ["PATH"]} | ({} if rank is None else {"NODE_RANK": rank})
        done = subprocess.run(echo, env=env, capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (0, out, err)
