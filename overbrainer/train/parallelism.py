"""How a job of many processes shares the model among its GPUs, chosen before the run.

Pure: from the model's size (read from its name), the adapter, the number of processes and
the memory of one GPU, :func:`choose` returns a :class:`Choice` — the parallelism, a
sentence saying why, and the memory one GPU needs with its basis. The renderer
(:mod:`overbrainer.train.axolotl`) writes Axolotl's keys for it; ``train --check`` says it.

The estimate, per GPU, is a rule of thumb (``P`` parameters, ``N`` processes):

- weights: 2 bytes/param in bf16 (``full`` and ``lora``), about 0.6 for ``qlora``'s 4-bit
  base (its quantization constants and the layers kept in bf16 included);
- training state: 14 bytes/param for ``full`` with AdamW in mixed precision (bf16
  gradients 2, fp32 master weights 4, the two moments 8: 16 with the weights); an
  adapter's own state is a few per cent of the model, left to the allowance;
- DDP holds both whole on every GPU; ZeRO-2 shards the training state (``/ N``); ZeRO-3
  and FSDP shard both;
- plus 20 % and 1 GiB for activations, buffers and the CUDA context.

``auto``, with more than one process: on the CPU, DDP (over gloo: the one recipe verified
to run Axolotl there); a model of unknown size, DDP; otherwise the first of DDP, ZeRO-2,
ZeRO-3 that fits one GPU's memory — so an adapter whose base fits one GPU, or a full
fine-tune that fits with its optimizer state, gets DDP; a full fine-tune whose sharded
optimizer state makes it fit gets ZeRO-2; anything else ZeRO-3 (FSDP only when asked).
A GPU of unknown memory is taken as 80 GiB for that choice (an A100 or H100), and the
reason says so. An explicit choice is honoured, but refused when the estimate says it
cannot fit (the refusal names one that would), or, on the CPU, when it is not DDP.
"""

import re
from dataclasses import dataclass
from typing import Literal

from overbrainer.config.model import TrainingSettings

__all__ = [
    "ASSUMED_GPU_GIB",
    "Choice",
    "GpuMemory",
    "Parallelism",
    "Processes",
    "Setting",
    "choose",
    "estimate_gib",
    "model_size",
]

Parallelism = Literal["ddp", "zero2", "zero3", "fsdp"]
"""How the processes share the model."""

Setting = Literal["auto", "ddp", "zero2", "zero3", "fsdp"]
"""``[training] parallelism``."""

Processes = int | Literal["gpu"]
"""A job's processes: a number, or ``"gpu"`` — one per GPU the job sees when it starts."""

Adapter = Literal["lora", "qlora", "full"]

ASSUMED_GPU_GIB = 80.0
"""The memory ``auto`` takes a GPU of unknown memory to have (an A100 or H100, 80 GB)."""

# Bytes per parameter: the weights, and the training state (gradients and optimizer).
_WEIGHT_BYTES: dict[Adapter, float] = {"full": 2.0, "lora": 2.0, "qlora": 0.6}
_STATE_BYTES: dict[Adapter, float] = {"full": 14.0, "lora": 0.0, "qlora": 0.0}
_ALLOWANCE_SHARE = 0.2
_ALLOWANCE_GIB = 1.0
_GIB = 2**30

# "7B", "0.5B", "135M", "8x7B" (a mixture of experts: counted whole), as a word of the
# name's last part; "A3B" (active parameters) is no size, as a letter comes before it.
_SIZE_RE = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")

# Tried in this order by ``auto``: the least sharing (and communication) first.
_ORDER: tuple[Parallelism, ...] = ("ddp", "zero2", "zero3")


@dataclass(frozen=True)
class GpuMemory:
    """The memory of one GPU of the job, in GiB, and where that figure comes from."""

    gib: float
    source: str


@dataclass(frozen=True)
class Choice:
    """How the job's processes share the model.

    ``parallelism`` is None for a job of one process (nothing to share: no key is
    rendered). ``need_gib`` is the estimate per GPU (None: the model's size is unknown),
    ``basis`` how it was reached. ``problem``: the setting cannot fit (the job must not
    start); ``warning``: ``auto`` found nothing that fits, and chose the most sharing.
    """

    processes: Processes
    parallelism: Parallelism | None
    why: str
    need_gib: float | None = None
    basis: str = ""
    problem: str | None = None
    warning: str | None = None

    @property
    def many(self) -> bool:
        """Whether the job runs more than one process (or one per GPU, counted then)."""
        return self.processes == "gpu" or self.processes > 1


