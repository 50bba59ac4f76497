"""What a machine target is asked before a run: the trainer, the container engine and the
GPUs it has.

Both questions are one POSIX script, ``probe.sh``, run as ``sh -s -- MODE ARG`` with the
script on stdin: the same text on this machine and over SSH, so both answer alike. It is
cheap on purpose (real Axolotl takes many seconds to import): the trainer's executable is
looked up, and the interpreter of its ``#!`` line started doing nothing. This module reads
the script and parses its answer; running it is the drivers' business.
"""

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from overbrainer.runpod.redact import one_line

__all__ = [
    "EngineProbe",
    "GpusProbe",
    "TrainerProbe",
    "engine_args",
    "gpus_args",
    "parse_engine",
    "parse_gpus",
    "parse_trainer",
    "probe_script",
    "trainer_args",
]

TrainerStatus = Literal[
    "ok", "missing", "not_executable", "no_interpreter", "interpreter_failed", "unreadable"
]
EngineStatus = Literal["ok", "missing", "no_answer", "unreadable"]

_DETAIL_LIMIT = 300


@cache
def probe_script() -> str:
    """The text of ``probe.sh``."""
    return (resources.files("overbrainer.preflight") / "probe.sh").read_text(encoding="utf-8")


def trainer_args(trainer: str) -> list[str]:
    """The script's arguments to probe ``trainer`` (a path, or a name on PATH)."""
    return ["trainer", trainer]


def engine_args(engine: str) -> list[str]:
    """The script's arguments to ask whether ``engine`` (docker, podman) answers."""
    return ["engine", engine]


def gpus_args() -> list[str]:
    """The script's arguments to count the GPUs ``nvidia-smi`` lists."""
    return ["gpus"]


@dataclass(frozen=True)
class GpusProbe:
    """How many GPUs ``nvidia-smi`` listed (``count``; None when it is not there, did not
    answer, or answered what the probe does not know: ``detail`` says which)."""

    count: int | None
    detail: str = ""


def parse_gpus(output: str) -> GpusProbe:
    """Read the script's answer to ``gpus``."""
    fields, detail = _fields(output)
    status, count = fields.get("status", ""), fields.get("count", "")
    if status == "ok" and count.isdigit():
        return GpusProbe(int(count))
    if status == "unknown":
        return GpusProbe(None, "no nvidia-smi")
    if status == "no_answer":
        return GpusProbe(None, f"nvidia-smi failed: {detail}" if detail else "nvidia-smi failed")
    return GpusProbe(None, "the probe gave no answer it knows")


@dataclass(frozen=True)
class TrainerProbe:
    """What the probe found about the trainer: ``asked`` is what the job will run,
    ``path`` where that resolved, ``interpreter`` the first word of its ``#!`` line and
    ``program`` the one that line starts through ``env`` (if it does); ``detail`` is what a
    failing interpreter said (one line, shortened)."""

    asked: str
    status: TrainerStatus
    path: str | None = None
    interpreter: str | None = None
    program: str | None = None
    detail: str = ""

    @property
    def shebang(self) -> str:
        """The ``#!`` line in words, as far as the probe told it."""
        words = [w for w in (self.interpreter, self.program) if w]
        return " ".join(words)


@dataclass(frozen=True)
class EngineProbe:
    """Whether the container ``engine`` answered, its server's version, or what it said."""

    engine: str
    status: EngineStatus
    version: str = ""
    detail: str = ""


def _fields(output: str) -> tuple[dict[str, str], str]:
    """The ``key=value`` lines before a ``--`` line, and what follows it (one line)."""
    lines = output.splitlines()
    end = lines.index("--") if "--" in lines else len(lines)
    fields: dict[str, str] = {}
    for line in lines[:end]:
        key, sep, value = line.partition("=")
        if sep and key.isidentifier() and key not in fields:
            fields[key] = value
    tail = " ".join(" ".join(lines[end + 1 :]).split())
    return fields, one_line(tail, _DETAIL_LIMIT) if tail else ""


def parse_trainer(output: str, asked: str) -> TrainerProbe:
    """Read the script's answer to ``trainer ASKED``; an answer it does not recognise reads
    as ``unreadable`` (never as ok)."""
    fields, detail = _fields(output)
    status = fields.get("status", "")
    known: tuple[TrainerStatus, ...] = (
        "ok", "missing", "not_executable", "no_interpreter", "interpreter_failed",
    )  # fmt: skip
    if status not in known:
        return TrainerProbe(asked, "unreadable", detail="the probe gave no answer it knows")
    return TrainerProbe(
        asked,
        known[known.index(status)],
        path=_text(fields.get("path")),
        interpreter=_text(fields.get("interpreter")),
        program=_text(fields.get("program")),
        detail=detail,
    )


def parse_engine(output: str, engine: str) -> EngineProbe:
    """Read the script's answer to ``engine ENGINE``."""
    fields, detail = _fields(output)
    status = fields.get("status", "")
    if status == "ok":
        return EngineProbe(engine, "ok", version=_text(fields.get("version")) or "")
    if status == "missing":
        return EngineProbe(engine, "missing")
    if status == "no_answer":
        return EngineProbe(engine, "no_answer", detail=detail)
    return EngineProbe(engine, "unreadable", detail="the probe gave no answer it knows")


def _text(value: str | None) -> str | None:
    if not value:
        return None
    return one_line(value, 200)
