"""The files ``overbrainer init`` writes into a new project."""

import json

from overbrainer.config.defaults import RUNPOD_DEFAULT_IMAGE

__all__ = ["BASE_MODEL", "project_files"]

# Small, public, and its chat template renders ``reasoning_content``.
BASE_MODEL = "Qwen/Qwen3-0.6B"

OVERBRAINER_TOML = f"""\
# overbrainer.toml — the settings of this project.
#
# Any key can be overridden by an environment variable (or a line in .env):
#   OVERBRAINER_<SECTION>__<KEY>          e.g. OVERBRAINER_TRAINING__EPOCHS=5
#   OVERBRAINER_TARGETS__<NAME>__<KEY>    e.g. OVERBRAINER_TARGETS__GPU_CLOUD__MAX_HOURS=6
# The environment wins over this file, this file over the defaults shown below. A list can
# come from the environment as one comma-separated string. Unknown keys are errors.
# Secrets and SSH hosts are read from the environment only (see .env.example).
# Check the settings with: overbrainer config check
# Check everything a run needs (settings, data, the target's trainer or Runpod account)
# without starting one: overbrainer train --check

[training]
# The target to train on: the name of one [targets.NAME] below (required).
target = "local"
# The model to fine-tune: a Hugging Face id or a path (required).
base_model = "{BASE_MODEL}"
# "lora", "qlora" (LoRA on a 4-bit base) or "full" (required).
adapter = "lora"

# Every other key is optional; the defaults are shown.
# epochs = 3                          # passes over data/train.jsonl; a whole number >= 1
# learning_rate = 2e-4                # > 0 and finite
# lora_r = 16                         # LoRA rank; >= 1
# lora_alpha = 32                     # LoRA scaling; >= 1
# lora_dropout = 0.05                 # in [0, 1)
# sequence_len = 4096                 # tokens per sample; >= 1
# micro_batch_size = 2                # >= 1
# gradient_accumulation_steps = 4     # >= 1
# optimizer = "adamw_torch_fused"     # an Axolotl optimizer name
# lr_scheduler = "cosine"             # an Axolotl scheduler name
# sample_packing = true               # pack short samples into one sequence
# evals_per_epoch = 4                 # >= 1; used when data/eval.jsonl is not empty
# saves_per_epoch = 1                 # >= 1
# merge = false                       # lora/qlora only: also write the merged model
# stop_timeout_minutes = 5            # `train stop`: a job not stopped by then is cancelled
# stall_minutes = 20                  # a job writing no metrics line for this long is
#                                     # stalled: asked to save, then ended (> 0)
# first_step_minutes = 60             # the same before its first line (model download;
#                                     # >= stall_minutes)
# keep_checkpoints = 2                # checkpoints come home as they are saved; this many of
#                                     # the last stay in runs/<id>/output (>= 1)
# hub_model_id = "you/your-model"     # push the result to the Hugging Face Hub (needs
#                                     # OVERBRAINER_HF_TOKEN); default: no push
# parallelism = "auto"                # a job of many processes (GPUs): "ddp", "zero2",
#                                     # "zero3" (DeepSpeed ZeRO) or "fsdp"; "auto" chooses
#                                     # from the model's size, the adapter and the GPUs'
#                                     # memory (`train --check` says what and why)
#
# More Axolotl settings, merged last into axolotl.yaml. Not allowed here: the keys written
# from a setting above (num_epochs, lora_r, learning_rate, micro_batch_size, … — the error
# names the setting to use), and the keys overbrainer manages (datasets, test_datasets,
# val_set_size, output_dir, dataset_prepared_path, plugins, resume_from_checkpoint: use
# `overbrainer train --resume-from RUN`).
# [training.axolotl_extra]
# chat_template = "tokenizer_default"
# bf16 = "auto"
#
# Environment variables for the job, on every target and runtime (strings). Not allowed:
# anything that looks like a secret by name (…KEY, …TOKEN, …SECRET, …PASSWORD, …) and the
# variables overbrainer sets itself (OVERBRAINER_*, PATH, PYTHONPATH, VIRTUAL_ENV,
# AXOLOTL_DO_NOT_TRACK). Every job already gets AXOLOTL_DO_NOT_TRACK=1 and, unless set
# here, WANDB_MODE=disabled.
# [training.env]
# HF_HOME = "/scratch/hf"
# TOKENIZERS_PARALLELISM = "false"

# Targets: where training runs. Names use lowercase letters, digits and _ only.
# Paths and image references may hold only letters, digits and . _ - / : @ + =
# (no spaces, quotes, '..' or a leading '-'): they end up in shell commands.

[targets.local]
kind = "local"                        # this machine
# runtime = "native"                  # "native" (axolotl installed here) or "docker"
# venv = "/opt/axolotl-venv"          # a directory holding bin/axolotl; default: axolotl
#                                     # on PATH
# engine = "docker"                   # with runtime = "docker": "docker" or "podman"
# image = "axolotlai/axolotl@sha256:<64 hex digits>"
#                                     # required with runtime = "docker"; pinned by digest
# allow_unpinned_image = false        # true accepts an image by tag (it may change)
# device = "auto"                     # "cpu": train on the CPU (a rehearsal before paying
#                                     # for a GPU): Axolotl's LoRA kernels and fp16/bf16 off,
#                                     # GPUs hidden from the job
# processes = 2                       # the job's processes, with torchrun (>= 1); default:
#                                     # one per GPU the job sees, or 1 with device = "cpu"

# A CPU rehearsal of this project's exact data and settings on a small model, on a laptop:
#   [targets.laptop]
#   kind = "local"
#   venv = "/path/to/axolotl-venv"
#   device = "cpu"
# then: OVERBRAINER_TRAINING__BASE_MODEL=<a small model> overbrainer train --target laptop

# A machine reached over SSH. Its host comes from the environment only:
#   OVERBRAINER_TARGETS__BOX__HOST=user@host[:port]   (or a Host alias from ~/.ssh/config)
# [targets.box]
# kind = "ssh"
# workdir = "overbrainer"             # runs go below it; relative to the remote home, or
#                                     # absolute ("/scratch/me/overbrainer")
# runtime = "native"                  # as for a local target, also venv, engine, image,
# venv = "/opt/axolotl-venv"          #   allow_unpinned_image, device and processes

# A Runpod pod, created for the run and deleted once its results are home. Needs
# OVERBRAINER_RUNPOD__API_KEY.
# [targets.gpu_cloud]
# kind = "runpod"
# gpu_types = ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"]
#                                     # required; tried in this order (or "auto", below)
# max_hours = 4                       # required; > 0, at most 720: the pod's watchdog
#                                     # deletes it by then, even with this machine gone;
#                                     # not with --keep-pod (then only `overbrainer pod rm
#                                     # RUN` deletes it)
# image = "{RUNPOD_DEFAULT_IMAGE}"
#                                     # an Axolotl cloud image pinned by digest; default:
#                                     # Axolotl 0.19.0's, shown here
# allow_unpinned_image = false        # true accepts an image by tag (it may change)
# gpu_count = 1                       # >= 1; more: one process per GPU (torchrun), sharing
#                                     # the model as [training] parallelism says
# nodes = 1                           # 1..250; 2 or more: a Runpod Instant Cluster of that
#                                     # many pods of gpu_count GPUs each, one job across
#                                     # them (torchrun, static rendezvous); prices and
#                                     # max_cost_usd count every GPU of every node
# venv = "/workspace/axolotl-venv"    # where the image keeps axolotl (the default
#                                     # image does)
# container_disk_gb = 50              # >= 20
# boot_grace_minutes = 30             # >= 5: how long the pod may take to boot
# retrieve_grace_minutes = 60         # >= 1: time kept for bringing results home
# save_before_deadline_minutes = 10   # >= 0, below max_hours: the watchdog asks the job to
#                                     # save a checkpoint and stop this long before the
#                                     # deadline (and at 95 % of max_cost_usd); 0: only
#                                     # at the cost cap; default 10 (a quarter of a
#                                     # max_hours under 40 min)
# data_center_ids = ["EU-RO-1"]       # default: any
# network_volume_id = "<volume id>"   # needs exactly one data_center_ids entry
# max_cost_usd = 10                   # default: none; the most the pod may cost, at the
#                                     # rate it was created at: it is deleted when it
#                                     # reaches it (not with --keep-pod)
# wait_for_capacity = "30m"          # default: none (fail at once); when no GPU type has
#                                     # capacity, try them all again (backing off) for up
#                                     # to this long: "90s", "30m", "2h", "1h30m"
# max_recoveries = 3                  # >= 0: how often a run whose pod is lost before its
#                                     # job ended goes on, on a new pod, from its newest
#                                     # checkpoint home; 0: never
# unreachable_minutes = 10            # a running pod that does not answer SSH this long
#                                     # is lost (its run recovered on a new pod)

# A pod on the cheapest GPU type in Runpod's catalog that has the memory it needs
# (`overbrainer pod gpus` lists them, cheapest first).
# [targets.gpu_auto]
# kind = "runpod"
# gpu_types = "auto"                  # the catalog's types, filtered, cheapest first
# min_vram_gb = 40                    # required with "auto": memory per GPU, in GB
# max_price_per_hour = 1.5            # default: any; the most per GPU-hour, in USD
# max_hours = 4
# volume = "cache"                    # default: none; the project's network volume, by
#                                     # name: made by the first run (billed $0.07/GB a
#                                     # month until deleted), mounted at /runpod-volume by
#                                     # every run; pods are created only where it lives
# volume_data_center = "EU-RO-1"      # where it lives; needed unless data_center_ids has
#                                     # exactly one entry (then that one)
# volume_size_gb = 50                 # 10..4096: its size when a run makes it
# checkpoints_home = "last"           # "all", "last" or "none": the checkpoints that come
#                                     # home (the final output always does); default
#                                     # "last" with a volume (the job saves them there, and
#                                     # a recovery resumes from it), "all" without one

# What applies to every run of the project.
# [project]
# monthly_budget_usd = 100            # default: none; the most the project's Runpod runs
#                                     # may cost in a calendar month (UTC): a run that
#                                     # could pass it is refused before any pod exists

# Where the event log lives. Default: SQLite at .overbrainer/events.sqlite.
# [store]
# url = "postgresql://you@db.example.com/overbrainer"
#                                     # a team's PostgreSQL; never a password here: it
#                                     # comes from PGPASSWORD, a ?service= entry or
#                                     # ~/.pgpass (see .env.example)

# The Runpod API (the key is OVERBRAINER_RUNPOD__API_KEY, environment only).
# [runpod]
# base_url = "https://api.runpod.io/v2"
#                                     # https, or http to a loopback address
# s3_base_url = "https://s3.example.com"
#                                     # default: each data center's own S3 endpoint
#                                     # (https://s3api-<data center>.runpod.io); https,
#                                     # or http to a loopback address
"""

