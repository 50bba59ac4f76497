"""The settings of a project: ``overbrainer.toml`` under ``OVERBRAINER_*`` environment variables.

Every model forbids unknown keys and is strict about types (the environment layer in
:mod:`overbrainer.config.load` turns strings into the right types first). Values that end up
in shell commands on a target (paths, image references, venvs, work directories, data center
ids) accept only a safe character set, checked by :func:`is_safe_value`; a refusal names the
key, never the value.
"""

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from overbrainer.config.pydantic_plugins import PluginsOff

_plugins_off = PluginsOff()  # until the models below are built: see its module

from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError  # noqa: E402

from overbrainer.config.axolotl_keys import MANAGED_AXOLOTL_KEYS, SETTING_KEYS  # noqa: E402
from overbrainer.config.defaults import RUNPOD_DEFAULT_IMAGE  # noqa: E402
from overbrainer.config.durations import parse_duration  # noqa: E402
from overbrainer.errors import OverbrainerError  # noqa: E402

__all__ = [
    "MANAGED_AXOLOTL_KEYS",
    "RUNPOD_DEFAULT_IMAGE",
    "SAFE_CHARS_RULE",
    "TARGET_NAME_RE",
    "ConfigError",
    "LocalTarget",
    "ProjectSettings",
    "RunpodOnly",
    "RunpodSettings",
    "RunpodTarget",
    "Settings",
    "SshTarget",
    "StoreSettings",
    "Target",
    "TrainingSettings",
    "is_loopback_host",
    "is_pinned_image",
    "is_safe_label",
    "is_safe_value",
    "parse_host",
    "store_url_has_password",
    "strip_url_password",
    "undeclared_target",
]


class ConfigError(OverbrainerError):
    """The configuration cannot be used; ``problems`` lists every reason, one line each.

    Each problem names its key (``training.epochs``, ``targets.gpu.max_hours`` or an
    environment variable), the rule it breaks and how to fix it. No problem carries a
    secret's value.
    """

    def __init__(self, problems: Sequence[str], *, hint: str | None = None) -> None:
        self.problems: list[str] = list(problems)
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            lines = [f"the configuration has {len(self.problems)} problems:"]
            lines.extend(f"  {problem}" for problem in self.problems)
            text = "\n".join(lines)
        return f"{text}\n{self.hint}" if self.hint else text


# --- safe values -----------------------------------------------------------------------

TARGET_NAME_RE = re.compile(r"^[a-z0-9_]+$")

# Letters, digits and the punctuation that paths and image references need; nothing a shell
# gives a meaning to (no spaces, quotes, $, `, ;, &, |, <, >, *, ?, ~, !, #, (, ), {, }, \).
_SAFE_RE = re.compile(r"^[A-Za-z0-9_.@:/+=-]+$")
# GPU type ids are labels like "NVIDIA GeForce RTX 4090": words of the safe set joined by
# single spaces. They travel in JSON to the Runpod API, and quoted anywhere else.
_LABEL_RE = re.compile(r"^[A-Za-z0-9_.+-]+( [A-Za-z0-9_.+-]+)*$")
_PINNED_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:-]*@sha256:[0-9a-f]{64}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_VOLUME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST_RE = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9_][A-Za-z0-9_.-]*)@)?"
    r"(?P<host>[A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)
_MAX_VALUE_LEN = 1024

SAFE_CHARS_RULE = (
    "only letters, digits and . _ - / : @ + = are allowed (no spaces, quotes, '..', "
    "line breaks or a leading '-')"
)


def is_safe_value(value: str) -> bool:
    """Whether ``value`` can go into a shell command on a target without surprises.

    Accepts letters, digits and ``. _ - / : @ + =``; refuses the empty string, ``..``
    anywhere, a leading ``-`` (it would read as an option) and anything longer than 1024
    characters. Spaces, quotes, line breaks, NUL and shell metacharacters are refused by the
    character set.
    """
    return (
        0 < len(value) <= _MAX_VALUE_LEN
        and _SAFE_RE.fullmatch(value) is not None
        and ".." not in value
        and not value.startswith("-")
    )


def is_safe_label(value: str) -> bool:
    """Like :func:`is_safe_value`, but words may be joined by single spaces (GPU type ids)."""
    return (
        0 < len(value) <= _MAX_VALUE_LEN
        and _LABEL_RE.fullmatch(value) is not None
        and ".." not in value
        and not value.startswith("-")
    )


