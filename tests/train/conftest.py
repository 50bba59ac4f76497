"""Shared helpers for the tests of ``overbrainer.train``."""

import json
from pathlib import Path
from typing import Any

import pytest

from overbrainer.config.model import TrainingSettings


def settings(**changes: Any) -> TrainingSettings:
    """Training settings with test defaults, overridden by ``changes``."""
    values: dict[str, Any] = {
        "target": "here",
        "base_model": "Qwen/Qwen3-0.6B",
        "adapter": "lora",
    }
    values.update(changes)
    return TrainingSettings(**values)


def example(*, reasoning: str | None = None) -> dict[str, Any]:
    """One valid chat example."""
    assistant: dict[str, Any] = {"role": "assistant", "content": "4"}
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    return {"messages": [{"role": "user", "content": "2+2?"}, assistant]}


def write_jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with a three-example train set and no eval set."""
    directory = tmp_path / "project"
    write_jsonl(
        directory / "data" / "train.jsonl",
        [example(reasoning="2 and 2 make 4"), example(), example()],
    )
    return directory
