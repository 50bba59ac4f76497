"""The overbrainer metrics plugin for Axolotl.

This file is copied into every run directory and imported there by Axolotl, which finds it
through ``PYTHONPATH`` when the config names ``overbrainer_metrics.OverbrainerMetricsPlugin``
under ``plugins:``. It therefore imports nothing from overbrainer and only the standard
library at module level: Axolotl and transformers are looked up lazily, so the module also
imports (and its line format can be tested) where neither is installed.

On the main process only, the plugin's callback appends one JSON line per event to the file
named by ``$OVERBRAINER_METRICS`` (``metrics.jsonl`` in the working directory when unset)::

    {"event":"begin","time":1700000000.123,"max_steps":120}
    {"event":"log","time":…,"step":10,"epoch":0.25,"max_steps":120,"loss":1.234,…}
    {"event":"log","time":…,"step":20,"epoch":0.5,"max_steps":120,"eval_loss":1.1}
    {"event":"phase","time":…,"phase":"saving_adapter"}

An evaluation's line carries the step it was computed at. A ``phase`` line says what the job
does next: ``saving_adapter`` (or ``saving_model`` for a full fine-tune) when training has
ended and Axolotl saves its result; the job itself writes ``merging`` before
``axolotl merge-lora``.

**Save and stop.** After every step the callback looks (one ``stat``) for the file named by
``$OVERBRAINER_STOP`` (``stop_request`` in the working directory when unset), which
overbrainer writes to ask the job to stop. Once it is there, the trainer saves a checkpoint
at that step and stops training; the save is announced by a ``stopped`` line naming the
step, whose checkpoint is ``checkpoint-STEP`` in the trainer's output directory::

    {"event":"stopped","time":…,"step":57}

A request holding a reason (one word: the pod's watchdog writes ``deadline``,
``cost_cap`` or ``stall``; ``train stop`` writes nothing) has it in the line:
``"reason":"deadline"``.

**Saves.** Every checkpoint the trainer saves is announced by a ``saved`` line naming its
step, written from the trainer's ``on_save``, which it calls only once it has written the
whole ``checkpoint-STEP`` folder (weights, optimizer, scheduler, ``trainer_state.json``)::

    {"event":"saved","time":…,"step":50}

overbrainer brings a checkpoint home only after this line: a folder that merely exists may
still be half written.

With several processes (distributed training), every rank must stop at the same step: the
ranks agree on the request (a one-number all-reduce) before any acts on it. And every rank
writes its own files of a checkpoint: the ``saved`` line waits at a barrier until each rank
has returned from its save, so a checkpoint is whole on disk before it is announced.

Each line is written whole by one ``write`` on a file opened for appending, so a reader never
sees half a line unless the process dies in the middle of that very call.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import stat
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

METRICS_ENV = "OVERBRAINER_METRICS"
"""The environment variable naming the metrics file."""

DEFAULT_METRICS_FILE = "metrics.jsonl"
"""The metrics file when ``$OVERBRAINER_METRICS`` is unset (relative to the working directory)."""

STOP_ENV = "OVERBRAINER_STOP"
"""The environment variable naming the save-and-stop request file."""

DEFAULT_STOP_FILE = "stop_request"
"""The request file when ``$OVERBRAINER_STOP`` is unset (relative to the working directory)."""

LOG_KEYS = ("loss", "eval_loss", "learning_rate", "grad_norm")
"""The values of a trainer log that become fields of a ``log`` line."""

_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}

_log = logging.getLogger("overbrainer_metrics")


def _plain(value: object) -> object:
    """``value`` as a JSON primitive, or ``None`` to leave the field out.

    Tensors and numpy scalars (anything with ``.item()``) become Python numbers; a NaN or an
    infinite loss is kept, spelled as a string, because a diverging run is worth seeing and
    bare ``NaN`` is not JSON.
    """
    if value is None or isinstance(value, (str, bool)):
        return value
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (int, float)):
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        number = float(value)
        if math.isnan(number):
            return "NaN"
        return _NON_FINITE.get(number, number)
    return None


def metrics_line(event: str, **fields: object) -> str:
    """One metrics line (with its trailing newline) for ``event`` and ``fields``.

    ``time`` defaults to now (seconds since the epoch); fields whose value is ``None`` or not
    a number, string or boolean are left out. The same function serves the plugin and the
    stand-in trainer of the tests, so both write exactly one format.
    """
    record: dict[str, object] = {"event": event}
    stamp = fields.pop("time", None)
    record["time"] = round(float(stamp) if isinstance(stamp, (int, float)) else time.time(), 3)
    for key, value in fields.items():
        plain = _plain(value)
        if plain is not None:
            record[key] = plain
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` to ``path`` with a single write on an ``O_APPEND`` descriptor.

    No fsync: the line only has to survive this process, not the machine.
    """
    data = line.encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        # A regular file takes the whole buffer at once; finish a short write all the same.
        while written < len(data):
            written += os.write(fd, data[written:])
    finally:
        os.close(fd)