def is_pinned_image(image: str) -> bool:
    """Whether ``image`` names a container image by digest: ``name[:tag]@sha256:<64 hex>``."""
    return _PINNED_RE.fullmatch(image) is not None


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` is ``localhost`` or a loopback address (127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_host(value: str) -> tuple[str | None, str, int | None]:
    """Split ``user@host[:port]`` (or an ``~/.ssh/config`` alias) into (user, host, port).

    Raises ``ValueError`` (without the value in its message) when it is not of that form.
    """
    match = _HOST_RE.fullmatch(value)
    if match is None:
        raise ValueError("must be user@host[:port] or a host alias from ~/.ssh/config")
    port_text = match.group("port")
    port = int(port_text) if port_text is not None else None
    if port is not None and not 1 <= port <= 65535:
        raise ValueError("has a port outside 1-65535")
    host = match.group("host")
    return match.group("user"), host.strip("[]"), port


def store_url_has_password(url: str) -> bool:
    """Whether a store URL carries a password (``scheme://user:PASSWORD@host/...``)."""
    try:
        return urlsplit(url).password is not None
    except ValueError:
        return False


def strip_url_password(url: str, replacement: str | None = None) -> str:
    """``url`` with its password removed (or replaced by ``replacement``, e.g. ``****``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    auth = f"{user}:{replacement}" if replacement is not None else user
    return parts._replace(netloc=f"{auth}@{host}").geturl()


def _problem(suffix: str, rule: str) -> PydanticCustomError:
    """An error about a key below the validated location: ``suffix`` (``.image``, ``[1]``)
    is appended to the error's location when it is shown."""
    return PydanticCustomError("overbrainer", "{rule}", {"suffix": suffix, "rule": rule})


def _check_safe(value: str | None) -> str | None:
    if value is not None and not is_safe_value(value):
        raise ValueError(f"cannot be passed safely to a shell on the target: {SAFE_CHARS_RULE}")
    return value


def secret_problem(secret: str) -> str | None:
    """Why ``secret`` cannot be sent as an HTTP bearer token, without showing any of it
    (None: it can). A token is printable ASCII without spaces; anything else would fail
    deep inside the HTTP client (a pasted smart quote cannot even be encoded) or corrupt
    the header."""
    if not secret:
        return "is empty; set it to the bare value"
    if all("!" <= ch <= "~" for ch in secret):
        return None
    if any(not ch.isascii() for ch in secret):
        kind = "has a character outside ASCII (a pasted smart quote or dash?)"
    else:
        kind = "has a space, line break or control character"
    return f"{kind}, which an HTTP header cannot carry; set it to the bare value"


def _check_secret(value: SecretStr | None) -> SecretStr | None:
    # A secret travels in HTTP headers and on stdin: only a header's characters survive.
    if value is not None:
        problem = secret_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
    return value


def _check_image(value: str | None, allow_unpinned: bool) -> None:
    if value is None:
        return
    _check_safe(value)
    if not allow_unpinned and not is_pinned_image(value):
        raise ValueError(
            "must be pinned by digest (name@sha256:<64 hex digits>) so every run uses the "
            "same image; pin it, or set allow_unpinned_image = true to accept a moving tag"
        )


_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)

Count = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]


# --- training --------------------------------------------------------------------------

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words of a variable's name (split at "_") that mark it as a secret: a key, a token, a
# password… (TOKENIZERS_PARALLELISM is not one: words are compared whole).
_SECRET_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "PRIVATE",
        "COOKIE",
    }
)
# Variables overbrainer sets for the job itself (its wrapper, its plugin, the trainer's
# telemetry and the Hugging Face token), or strips from it.
JOB_OWN_VARIABLES = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "AXOLOTL_DO_NOT_TRACK",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
    }
)
_JOB_OWN_PREFIXES = ("OVERBRAINER_", "VAULT_")


def env_refusal(name: str) -> str | None:
    """Why ``name`` may not be set in ``[training.env]``, or None when it may.

    Refused: names that are not portable variable names; overbrainer's own variables
    (``OVERBRAINER_*``, ``VAULT_*`` and those the job wrapper sets: ``PATH``,
    ``PYTHONPATH``, ``VIRTUAL_ENV``, ``AXOLOTL_DO_NOT_TRACK``, the Hugging Face token);
    and anything that looks like a secret by name — a word (between ``_``) such as KEY,
    TOKEN, SECRET, PASSWORD, CREDENTIALS, AUTH or PRIVATE — because the table is written
    into the run's files and shown by ``config check``.
    """
    if _ENV_NAME_RE.fullmatch(name) is None:
        return "is not an environment variable name (letters, digits and _, not first a digit)"
    upper = name.upper()
    if upper.startswith(_JOB_OWN_PREFIXES) or upper in JOB_OWN_VARIABLES:
        return "is set by overbrainer for the job itself; remove it"
    if _SECRET_WORDS & set(upper.split("_")):
        return (
            "looks like a secret by its name, and [training.env] is written into the run's "
            "files: remove it (the Hugging Face token goes in OVERBRAINER_HF_TOKEN; other "
            "credentials belong in the target's own environment)"
        )
    return None


class TrainingSettings(BaseModel):
    """``[training]``: what to train and how."""

    model_config = _STRICT

    target: str
    base_model: str
    adapter: Literal["lora", "qlora", "full"]
    epochs: Count = 3
    learning_rate: Rate = 2e-4
    lora_r: Count = 16
    lora_alpha: Count = 32
    lora_dropout: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.05
    sequence_len: Count = 4096
    micro_batch_size: Count = 2
    gradient_accumulation_steps: Count = 4
    optimizer: str = "adamw_torch_fused"
    lr_scheduler: str = "cosine"
    sample_packing: bool = True
    evals_per_epoch: Count = 4
    saves_per_epoch: Count = 1
    merge: bool = False
    hub_model_id: str | None = None
    # `train stop`: how long a job asked to save a checkpoint and stop has before it is
    # cancelled instead (a save of a big model takes minutes).
    stop_timeout_minutes: Annotated[float, Field(gt=0, le=24 * 60, allow_inf_nan=False)] = 5
    # A job that writes no metrics line for this long is stalled (hung): it is asked to
    # save and stop, then ended (lifecycle/stalls.py; the pod's watchdog keeps the same
    # rule when nothing follows the run).
    stall_minutes: Annotated[float, Field(gt=0, le=24 * 60, allow_inf_nan=False)] = 20
    # Before its first metrics line a job may take longer: the model is downloaded, loaded
    # and the data prepared first. Counted from the job's start.
    first_step_minutes: Annotated[float, Field(gt=0, le=24 * 60, allow_inf_nan=False)] = 60
    # How many of a run's checkpoints stay on this machine: each one the trainer saves comes
    # home while the job runs; older ones beyond these are removed (the last always stays).
    keep_checkpoints: Count = 2
    # How a job of many processes shares the model (overbrainer.train.parallelism): "auto"
    # chooses from the model's size, the adapter, the GPUs and their memory; the others are
    # honoured where they fit. A job of one process has none.
    parallelism: Literal["auto", "ddp", "zero2", "zero3", "fsdp"] = "auto"
    # Plain defaults (pydantic copies a mutable one for each instance): a default_factory
    # of dict or list costs an inspection of the builtin's signature on every start.
    axolotl_extra: dict[str, Any] = {}
    env: dict[str, str] = {}

    @field_validator("target")
    @classmethod
    def _target_name(cls, value: str) -> str:
        if TARGET_NAME_RE.fullmatch(value) is None:
            raise ValueError("must name a target: lowercase letters, digits and _ only")
        return value

    @field_validator("base_model", "hub_model_id")
    @classmethod
    def _safe(cls, value: str | None) -> str | None:
        return _check_safe(value)

    @field_validator("optimizer", "lr_scheduler")
    @classmethod
    def _token(cls, value: str) -> str:
        if _TOKEN_RE.fullmatch(value) is None or value.startswith("-"):
            raise ValueError("must be an Axolotl name: letters, digits, _ . - only")
        return value

    @field_validator("merge")
    @classmethod
    def _merge_needs_adapter(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("adapter") == "full":
            raise ValueError(
                "only applies to adapter lora or qlora (a full fine-tune has no adapter to "
                "merge); set merge = false"
            )
        return value

    @field_validator("first_step_minutes")
    @classmethod
    def _first_step_not_shorter(cls, value: float, info: ValidationInfo) -> float:
        stall = info.data.get("stall_minutes")
        if stall is not None and value < stall:
            raise ValueError(
                f"must be at least stall_minutes ({stall:g}): the first step also downloads "
                "and loads the model, so it may take longer than any other, never less"
            )
        return value

    @field_validator("axolotl_extra")
    @classmethod
    def _extra_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        typed = set(cls.model_fields) - {"target", "axolotl_extra", "env"}
        for key in value:
            if key in typed:
                raise _problem(
                    f".{key}",
                    f"has a typed setting; set training.{key} instead",
                )
            if key in SETTING_KEYS:
                setting = SETTING_KEYS[key]
                raise _problem(
                    f".{key}",
                    f"is written into axolotl.yaml from training.{setting}; set "
                    f"training.{setting} instead",
                )
            if key in MANAGED_AXOLOTL_KEYS:
                raise _problem(
                    f".{key}",
                    "is managed by overbrainer (datasets, test_datasets, val_set_size, "
                    "output_dir, dataset_prepared_path, plugins); remove it",
                )
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(
                "must hold plain values only (strings, finite numbers, booleans, lists, "
                "tables); dates and inf/nan cannot be passed to Axolotl"
            ) from None
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            why = env_refusal(name)
            if why is not None:
                raise _problem(f".{name}", why)
            if any(ch in text for ch in "\n\r\0"):
                raise _problem(f".{name}", "holds a line break or a NUL; use one line")
        return value


# --- targets ---------------------------------------------------------------------------


class _MachineTarget(BaseModel):
    """What a local and an SSH target share: how Axolotl runs there."""

    model_config = _STRICT

    runtime: Literal["native", "docker"] = "native"
    venv: str | None = None
    # "cpu": a rehearsal on a machine without a usable GPU (CPU-safe Axolotl keys, GPUs
    # hidden from the job); "auto": whatever Axolotl finds.
    device: Literal["auto", "cpu"] = "auto"
    # The job's processes (torchrun's, one per GPU). Unset: one per GPU the job sees, or
    # one with device = "cpu" (a CPU has no GPUs to count; set 2 to rehearse many).
    processes: Count | None = None
    engine: Literal["docker", "podman"] = "docker"
    # Declared before ``image`` so that the image's validator sees it.
    allow_unpinned_image: bool = False
    image: str | None = Field(default=None, validate_default=True)

    @property
    def job_processes(self) -> int | Literal["gpu"]:
        """How many processes the job runs: the setting, else ``"gpu"`` (one per GPU the
        job sees, counted when it starts), or 1 on the CPU."""
        if self.processes is not None:
            return self.processes
        return 1 if self.device == "cpu" else "gpu"

    @property
    def checkpoints_brought_home(self) -> "CheckpointsHome":
        """Every checkpoint comes home: a machine's run keeps them nowhere else."""
        return "all"

    @property
    def saves_on_volume(self) -> bool:
        """A machine's job saves in its run directory, on no network volume."""
        return False

    @property
    def described(self) -> str:
        """The target's kind and runtime, as the preflight names it (``ssh, docker``)."""
        kind: str = getattr(self, "kind")  # noqa: B009 (each subclass declares its own)
        return f"{kind}, {self.runtime}"

    @field_validator("venv")
    @classmethod
    def _safe(cls, value: str | None) -> str | None:
        return _check_safe(value)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None, info: ValidationInfo) -> str | None:
        runtime = info.data.get("runtime")
        if runtime == "docker" and value is None:
            raise ValueError('is required with runtime = "docker": image = "name@sha256:<digest>"')
        if runtime == "native" and value is not None:
            raise ValueError('only applies with runtime = "docker"; set that or remove image')
        _check_image(value, bool(info.data.get("allow_unpinned_image", False)))
        return value


class LocalTarget(_MachineTarget):
    """``[targets.NAME]`` with ``kind = "local"``: train on this machine."""

    kind: Literal["local"]

    def unset_for_training(self, name: str, settings: "Settings") -> list[str]:
        """What training on this target needs that is not set yet: nothing."""
        return []


class SshTarget(_MachineTarget):
    """``[targets.NAME]`` with ``kind = "ssh"``: train on a machine reached over SSH.

    ``host`` comes from ``OVERBRAINER_TARGETS__<NAME>__HOST`` only.
    """

    kind: Literal["ssh"]
    # Relative to the remote home, or absolute (a scratch disk: /scratch/me/overbrainer).
    workdir: str = "overbrainer"
    host: str | None = None

    def unset_for_training(self, name: str, settings: "Settings") -> list[str]:
        """What training on this target needs that is not set yet: its host."""
        if self.host is not None:
            return []
        return [
            f"targets.{name}.host: not set; set OVERBRAINER_TARGETS__{name.upper()}__HOST="
            "user@host[:port] in the environment or .env before training on it"
        ]

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str) -> str:
        _check_safe(value)
        trimmed = value.rstrip("/")
        if not trimmed:
            raise ValueError(
                "may not be the root directory: name a directory for overbrainer's runs, "
                'relative to the remote home ("overbrainer") or absolute '
                '("/scratch/me/overbrainer")'
            )
        return trimmed

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None:
            parse_host(value)
        return value


def _gpu_choice(value: object) -> list[str] | Literal["auto"]:
    """``gpu_types``: ``"auto"``, or a non-empty list of GPU type ids (one error, not one
    per member of the union)."""
    if value == "auto":
        return "auto"
    if not isinstance(value, list):
        raise _problem(
            "",
            'must be a list of GPU type ids (["NVIDIA GeForce RTX 4090"]) or "auto"',
        )
    if not value:
        raise _problem(
            "", 'must not be empty: name the GPU types to try, or set gpu_types = "auto"'
        )
    for index, gpu in enumerate(value):
        if not isinstance(gpu, str) or not is_safe_label(gpu):
            raise _problem(
                f"[{index}]",
                "is not a GPU type id: words of letters, digits and . _ - + separated "
                'by single spaces (e.g. "NVIDIA GeForce RTX 4090")',
            )
    return list(value)


# A list tried in order, or "auto": the catalog's types with at least ``min_vram_gb`` of
# memory (and at most ``max_price_per_hour``), cheapest first.
GpuChoice = Annotated[list[str] | Literal["auto"], PlainValidator(_gpu_choice)]


SAVE_BEFORE_DEADLINE_MINUTES = 10.0
"""The default of ``save_before_deadline_minutes``: time enough to save a checkpoint and
bring it home before the pod's watchdog deletes the pod."""


CheckpointsHome = Literal["all", "last", "none"]
"""Which checkpoints of a Runpod job come home while it runs (``checkpoints_home``)."""


class RunpodTarget(BaseModel):
    """``[targets.NAME]`` with ``kind = "runpod"``: a pod created for the run, then deleted."""

    model_config = _STRICT

    kind: Literal["runpod"]
    gpu_types: GpuChoice
    max_hours: Annotated[float, Field(gt=0, le=720, allow_inf_nan=False)]
    gpu_count: Count = 1
    # How many pods the run's job spans: 1, a pod; 2 or more, an Instant Cluster of that
    # many identical pods (Runpod allows 2..250), every one of gpu_count GPUs.
    nodes: Annotated[int, Field(ge=1, le=250)] = 1
    min_vram_gb: Annotated[int, Field(ge=1, le=10_000)] | None = None
    max_price_per_hour: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] | None = None
    # The most a run's pod may cost, in US dollars, at the rate it was created at.
    max_cost_usd: Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False)] | None = None
    # How many times a run whose pod is lost before its job ended is recovered on a new pod
    # (0: never; the run fails as the pod goes).
    max_recoveries: Annotated[int, Field(ge=0, le=100)] = 3
    # How long a pod Runpod shows running may not answer SSH before its run is recovered
    # on a new pod (with max_recoveries > 0): the job may be fine, but nothing can reach
    # it, bring its checkpoints home or end it.
    unreachable_minutes: Annotated[float, Field(gt=0, le=1440, allow_inf_nan=False)] = 10.0
    # Declared before ``image`` so that the image's validator sees it.
    allow_unpinned_image: bool = False
    image: str = RUNPOD_DEFAULT_IMAGE
    venv: str = "/workspace/axolotl-venv"
    container_disk_gb: Annotated[int, Field(ge=20)] = 50
    boot_grace_minutes: Annotated[int, Field(ge=5)] = 30
    retrieve_grace_minutes: Annotated[int, Field(ge=1)] = 60
    # How long before the pod's deadline its watchdog asks the job to save a checkpoint
    # and stop (0: never; it also asks at 95 % of max_cost_usd). Unset: see save_before.
    save_before_deadline_minutes: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    data_center_ids: list[str] = []  # a plain default: see TrainingSettings.env
    network_volume_id: str | None = None
    # A network volume of the project, by name: made by the first run that needs it (of
    # volume_size_gb, in volume_data_center), mounted at /runpod-volume by every run after.
    volume: str | None = None
    volume_size_gb: Annotated[int, Field(ge=10, le=4096)] = 50
    volume_data_center: str | None = None
    # Which checkpoints come home while a run's job runs (the final output always does):
    # "all", "last" (only the newest, once the job ended) or "none". Unset: "all"
    # without a volume, "last" with one (the checkpoints live on the volume).
    checkpoints_home: CheckpointsHome | None = None
    # How long the walk waits for capacity when no candidate has any ("30m"); unset or
    # "0": the run fails at once. Kept as written (config show says what was written).
    wait_for_capacity: str | None = None

    @property
    def described(self) -> str:
        """The target's kind, as the preflight names it."""
        return self.kind

    @property
    def volume_center(self) -> str | None:
        """The data center of ``volume`` (None without one): ``volume_data_center``, else
        the one of ``data_center_ids``."""
        if self.volume is None:
            return None
        return self.volume_data_center or self.data_center_ids[0]

    @property
    def checkpoints_brought_home(self) -> CheckpointsHome:
        """Which checkpoints come home: ``checkpoints_home``, else ``all`` without a volume
        and ``last`` with one."""
        if self.checkpoints_home is not None:
            return self.checkpoints_home
        return "all" if self.volume is None else "last"

    @property
    def saves_on_volume(self) -> bool:
        """Whether the job saves its checkpoints on the target's network volume."""
        return self.volume is not None

    @property
    def pod_data_centers(self) -> list[str]:
        """Where the pod may be created: only where its volume lives, when it has one."""
        center = self.volume_center
        return [center] if center is not None else list(self.data_center_ids)

    @property
    def capacity_wait_seconds(self) -> float:
        """``wait_for_capacity`` in seconds (0: no wait)."""
        return 0.0 if self.wait_for_capacity is None else parse_duration(self.wait_for_capacity)

    @property
    def job_processes(self) -> int:
        """How many processes the job runs: one per GPU of the pod, or of every node of
        the cluster (its world: a checkpoint's shape counts them all)."""
        return self.gpu_count * self.nodes

    def unset_for_training(self, name: str, settings: "Settings") -> list[str]:
        """What training on this target needs that is not set yet: the API key."""
        if settings.runpod.api_key is not None:
            return []
        return [
            f"targets.{name}: a runpod target needs OVERBRAINER_RUNPOD__API_KEY; set it in "
            "the environment or .env before training on it"
        ]

    @property
    def save_before(self) -> float:
        """Minutes before the deadline the job is asked to save: the setting, else
        :data:`SAVE_BEFORE_DEADLINE_MINUTES`, or a quarter of a shorter bound."""
        if self.save_before_deadline_minutes is not None:
            return self.save_before_deadline_minutes
        return min(SAVE_BEFORE_DEADLINE_MINUTES, self.max_hours * 60 / 4)

    @model_validator(mode="after")
    def _save_leaves_time(self) -> "RunpodTarget":
        minutes = self.save_before_deadline_minutes
        if minutes is not None and minutes >= self.max_hours * 60:
            raise _problem(
                ".save_before_deadline_minutes",
                f"({minutes:g}) leaves no time to train: the pod's deadline is max_hours = "
                f"{self.max_hours:g} ({self.max_hours * 60:g} minutes) after its creation; "
                f"set save_before_deadline_minutes below {self.max_hours * 60:g} (default "
                f"{SAVE_BEFORE_DEADLINE_MINUTES:g}) or raise max_hours",
            )
        return self

    @model_validator(mode="after")
    def _auto_choice(self) -> "RunpodTarget":
        auto = self.gpu_types == "auto"
        if auto and self.min_vram_gb is None:
            raise _problem(
                ".min_vram_gb",
                'is required with gpu_types = "auto": the least GPU memory (GB) the run '
                "needs; add min_vram_gb = 24 (or what your model needs); `overbrainer pod "
                "gpus` lists the types and their memory",
            )
        if not auto:
            for key in ("min_vram_gb", "max_price_per_hour"):
                if getattr(self, key) is not None:
                    raise _problem(
                        f".{key}",
                        'applies only with gpu_types = "auto" (a list is tried as '
                        f'written): set gpu_types = "auto" or remove {key}',
                    )
        return self

    @model_validator(mode="after")
    def _project_volume(self) -> "RunpodTarget":
        if self.volume is None:
            if self.checkpoints_home in ("last", "none"):
                raise _problem(
                    ".checkpoints_home",
                    f'= "{self.checkpoints_home}" needs a network volume to keep the other '
                    "checkpoints (without one they live only on the pod, which is deleted): "
                    'set volume = "NAME" or checkpoints_home = "all"',
                )
            for key in ("volume_data_center", "volume_size_gb"):
                if key in self.model_fields_set:
                    raise _problem(
                        f".{key}",
                        f'applies only with a volume: set volume = "NAME" or remove {key}',
                    )
            return self
        if self.network_volume_id is not None:
            raise _problem(
                ".volume",
                "cannot be set together with network_volume_id (a pod mounts one network "
                "volume): keep volume (the project's volume, by name) or network_volume_id "
                "(an existing volume, by id), not both",
            )
        centers = self.data_center_ids
        where = self.volume_data_center
        if where is None and len(centers) != 1:
            raise _problem(
                ".volume_data_center",
                f'is required with volume = "{self.volume}": a network volume lives in one '
                'data center; set volume_data_center = "EU-RO-1" (or the one you want), or '
                "data_center_ids to exactly one",
            )
        if where is not None and centers and where not in centers:
            raise _problem(
                ".volume_data_center",
                f'("{where}") is not one of data_center_ids ({", ".join(centers)}): the pods '
                "are created where the volume lives; add it to data_center_ids or change "
                "volume_data_center",
            )
        return self

    @field_validator("volume")
    @classmethod
    def _volume_name(cls, value: str | None) -> str | None:
        if value is not None and not _VOLUME_NAME_RE.fullmatch(value):
            raise ValueError(
                f"({value!r}) is not a volume name: 1 to 64 letters, digits, '.', '_' or "
                "'-', starting with a letter or digit (e.g. volume = \"cache\")"
            )
        return value

    @field_validator("volume_data_center")
    @classmethod
    def _volume_center(cls, value: str | None) -> str | None:
        if value is not None and not is_safe_value(value):
            raise ValueError(f'is not a data center id (e.g. "EU-RO-1"): {SAFE_CHARS_RULE}')
        return value

    @field_validator("data_center_ids")
    @classmethod
    def _data_centers(cls, value: list[str]) -> list[str]:
        for index, center in enumerate(value):
            if not is_safe_value(center):
                raise _problem(
                    f"[{index}]",
                    f'is not a data center id (e.g. "EU-RO-1"): {SAFE_CHARS_RULE}',
                )
        return value

    @field_validator("venv")
    @classmethod
    def _safe(cls, value: str) -> str:
        _check_safe(value)
        return value

    @field_validator("wait_for_capacity", mode="plain")
    @classmethod
    def _capacity_wait(cls, value: object) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(
                f'({value!r}) must be a string: a span like wait_for_capacity = "30m" '
                '(or "0": fail at once when no GPU type has capacity)'
            )
        try:
            parse_duration(value)
        except ValueError as error:
            raise ValueError(f'{error} (or "0": fail at once)') from None
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str, info: ValidationInfo) -> str:
        _check_image(value, bool(info.data.get("allow_unpinned_image", False)))
        return value

    @field_validator("network_volume_id")
    @classmethod
    def _volume(cls, value: str | None, info: ValidationInfo) -> str | None:
        _check_safe(value)
        centers = info.data.get("data_center_ids")
        if value is not None and centers is not None and len(centers) != 1:
            raise ValueError(
                "needs exactly one data center (a network volume lives in one); set "
                'data_center_ids = ["<the volume\'s data center>"]'
            )
        return value