ENV_EXAMPLE = """\
# Copy this file to .env (which git ignores) and fill in what you use.
# These are read from the environment or .env only, never from overbrainer.toml.
# The process environment wins over .env. An empty value counts as unset.

# Runpod API key, for runpod targets (it never reaches the pod).
OVERBRAINER_RUNPOD__API_KEY=

# Runpod's S3 API key (Settings > S3 API Keys; both or neither): network volumes are
# filled through it before any pod exists.
# OVERBRAINER_RUNPOD__S3_ACCESS_KEY=
# OVERBRAINER_RUNPOD__S3_SECRET=

# Hugging Face token: gated base models, and hub_model_id.
OVERBRAINER_HF_TOKEN=

# The host of an ssh target named box: user@host[:port] or a Host alias from ~/.ssh/config.
# OVERBRAINER_TARGETS__BOX__HOST=

# A team's PostgreSQL event store (default: SQLite in .overbrainer/). Its password never
# goes in overbrainer.toml: it comes from PGPASSWORD, a ?service=NAME entry of
# ~/.pg_service.conf, or libpq's password file (~/.pgpass, mode 600). A password inside
# this URL is taken too, but PGPASSWORD or ~/.pgpass keep it out of the URL you share.
# OVERBRAINER_STORE__URL=postgresql://you@db.example.com/overbrainer
# PGPASSWORD=
"""

