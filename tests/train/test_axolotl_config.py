"""axolotl.yaml, the trainer commands, the job environment and the run directory."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from overbrainer.errors import OverbrainerError
from overbrainer.train import overbrainer_metrics
from overbrainer.train.axolotl import (
    CONFIG_FILE,
    dump_config,
    job_environment,
    merge_command,
    phase_command,
    prepare_run_dir,
    reasoning_template_warning,
    render_config,
    trainer_commands,
    write_config,
)
from overbrainer.train.metrics import milestones, parse_metrics_lines
from tests.train.conftest import example, settings, write_jsonl

TRAIN_SET = {
    "path": "data/train.jsonl",
    "type": "chat_template",
    "field_messages": "messages",
    "field_thinking": "reasoning_content",
    "roles_to_train": ["assistant"],
    "train_on_eos": "turn",
    "ds_type": "json",
}


def test_render_lora_config_has_every_setting() -> None:
    cfg = render_config(
        settings(epochs=2, learning_rate=1e-5, lora_r=8, sample_packing=False), has_eval=False
    )
    assert cfg == {
        "base_model": "Qwen/Qwen3-0.6B",
        "datasets": [TRAIN_SET],
        "val_set_size": 0,
        "num_epochs": 2,
        "learning_rate": 1e-5,
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 4,
        "sequence_len": 4096,
        "optimizer": "adamw_torch_fused",
        "lr_scheduler": "cosine",
        "sample_packing": False,
        "saves_per_epoch": 1,
        "adapter": "lora",
        "lora_r": 8,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_target_linear": True,
        "output_dir": "./output",
        "dataset_prepared_path": "./prepared",
        "plugins": ["overbrainer_metrics.OverbrainerMetricsPlugin"],
    }


def test_yaml_loads_back_equal(tmp_path: Path) -> None:
    training = settings(
        adapter="qlora",
        hub_model_id="me/my-model",
        axolotl_extra={"bf16": "auto", "special_tokens": {"pad_token": "<|pad|>"}},
    )
    path = write_config(tmp_path, training, has_eval=True)
    assert path == tmp_path / "axolotl.yaml"
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert loaded == render_config(training, has_eval=True)
    # Key order is kept: the file reads in the order it was rendered.
    assert list(loaded)[:3] == ["base_model", "datasets", "val_set_size"]
    assert list(loaded)[-2:] == ["bf16", "special_tokens"]


def test_dump_keeps_floats_exact() -> None:
    cfg = render_config(settings(learning_rate=3.5e-6, lora_dropout=0.1), has_eval=False)
    loaded = yaml.safe_load(dump_config(cfg))
    assert loaded["learning_rate"] == 3.5e-6
    assert loaded["lora_dropout"] == 0.1


def test_qlora_loads_in_4bit() -> None:
    cfg = render_config(settings(adapter="qlora"), has_eval=False)
    assert cfg["adapter"] == "qlora"
    assert cfg["load_in_4bit"] is True
    assert cfg["lora_target_linear"] is True


def test_lora_does_not_load_in_4bit() -> None:
    assert "load_in_4bit" not in render_config(settings(adapter="lora"), has_eval=False)


def test_full_fine_tune_has_no_adapter_block() -> None:
    cfg = render_config(settings(adapter="full"), has_eval=False)
    for key in ("adapter", "lora_r", "lora_alpha", "lora_dropout", "lora_target_linear"):
        assert key not in cfg
    assert "load_in_4bit" not in cfg


def test_eval_set_only_with_eval() -> None:
    without = render_config(settings(evals_per_epoch=2), has_eval=False)
    assert "test_datasets" not in without
    assert "evals_per_epoch" not in without
    with_eval = render_config(settings(evals_per_epoch=2), has_eval=True)
    assert with_eval["test_datasets"] == [{**TRAIN_SET, "path": "data/eval.jsonl"}]
    assert with_eval["evals_per_epoch"] == 2
    # Axolotl refuses a non-zero val_set_size next to test_datasets.
    assert with_eval["val_set_size"] == 0


def test_hub_model_id_only_when_set() -> None:
    assert "hub_model_id" not in render_config(settings(), has_eval=False)
    cfg = render_config(settings(hub_model_id="me/adapter"), has_eval=False)
    assert cfg["hub_model_id"] == "me/adapter"


def test_axolotl_extra_is_merged_last() -> None:
    extra = {"chat_template": "qwen3", "warmup_ratio": 0.1, "lora_target_modules": ["q_proj"]}
    cfg = render_config(settings(axolotl_extra=extra), has_eval=False)
    assert list(cfg)[-3:] == ["chat_template", "warmup_ratio", "lora_target_modules"]
    assert cfg["lora_target_modules"] == ["q_proj"]


def test_axolotl_extra_overrides_a_rendered_key_in_place() -> None:
    # A key the settings do not type (lora_target_linear) can be overridden; it keeps its
    # place in the file.
    cfg = render_config(settings(axolotl_extra={"lora_target_linear": False}), has_eval=False)
    assert cfg["lora_target_linear"] is False
    assert list(cfg).index("lora_target_linear") < list(cfg).index("output_dir")


def test_axolotl_extra_is_copied_not_shared() -> None:
    training = settings(axolotl_extra={"lora_target_modules": ["q_proj"]})
    cfg = render_config(training, has_eval=False)
    cfg["lora_target_modules"].append("v_proj")
    assert training.axolotl_extra["lora_target_modules"] == ["q_proj"]


def test_managed_keys_in_axolotl_extra_are_refused() -> None:
    # The settings refuse it; model_copy skips validation, so the guard is reached.
    training = settings().model_copy(update={"axolotl_extra": {"plugins": [], "output_dir": "/"}})
    with pytest.raises(OverbrainerError, match="output_dir, plugins"):
        render_config(training, has_eval=False)


def test_trainer_commands() -> None:
    assert trainer_commands(settings()) == [["axolotl", "train", "axolotl.yaml"]]
    assert trainer_commands(settings(merge=True), "/venv/bin/axolotl") == [
        ["/venv/bin/axolotl", "train", "axolotl.yaml"],
        merge_command("/venv/bin/axolotl"),
    ]
    assert merge_command("/venv/bin/axolotl")[-3:] == [
        "/venv/bin/axolotl",
        "merge-lora",
        "axolotl.yaml",
    ]
    assert trainer_commands(settings(adapter="qlora", merge=True))[1:] == [merge_command()]
    assert len(trainer_commands(settings(adapter="full", merge=False))) == 1


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox sh"])
@pytest.mark.parametrize("stopped", [False, True])
def test_the_merge_runs_only_after_a_training_that_was_not_stopped(
    tmp_path: Path, shell: str, stopped: bool
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    lines = '{"event":"log","time":1,"step":3}\n'
    if stopped:
        lines += '{"event":"stopped","time":2,"step":3}\n'
    metrics.write_text(lines)
    marker = tmp_path / "merged"
    # The "merge" records its arguments: it runs, with them, only when not stopped.
    command = [*merge_command("/bin/sh")[:4], "sh", "-c", f'echo "$@" > {marker}', "sh", "x"]
    done = subprocess.run(
        [*shell.split(), *command[1:]],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        check=False,
    )
    assert done.returncode == 0
    _check_merged(metrics, marker, stopped=stopped)


def _check_merged(metrics: Path, marker: Path, *, stopped: bool) -> None:
    events, malformed, _ = parse_metrics_lines(metrics.read_bytes())
    assert malformed == 0
    phase = events[-1].phase
    if stopped:
        assert phase == "merge_skipped" and not marker.exists()
        assert list(milestones(events[-1:])) == [
            "not merging the adapter: its training was stopped before its end"
        ]
    else:
        assert phase == "merging" and marker.read_text() == "x\n"


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox sh"])
@pytest.mark.parametrize("before", ["", '{"event":"phase","time":1,"phase":"merging"}\n'])
def test_the_merge_is_skipped_after_a_training_that_wrote_no_metrics(
    tmp_path: Path, shell: str, before: str
) -> None:
    # No file, or only phase lines (the job's shell writes those, not the plugin): the
    # training recorded nothing, the run fails, and nothing is merged nor announced.
    metrics = tmp_path / "metrics.jsonl"
    if before:
        metrics.write_text(before)
    marker = tmp_path / "merged"
    command = [*merge_command("/bin/sh")[:4], "sh", "-c", f'echo "$@" > {marker}', "sh", "x"]
    done = subprocess.run(
        [*shell.split(), *command[1:]],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert not marker.exists()
    assert done.stderr == (
        "overbrainer: merge skipped: the training wrote no metrics (the metrics plugin was "
        "not loaded)\n"
    )
    assert (metrics.read_text() if metrics.exists() else "") == before


@pytest.mark.parametrize("shell", ["sh", "dash", "busybox sh"])
def test_the_phase_command_writes_a_phase_line_the_follower_reads(
    tmp_path: Path, shell: str
) -> None:
    # Under every shell a target may have; into $OVERBRAINER_METRICS, else metrics.jsonl.
    command = phase_command("merging")
    argv = [*shell.split(), *command[1:]]
    subprocess.run(argv, cwd=tmp_path, check=True, env={"PATH": os.environ["PATH"]})
    subprocess.run(
        argv,
        cwd=tmp_path,
        check=True,
        env={"PATH": os.environ["PATH"], "OVERBRAINER_METRICS": "elsewhere.jsonl"},
    )
    for name in ("metrics.jsonl", "elsewhere.jsonl"):
        events, malformed, _ = parse_metrics_lines((tmp_path / name).read_bytes())
        assert malformed == 0
        assert [(e.event, e.phase) for e in events] == [("phase", "merging")]
        assert events[0].time is not None and abs(events[0].time - time.time()) < 60
        assert list(milestones(events)) == ["merging the adapter into the base model"]


@pytest.mark.parametrize("bad", ["", "Merging", "merge; rm -rf /", "a-b"])
def test_a_phase_name_is_lowercase_words(bad: str) -> None:
    with pytest.raises(ValueError, match="phase"):
        phase_command(bad)


def test_job_environment() -> None:
    env = job_environment()
    assert env == {
        "WANDB_MODE": "disabled",
        "PYTHONPATH": ".",
        "OVERBRAINER_METRICS": "metrics.jsonl",
        "OVERBRAINER_STOP": "stop_request",
        "AXOLOTL_DO_NOT_TRACK": "1",
    }
    assert job_environment(pythonpath="/opt/lib")["PYTHONPATH"] == ".:/opt/lib"


def test_job_environment_takes_training_env_and_keeps_its_own_last() -> None:
    training = settings(env={"WANDB_MODE": "offline", "HF_HOME": "/scratch/hf", "TZ": "UTC"})
    env = job_environment(training)
    assert env["WANDB_MODE"] == "offline"  # the user's choice wins over the default
    assert env["HF_HOME"] == "/scratch/hf"
    assert env["TZ"] == "UTC"
    assert env["AXOLOTL_DO_NOT_TRACK"] == "1"
    # overbrainer's own come last, so nothing the table holds could shadow them.
    assert list(env)[-4:] == [
        "PYTHONPATH",
        "OVERBRAINER_METRICS",
        "OVERBRAINER_STOP",
        "AXOLOTL_DO_NOT_TRACK",
    ]


def test_a_cpu_target_hides_the_gpus_from_the_job() -> None:
    assert job_environment(device="cpu")["CUDA_VISIBLE_DEVICES"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in job_environment(device="auto")


@pytest.mark.parametrize(
    "base_model",
    [
        "Qwen/Qwen3-8B",
        "Qwen/QwQ-32B",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "openai/gpt-oss-20b",
        "microsoft/Phi-4-reasoning",
        "unsloth/qwen3_4b",
    ],
)
def test_no_warning_for_reasoning_models(base_model: str) -> None:
    assert reasoning_template_warning(settings(base_model=base_model)) is None


@pytest.mark.parametrize(
    "base_model",
    ["meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3", "google/gemma-2-9b"],
)
def test_warning_for_plain_models(base_model: str) -> None:
    warning = reasoning_template_warning(settings(base_model=base_model))
    assert warning is not None
    assert base_model in warning
    assert "reasoning_content" in warning
    assert "chat_template" in warning


@pytest.mark.parametrize("template", ["chatml", "llama3", "mistral_v1", "gemma"])
def test_warning_for_plain_template_even_on_a_reasoning_model(template: str) -> None:
    training = settings(base_model="Qwen/Qwen3-8B", axolotl_extra={"chat_template": template})
    warning = reasoning_template_warning(training)
    assert warning is not None
    assert repr(template) in warning


def test_reasoning_template_on_a_plain_model_is_fine() -> None:
    training = settings(
        base_model="meta-llama/Llama-3.1-8B", axolotl_extra={"chat_template": "qwen3"}
    )
    assert reasoning_template_warning(training) is None


def test_tokenizer_default_template_falls_back_to_the_model() -> None:
    plain = settings(
        base_model="meta-llama/Llama-3.1-8B", axolotl_extra={"chat_template": "tokenizer_default"}
    )
    assert reasoning_template_warning(plain) is not None
    reasoning = settings(
        base_model="Qwen/Qwen3-8B",
        axolotl_extra={"chat_template": "tokenizer_default_fallback_chatml"},
    )
    assert reasoning_template_warning(reasoning) is None


def test_jinja_template_decides_by_its_text() -> None:
    keeps = "{% for m in messages %}{{ m.reasoning_content }}{{ m.content }}{% endfor %}"
    drops = "{% for m in messages %}{{ m.content }}{% endfor %}"
    ok = settings(
        base_model="meta-llama/Llama-3.1-8B",
        axolotl_extra={"chat_template": "jinja", "chat_template_jinja": keeps},
    )
    assert reasoning_template_warning(ok) is None
    bad = settings(
        base_model="Qwen/Qwen3-8B",
        axolotl_extra={"chat_template": "jinja", "chat_template_jinja": drops},
    )
    warning = reasoning_template_warning(bad)
    assert warning is not None
    assert "chat_template_jinja" in warning
    # The template text itself is not echoed.
    assert drops not in warning


def test_no_warning_without_reasoning_in_the_data() -> None:
    training = settings(base_model="meta-llama/Llama-3.1-8B")
    assert reasoning_template_warning(training, has_reasoning=False) is None


def test_prepare_run_dir_without_eval(project: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20250101-000000-abcd"
    run_dir.mkdir(parents=True)
    training = settings()
    prepare_run_dir(run_dir, project, training)
    assert (run_dir / "data" / "train.jsonl").read_bytes() == (
        project / "data" / "train.jsonl"
    ).read_bytes()
    assert not (run_dir / "data" / "eval.jsonl").exists()
    plugin = Path(overbrainer_metrics.__file__).read_bytes()
    assert (run_dir / "overbrainer_metrics.py").read_bytes() == plugin
    cfg = yaml.safe_load((run_dir / "axolotl.yaml").read_text(encoding="utf-8"))
    assert cfg == render_config(training, has_eval=False)


def test_prepare_run_dir_with_eval(project: Path, tmp_path: Path) -> None:
    write_jsonl(project / "data" / "eval.jsonl", [example()])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    prepare_run_dir(run_dir, project, settings())
    assert json.loads((run_dir / "data" / "eval.jsonl").read_text()) == example()
    cfg = yaml.safe_load((run_dir / "axolotl.yaml").read_text(encoding="utf-8"))
    assert cfg["test_datasets"][0]["path"] == "data/eval.jsonl"
    # Every dataset path resolves inside the run directory.
    for dataset in cfg["datasets"] + cfg["test_datasets"]:
        assert (run_dir / dataset["path"]).is_file()


def test_prepare_run_dir_skips_an_empty_eval_set(project: Path, tmp_path: Path) -> None:
    (project / "data" / "eval.jsonl").write_text("\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    prepare_run_dir(run_dir, project, settings())
    assert not (run_dir / "data" / "eval.jsonl").exists()
    cfg = yaml.safe_load((run_dir / "axolotl.yaml").read_text(encoding="utf-8"))
    assert "test_datasets" not in cfg


def test_prepare_run_dir_refuses_missing_data(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(OverbrainerError, match=r"train\.jsonl is missing"):
        prepare_run_dir(run_dir, tmp_path / "empty-project", settings())
    assert not (run_dir / "axolotl.yaml").exists()


def test_a_shared_prepared_folder_has_one_subfolder_per_data_content(tmp_path: Path) -> None:
    # Axolotl names what it prepares by the dataset's path, not its content: runs sharing
    # a folder (a network volume's) must not meet changed data's old tokens.
    def prepared_of(name: str, examples: list[dict[str, object]]) -> str:
        project = tmp_path / name
        write_jsonl(project / "data" / "train.jsonl", examples)
        run_dir = tmp_path / f"{name}-run"
        run_dir.mkdir()
        prepare_run_dir(
            run_dir, project, settings(), prepared="/runpod-volume/overbrainer/prepared"
        )
        return str(yaml.safe_load((run_dir / CONFIG_FILE).read_text())["dataset_prepared_path"])

    first = prepared_of("a", [example()])
    same = prepared_of("b", [example()])
    changed = prepared_of("c", [example(reasoning="because")])
    assert first.startswith("/runpod-volume/overbrainer/prepared/data-")
    assert first == same
    assert changed != first and changed.startswith("/runpod-volume/overbrainer/prepared/data-")
