"""Which keys of ``axolotl.yaml`` overbrainer writes, and from what.

The renderer (:func:`overbrainer.train.axolotl.render_config`) writes every key that comes
from a ``[training]`` setting through :data:`SETTING_KEYS`, and the settings refuse the same
keys in ``axolotl_extra``, so the two cannot drift apart: a key the renderer writes from a
setting is a key ``axolotl_extra`` may not set, and the refusal names the setting.
"""

from types import MappingProxyType

SETTING_KEYS = MappingProxyType(
    {
        "base_model": "base_model",
        "adapter": "adapter",
        "load_in_4bit": "adapter",
        "num_epochs": "epochs",
        "learning_rate": "learning_rate",
        "micro_batch_size": "micro_batch_size",
        "gradient_accumulation_steps": "gradient_accumulation_steps",
        "sequence_len": "sequence_len",
        "optimizer": "optimizer",
        "lr_scheduler": "lr_scheduler",
        "sample_packing": "sample_packing",
        "evals_per_epoch": "evals_per_epoch",
        "saves_per_epoch": "saves_per_epoch",
        "lora_r": "lora_r",
        "lora_alpha": "lora_alpha",
        "lora_dropout": "lora_dropout",
        "hub_model_id": "hub_model_id",
    }
)
"""``axolotl.yaml`` key -> the ``[training]`` setting it is written from."""

MANAGED_AXOLOTL_KEYS = frozenset(
    {
        "datasets",
        "test_datasets",
        "val_set_size",
        "output_dir",
        "dataset_prepared_path",
        "plugins",
        "resume_from_checkpoint",
    }
)
"""Keys overbrainer writes from the run itself (its data, its directories, its plugin, the
checkpoint of ``train --resume-from``)."""

DEFAULT_KEYS = frozenset({"lora_target_linear"})
"""Keys overbrainer writes as a default that ``axolotl_extra`` may change (to name the
target modules one by one, say)."""

CPU_KEYS = MappingProxyType(
    {
        "lora_mlp_kernel": False,
        "lora_qkv_kernel": False,
        "lora_o_kernel": False,
        "fp16": False,
        "bf16": False,
        "tf32": False,
    }
)
"""What a target with ``device = "cpu"`` sets, over ``axolotl_extra``: Axolotl switches its
Triton LoRA kernels on by itself (the MLP one allocates on CUDA), and mixed precision has
no CPU kernel for every operation."""

PARALLELISM_KEYS = frozenset(
    {"ddp_backend", "max_memory", "deepspeed", "fsdp_version", "fsdp_config"}
)
"""What a job of many processes gets for its ``[training] parallelism``, over
``axolotl_extra`` (:func:`overbrainer.train.axolotl.parallelism_keys`); a job of one process
gets none of them, and ``axolotl_extra`` may set them for it."""