def _is_main_process(state: object) -> bool:
    """Whether this process is the one that writes (rank 0 of the whole job): the
    launcher's ``RANK`` when it set one (torchrun does, for every worker), else the
    trainer's flag. The launcher's first: the trainer's flag said rank 0 on every rank of
    a job on the CPU (Axolotl 0.19), and both wrote every line."""
    rank = os.environ.get("RANK")
    if rank is not None and rank.strip():
        return rank.strip() == "0"
    flag = getattr(state, "is_world_process_zero", None)
    if isinstance(flag, bool):
        return flag
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.strip():
        return local.strip() == "0"
    return True


def _process_group() -> Any:
    """``torch.distributed`` when this process is one of several ranks of a job, else None.
    Torch is the trainer's: it is looked up, never imported here."""
    torch: Any = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def _agreed(asked: bool) -> bool:
    """Whether any rank of the job saw the stop request (just ``asked`` with one process):
    ranks that stopped at different steps would wait for each other for ever."""
    dist = _process_group()
    if dist is None:
        return asked
    torch: Any = sys.modules["torch"]
    device = "cuda" if dist.get_backend() == "nccl" and torch.cuda.is_available() else "cpu"
    flag = torch.tensor([1 if asked else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _every_rank_saved() -> None:
    """Return once every rank of the job has written its part of the checkpoint just saved.

    The trainer calls ``on_save`` on each rank once that rank's own save returned; ranks
    write their files apart (rank 0 the weights, each rank its RNG state, each its shard of
    a sharded optimizer), so rank 0's return alone says nothing of the others'. A barrier
    here holds rank 0's ``saved`` line until every rank has reached it."""
    dist = _process_group()
    if dist is not None:
        dist.barrier()


def request_reason(path: str | os.PathLike[str]) -> str | None:
    """The reason a save-and-stop request holds (one word of lowercase letters and ``_``,
    at most 32), or None: an empty request, an unreadable one, anything else."""
    # Never blocks: non-blocking open, and only a regular file is read (a FIFO with no
    # writer would hold the trainer for ever).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    word = data.strip().decode("ascii", errors="replace")
    if 0 < len(word) <= 32 and all(ch.islower() or ch == "_" for ch in word):
        return word
    return None


class MetricsCallback:
    """The callback's behaviour, independent of transformers.

    Its methods follow ``transformers.TrainerCallback`` (``args, state, control, **kwargs``);
    :func:`new_callback` mixes it into a real ``TrainerCallback`` when transformers is there.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        saving: str = "model",
        stop_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path: str | os.PathLike[str] = (
            path or os.environ.get(METRICS_ENV) or DEFAULT_METRICS_FILE
        )
        self.stop_path: str | os.PathLike[str] = (
            stop_path or os.environ.get(STOP_ENV) or DEFAULT_STOP_FILE
        )
        self.saving = saving  # what Axolotl saves once training ends: "adapter" or "model"
        self.stopping = False  # a save-and-stop was asked and acted on
        self.reason: str | None = None  # why, when the request said
        self._failed = False

    def _write(self, state: object, event: str, **fields: object) -> None:
        if not _is_main_process(state):
            return
        try:
            append_line(self.path, metrics_line(event, **fields))
        except OSError as error:
            # Metrics must never stop a paid training run: warn once, keep training.
            if not self._failed:
                self._failed = True
                _log.warning("cannot append to the metrics file %s: %s", self.path, error)

    def on_train_begin(self, args: object, state: object, control: object, **kwargs: Any) -> None:
        """Write the ``begin`` line with the planned number of steps."""
        self._write(state, "begin", max_steps=getattr(state, "max_steps", None))

    def on_log(
        self,
        args: object,
        state: object,
        control: object,
        logs: Mapping[str, object] | None = None,
        **kwargs: Any,
    ) -> None:
        """Write a ``log`` line with the step, epoch and the known values of ``logs``."""
        values = {key: logs[key] for key in LOG_KEYS if logs is not None and key in logs}
        self._write(
            state,
            "log",
            step=getattr(state, "global_step", None),
            epoch=getattr(state, "epoch", None),
            max_steps=getattr(state, "max_steps", None),
            **values,
        )

    def on_step_end(self, args: object, state: object, control: object, **kwargs: Any) -> None:
        """Once a save-and-stop is asked: save a checkpoint at this step and stop."""
        # One stat per step: the request is a file's existence; its content (a reason) is
        # read once, when acted on.
        if self.stopping or not _agreed(os.path.exists(self.stop_path)):  # noqa: PTH110
            return
        self.stopping = True
        self.reason = request_reason(self.stop_path)
        # The trainer saves (and then stops) right after this callback, at this step.
        setattr(control, "should_save", True)  # noqa: B010 - any TrainerControl-like object
        setattr(control, "should_training_stop", True)  # noqa: B010

    def on_save(self, args: object, state: object, control: object, **kwargs: Any) -> None:
        """A checkpoint is saved whole, by every rank: say so (its step names it), and after
        the save a stop asked for, say that too."""
        _every_rank_saved()
        self._write(state, "saved", step=getattr(state, "global_step", None))
        if self.stopping:
            self._write(
                state, "stopped", step=getattr(state, "global_step", None), reason=self.reason
            )

    def on_train_end(self, args: object, state: object, control: object, **kwargs: Any) -> None:
        """Write the ``saving_adapter`` / ``saving_model`` phase: training is over and
        Axolotl saves its result next."""
        self._write(state, "phase", phase=f"saving_{self.saving}")


def new_callback(
    path: str | os.PathLike[str] | None = None, saving: str = "model"
) -> MetricsCallback:
    """A metrics callback: a ``transformers.TrainerCallback`` when transformers is importable,
    else a plain :class:`MetricsCallback` (for tests and the stand-in trainer)."""
    try:
        base: type = importlib.import_module("transformers").TrainerCallback
    except ImportError:
        return MetricsCallback(path, saving)
    # MetricsCallback first, so its methods win over TrainerCallback's no-op ones.
    cls = cast(
        "type[MetricsCallback]",
        type("OverbrainerMetricsCallback", (MetricsCallback, base), {"__module__": __name__}),
    )
    return cls(path, saving)


def _no_model_card(*args: object, **kwargs: object) -> None:
    """The model card of a rank other than 0: none."""


def _or_warning(write: Any) -> Any:
    """``write`` (the trainer's model card writer), a failure of which is a warning."""

    def written(*args: object, **kwargs: object) -> None:
        try:
            write(*args, **kwargs)
        except Exception as error:  # a README must not fail a paid run
            _log.warning("the model card (README.md) was not written: %r", error)
            print(
                f"overbrainer: the model card (README.md) was not written: {error!r}",
                file=sys.stderr,
                flush=True,
            )

    return written


def _plugin_base() -> type:
    """Axolotl's ``BasePlugin`` where Axolotl is installed, else ``object``."""
    try:
        base: type = importlib.import_module("axolotl.integrations.base").BasePlugin
    except ImportError:
        return object
    return base


if TYPE_CHECKING:
    _PluginBase = object
else:
    _PluginBase = _plugin_base()


class OverbrainerMetricsPlugin(_PluginBase):
    """The Axolotl plugin: adds the metrics callback before the trainer is built."""

    def post_trainer_create(self, cfg: object, trainer: object) -> None:
        """The output's model card (``README.md``) never fails a run whose training
        succeeded: only rank 0 writes it (the other ranks of a job of several would write
        the same file at once), and a card that cannot be written is a warning. Axolotl
        0.19's fails when its results table mixes rows with and without memory figures
        (a ``KeyError``): on rank 1 of a job of several that evaluates, and on rank 0 of one
        resumed from another's checkpoint."""
        if not _is_main_process(getattr(trainer, "state", None)):
            setattr(trainer, "create_model_card", _no_model_card)  # noqa: B010
            return
        write = getattr(trainer, "create_model_card", None)
        if callable(write):
            setattr(trainer, "create_model_card", _or_warning(write))  # noqa: B010

    def add_callbacks_pre_trainer(self, cfg: object, model: object) -> list[Any]:
        """The callbacks Axolotl attaches to its trainer: the metrics callback."""
        # Axolotl's config is a dict (attribute access too); the stand-in's a plain dict.
        adapter = cfg.get("adapter") if isinstance(cfg, Mapping) else getattr(cfg, "adapter", None)
        saving = "adapter" if adapter else "model"
        return [new_callback(saving=saving)]