def model_size(base_model: str) -> float | None:
    """The model's parameters, in billions, read from its name ("Qwen2.5-7B-Instruct":
    7.0, "SmolLM2-135M": 0.135, "Mixtral-8x7B": 56.0); None when the name has no size."""
    name = base_model.rstrip("/").rpartition("/")[2]
    found = list(_SIZE_RE.finditer(name))
    billions = [m for m in found if m.group(3) in "Bb"]
    if not found:
        return None
    match = (billions or found)[0]
    experts = int(match.group(1)) if match.group(1) else 1
    value = float(match.group(2)) * experts
    return value if match.group(3) in "Bb" else value / 1000


def _shards(processes: Processes) -> int:
    # One per GPU counted when the job starts: at least two share, else nothing is shared.
    return 2 if processes == "gpu" else processes


def estimate_gib(
    parallelism: Parallelism | None, billions: float, adapter: Adapter, processes: Processes
) -> float:
    """The memory one GPU needs, in GiB (the rule of thumb of this module's docstring)."""
    n = _shards(processes) if parallelism is not None else 1
    weights = _WEIGHT_BYTES[adapter]
    state = _STATE_BYTES[adapter]
    if parallelism == "zero2":
        state /= n
    elif parallelism in ("zero3", "fsdp"):
        weights /= n
        state /= n
    raw = billions * 1e9 * (weights + state) / _GIB
    return raw * (1 + _ALLOWANCE_SHARE) + _ALLOWANCE_GIB


def _basis(
    parallelism: Parallelism | None,
    billions: float,
    adapter: Adapter,
    processes: Processes,
    each: str = "each GPU",
) -> str:
    weights = _WEIGHT_BYTES[adapter]
    state = _STATE_BYTES[adapter]
    what = {
        "full": f"{weights + state:g} bytes (bf16 weights and gradients, fp32 master weights, "
        "AdamW state)",
        "lora": f"{weights:g} bytes (the bf16 base)",
        "qlora": f"{weights:g} bytes (the 4-bit base)",
    }[adapter]
    n = _shards(processes)
    of_n = f"{n} GPUs" + (" at least" if processes == "gpu" else "")
    if parallelism is None or parallelism == "ddp":
        shared = f"whole on {each}"
    elif parallelism == "zero2" and state:
        shared = f"optimizer state and gradients sharded over {of_n}"
    elif parallelism == "zero2":
        shared = "whole on each GPU (ZeRO-2 shards only the optimizer state)"
    else:
        shared = f"sharded over {of_n}"
    return f"{_size_text(billions)} params × {what}, {shared}, + 20 % + 1 GiB for activations"


def _size_text(billions: float) -> str:
    return f"{billions:g}B" if billions >= 1 else f"{billions * 1000:g}M"


def _has(gpu: GpuMemory) -> str:
    return f"a GPU has {gpu.gib:g} GiB ({gpu.source})"


def _gib(value: float) -> str:
    return f"{value:.1f} GiB"


def choose(
    setting: Setting,
    *,
    base_model: str,
    adapter: Adapter,
    processes: Processes,
    gpu: GpuMemory | None,
    cpu: bool = False,
) -> Choice:
    """The parallelism of a job of ``processes`` on GPUs of memory ``gpu`` (None: unknown),
    for ``setting`` (``[training] parallelism``). ``cpu``: the job trains on the CPU."""
    if processes != "gpu" and processes <= 1:
        why = "nothing to share"
        if setting != "auto":
            why += f' (parallelism = "{setting}" applies to a job of many processes)'
        return Choice(processes, None, why)
    billions = model_size(base_model)
    if cpu:
        return _on_cpu(setting, processes, billions, adapter)
    if billions is None:
        unknown = f"the size of {base_model} is unknown (its name has no size such as 7B or 0.5B)"
        if setting == "auto":
            return Choice(
                processes,
                "ddp",
                f'{unknown}: the default; set parallelism = "zero3" if it does not fit one GPU',
            )
        return Choice(processes, setting, f"as set; {unknown}, so its fit is not checked")
    if setting == "auto":
        return _auto(processes, billions, adapter, gpu)
    need = estimate_gib(setting, billions, adapter, processes)
    basis = _basis(setting, billions, adapter, processes)
    if gpu is None:
        return Choice(
            processes,
            setting,
            "as set; the memory of the GPUs is unknown, so its fit is not checked",
            need,
            basis,
        )
    if need <= gpu.gib:
        return Choice(
            processes,
            setting,
            f"as set: about {_gib(need)} per GPU, and {_has(gpu)}",
            need,
            basis,
        )
    return Choice(
        processes,
        setting,
        f"as set, but it does not fit: about {_gib(need)} per GPU, and {_has(gpu)}",
        need,
        basis,
        problem=_refusal(setting, need, billions, adapter, processes, gpu),
    )


