"""The Axolotl side of a run: ``axolotl.yaml``, the trainer commands, the job's environment
and the run directory they need.

A run directory holds everything the job reads, with paths relative to it (the job runs
there, on whatever target)::

    axolotl.yaml            rendered by render_config / write_config
    overbrainer_metrics.py  the metrics plugin, found through PYTHONPATH=.
    overbrainer_model.py    the job's first step on a pod: the base model made ready
    data/train.jsonl        copied from the project
    data/eval.jsonl         copied when the project's is not empty
    resume/checkpoint-N     the checkpoint a resumed run goes on from (``--resume-from``)
    deepspeed/zeroN.json    the DeepSpeed config of a job of many processes with ZeRO
"""

import copy
import errno
import hashlib
import math
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from overbrainer.config.axolotl_keys import CPU_KEYS, MANAGED_AXOLOTL_KEYS, SETTING_KEYS
from overbrainer.config.model import TrainingSettings
from overbrainer.errors import OverbrainerError
from overbrainer.train.data import EVAL_FILE, TRAIN_FILE, DataFiles, check_data
from overbrainer.train.layout import CHECKPOINT_PREFIX, OUTPUT_DIR
from overbrainer.train.parallelism import Choice, Processes
from overbrainer.train.ranks import GLOBAL_PREFIX_TEMPLATE, PREFIX_TEMPLATE_ENV, RANK_ROLE

CONFIG_FILE = "axolotl.yaml"
"""The config file's name in the run directory."""

PLUGIN_FILE = "overbrainer_metrics.py"
"""The metrics plugin's file name, in the package and in the run directory."""

MODEL_STEP_FILE = "overbrainer_model.py"
"""The step that makes the base model ready before the trainer (:func:`model_ready_command`),
in the package and in the run directory."""

MODEL_READY_FILE = "model_ready.json"
"""What that step writes in the run directory: whether the base model came from the cache
and how long it took to be ready."""

PLUGIN = "overbrainer_metrics.OverbrainerMetricsPlugin"
"""How ``axolotl.yaml`` names the metrics plugin (module on ``PYTHONPATH``, then class)."""

METRICS_FILE = "metrics.jsonl"
"""The metrics file, relative to the run directory."""

METRICS_ENV = "OVERBRAINER_METRICS"
"""The variable telling the plugin where to write (set for the job by overbrainer)."""

STOP_FILE = "stop_request"
"""The save-and-stop request, relative to the run directory: overbrainer writes it there
(``train stop``) and the plugin, which looks for it after every step, then makes the
trainer save a checkpoint and stop."""

STOP_ENV = "OVERBRAINER_STOP"
"""The variable telling the plugin where the request appears."""

RESUME_DIR = "resume"
"""Where a resumed run's directory holds the checkpoint it starts from (uploaded with it)."""

TELEMETRY_ENV = "AXOLOTL_DO_NOT_TRACK"
"""Set to ``1`` for every job: Axolotl then sends no telemetry (see :func:`job_environment`)."""

PREPARED_DIR = "prepared"
"""Axolotl's ``dataset_prepared_path``, relative to the run directory."""

MERGED_DIR = f"{OUTPUT_DIR}/merged"
"""Where ``axolotl merge-lora`` writes the merged model."""

DEEPSPEED_DIR = "deepspeed"
"""Where the package keeps its DeepSpeed configs, and a run directory its copy of one."""

# The CPU's share of a process's loading when it trains on the CPU (see render_config):
# at least what the verified recipe used, more for a bigger model.
_CPU_MAX_MEMORY_GIB = 8

# Names (lower case, "_" and " " read as "-") of chat templates and model families whose
# templates render an assistant turn's ``reasoning_content``.
_REASONING_NAMES = (
    "qwen3",
    "qwq",
    "deepseek-r1",
    "r1-distill",
    "gpt-oss",
    "phi-4-reasoning",
    "phi-4-mini-reasoning",
    "magistral",
    "exaone-deep",
    "smollm3",
    "seed-oss",
    "glm-4.5",
    "glm-4.6",
    "glm4-5",
    "kimi-k2",
    "olmo-3-think",
)
# Axolotl chat_template values that defer to the base model's own template.
_TOKENIZER_TEMPLATES = ("tokenizer_default", "tokenizer_default_fallback_")


