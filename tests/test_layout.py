"""Where the suite's test doubles live: in ``tests/fakes/``, read from the source.

The doubles and stand-ins only the suite uses (the fixtures that start the real sshd,
PostgreSQL and Chromium, the command confiner, the command on another host, the
package-manager stand-ins) live in the package ``tests.fakes``; what the demo, the
benchmarks and the campaigns run ships in ``overbrainer.testing`` (tests/test_layers.py
keeps those away from ``tests``). A test module may keep a small double of its own, but a
``Fake…``/``Stub…`` class, a fixture shared under one name, or a stand-in program goes in
``tests/fakes/``, which imports nothing from the test modules.
"""

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FAKES = TESTS / "fakes"


def python_files(under: Path) -> Iterator[Path]:
    for path in sorted(under.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


def in_fakes(path: Path) -> bool:
    return path.is_relative_to(FAKES)


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def fixtures(path: Path) -> Iterator[tuple[str, ast.AST]]:
    """The pytest fixtures a module defines: functions decorated ``@pytest.fixture``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(target) in ("pytest.fixture", "fixture"):
                yield node.name, node


def test_tests_fakes_is_a_package_defining_the_fixtures_of_sshd_and_postgresql() -> None:
    assert (FAKES / "__init__.py").is_file()
    defined = {name for path in python_files(FAKES) for name, _ in fixtures(path)}
    assert {"sshd_server", "pg_cluster", "team"} <= defined


def test_no_fixture_of_tests_fakes_is_defined_again_elsewhere() -> None:
    shared = {name for path in python_files(FAKES) for name, _ in fixtures(path)}
    copies = [
        f"{where(path, node)} defines the fixture {name} of tests/fakes again"
        for path in python_files(TESTS)
        if not in_fakes(path)
        for name, node in fixtures(path)
        if name in shared
    ]
    assert copies == []


def test_no_module_outside_tests_fakes_defines_a_fake_or_a_stub() -> None:
    double = re.compile(r"(Fake|Stub)[A-Z_]|(fake|stub)_")
    found = [
        f"{where(path, node)} defines {node.name}"
        for path in python_files(TESTS)
        if not in_fakes(path)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and double.match(node.name)
    ]
    assert found == []


def test_stand_in_programs_under_tests_live_in_tests_fakes() -> None:
    programs = [
        path
        for path in sorted(TESTS.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and (os.access(path, os.X_OK) or path.read_bytes().startswith(b"#!"))
    ]
    assert programs, "the apt-get and sudo stand-ins are programs"
    assert [str(path.relative_to(ROOT)) for path in programs if not in_fakes(path)] == []


def test_tests_fakes_imports_nothing_from_the_test_modules() -> None:
    wrong = []
    for path in python_files(FAKES):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.ImportFrom):
                # A relative import stays inside tests/fakes only if it names a sibling.
                targets = [] if node.level == 1 else [f"{'.' * node.level}{node.module}"]
            else:
                continue
            for target in targets:
                inside = target == "tests.fakes" or target.startswith("tests.fakes.")
                if target.startswith((".", "tests")) and not inside:
                    wrong.append(f"{where(path, node)} imports {target}")
    assert wrong == []


def test_every_module_of_the_suite_named_in_a_string_exists() -> None:
    # ``python -m tests.fakes.confine`` is run from a string: a module moved without its
    # callers fails here, not as a test that cannot find its stand-in.
    named = re.compile(r"tests(\.\w+)+")
    missing = []
    for path in python_files(TESTS):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if not named.fullmatch(node.value):
                continue
            module = ROOT.joinpath(*node.value.split("."))
            if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                missing.append(f"{where(path, node)} names {node.value}")
    assert missing == []