def _refusal(
    setting: Parallelism,
    need: float,
    billions: float,
    adapter: Adapter,
    processes: Processes,
    gpu: GpuMemory,
) -> str:
    head = (
        f'training.parallelism = "{setting}" needs about {_gib(need)} per GPU for '
        f"{_size_text(billions)} parameters ({adapter}), and {_has(gpu)}"
    )
    for other in _ORDER:
        other_need = estimate_gib(other, billions, adapter, processes)
        if other_need <= gpu.gib and other != setting:
            also = ' (or "fsdp")' if other == "zero3" else ""
            return (
                f'{head}: set parallelism = "{other}"{also} (about {_gib(other_need)} per '
                'GPU) or "auto"'
            )
    least = estimate_gib("zero3", billions, adapter, processes)
    return (
        f"{head}; even fully sharded (zero3) it needs about {_gib(least)} per GPU: use "
        "more GPUs, GPUs with more memory, or a lighter adapter (lora, qlora)"
    )


def _auto(processes: Processes, billions: float, adapter: Adapter, gpu: GpuMemory | None) -> Choice:
    memory = gpu.gib if gpu is not None else ASSUMED_GPU_GIB
    where = (
        _has(gpu)
        if gpu is not None
        else f"a GPU of unknown memory is taken to have {ASSUMED_GPU_GIB:g} GiB"
    )
    for parallelism in _ORDER:
        need = estimate_gib(parallelism, billions, adapter, processes)
        if need <= memory:
            return Choice(
                processes,
                parallelism,
                f"{_why_fits(parallelism, adapter)}: about {_gib(need)} per GPU, and {where}",
                need,
                _basis(parallelism, billions, adapter, processes),
            )
    need = estimate_gib("zero3", billions, adapter, processes)
    return Choice(
        processes,
        "zero3",
        f"the most sharing, and still about {_gib(need)} per GPU, while {where}",
        need,
        _basis("zero3", billions, adapter, processes),
        warning=(
            f"{_size_text(billions)} parameters ({adapter}) need about {_gib(need)} per GPU "
            f"even fully sharded, more than {memory:g} GiB: the job may run out of memory; "
            "use more GPUs, GPUs with more memory, or a lighter adapter (lora, qlora)"
        ),
    )


def _why_fits(parallelism: Parallelism, adapter: Adapter) -> str:
    if parallelism == "ddp":
        whole = "the base weights" if adapter != "full" else "the model with its optimizer state"
        return f"{whole} {'fits' if adapter == 'full' else 'fit'} one GPU"
    if parallelism == "zero2":
        return "the model fits one GPU once its optimizer state is sharded"
    return "the model fits only fully sharded"


def _on_cpu(
    setting: Setting, processes: Processes, billions: float | None, adapter: Adapter
) -> Choice:
    need = None if billions is None else estimate_gib("ddp", billions, adapter, processes)
    basis = "" if billions is None else _basis("ddp", billions, adapter, processes, "each process")
    if setting == "auto" or setting == "ddp":  # (== narrows the Literal; "in" would not)
        why = "on the CPU, over gloo: the one recipe verified to run Axolotl there"
        return Choice(processes, "ddp", why, need, basis)
    return Choice(
        processes,
        setting,
        "on the CPU, where only DDP is verified",
        need,
        basis,
        problem=(
            f'training.parallelism = "{setting}" is not run on the CPU: only DDP over gloo '
            'is verified to run Axolotl there; set parallelism = "ddp" or "auto" for this '
            "rehearsal"
        ),
    )


def choose_for(
    training: TrainingSettings, *, processes: Processes, gpu: GpuMemory | None, cpu: bool = False
) -> Choice:
    """:func:`choose` for a target's job of ``training``: the setting, the model and the
    adapter are the training's; the processes and the GPU are what the target has."""
    return choose(
        training.parallelism,
        base_model=training.base_model,
        adapter=training.adapter,
        processes=processes,
        gpu=gpu,
        cpu=cpu,
    )