def _dataset(path: Path) -> dict[str, Any]:
    """A ``chat_template`` dataset entry for the JSONL file at ``path`` (run-relative)."""
    return {
        "path": path.as_posix(),
        "type": "chat_template",
        "field_messages": "messages",
        "field_thinking": "reasoning_content",
        "roles_to_train": ["assistant"],
        "train_on_eos": "turn",
        "ds_type": "json",
    }


def render_config(
    training: TrainingSettings,
    *,
    has_eval: bool,
    device: str = "auto",
    resume_from: str | None = None,
    choice: Choice | None = None,
    prepared: str | None = None,
) -> dict[str, Any]:
    """The content of ``axolotl.yaml`` for ``training``.

    Every key that comes from a setting is written through :data:`SETTING_KEYS` (which
    ``axolotl_extra`` may therefore not set). The eval set (``test_datasets``, with
    ``evals_per_epoch``) is there only with ``has_eval``: without an eval set Axolotl has
    nothing to evaluate. ``axolotl_extra`` is merged last, key by key; then, with
    ``device="cpu"``, the CPU-safe keys (:data:`CPU_KEYS`) over it. ``resume_from``: the
    run-relative checkpoint the training goes on from (``train --resume-from``).
    ``choice``: how a job of many processes shares the model (:func:`parallelism_keys`,
    written last); None or one process: nothing. ``prepared``: where Axolotl keeps the
    tokenised data (a network volume's folder, shared by runs); None: the run directory's
    own ``prepared/``.
    """
    if choice is not None and choice.problem is not None:
        # The preflight refuses it before any run exists; a second guard.
        raise OverbrainerError(choice.problem)
    refused = sorted((MANAGED_AXOLOTL_KEYS | SETTING_KEYS.keys()) & training.axolotl_extra.keys())
    if refused:
        # The settings refuse these already; a second guard, because a lost plugin or
        # output_dir would make the run fail only after the job has cost its time.
        raise OverbrainerError(
            f"training.axolotl_extra may not set {', '.join(refused)}: overbrainer writes "
            "them; remove them from overbrainer.toml"
        )
    cfg: dict[str, Any] = {}

    def setting(key: str, value: Any = None) -> None:
        cfg[key] = getattr(training, SETTING_KEYS[key]) if value is None else value

    setting("base_model")
    cfg["datasets"] = [_dataset(TRAIN_FILE)]
    cfg["val_set_size"] = 0
    if has_eval:
        cfg["test_datasets"] = [_dataset(EVAL_FILE)]
    for key in (
        "num_epochs",
        "learning_rate",
        "micro_batch_size",
        "gradient_accumulation_steps",
        "sequence_len",
        "optimizer",
        "lr_scheduler",
        "sample_packing",
    ):
        setting(key)
    if has_eval:
        setting("evals_per_epoch")
    setting("saves_per_epoch")
    if training.adapter in ("lora", "qlora"):
        for key in ("adapter", "lora_r", "lora_alpha", "lora_dropout"):
            setting(key)
        cfg["lora_target_linear"] = True
        if training.adapter == "qlora":
            setting("load_in_4bit", True)
    if training.hub_model_id is not None:
        setting("hub_model_id")
    cfg["output_dir"] = f"./{OUTPUT_DIR}"
    cfg["dataset_prepared_path"] = prepared or f"./{PREPARED_DIR}"
    cfg["plugins"] = [PLUGIN]
    if resume_from is not None:
        cfg["resume_from_checkpoint"] = f"./{resume_from}"
    for key, value in training.axolotl_extra.items():
        cfg[key] = copy.deepcopy(value)
    if device == "cpu":
        cfg.update(CPU_KEYS)
    if choice is not None:
        cfg.update(parallelism_keys(choice, device=device))
    return cfg


