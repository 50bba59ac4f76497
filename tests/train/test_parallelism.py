"""How a job of many processes shares the model: the size read from a model's name, the
memory estimate per GPU, ``auto``'s choice, and an explicit choice honoured or refused."""

import pytest

from overbrainer.train.parallelism import (
    ASSUMED_GPU_GIB,
    Choice,
    GpuMemory,
    choose,
    estimate_gib,
    model_size,
)

RTX_4090 = GpuMemory(24, "NVIDIA GeForce RTX 4090 in Runpod's catalog")
A100 = GpuMemory(80, "NVIDIA A100 80GB PCIe in Runpod's catalog")
H200 = GpuMemory(141, "NVIDIA H200 in Runpod's catalog")


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("Qwen/Qwen3-0.6B", 0.6),
        ("meta-llama/Llama-3.1-8B-Instruct", 8.0),
        ("meta-llama/Llama-2-7b-hf", 7.0),
        ("Qwen/Qwen2.5-72B", 72.0),
        ("mistralai/Mixtral-8x7B-v0.1", 56.0),  # experts counted whole
        ("Qwen/Qwen3-30B-A3B", 30.0),  # the active parameters are no size
        ("openai/gpt-oss-20b", 20.0),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 0.135),
        ("Qwen/Qwen2.5-7B-Instruct-1M", 7.0),  # a size in B wins over a context in M
        ("microsoft/phi-4", None),
        ("/models/tiny-qwen3", None),
        ("./checkpoints/run-2/", None),
    ],
)
def test_the_size_is_read_from_the_name(name: str, billions: float | None) -> None:
    assert model_size(name) == billions


@pytest.mark.parametrize(
    ("parallelism", "adapter", "processes", "raw_bytes_per_param"),
    [
        ("ddp", "full", 8, 16.0),
        ("zero2", "full", 8, 2 + 14 / 8),
        ("zero3", "full", 8, 16 / 8),
        ("fsdp", "full", 4, 16 / 4),
        ("ddp", "lora", 8, 2.0),
        ("zero2", "lora", 8, 2.0),  # nothing of an adapter's base is sharded by ZeRO-2
        ("zero3", "lora", 2, 1.0),
        ("ddp", "qlora", 8, 0.6),
        ("zero3", "full", "gpu", 16 / 2),  # one per GPU: at least two share
        (None, "full", 1, 16.0),
    ],
)
def test_the_estimate_per_gpu(
    parallelism: str | None, adapter: str, processes: int | str, raw_bytes_per_param: float
) -> None:
    raw = 10e9 * raw_bytes_per_param / 2**30
    assert estimate_gib(parallelism, 10.0, adapter, processes) == pytest.approx(  # type: ignore[arg-type]
        raw * 1.2 + 1
    )


# (model, adapter, processes, one GPU's memory) -> what auto chooses
AUTO = [
    # An adapter whose base fits one GPU: DDP.
    ("Qwen/Qwen3-0.6B", "lora", 2, RTX_4090, "ddp"),
    ("meta-llama/Llama-3.1-8B", "lora", 8, RTX_4090, "ddp"),
    ("meta-llama/Llama-3.1-70B", "qlora", 8, A100, "ddp"),
    # An adapter whose base does not: fully sharded.
    ("meta-llama/Llama-3.1-70B", "lora", 8, RTX_4090, "zero3"),
    # A full fine-tune that fits with its optimizer state: DDP.
    ("Qwen/Qwen3-0.6B", "full", 2, RTX_4090, "ddp"),
    ("Qwen/Qwen3-4B", "full", 8, A100, "ddp"),
    # ... that fits once its optimizer state is sharded: ZeRO-2.
    ("meta-llama/Llama-3.1-8B", "full", 8, A100, "zero2"),
    ("Qwen/Qwen3-14B", "full", 8, H200, "zero2"),
    # ... that fits only fully sharded: ZeRO-3.
    ("meta-llama/Llama-3.1-8B", "full", 8, RTX_4090, "zero3"),
    ("Qwen/Qwen2.5-32B", "full", 8, A100, "zero3"),
    # Unknown memory: taken as 80 GiB.
    ("meta-llama/Llama-3.1-8B", "full", 8, None, "zero2"),
    ("meta-llama/Llama-3.1-8B", "lora", "gpu", None, "ddp"),
    # Unknown size: DDP.
    ("/models/mine", "full", 8, RTX_4090, "ddp"),
]


@pytest.mark.parametrize(("model", "adapter", "processes", "gpu", "chosen"), AUTO)
def test_auto_chooses_the_least_sharing_that_fits(
    model: str, adapter: str, processes: int | str, gpu: GpuMemory | None, chosen: str
) -> None:
    choice = choose(
        "auto",
        base_model=model,
        adapter=adapter,  # type: ignore[arg-type]
        processes=processes,  # type: ignore[arg-type]
        gpu=gpu,
    )
    assert choice.parallelism == chosen
    assert choice.problem is None and choice.warning is None
    billions = model_size(model)
    if billions is not None:
        assert choice.need_gib is not None
        assert choice.need_gib <= (gpu.gib if gpu else ASSUMED_GPU_GIB)
        size = f"{billions:g}B" if billions >= 1 else f"{billions * 1000:g}M"
        assert choice.basis.startswith(f"{size} params × ")


