"""What ``train --resume-from RUN[:STEP]`` decides, with no I/O: which checkpoint a new run
starts from, and whether the settings it would train with keep that checkpoint meaningful.

A checkpoint holds the weights of one model shape (the base model, the adapter and its LoRA
shape) trained on sequences of one length: a run that changed any of those cannot go on
from it. How long it trains (epochs) and how (learning rate, scheduler, batch sizes) may
change.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from overbrainer.config.axolotl_keys import SETTING_KEYS
from overbrainer.errors import OverbrainerError, UsageError

# The axolotl.yaml keys a checkpoint depends on, in the order problems are named.
MUST_MATCH = (
    "base_model",
    "adapter",
    "load_in_4bit",
    "lora_r",
    "lora_alpha",
    "lora_target_linear",
    "lora_target_modules",
    "sequence_len",
)


class ResumeError(OverbrainerError):
    """The run cannot be resumed as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ResumeFrom:
    """The checkpoint a new run starts from: run ``run_id``'s, saved at ``step``."""

    run_id: str
    step: int
    at_home: bool = True
    """False: the checkpoint is only on the network volume the new run mounts (its run
    kept only some checkpoints at home: ``checkpoints_home``); the pod reads it there."""

    def recorded(self) -> dict[str, Any]:
        """As ``run.Created`` records it."""
        return {"run": self.run_id, "step": self.step}


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``RUN`` or ``RUN:STEP`` → the run as given and the step (None: its last)."""
    run, colon, step = spec.rpartition(":")
    if not colon:
        return spec, None
    if not run or not step.isdigit() or int(step) < 1:
        raise UsageError(
            f"--resume-from takes RUN or RUN:STEP (STEP a checkpoint's step, 1 or more), "
            f"not {spec!r}"
        )
    return run, int(step)


def pick_checkpoint(
    run_id: str,
    available: Iterable[int],
    requested: int | None,
    pruned: Iterable[int] = (),
    on_volume: Iterable[int] = (),
) -> ResumeFrom:
    """The checkpoint of run ``run_id`` to start from: the one at ``requested`` (None: the
    last), among ``available`` (the steps of its complete checkpoints at home) and
    ``on_volume`` (those recorded whole on the network volume the new run mounts; one at
    home is read from home). ``pruned``: the steps the log says were removed from this
    machine."""
    home = sorted(set(available))
    volume = sorted(set(on_volume) - set(home))
    steps = sorted(set(home) | set(volume))
    have = _held(home, volume)
    if requested is not None and requested not in steps and requested in set(pruned):
        raise ResumeError(
            f"checkpoint-{requested} of run {run_id} was removed from this machine (only the "
            f"last [training] keep_checkpoints stay): {have}; `overbrainer train "
            f"--resume-from {run_id}` starts from its last"
        )
    if requested is None:
        if not steps:
            raise ResumeError(
                f"run {run_id} has no checkpoint at home to resume from (in "
                f"runs/{run_id}/output/checkpoint-*): stop a run with `overbrainer train "
                "stop RUN` to have one saved and brought home"
            )
        return ResumeFrom(run_id, steps[-1], at_home=steps[-1] in home)
    if requested not in steps:
        where = "at home or on the network volume" if volume else "at home"
        raise ResumeError(
            f"run {run_id} has no checkpoint of step {requested} {where} ({have}): "
            f"`overbrainer train --resume-from {run_id}` starts from its last"
        )
    return ResumeFrom(run_id, requested, at_home=requested in home)


def _held(home: list[int], volume: list[int]) -> str:
    """``it has 10 at home and 5 on the network volume``."""
    listed = ", ".join(str(step) for step in home)
    said = f"it has {listed}" if home else "it has none at home"
    if home and volume:
        said += " at home"
    if volume:
        said += " and " + ", ".join(str(step) for step in volume) + " on the network volume"
    return said


def _setting_name(key: str) -> str:
    setting = SETTING_KEYS.get(key)
    return f"training.{setting}" if setting else f"training.axolotl_extra.{key}"


def mismatches(trained: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """One problem per setting (of :data:`MUST_MATCH`) that differs between the config the
    checkpoint was ``trained`` with and the one the new run would use (``now``), each
    naming the setting and both values; empty when the checkpoint fits."""
    return [problem for _, problem in mismatched(trained, now)]


def mismatched(trained: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[str, str]]:
    """:func:`mismatches`, each with the setting it names (``training.lora_r``)."""
    problems: list[tuple[str, str]] = []
    named: set[str] = set()
    for key in MUST_MATCH:
        if _value(trained, key) == _value(now, key):
            continue
        name = _setting_name(key)
        if name in named:  # adapter and load_in_4bit are one setting
            continue
        named.add(name)
        shown = "adapter" if key == "load_in_4bit" else key
        problems.append(
            (
                name,
                f"{name} is {_shown(_value(now, shown))} here but the checkpoint was trained "
                f"with {_shown(_value(trained, shown))}",
            )
        )
    return problems


Shape = tuple[int | None, str | None]
"""A job's processes (None: one per GPU it saw) and how they shared the model (None: one
process), as ``run.Created`` records them."""


def shape_mismatch(trained: Shape, now: Shape) -> str | None:
    """Why a checkpoint saved by a job of shape ``trained`` cannot go on in a job of shape
    ``now`` (its ranks each saved their own state, a sharded optimizer its shards), or
    None when they match. A count of one per GPU is compared only by its parallelism."""
    (trained_count, trained_way), (now_count, now_way) = trained, now
    counts_differ = None not in (trained_count, now_count) and trained_count != now_count
    if not counts_differ and trained_way == now_way:
        return None
    return (
        f"the job would run {_shape(now)} here but the checkpoint was saved by a job of "
        f"{_shape(trained)}"
    )


SHAPE_FIX = (
    "resume with the shape it was saved by ([targets.NAME] processes, or gpu_count × nodes "
    "on Runpod; [training] parallelism)"
)
"""How to fit a checkpoint's shape again."""