def parallelism_keys(choice: Choice, *, device: str = "auto") -> dict[str, Any]:
    """Axolotl's keys for ``choice`` (none for a job of one process).

    - ``ddp``: nothing on GPUs (Axolotl's default under torchrun); on the CPU,
      ``ddp_backend: gloo`` (NCCL needs GPUs) and a ``max_memory`` for the CPU, without
      which Axolotl pins each process's model to the GPU of its rank, and loading fails
      with no GPU there;
    - ``zero2``, ``zero3``: ``deepspeed:`` the run directory's copy of the package's JSON
      (:func:`deepspeed_file`), whose ZeRO-3 gathers the 16-bit weights on saving;
    - ``fsdp``: FSDP2, each decoder layer wrapped and fully sharded, and the model saved
      as a full state dict, so the final model is written whole by rank 0.
    """
    if choice.parallelism is None or not choice.many:
        return {}
    if choice.parallelism == "ddp":
        if device != "cpu":
            return {}
        need = choice.need_gib or 0
        gib = max(_CPU_MAX_MEMORY_GIB, math.ceil(need))
        return {"ddp_backend": "gloo", "max_memory": {"cpu": f"{gib}GiB"}}
    if choice.parallelism in ("zero2", "zero3"):
        return {"deepspeed": f"./{deepspeed_file(choice.parallelism)}"}
    return {
        "fsdp_version": 2,
        "fsdp_config": {
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "reshard_after_forward": True,
            "state_dict_type": "FULL_STATE_DICT",
            "offload_params": False,
        },
    }


def deepspeed_file(stage: Literal["zero2", "zero3"]) -> str:
    """The run-relative path of the DeepSpeed config of ZeRO ``stage``."""
    return f"{DEEPSPEED_DIR}/{stage}.json"


def deepspeed_source(stage: Literal["zero2", "zero3"]) -> bytes:
    """The DeepSpeed config of ZeRO ``stage``, as shipped with the package."""
    return resources.files("overbrainer.train").joinpath(deepspeed_file(stage)).read_bytes()


def cpu_overridden(training: TrainingSettings) -> list[str]:
    """The ``axolotl_extra`` keys a ``device = "cpu"`` target replaces (to warn about)."""
    return [key for key in CPU_KEYS if key in training.axolotl_extra]


def dump_config(cfg: dict[str, Any]) -> str:
    """``cfg`` as YAML, keys in their order."""
    return yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False, allow_unicode=True)


def write_config(
    run_dir: Path,
    training: TrainingSettings,
    has_eval: bool,
    device: str = "auto",
    resume_from: str | None = None,
    choice: Choice | None = None,
    prepared: str | None = None,
) -> Path:
    """Write ``run_dir/axolotl.yaml`` (and the DeepSpeed config it names) and return its
    path."""
    path = run_dir / CONFIG_FILE
    cfg = render_config(
        training,
        has_eval=has_eval,
        device=device,
        resume_from=resume_from,
        choice=choice,
        prepared=prepared,
    )
    if choice is not None and choice.many and choice.parallelism in ("zero2", "zero3"):
        stage: Literal["zero2", "zero3"] = choice.parallelism
        copy_to = run_dir / deepspeed_file(stage)
        copy_to.parent.mkdir(parents=True, exist_ok=True)
        copy_to.write_bytes(deepspeed_source(stage))
    path.write_text(dump_config(cfg), encoding="utf-8")
    return path


# A job of one process per GPU it sees: counted from CUDA_VISIBLE_DEVICES when set (what
# the job may use), else from nvidia-smi; torchrun over them when there are several, else
# the trainer alone, as on a machine with one GPU or none (torchrun's own "gpu" count
# fails where CUDA is missing). Arguments: torchrun, axolotl, the config, the role.
_PER_GPU_SCRIPT = (
    "n=0; "
    'if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then '
    '[ -z "$CUDA_VISIBLE_DEVICES" ] || '
    'n=$(( $(printf %s "$CUDA_VISIBLE_DEVICES" | tr -cd , | wc -c) + 1 )); '
    "elif command -v nvidia-smi >/dev/null 2>&1; then "
    "n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU '); fi; "
    'if [ "$n" -gt 1 ]; then '
    'exec "$1" --standalone --nnodes 1 --nproc-per-node "$n" --role "$4" --tee 3 '
    '-m axolotl.cli.train "$3"; '
    'fi; exec "$2" train "$3"'
)