def test_auto_says_its_basis_and_the_memory_it_compared_with() -> None:
    choice = choose("auto", base_model="x/Llama-3.1-8B", adapter="full", processes=8, gpu=RTX_4090)
    assert choice.why == (
        "the model fits only fully sharded: about 18.9 GiB per GPU, and a GPU has 24 GiB "
        "(NVIDIA GeForce RTX 4090 in Runpod's catalog)"
    )
    assert choice.basis == (
        "8B params × 16 bytes (bf16 weights and gradients, fp32 master weights, AdamW "
        "state), sharded over 8 GPUs, + 20 % + 1 GiB for activations"
    )
    unknown = choose("auto", base_model="x/Llama-3.1-8B", adapter="lora", processes=2, gpu=None)
    assert "a GPU of unknown memory is taken to have 80 GiB" in unknown.why
    nameless = choose("auto", base_model="/models/mine", adapter="lora", processes=2, gpu=None)
    assert nameless.why.startswith("the size of /models/mine is unknown")
    assert nameless.need_gib is None


def test_auto_warns_when_even_the_most_sharing_does_not_fit() -> None:
    choice = choose("auto", base_model="x/Llama-3.1-70B", adapter="full", processes=8, gpu=RTX_4090)
    assert choice.parallelism == "zero3"
    assert choice.problem is None
    assert choice.warning is not None
    assert "need about 157.5 GiB per GPU even fully sharded, more than 24 GiB" in choice.warning


@pytest.mark.parametrize("setting", ["auto", "ddp", "zero2", "zero3", "fsdp"])
def test_one_process_shares_nothing(setting: str) -> None:
    choice = choose(
        setting,  # type: ignore[arg-type]
        base_model="x/Llama-3.1-70B",
        adapter="full",
        processes=1,
        gpu=RTX_4090,
    )
    assert choice.parallelism is None and not choice.many
    assert choice.problem is None
    assert choice.why.startswith("nothing to share")


# (setting, model, adapter, processes, gpu) -> problem (None: honoured), or a part of it
EXPLICIT = [
    ("ddp", "x/Llama-3.1-8B", "lora", 8, RTX_4090, None),
    ("fsdp", "x/Llama-3.1-8B", "lora", 8, RTX_4090, None),
    ("zero2", "x/Llama-3.1-8B", "full", 8, A100, None),
    ("zero3", "x/Llama-3.1-8B", "full", 8, RTX_4090, None),
    ("ddp", "x/Llama-3.1-8B", "full", 8, A100, 'set parallelism = "zero2" (about 34.5 GiB'),
    ("ddp", "x/Llama-3.1-8B", "full", 8, RTX_4090, 'set parallelism = "zero3" (or "fsdp")'),
    ("zero2", "x/Llama-3.1-70B", "lora", 8, RTX_4090, 'set parallelism = "zero3"'),
    ("ddp", "x/Llama-3.1-70B", "full", 8, RTX_4090, "even fully sharded (zero3) it needs"),
    # Unknown memory or size: honoured, unchecked.
    ("ddp", "x/Llama-3.1-70B", "full", 8, None, None),
    ("zero2", "/models/mine", "full", 8, RTX_4090, None),
]


@pytest.mark.parametrize(("setting", "model", "adapter", "processes", "gpu", "problem"), EXPLICIT)
def test_an_explicit_choice_is_honoured_unless_it_cannot_fit(
    setting: str,
    model: str,
    adapter: str,
    processes: int,
    gpu: GpuMemory | None,
    problem: str | None,
) -> None:
    choice = choose(
        setting,  # type: ignore[arg-type]
        base_model=model,
        adapter=adapter,  # type: ignore[arg-type]
        processes=processes,
        gpu=gpu,
    )
    assert choice.parallelism == setting
    if problem is None:
        assert choice.problem is None
        assert choice.why.startswith("as set")
    else:
        assert choice.problem is not None
        assert choice.problem.startswith(f'training.parallelism = "{setting}" needs about ')
        assert problem in choice.problem


def test_a_refusal_names_what_it_needs_and_what_there_is() -> None:
    choice = choose("ddp", base_model="x/Llama-3.1-8B", adapter="full", processes=2, gpu=A100)
    assert choice.problem == (
        'training.parallelism = "ddp" needs about 144.1 GiB per GPU for 8B parameters (full), '
        "and a GPU has 80 GiB (NVIDIA A100 80GB PCIe in Runpod's catalog): set parallelism = "
        '"zero3" (or "fsdp") (about 72.5 GiB per GPU) or "auto"'
    )


@pytest.mark.parametrize(
    ("setting", "parallelism", "refused"),
    [
        ("auto", "ddp", False),
        ("ddp", "ddp", False),
        ("zero2", "zero2", True),
        ("zero3", "zero3", True),
        ("fsdp", "fsdp", True),
    ],
)
def test_on_the_cpu_only_ddp_runs(setting: str, parallelism: str, refused: bool) -> None:
    choice = choose(
        setting,  # type: ignore[arg-type]
        base_model="x/Qwen3-0.6B",
        adapter="lora",
        processes=2,
        gpu=None,
        cpu=True,
    )
    assert choice.parallelism == parallelism
    assert (choice.problem is not None) is refused
    if refused:
        assert choice.problem is not None and 'set parallelism = "ddp" or "auto"' in choice.problem
    else:
        assert choice.why.startswith("on the CPU, over gloo")
        assert choice.basis.endswith("whole on each process, + 20 % + 1 GiB for activations")


def test_many_means_more_than_one_process_or_one_per_gpu() -> None:
    assert Choice(2, "ddp", "").many
    assert Choice("gpu", "ddp", "").many
    assert not Choice(1, None, "").many
