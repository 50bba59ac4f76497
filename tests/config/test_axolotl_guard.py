"""``axolotl_extra`` may not set a key overbrainer writes, and ``[training.env]`` may not
hold a secret or one of overbrainer's own variables: each refusal names the key and what
to do instead. The guarded keys are the renderer's own (they cannot drift apart)."""

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from overbrainer.config.axolotl_keys import (
    CPU_KEYS,
    DEFAULT_KEYS,
    MANAGED_AXOLOTL_KEYS,
    PARALLELISM_KEYS,
    SETTING_KEYS,
)
from overbrainer.config.load import ConfigError, load_settings
from overbrainer.config.model import TrainingSettings, env_refusal
from overbrainer.train.axolotl import render_config
from overbrainer.train.parallelism import Choice

BASE: dict[str, Any] = {"target": "here", "base_model": "a/b", "adapter": "lora"}

# For each [training] setting, a value other than the default: changing it must change
# exactly the axolotl.yaml keys SETTING_KEYS says it is written to.
OTHER_VALUES: dict[str, Any] = {
    "base_model": "c/d",
    "adapter": "qlora",
    "epochs": 5,
    "learning_rate": 1e-3,
    "lora_r": 7,
    "lora_alpha": 9,
    "lora_dropout": 0.2,
    "sequence_len": 512,
    "micro_batch_size": 3,
    "gradient_accumulation_steps": 7,
    "optimizer": "sgd",
    "lr_scheduler": "linear",
    "sample_packing": False,
    "evals_per_epoch": 9,
    "saves_per_epoch": 3,
    "merge": True,  # changes the commands, not axolotl.yaml
    "hub_model_id": "me/model",
}
# Settings of overbrainer's own, written to no key of axolotl.yaml; and parallelism, written
# only for a job of many processes, through its target's choice (tests/train).
NOT_RENDERED = {
    "target", "axolotl_extra", "env", "stop_timeout_minutes", "stall_minutes",
    "first_step_minutes", "keep_checkpoints", "parallelism"
}  # fmt: skip


def _training(**changes: Any) -> TrainingSettings:
    return TrainingSettings(**{**BASE, **changes})


