"""The project's training data: ``data/train.jsonl`` and the optional ``data/eval.jsonl``.

Both are JSON Lines in the chat format Axolotl's ``chat_template`` type reads: one object per
line with a non-empty ``messages`` list of ``{"role": …, "content": …}`` turns, at least one
of them the assistant's (only assistant turns are trained on), reasoning (if any) in an
assistant turn's ``reasoning_content``. They are checked before any run is created, so a
bad file never costs a job, let alone a pod. Problems are reported as ``file:line`` (paths
relative to the project) and never echo content: the examples may be private.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from overbrainer.errors import OverbrainerError
from overbrainer.plurals import word

TRAIN_FILE = Path("data") / "train.jsonl"
"""The train set, relative to the project (and to the run directory)."""

EVAL_FILE = Path("data") / "eval.jsonl"
"""The optional eval set, relative to the project (and to the run directory)."""

_SHOWN_PROBLEMS = 5
# Roles Axolotl's chat_template reads as the assistant's (ShareGPT's "gpt" is mapped to it):
# the turns the rendered config trains on.
_ASSISTANT_ROLES = frozenset({"assistant", "gpt"})
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


@dataclass(frozen=True)
class DataReport:
    """What checking the data files found: the files (when usable) and every problem.

    Each problem is one line naming its file (relative to the project) and, for a bad
    example, its line: ``data/train.jsonl:3: not valid JSON (…)``. Only the first bad lines
    of a file are spelled out; one more line says how many others there are.
    """

    files: DataFiles | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the data can be trained on."""
        return self.files is not None and not self.problems


@dataclass
class _Scan:
    examples: int = 0
    reasoning: int = 0
    bad_lines: list[tuple[int, str]] | None = None

    def problem(self, line: int, what: str) -> None:
        if self.bad_lines is None:
            self.bad_lines = []
        self.bad_lines.append((line, what))


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
    if not any(message["role"] in _ASSISTANT_ROLES for message in messages):
        return (
            'no assistant turn (role "assistant"): only assistant turns are trained on, so '
            "this example would teach nothing"
        ), False
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


def _describe(shown: Path, bad_lines: list[tuple[int, str]]) -> list[str]:
    """One problem per bad line, the first few only, then how many more there are."""
    problems = [f"{shown}:{line}: {what}" for line, what in bad_lines[:_SHOWN_PROBLEMS]]
    more = len(bad_lines) - _SHOWN_PROBLEMS
    if more > 0:
        problems.append(f"{shown}: {more} more bad {word(more, 'line')} ({len(bad_lines)} in all)")
    return problems


def _read(path: Path, shown: Path, *, required: bool) -> tuple[_Scan | None, list[str]]:
    """The scan of ``path`` (``None`` when absent or empty) and its problems."""
    if not path.exists():
        if required:
            return None, [f"{shown} is missing: put the training examples there, {_FORMAT}"]
        return None, []
    if not path.is_file():
        return None, [f"{shown} is not a file: it must hold {_FORMAT}"]
    try:
        scan = _scan(path)
    except OSError as error:
        return None, [f"cannot read {shown} ({error.strerror or error})"]
    if scan.bad_lines:
        return scan, _describe(shown, scan.bad_lines)
    if scan.examples == 0:
        if required:
            return None, [f"{shown} is empty: put the training examples there, {_FORMAT}"]
        return None, []
    return scan, []


def inspect_data(project_dir: Path) -> DataReport:
    """Check every line of the project's data files; never raises for bad data.

    A missing or empty ``data/train.jsonl`` is a problem; ``data/eval.jsonl`` is optional
    (missing or empty means no eval set), but when it has examples they must be valid too.
    """
    train_path = project_dir / TRAIN_FILE
    eval_path = project_dir / EVAL_FILE
    train, train_problems = _read(train_path, TRAIN_FILE, required=True)
    evaluation, eval_problems = _read(eval_path, EVAL_FILE, required=False)
    problems = (*train_problems, *eval_problems)
    if problems or train is None:
        return DataReport(None, problems)
    files = DataFiles(
        train_path=train_path,
        eval_path=eval_path if evaluation is not None else None,
        train_examples=train.examples,
        eval_examples=evaluation.examples if evaluation is not None else 0,
        reasoning_examples=train.reasoning,
    )
    return DataReport(files, ())


def check_data(project_dir: Path) -> DataFiles:
    """Check the project's data files (see :func:`inspect_data`); a :class:`DataError`
    names every problem at once, one per line."""
    report = inspect_data(project_dir)
    if report.files is None or report.problems:
        lines = [*report.problems, "fix the data, then run `overbrainer train` again"]
        raise DataError("\n".join(lines))
    return report.files
