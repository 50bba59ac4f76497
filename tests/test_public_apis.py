"""overbrainer leans on no other package's private parts: no module or name starting with
``_`` is imported from outside the project (the standard library included), and no
private attribute of an imported module is used. ``tests/test_pg_public_apis.py`` holds
the team store's use of eventsourcing's objects to the same rule."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "overbrainer"


def _private(name: str) -> bool:
    # ``__name__`` and its kind are Python's data model, public to all.
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _leaning(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    imported: set[str] = set()  # names bound to other packages' modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "overbrainer":
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    found.append((node.lineno, f"import {alias.name}"))
                imported.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] == "overbrainer":
                continue
            if any(_private(part) for part in module.split(".")):
                found.append((node.lineno, f"from {module} import …"))
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, f"from {module} import {alias.name}"))
                imported.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
            and _private(node.attr)
        ):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


def test_no_module_leans_on_another_packages_private_parts() -> None:
    leaning = []
    for source in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        for line, what in _leaning(tree):
            leaning.append(f"{source.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert leaning == []


def test_the_check_sees_each_way_of_leaning() -> None:
    code = (
        "import _sha1\n"
        "import pydantic.plugin._loader as loader\n"
        "from eventsourcing._private import x\n"
        "from sys import _getframe\n"
        "import sys\n"
        "sys._getframe()\n"
        "from overbrainer._own import fine\n"
        "from . import _also_fine\n"
        "print(sys.__name__)\n"
    )
    assert [what for _, what in _leaning(ast.parse(code))] == [
        "import _sha1",
        "import pydantic.plugin._loader",
        "from eventsourcing._private import …",
        "from sys import _getframe",
        "sys._getframe",
    ]