def torchrun_of(axolotl: str) -> str:
    """The ``torchrun`` beside the ``axolotl`` executable (the same venv), or the name on
    ``PATH`` when ``axolotl`` is itself a name on ``PATH``."""
    folder, slash, _ = axolotl.rpartition("/")
    return f"{folder}/torchrun" if slash else "torchrun"


CLUSTER_INTERFACE = "ens1"
"""The network interface a Runpod cluster's nodes talk to each other through (NCCL's
``NCCL_SOCKET_IFNAME`` unless the job's environment names another)."""

CLUSTER_VARIABLES = ("NUM_NODES", "NODE_RANK", "PRIMARY_ADDR", "PRIMARY_PORT", "NUM_TRAINERS")
"""The variables a cluster gives each node's job (the node command reads them when it starts:
how many nodes, this one's rank, where node 0's rendezvous listens, its GPUs)."""

# The job on one node of a cluster: torchrun joins the other nodes by a static rendezvous at
# node 0's address, every node started the same way, with the cluster's variables read from
# the node's environment when the job starts (missing ones fail it at once, named).
# Arguments: torchrun, the rendezvous id (the run's), the processes per node (empty: one
# per GPU of the node, NUM_TRAINERS), the role, the config, the lines' prefix template.
_NODE_SCRIPT = (
    'for v in NUM_NODES NODE_RANK PRIMARY_ADDR PRIMARY_PORT; do eval "x=\\${$v:-}"; '
    '[ -n "$x" ] || { echo "overbrainer: $v is not set: not a node of a cluster" >&2; '
    "exit 2; }; done; "
    'n="${3:-${NUM_TRAINERS:-}}"; '
    '[ -n "$n" ] || { echo "overbrainer: NUM_TRAINERS is not set: how many processes per '
    'node?" >&2; exit 2; }; '
    f'export NCCL_SOCKET_IFNAME="${{NCCL_SOCKET_IFNAME:-{CLUSTER_INTERFACE}}}" '
    f'{PREFIX_TEMPLATE_ENV}="$6"; '
    'exec "$1" --nnodes "$NUM_NODES" --node-rank "$NODE_RANK" --nproc-per-node "$n" '
    '--rdzv-id "$2" --rdzv-backend static --rdzv-endpoint "$PRIMARY_ADDR:$PRIMARY_PORT" '
    '--role "$4" --tee 3 -m axolotl.cli.train "$5"'
)

# A command that runs on node 0 only (its arguments), or says it is skipped on another node.
_NODE_ZERO_SCRIPT = (
    'w="$1"; shift; if [ "${NODE_RANK:-0}" != 0 ]; then echo "overbrainer: node $NODE_RANK '
    'skips $w (node 0 does it)" >&2; exit 0; fi; exec "$@"'
)


def train_command(
    axolotl: str = "axolotl", processes: Processes = 1, *, cluster_run: str | None = None
) -> list[str]:
    """The job command that trains: ``axolotl train`` for one process; ``torchrun`` over
    ``processes`` on this machine otherwise (``"gpu"``: one per GPU the job sees, counted
    when it starts, :data:`_PER_GPU_SCRIPT`), each worker's lines in the job's log prefixed
    by its rank (:mod:`overbrainer.train.ranks`).

    ``cluster_run``: the run's id, for the job that runs on every node of a cluster: then
    ``torchrun`` over ``processes`` per node (``"gpu"``: ``$NUM_TRAINERS``, the node's
    GPUs), joined to the other nodes by a static rendezvous at ``$PRIMARY_ADDR:
    $PRIMARY_PORT`` of id ``cluster_run`` as node ``$NODE_RANK`` of ``$NUM_NODES``, all
    read when the job starts (:data:`_NODE_SCRIPT`); each line prefixed by its worker's
    global rank (node rank × processes per node + local rank)."""
    if cluster_run is not None:
        per_node = "" if processes == "gpu" else str(max(1, processes))
        return [
            "sh",
            "-c",
            _NODE_SCRIPT,
            "sh",
            torchrun_of(axolotl),
            cluster_run,
            per_node,
            RANK_ROLE,
            CONFIG_FILE,
            GLOBAL_PREFIX_TEMPLATE,
        ]
    if processes == "gpu":
        torchrun = torchrun_of(axolotl)
        return ["sh", "-c", _PER_GPU_SCRIPT, "sh", torchrun, axolotl, CONFIG_FILE, RANK_ROLE]
    if processes <= 1:
        return [axolotl, "train", CONFIG_FILE]
    return [
        torchrun_of(axolotl),
        # Its own rendezvous on a free port of this machine: two jobs here never meet.
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(processes),
        # Each worker's lines in the job's log, prefixed [rankK]: (`runs logs --rank K`).
        "--role",
        RANK_ROLE,
        "--tee",
        "3",
        "-m",
        "axolotl.cli.train",
        CONFIG_FILE,
    ]


