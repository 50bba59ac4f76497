"""The project's training data: ``data/train.jsonl`` and the optional ``data/eval.jsonl``.

Both are JSON Lines in the chat format Axolotl's ``chat_template`` type reads: one object per
line with a non-empty ``messages`` list of ``{"role": …, "content": …}`` turns, reasoning (if
any) in an assistant turn's ``reasoning_content``. They are checked before any run is
created, so a bad file never costs a job, let alone a pod. Problems are reported by line
number only: the examples may be private, so their content is never echoed.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from overbrainer.errors import OverbrainerError

TRAIN_FILE = Path("data") / "train.jsonl"
"""The train set, relative to the project (and to the run directory)."""

EVAL_FILE = Path("data") / "eval.jsonl"
"""The optional eval set, relative to the project (and to the run directory)."""

_SHOWN_PROBLEMS = 5
_FORMAT = (
    'one JSON object per line, each with a "messages" list of {"role": ..., "content": ...} '
    'turns (reasoning, if any, in an assistant turn\'s "reasoning_content")'
)


class DataError(OverbrainerError):
    """The training data cannot be used; the message names each file and line."""


@dataclass(frozen=True)
class DataFiles:
    """The checked data files of a project."""

    train_path: Path
    """``data/train.jsonl`` (it exists and holds at least one example)."""
    eval_path: Path | None
    """``data/eval.jsonl`` when it holds at least one example, else ``None``."""
    train_examples: int
    eval_examples: int
    reasoning_examples: int
    """Train examples with a non-empty ``reasoning_content`` in some turn."""

    @property
    def has_eval(self) -> bool:
        """Whether there is an eval set (``test_datasets`` in ``axolotl.yaml``)."""
        return self.eval_path is not None


@dataclass
class _Scan:
    examples: int = 0
    reasoning: int = 0
    problems: list[str] | None = None

    def problem(self, line: int, what: str) -> None:
        if self.problems is None:
            self.problems = []
        self.problems.append(f"line {line}: {what}")


def _check_message(index: int, message: object) -> tuple[str | None, bool]:
    """``(problem, has_reasoning)`` for turn ``index`` (1-based) of an example."""
    where = f"message {index}"
    if not isinstance(message, dict):
        return f"{where} is not an object", False
    role = message.get("role")
    if not isinstance(role, str) or not role.strip():
        return f'{where} has no "role" string', False
    if "content" not in message:
        return f'{where} has no "content"', False
    content = message["content"]
    if not isinstance(content, str | list):
        return f'{where} has a "content" that is neither a string nor a list', False
    reasoning = message.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        return f'{where} has a "reasoning_content" that is not a string', False
    return None, bool(reasoning)


def _check_line(raw: bytes) -> tuple[str | None, bool]:
    """``(problem, has_reasoning)`` for one non-blank line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text", False
    try:
        example = json.loads(text)
    except json.JSONDecodeError as error:
        # The decoder's message names a position, never the text.
        return f"not valid JSON ({error.msg} at column {error.colno})", False
    if not isinstance(example, dict):
        return "not a JSON object", False
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        return '"messages" must be a non-empty list of turns', False
    has_reasoning = False
    for index, message in enumerate(messages, start=1):
        problem, reasoning = _check_message(index, message)
        if problem is not None:
            return problem, False
        has_reasoning = has_reasoning or reasoning
    return None, has_reasoning


def _scan(path: Path) -> _Scan:
    """Check every line of ``path`` (blank lines are skipped, as Axolotl's loader does)."""
    scan = _Scan()
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            problem, has_reasoning = _check_line(raw.rstrip(b"\r\n"))
            if problem is not None:
                scan.problem(number, problem)
            else:
                scan.examples += 1
                scan.reasoning += int(has_reasoning)
    return scan


def _describe(path: Path, problems: list[str]) -> str:
    shown = "; ".join(problems[:_SHOWN_PROBLEMS])
    more = len(problems) - _SHOWN_PROBLEMS
    tail = f"; and {more} more" if more > 0 else ""
    noun = "line" if len(problems) == 1 else "lines"
    return f"{path} has {len(problems)} bad {noun}: {shown}{tail}"


def _read(path: Path, *, required: bool) -> tuple[_Scan | None, str | None]:
    """The scan of ``path`` (``None`` when absent or empty) and the problem, if any."""
    if not path.exists():
        if required:
            return None, f"{path} is missing: put the training examples there, {_FORMAT}"
        return None, None
    if not path.is_file():
        return None, f"{path} is not a file: it must hold {_FORMAT}"
    try:
        scan = _scan(path)
    except OSError as error:
        return None, f"cannot read {path} ({error.strerror or error})"
    if scan.problems:
        return scan, _describe(path, scan.problems)
    if scan.examples == 0:
        if required:
            return None, f"{path} is empty: put the training examples there, {_FORMAT}"
        return None, None
    return scan, None


def check_data(project_dir: Path) -> DataFiles:
    """Check the project's data files; a :class:`DataError` names every problem at once.

    A missing or empty ``data/train.jsonl`` is an error; ``data/eval.jsonl`` is optional
    (missing or empty means no eval set), but when it has examples they must be valid too.
    """
    train_path = project_dir / TRAIN_FILE
    eval_path = project_dir / EVAL_FILE
    train, train_problem = _read(train_path, required=True)
    evaluation, eval_problem = _read(eval_path, required=False)
    problems = [p for p in (train_problem, eval_problem) if p is not None]
    if problems:
        raise DataError("\n".join([*problems, "fix the data, then run `overbrainer train` again"]))
    assert train is not None  # no problem means the train set was read and is not empty
    return DataFiles(
        train_path=train_path,
        eval_path=eval_path if evaluation is not None else None,
        train_examples=train.examples,
        eval_examples=evaluation.examples if evaluation is not None else 0,
        reasoning_examples=train.reasoning,
    )