Target = LocalTarget | SshTarget | RunpodTarget
_TargetField = Annotated[Target, Field(discriminator="kind")]


# --- store and Runpod ------------------------------------------------------------------


class StoreSettings(BaseModel):
    """``[store]``: where the event log lives (default SQLite in ``.overbrainer/``)."""

    model_config = _STRICT

    url: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if any(ch in value for ch in "\r\n\0"):
            raise ValueError("must be one line without NUL")
        if value.startswith("sqlite:///") and len(value) > len("sqlite:///"):
            return value
        if value.startswith(("postgresql://", "postgres://")):
            try:
                parts = urlsplit(value)
                parts.port  # noqa: B018 - raises ValueError on a bad port
            except ValueError:
                raise ValueError("is not a valid postgresql:// URL") from None
            if not parts.hostname and not parts.path.strip("/"):
                raise ValueError("needs a host or a database name: postgresql://host/dbname")
            return value
        raise ValueError(
            "must be sqlite:///PATH or postgresql://[user@]host[:port]/dbname "
            "(leave it out for SQLite at .overbrainer/events.sqlite)"
        )

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # A URL set from the environment may hold a password: never show it in a repr.
        yield "url", strip_url_password(self.url, "****") if self.url is not None else None

    @property
    def is_postgres(self) -> bool:
        """Whether the log lives on a PostgreSQL server."""
        return self.url is not None and self.url.startswith(("postgresql://", "postgres://"))