def trainer_commands(
    training: TrainingSettings,
    axolotl: str = "axolotl",
    processes: Processes = 1,
    *,
    cluster_run: str | None = None,
) -> list[list[str]]:
    """The commands the job runs in the run directory, in order.

    ``axolotl`` is the executable (a venv's ``bin/axolotl`` or the name on ``PATH``);
    ``processes`` how many the training runs and ``cluster_run`` the run's id when it runs
    on every node of a cluster (:func:`train_command`). The merge only follows a lora/qlora
    training (a full fine-tune has nothing to merge), and only one that was not stopped
    (:func:`merge_command`); it is one process, whatever the training, and on a cluster
    runs on node 0 only, which alone holds the trained adapter (:func:`on_node_zero`).
    """
    commands = [train_command(axolotl, processes, cluster_run=cluster_run)]
    if training.merge and training.adapter in ("lora", "qlora"):
        merge = merge_command(axolotl)
        commands.append(merge if cluster_run is None else on_node_zero(merge, "the merge"))
    return commands


def on_node_zero(command: list[str], what: str) -> list[str]:
    """``command`` run by the job of node 0 only (``$NODE_RANK`` 0, or unset); the job of
    another node says it skips ``what`` and goes on (exit 0)."""
    return ["sh", "-c", _NODE_ZERO_SCRIPT, "sh", what, *command]


# The merge, unless the training recorded nothing (no line but phase lines: the metrics
# plugin was not loaded, so the run fails, and a merged model would only hide that) or was
# stopped before its end (a save-and-stop: the plugin's ``stopped`` line in the metrics
# file), whose half-trained adapter is not worth a merged model: it writes the ``merging``
# phase line and runs the merge (its arguments), or writes ``merge_skipped`` and succeeds;
# without metrics it writes no line at all (job.log says why). Shell alone, as the phase
# command.
_MERGE_SCRIPT = (
    'm="${' + METRICS_ENV + ":-" + METRICS_FILE + '}"; '
    """if ! grep -qv '"event":"phase"' "$m" 2>/dev/null; then """
    "echo 'overbrainer: merge skipped: the training wrote no metrics (the metrics plugin "
    "was not loaded)' >&2; exit 0; fi; "
    """if grep -q '"event":"stopped"' "$m" 2>/dev/null; then p=merge_skipped; """
    "else p=merging; fi; "
    """printf '{"event":"phase","time":%s,"phase":"%s"}\\n' "$(date +%s)" "$p" >>"$m"; """
    '[ "$p" = merging ] || exit 0; exec "$@"'
)


def merge_command(axolotl: str = "axolotl") -> list[str]:
    """The job command that merges the adapter (``axolotl merge-lora``) after announcing
    it, or, when the training was stopped before its end, says the merge is skipped."""
    return ["sh", "-c", _MERGE_SCRIPT, "sh", axolotl, "merge-lora", CONFIG_FILE]


# Appends a phase line to the metrics file, in the plugin's format, with the shell alone
# (``date`` and ``printf``): no Python needed before the command it announces.
_PHASE_SCRIPT = (
    """printf '{"event":"phase","time":%s,"phase":"%s"}\\n' "$(date +%s)" "$1" """
    '>>"${' + METRICS_ENV + ":-" + METRICS_FILE + '}"'
)


def phase_command(phase: str) -> list[str]:
    """A job command that writes a ``phase`` line (``merging``) to the metrics file, so the
    follower can say what the job does next; ``phase`` is lowercase letters and ``_``."""
    if not phase or not all(ch.islower() or ch == "_" for ch in phase):
        raise ValueError(f"not a phase name: {phase!r}")
    return ["sh", "-c", _PHASE_SCRIPT, "sh", phase]