def _shape(shape: Shape) -> str:
    count, way = shape
    processes = (
        "one process per GPU"
        if count is None
        else f"{count} process" + ("es" if count != 1 else "")
    )
    return processes + (f" ({way})" if way else "")


def put_back(setting: str, sources: Mapping[str, str], process: Mapping[str, str]) -> str:
    """How to give ``setting`` its checkpoint's value again, where its value comes from:
    an ``OVERBRAINER_*`` variable (``sources``: dotted key -> variable) of the process
    environment (``process``) or of the project's ``.env``, else ``overbrainer.toml``."""
    variable = next(
        (name for key, name in sources.items() if setting == key or setting.startswith(key + ".")),
        None,
    )
    if variable is None:
        return "set it back in overbrainer.toml"
    if variable in process:
        return f"the environment variable {variable} sets it: unset it or set it back"
    return f"{variable} in the project's .env sets it: remove it there or set it back"


def _value(cfg: Mapping[str, Any], key: str) -> Any:
    """``cfg``'s ``key`` (a config without an adapter is a full fine-tune's)."""
    value = cfg.get(key)
    return "full" if key == "adapter" and value is None else value


def _shown(value: object) -> str:
    return "(not set)" if value is None else repr(value) if isinstance(value, str) else str(value)


def refusal(source: ResumeFrom, problems: list[str]) -> ResumeError:
    """The error of a resume whose settings do not fit the checkpoint."""
    listed = "\n".join(f"  - {problem}" for problem in problems)
    return ResumeError(
        f"cannot resume from checkpoint-{source.step} of run {source.run_id}: these settings "
        f"differ from the ones it was trained with, and the checkpoint only fits those:\n"
        f"{listed}\nset them back as each says (epochs and the learning rate and its "
        "schedule may change); no run was created"
    )