class RunpodSettings(BaseModel):
    """``[runpod]``: the API to talk to; the key comes from ``OVERBRAINER_RUNPOD__API_KEY``.

    ``s3_access_key`` and ``s3_secret`` are the S3 API key of Runpod's network volumes
    (``user_…``, ``rps_…``; environment only, both or neither); ``s3_base_url`` replaces
    every data center's S3 endpoint (tests: an S3-compatible server on loopback).
    """

    model_config = _STRICT

    base_url: str = "https://api.runpod.io/v2"
    api_key: SecretStr | None = None
    s3_access_key: SecretStr | None = None
    s3_secret: SecretStr | None = None
    s3_base_url: str | None = None

    @field_validator("base_url", "s3_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            parts = urlsplit(value)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise ValueError("is not a valid URL") from None
        if not host or any(ch.isspace() or ch in "\0\"'" for ch in value):
            raise ValueError("is not a valid URL: https://host[/path]")
        if parts.username is not None or parts.password is not None:
            raise ValueError("may not carry credentials; set OVERBRAINER_RUNPOD__API_KEY")
        if parts.scheme == "https":
            pass
        elif parts.scheme == "http":
            if not is_loopback_host(host):
                raise ValueError(
                    "must use https (http is allowed only to a loopback address: 127.0.0.1, "
                    "localhost or ::1)"
                )
        else:
            raise ValueError("must be an https:// URL")
        if parts.query or parts.fragment:
            raise ValueError("may not have a query or fragment")
        return value.rstrip("/")

    @field_validator("api_key", "s3_access_key", "s3_secret")
    @classmethod
    def _key(cls, value: SecretStr | None) -> SecretStr | None:
        return _check_secret(value)

    @model_validator(mode="after")
    def _s3_pair(self) -> "RunpodSettings":
        # One half of a key pair signs nothing: say so now, not at the first upload.
        if (self.s3_access_key is None) != (self.s3_secret is None):
            missing = "s3_secret" if self.s3_secret is None else "s3_access_key"
            raise _problem(
                f".{missing}",
                "is not set, and the S3 API key needs both: set OVERBRAINER_RUNPOD__S3_ACCESS_KEY "
                "(user_…) and OVERBRAINER_RUNPOD__S3_SECRET (rps_…), or neither",
            )
        return self


class ProjectSettings(BaseModel):
    """``[project]``: what applies to every run of the project."""

    model_config = _STRICT

    # The most the project's Runpod runs may cost in a calendar month (UTC), in US dollars:
    # a run that could pass it is refused before any pod exists. None: no budget.
    monthly_budget_usd: Annotated[float, Field(allow_inf_nan=False)] | None = None

    @field_validator("monthly_budget_usd")
    @classmethod
    def _budget(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value <= 100_000_000:
            raise ValueError(
                "must be a number of US dollars greater than 0 (e.g. 100); remove it for no "
                "monthly budget"
            )
        return value


# --- all settings ----------------------------------------------------------------------


class Settings(BaseModel):
    """Everything a command needs to know, resolved from the file, the environment and
    defaults. Build it with :func:`overbrainer.config.load.load_settings`."""

    model_config = _STRICT

    training: TrainingSettings
    targets: dict[str, _TargetField]
    project: ProjectSettings = Field(default_factory=ProjectSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    runpod: RunpodSettings = Field(default_factory=RunpodSettings)
    hf_token: SecretStr | None = None

    @field_validator("hf_token")
    @classmethod
    def _token(cls, value: SecretStr | None) -> SecretStr | None:
        return _check_secret(value)

    @field_validator("targets")
    @classmethod
    def _target_names(cls, value: dict[str, Target]) -> dict[str, Target]:
        for name in value:
            if TARGET_NAME_RE.fullmatch(name) is None:
                raise _problem(
                    f".{name}", "is not a valid target name: use lowercase letters, digits and _"
                )
        return value

    @model_validator(mode="after")
    def _declared_target(self) -> "Settings":
        if self.training.target not in self.targets:
            raise _problem(
                ".training.target", undeclared_target(self.training.target, self.targets)
            )
        return self

    def target_of(self, name: str) -> Target:
        """The target called ``name``; a :class:`ConfigError` naming the known ones if none."""
        try:
            return self.targets[name]
        except KeyError:
            raise ConfigError([undeclared_target(name, self.targets)]) from None

    def require_host(self, name: str) -> str:
        """The host of SSH target ``name``, or a :class:`ConfigError` saying how to set it."""
        target = self.target_of(name)
        if not isinstance(target, SshTarget):
            raise ConfigError([f"targets.{name}: is kind {target.kind}, not ssh; it has no host"])
        if target.host is None:
            raise ConfigError(
                [
                    f"targets.{name}.host: not set; set OVERBRAINER_TARGETS__{name.upper()}__HOST"
                    "=user@host[:port] (or a Host alias from ~/.ssh/config) in the "
                    "environment or in .env"
                ]
            )
        return target.host

    def require_runpod_api_key(self) -> str:
        """The Runpod API key, or a :class:`ConfigError` saying how to set it."""
        if self.runpod.api_key is None:
            raise ConfigError(
                [
                    "OVERBRAINER_RUNPOD__API_KEY: not set; create a key at "
                    "https://www.runpod.io/console/user/settings and put "
                    "OVERBRAINER_RUNPOD__API_KEY=<key> in the environment or in .env"
                ]
            )
        return self.runpod.api_key.get_secret_value()

    def public_data(self) -> dict[str, Any]:
        """The settings as JSON-able data without any secret (a store URL loses its
        password; secrets are left out)."""
        data = self.model_dump(
            mode="json",
            exclude={"hf_token": True, "runpod": {"api_key", "s3_access_key", "s3_secret"}},
        )
        url = data["store"]["url"]
        if isinstance(url, str):
            data["store"]["url"] = strip_url_password(url)
        return data

    def settings_digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of the non-secret settings; the order of keys
        in the file does not change it."""
        canonical = json.dumps(
            self.public_data(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def undeclared_target(name: str, declared: Iterable[str]) -> str:
    """Why ``name`` is no target, and what to do: the rule shared by every such message."""
    known = ", ".join(sorted(declared)) or "none"
    return (
        f"no target named {name!r} is declared (declared: {known}); add [targets.{name}] to "
        "overbrainer.toml or name a declared one"
    )


class RunpodOnly(BaseModel):
    """The ``[runpod]`` table alone (Runpod's catalog outside a project), so that errors
    name ``runpod.…`` as in a project."""

    model_config = ConfigDict(extra="forbid")
    runpod: RunpodSettings = Field(default_factory=RunpodSettings)


# Every model is built above: no pydantic plugin sees the settings (see pydantic_plugins).
_plugins_off.restore()