def job_environment(
    training: TrainingSettings | None = None,
    *,
    device: str = "auto",
    pythonpath: str | None = None,
) -> dict[str, str]:
    """The variables overbrainer sets for the job (over the environment it inherits).

    - ``WANDB_MODE=disabled`` unless ``[training.env]`` sets it: a job logs to Weights &
      Biases only when asked to;
    - ``CUDA_VISIBLE_DEVICES=""`` on a ``device = "cpu"`` target: the rehearsal trains on
      the CPU even where a GPU is present;
    - then ``[training.env]`` (the settings refuse secrets and overbrainer's own names);
    - ``PYTHONPATH`` starting with ``.``, the run directory, where the plugin module is
      (``pythonpath``, an inherited value, follows it), where the plugin writes and where
      it looks for a save-and-stop request;
    - ``AXOLOTL_DO_NOT_TRACK=1`` always: Axolotl's telemetry flush can wait for ever on a
      machine that cannot reach the internet, after training has saved its results, and
      the run would never end.

    The caller drops the user's own ``OVERBRAINER_*`` variables before adding these.
    """
    env: dict[str, str] = {"WANDB_MODE": "disabled"}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    if training is not None:
        env.update(training.env)
    env["PYTHONPATH"] = "." if not pythonpath else f".:{pythonpath}"
    env[METRICS_ENV] = METRICS_FILE
    env[STOP_ENV] = STOP_FILE
    env[TELEMETRY_ENV] = "1"
    return env


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(" ", "-")


def _keeps_reasoning(name: str) -> bool:
    normalized = _normalized(name)
    return any(known in normalized for known in _REASONING_NAMES)


def reasoning_template_warning(
    training: TrainingSettings, *, has_reasoning: bool = True
) -> str | None:
    """A warning when the chat template is unlikely to render ``reasoning_content``.

    A name heuristic: a ``chat_template_jinja`` in ``axolotl_extra`` must mention
    ``reasoning_content``; otherwise a named ``chat_template``, or else the base model
    (whose own template Axolotl uses by default), must be one known to carry reasoning
    (Qwen3, QwQ, DeepSeek-R1, gpt-oss, Phi-4-reasoning, …). ``has_reasoning=False`` (no
    example has a reasoning trace) means there is nothing to lose: no warning.
    """
    if not has_reasoning:
        return None
    extra = training.axolotl_extra
    fix = (
        "set training.axolotl_extra.chat_template to a template that renders it (e.g. "
        '"qwen3") or chat_template_jinja to one that uses message.reasoning_content'
    )
    lost = "the reasoning traces (reasoning_content) of the training examples may be dropped"
    jinja = extra.get("chat_template_jinja")
    if isinstance(jinja, str) and jinja.strip():
        if "reasoning_content" in jinja:
            return None
        return (
            "training.axolotl_extra.chat_template_jinja never mentions reasoning_content: "
            f"{lost}; {fix}"
        )
    template = extra.get("chat_template")
    if (
        isinstance(template, str)
        and template.strip()
        and template != "jinja"
        and not template.startswith(_TOKENIZER_TEMPLATES)
    ):
        if _keeps_reasoning(template):
            return None
        return (
            f"training.axolotl_extra.chat_template {template!r} is not known to render "
            f"reasoning_content: {lost}; {fix}"
        )
    if _keeps_reasoning(training.base_model):
        return None
    return (
        f"the chat template of {training.base_model} is not known to render "
        f"reasoning_content: {lost}; {fix}"
    )


# The model step, run by the job's Python when there is one ($1); it never fails the job.
_MODEL_STEP_SCRIPT = (
    'if [ ! -x "$1" ]; then echo "overbrainer: no $1: the trainer downloads the base model" '
    '>&2; exit 0; fi; "$@" || echo "overbrainer: the base model step failed; left to the '
    'trainer" >&2; exit 0'
)