GITIGNORE = """\
# overbrainer: runs and their results, the event log, and secrets.
runs/
.overbrainer/
.env
"""

_EXAMPLES = [
    (
        "What is 17 + 25?",
        "17 + 25 = 42.",
        "Add the tens: 10 + 20 = 30. Add the ones: 7 + 5 = 12. 30 + 12 = 42.",
    ),
    (
        "Is 91 a prime number?",
        "No: 91 = 7 × 13.",
        "91 is odd, not divisible by 3 (digit sum 10) or 5. Try 7: 7 × 13 = 91. Not prime.",
    ),
    (
        "Spell 'level' backwards.",
        "'level' backwards is 'level': it is a palindrome.",
        "l-e-v-e-l reversed is l-e-v-e-l, the same word.",
    ),
    (
        "How many minutes are there in 3.5 hours?",
        "210 minutes.",
        "One hour is 60 minutes. 3 hours are 180 minutes, half an hour is 30: 210.",
    ),
]


def _train_jsonl() -> str:
    lines = [
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": answer, "reasoning_content": reasoning},
                ]
            },
            ensure_ascii=False,
        )
        for question, answer, reasoning in _EXAMPLES
    ]
    return "\n".join(lines) + "\n"


def project_files() -> dict[str, str]:
    """The files of a new project, by path relative to its directory, in writing order."""
    return {
        "overbrainer.toml": OVERBRAINER_TOML,
        ".env.example": ENV_EXAMPLE,
        ".gitignore": GITIGNORE,
        "data/train.jsonl": _train_jsonl(),
        "data/eval.jsonl": "",
    }
