"""A kind of target is chosen in one place, ``overbrainer/targets/choose.py``.

Everything else asks the chosen target, or the facts recorded on a run: no module compares
a kind with a kind's name (``run.kind == "runpod"``), and no module outside the targets'
homes tells the target settings apart by their class (``isinstance(spec, RunpodTarget)``);
the configuration's own module validates them, and the machine home tells its two machines
(this one, a host over SSH) apart. Read from the source, every module, every function.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "overbrainer"

KIND_NAMES = frozenset({"local", "ssh", "runpod"})
TARGET_CLASSES = frozenset({"LocalTarget", "SshTarget", "RunpodTarget"})

CHOICE = "targets/choose.py"
CLASSES_ALLOWED = ("targets/", "config/model.py")


def _is_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind"
    )


def _names_a_kind(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in KIND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(item) for item in node.elts)
    return False


def kind_branches(source: str) -> list[int]:
    """The lines of ``source`` that compare a kind with a kind's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind(side) for side in sides) and any(_names_a_kind(s) for s in sides):
                found.append(node.lineno)
    return sorted(found)


def class_branches(source: str) -> list[int]:
    """The lines of ``source`` that tell target settings apart by class (an ``assert`` that
    only narrows a type for the checker is not a branch)."""
    tree = ast.parse(source)
    asserted = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        for inner in ast.walk(node.test)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and id(node) not in asserted
        ):
            kinds = node.args[1]
            names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
            if any(isinstance(n, ast.Name) and n.id in TARGET_CLASSES for n in names):
                found.append(node.lineno)
    return sorted(found)


def _modules() -> list[tuple[str, str]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_only_the_choice_compares_a_kind_with_its_name() -> None:
    wrong = [
        f"overbrainer/{name}:{line}"
        for name, source in _modules()
        if name != CHOICE
        for line in kind_branches(source)
    ]
    assert wrong == []


def test_only_the_targets_and_their_settings_tell_target_settings_apart_by_class() -> None:
    wrong = [
        f"overbrainer/{name}:{line}"
        for name, source in _modules()
        if not name.startswith(CLASSES_ALLOWED)
        for line in class_branches(source)
    ]
    assert wrong == []


def test_the_choice_holds_what_it_is_kept_to() -> None:
    source = (PACKAGE / CHOICE).read_text()
    assert class_branches(source) != []  # target_for chooses by the settings' class
    names = {
        n.name
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert {"target_for", "target_of_run"} <= names


def test_the_readers_find_each_way_a_kind_is_branched_on() -> None:
    source = (
        "if run.kind == 'runpod': pass\n"
        "x = 'job dir' if kind != 'local' else 'remote'\n"
        "ok = state.run.kind in ('local', 'ssh')\n"
        "fine = outcome.kind == 'ready'\n"
        "if isinstance(spec, RunpodTarget): pass\n"
        "if isinstance(spec, (LocalTarget, SshTarget)): pass\n"
        "assert isinstance(spec, RunpodTarget)\n"
    )
    assert kind_branches(source) == [1, 2, 3]
    assert class_branches(source) == [5, 6]


def test_the_choice_knows_every_kind_a_run_may_record() -> None:
    from overbrainer.events.target_kinds import TargetKind
    from overbrainer.targets.choose import KINDS

    assert set(KINDS) == set(TargetKind)
    assert {kind.value for kind, home in KINDS.items() if home.home == "machine"} == {
        "local",
        "ssh",
    }
