"""Counts in messages agree with their words (``1 setting differs``, ``(1 line)``), through
one helper, :mod:`overbrainer.plurals`: no module spells a plural by hand."""

import ast
from pathlib import Path

from overbrainer.plurals import plural, word
from overbrainer.projections.compare import settings_of

ROOT = Path(__file__).resolve().parent.parent


def test_a_count_of_one_takes_the_singular_and_every_other_count_the_plural() -> None:
    assert [plural(n, "line") for n in (0, 1, 2)] == ["0 lines", "1 line", "2 lines"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == (
        "3 entries"
    )
    assert [word(n, "differs", "differ") for n in (1, 2)] == ["differs", "differ"]
    assert [word(n, "it", "them") for n in (1, 4)] == ["it", "them"]
    assert word(1.0, "minute") == "minute" and word(0.5, "minute") == "minutes"


def test_a_data_file_of_one_line_is_fingerprinted_as_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "data" / "eval.jsonl").write_text('{"text": "x"}\n{"text": "y"}\n')
    found = settings_of(tmp_path)
    assert found["data/train.jsonl"].endswith(' (1 line)"')
    assert found["data/eval.jsonl"].endswith(' (2 lines)"')


# The pairs a count chooses between: what word() is for.
_PAIRS = [{"", "s"}, {"is", "are"}, {"it", "them"}, {"was", "were"}, {"has", "have"}]


def _chosen_by_hand(node: ast.IfExp) -> bool:
    sides = [node.body, node.orelse]
    if not all(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides):
        return False
    return {s.value for s in sides if isinstance(s, ast.Constant)} in _PAIRS


def test_no_module_spells_a_plural_by_hand() -> None:
    found = []
    for path in sorted((ROOT / "overbrainer").rglob("*.py")):
        if path.name in ("plurals.py", "help_texts.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.IfExp) and _chosen_by_hand(node):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