def _problems(tmp_path: Path, table: str, values: dict[str, Any]) -> str:
    """Every problem ``load_settings`` reports for ``[training.TABLE]`` holding ``values``
    (as a user would see them)."""
    lines = [
        "[training]",
        'target = "here"',
        'base_model = "a/b"',
        'adapter = "lora"',
        f"[training.{table}]",
        *(f"{json.dumps(key)} = {json.dumps(value)}" for key, value in values.items()),
        "[targets.here]",
        'kind = "local"',
    ]
    (tmp_path / "overbrainer.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(tmp_path, {})
    return str(raised.value)


def test_every_setting_is_probed() -> None:
    assert set(OTHER_VALUES) == set(TrainingSettings.model_fields) - NOT_RENDERED


@pytest.mark.parametrize("setting", sorted(OTHER_VALUES))
def test_a_setting_changes_exactly_the_keys_it_is_written_to(setting: str) -> None:
    before = render_config(_training(), has_eval=True)
    after = render_config(_training(**{setting: OTHER_VALUES[setting]}), has_eval=True)
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    assert changed == {key for key, source in SETTING_KEYS.items() if source == setting}


@pytest.mark.parametrize(
    ("adapter", "has_eval", "hub", "device", "parallelism"),
    list(
        itertools.product(
            ["lora", "qlora", "full"],
            [True, False],
            [None, "me/m"],
            ["auto", "cpu"],
            [None, "ddp", "zero2", "zero3", "fsdp"],
        )
    ),
)
def test_every_rendered_key_is_known(
    adapter: str, has_eval: bool, hub: str | None, device: str, parallelism: Any
) -> None:
    choice = None if parallelism is None else Choice(4, parallelism, "why")
    cfg = render_config(
        _training(adapter=adapter, hub_model_id=hub),
        has_eval=has_eval,
        device=device,
        choice=choice,
    )
    known = (
        SETTING_KEYS.keys()
        | MANAGED_AXOLOTL_KEYS
        | DEFAULT_KEYS
        | CPU_KEYS.keys()
        | PARALLELISM_KEYS
    )
    assert set(cfg) <= known, set(cfg) - known


@pytest.mark.parametrize("key", sorted(SETTING_KEYS))
def test_every_key_written_from_a_setting_is_refused_in_axolotl_extra(
    tmp_path: Path, key: str
) -> None:
    text = _problems(tmp_path, "axolotl_extra", {key: 1})
    setting = SETTING_KEYS[key]
    assert f"set training.{setting} instead" in text
    assert f"training.axolotl_extra.{key}:" in text


@pytest.mark.parametrize("key", sorted(MANAGED_AXOLOTL_KEYS))
def test_managed_keys_are_refused_in_axolotl_extra(key: str) -> None:
    with pytest.raises(ValidationError, match="managed by overbrainer"):
        _training(axolotl_extra={key: 1})


def test_defaults_and_other_keys_stay_open() -> None:
    extra = {"lora_target_linear": False, "lora_target_modules": ["q_proj"], "bf16": "auto"}
    assert render_config(_training(axolotl_extra=extra), has_eval=False)["bf16"] == "auto"


def test_a_cpu_target_renders_the_cpu_keys_over_axolotl_extra() -> None:
    training = _training(axolotl_extra={"bf16": "auto", "lora_mlp_kernel": True, "seed": 1})
    cpu = render_config(training, has_eval=False, device="cpu")
    for key, value in CPU_KEYS.items():
        assert cpu[key] is value
    assert cpu["seed"] == 1
    auto = render_config(training, has_eval=False)
    assert auto["bf16"] == "auto"
    assert auto["lora_mlp_kernel"] is True
    assert "fp16" not in auto


# --- [training.env] -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "HF_HOME",
        "HF_HUB_OFFLINE",
        "WANDB_MODE",
        "WANDB_PROJECT",
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "PYTORCH_CUDA_ALLOC_CONF",
        "NCCL_DEBUG",
        "TZ",
        "MONKEY_BUSINESS",
    ],
)
def test_ordinary_variables_are_accepted(name: str) -> None:
    assert env_refusal(name) is None
    assert _training(env={name: "1"}).env == {name: "1"}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("WANDB_API_KEY", "looks like a secret"),
        ("HF_TOKEN", "set by overbrainer"),
        ("HUGGING_FACE_HUB_TOKEN", "set by overbrainer"),
        ("GITHUB_TOKEN", "looks like a secret"),
        ("AWS_SECRET_ACCESS_KEY", "looks like a secret"),
        ("AWS_ACCESS_KEY_ID", "looks like a secret"),
        ("PGPASSWORD".replace("PGPASSWORD", "PG_PASSWORD"), "looks like a secret"),
        ("MY_PRIVATE_THING", "looks like a secret"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "looks like a secret"),
        ("api_key", "looks like a secret"),
        ("OVERBRAINER_METRICS", "set by overbrainer"),
        ("overbrainer_run", "set by overbrainer"),
        ("VAULT_ADDR", "set by overbrainer"),
        ("PATH", "set by overbrainer"),
        ("PYTHONPATH", "set by overbrainer"),
        ("VIRTUAL_ENV", "set by overbrainer"),
        ("AXOLOTL_DO_NOT_TRACK", "set by overbrainer"),
        ("1ABC", "not an environment variable name"),
        ("A-B", "not an environment variable name"),
        ("A B", "not an environment variable name"),
    ],
)
def test_secrets_and_overbrainers_own_variables_are_refused_naming_the_key(
    tmp_path: Path, name: str, why: str
) -> None:
    refusal = env_refusal(name)
    assert refusal is not None and why in refusal
    canary = "CANARY-value-never-shown"
    text = _problems(tmp_path, "env", {"HF_HOME": "/x", name: canary})
    assert f"training.env.{name}: {refusal}" in text
    assert canary not in text


def test_env_values_are_one_line_strings() -> None:
    with pytest.raises(ValidationError, match="line break"):
        _training(env={"A": "x\ny"})
    with pytest.raises(ValidationError):
        _training(env={"A": 1})
