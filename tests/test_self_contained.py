"""The repository explains itself: no comment or docstring sends its reader to a document
the repository does not hold, and every package of ``overbrainer`` says what it is for.

A reference such as "see the spec, section 7.2" or "as the earlier prototype did" reads as
an explanation but explains nothing to whoever has only this repository; the reason has to
be written where the code is.
"""

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPS = ("overbrainer", "tests", "bench", "reliability", "demo", "e2e", ".ci", "docs")
FILES = ("README.md", "justfile", "pyproject.toml")
SKIPPED = {".venv", ".e2e", "__pycache__", ".git"}

# Section references to a specification, the development notes kept beside the repository,
# and the prototype this code was once compared with.
OUTSIDE = re.compile(
    r"SPEC\s*§|SPEC\.md|§\s*\d"
    r"|\b(?:STACK|AXOLOTL|RUNPOD)-NOTES\b|/work/shared"
    r"|\b[Tt]he seed\b|\bseed's\b|\(seed: `",
)


def _texts() -> Iterator[Path]:
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and not SKIPPED & set(path.relative_to(ROOT).parts):
                yield path
    for name in FILES:
        yield ROOT / name


def references_outside(path: Path) -> list[str]:
    """``file:line: text`` of each line of ``path`` citing a document kept elsewhere."""
    data = path.read_bytes()
    if b"\0" in data:  # a database or another binary file: no prose
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [
        f"{shown}:{number}: {line.strip()}"
        for number, line in enumerate(lines, 1)
        if OUTSIDE.search(line)
    ]


def test_no_comment_cites_a_document_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    found = [where for path in _texts() if path != this for where in references_outside(path)]
    assert found == [], "explain the reason in place instead"


def test_the_check_finds_each_kind_of_outside_reference(tmp_path: Path) -> None:
    code = tmp_path / "cited.py"
    code.write_text(
        '"""Provisioning a pod (SPEC §7.2; the seed\'s ``start_pod``)."""\n'
        "# as the seed's Job::run did\n"
        "# the timing of §7.2\n"
        "# Runpod's own advice (RUNPOD-NOTES): 400 is this candidate only\n"
        "# the pod may still bill (seed: ``end``)\n"
        "rng = random.Random(seed)  # a seed for the fake's jitter is no citation\n"
        "def fake(seed: int | None = 0) -> None: ...\n"
    )
    assert [line.split(":")[1] for line in references_outside(code)] == ["1", "2", "3", "4", "5"]


def _packages() -> list[Path]:
    return sorted(path.parent for path in (ROOT / "overbrainer").rglob("__init__.py"))


def test_every_package_says_what_it_is_for() -> None:
    unexplained = []
    for package in _packages():
        docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
        # A sentence at least, more than the package's own name ("events.").
        words = re.findall(r"[A-Za-z]+", docstring)
        if len(words) < 8:
            unexplained.append(f"{package.relative_to(ROOT)}: {docstring!r}")
    assert unexplained == []
    assert len(_packages()) >= 14  # the check did find the packages