def model_ready_command(python: str, training: TrainingSettings) -> list[str]:
    """The job's step before the trainer: the base model made ready in ``HF_HOME`` by
    ``python`` (the job's venv's) running :data:`MODEL_STEP_FILE`, which records whether
    it came from the cache (:data:`MODEL_READY_FILE`). It never fails the job (without
    that Python, it does nothing)."""
    revision = training.axolotl_extra.get("revision_of_model")
    step = [python, MODEL_STEP_FILE, training.base_model]
    if isinstance(revision, str) and revision:
        step.append(revision)
    return ["sh", "-c", _MODEL_STEP_SCRIPT, "sh", *step]


def model_step_source() -> bytes:
    """The model step's module, as shipped with the package."""
    return resources.files("overbrainer.train").joinpath(MODEL_STEP_FILE).read_bytes()


def plugin_source() -> bytes:
    """The metrics plugin module, as shipped with the package."""
    return resources.files("overbrainer.train").joinpath(PLUGIN_FILE).read_bytes()


def prepare_run_dir(
    run_dir: Path,
    project_dir: Path,
    training: TrainingSettings,
    data: DataFiles | None = None,
    *,
    device: str = "auto",
    resume: tuple[Path, int] | None = None,
    choice: Choice | None = None,
    prepared: str | None = None,
    resume_elsewhere: int | None = None,
) -> None:
    """Fill ``run_dir`` with what the job reads: the data, the plugin, the model step and
    ``axolotl.yaml``. ``resume_elsewhere``: the step of a checkpoint the target puts in
    ``resume/`` itself (a network volume's): the config names it, nothing is placed here.

    ``data`` is the result of :func:`check_data` on ``project_dir`` (checked here when not
    given). The eval set is copied, and configured, only when it has examples. ``resume``:
    the directory of the run whose checkpoint (of the step given) the training goes on
    from; it is placed in ``resume/`` here. ``choice``: how a job of many processes shares
    the model and ``prepared`` where the tokenised data is kept (:func:`render_config`).
    """
    if data is None:
        data = check_data(project_dir)
    data_dir = run_dir / TRAIN_FILE.parent
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data.train_path, run_dir / TRAIN_FILE)
    if data.eval_path is not None:
        shutil.copyfile(data.eval_path, run_dir / EVAL_FILE)
    (run_dir / PLUGIN_FILE).write_bytes(plugin_source())
    (run_dir / MODEL_STEP_FILE).write_bytes(model_step_source())
    resume_from = None if resume_elsewhere is None else resume_path(resume_elsewhere)
    if resume is not None:
        resume_from = place_checkpoint(resume[0], resume[1], run_dir)
    if prepared is not None:
        # A folder runs share (a network volume's): Axolotl names what it prepares there by
        # the dataset's path and settings, not its content, so changed data at the same
        # path would train on the old tokens. One subfolder per content keeps them apart.
        prepared = f"{prepared.rstrip('/')}/{data_digest(data)}"
    write_config(run_dir, training, data.has_eval, device, resume_from, choice, prepared)


def data_digest(data: DataFiles) -> str:
    """A short SHA-256 of the train set and the eval set (when there is one): the same for
    the same content, whatever the files' names or times."""
    digest = hashlib.sha256()
    for path in (data.train_path, data.eval_path):
        digest.update(b"\0" if path is None else b"\1")
        if path is not None:
            with path.open("rb") as file:
                for chunk in iter(lambda: file.read(1 << 20), b""):
                    digest.update(chunk)
    return f"data-{digest.hexdigest()[:16]}"


def resume_path(step: int) -> str:
    """Where a resumed run's directory holds its checkpoint (run-relative)."""
    return f"{RESUME_DIR}/{CHECKPOINT_PREFIX}{step}"


def place_checkpoint(source_run_dir: Path, step: int, run_dir: Path) -> str:
    """Put checkpoint ``step`` of the run in ``source_run_dir`` into ``run_dir`` (hard
    links where the filesystem allows: the trainer only reads it); its run-relative path."""
    source = source_run_dir / OUTPUT_DIR / f"{CHECKPOINT_PREFIX}{step}"
    rel = resume_path(step)
    target = run_dir / rel
    for directory, _, names in os.walk(source):
        here = Path(directory)
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in names:
            _link_or_copy(here / name, into / name)
    return rel


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(source, target, follow_symlinks=False)
