"""The packages of overbrainer depend on each other one way, read from the source.

Every ``import`` of every module is parsed (at the top, inside functions, under
``TYPE_CHECKING``: a lazy import is still a dependency) and mapped to its package. A
package may import only packages of lower layers; packages of one layer do not import each
other. Modules import each other without cycles, inside a package too. A new package must
be given its layer here, which is the point: where it sits is a decision.

Besides: only the tests import ``tests`` (the demo, the benchmarks, the campaigns and e2e
take their stand-ins from ``overbrainer.testing``), nothing imports another module's
private ``_name``, and the command line loads no test tooling.
"""

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top. ``version`` is the installed version, ``overbrainer`` the package's own
# ``__init__`` (which hands it out), ``errors`` the base error class, ``utc`` how times
# are written and read and ``plurals`` the words that agree with a count: everything may
# use them.
LAYERS: list[set[str]] = [
    {"version"},
    {"overbrainer", "errors", "utc", "plurals"},
    {"config"},  # overbrainer.toml, the environment, .env
    {"events"},  # the typed events, their fold, the store (SQLite, PostgreSQL), run IDs
    {"exec", "runpod", "train"},  # executors; the Runpod API client; Axolotl's job
    {"projections"},  # what the log folds to: run.json, views, summaries, timelines
    {"front"},  # the terminal, Ctrl-C, the campaigns' fault injection
    {"session"},  # the journal, and what one command's run operations share
    {"lifecycle", "preflight"},  # a run's life on any target; the checks before a run exists
    {"targets"},  # each kind of target (machine/, runpod/), and the one choice among them
    {"cli"},  # the commands
    {"__main__"},
    {"testing"},  # stand-ins for tests, the demo, the benchmarks and the campaigns
]

FIRST_PARTY = ("overbrainer", "tests", "bench", "reliability", "e2e")


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a dotted module path (or ``module.name``)."""

    source: str  # the importing module
    target: str
    names: tuple[str, ...]  # what ``from target import …`` takes; empty for ``import``
    line: int

    def where(self) -> str:
        return f"{self.source}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Iterator[Import]:
    """Every import in ``path``, wherever it stands, relative ones resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield Import(name, target, tuple(a.name for a in node.names), node.lineno)


def sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts)


def modules() -> set[str]:
    return {module_name(p) for p in sources("overbrainer")}


def package_of(module: str) -> str:
    """``overbrainer.events.store`` → ``events``; ``overbrainer.errors`` → ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(package: str) -> int:
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"package overbrainer.{package} has no layer in LAYERS")


def product_imports() -> list[Import]:
    """Imports of overbrainer modules by overbrainer modules, each resolved to the module
    it loads (``from pkg import mod`` loads ``pkg.mod``)."""
    known = modules()
    found = []
    for path in sources("overbrainer"):
        for imp in imports(path):
            if imp.target != "overbrainer" and not imp.target.startswith("overbrainer."):
                continue
            # ``from pkg import mod`` loads ``pkg.mod``; ``from mod import name`` loads ``mod``.
            targets = {
                f"{imp.target}.{n}" if f"{imp.target}.{n}" in known else imp.target
                for n in imp.names or [""]
            }
            found += [Import(imp.source, t, imp.names, imp.line) for t in sorted(targets)]
    return found


def test_every_package_has_a_layer() -> None:
    packages = {package_of(m) for m in modules()}
    placed = set().union(*LAYERS)
    assert packages - placed == set(), "give each new package its layer in LAYERS"
    assert placed - packages == set(), "LAYERS names a package that does not exist"


def test_packages_import_only_lower_layers() -> None:
    wrong = []
    for imp in product_imports():
        mine, theirs = package_of(imp.source), package_of(imp.target)
        if mine != theirs and layer_of(theirs) >= layer_of(mine):
            wrong.append(f"{imp.where()} imports {imp.target} ({mine} → {theirs})")
    assert wrong == []


def test_modules_import_each_other_without_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for imp in product_imports():
        if imp.target != imp.source:
            graph[imp.source].add(imp.target)
    cycles = strongly_connected(graph)
    assert cycles == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``: its strongly connected components of two or more nodes
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_only_the_tests_import_tests() -> None:
    outside = sources("overbrainer", "bench", "reliability", "e2e")
    wrong = [
        f"{imp.where()} imports {imp.target}"
        for path in outside
        if path.suffix == ".py"
        for imp in imports(path)
        if imp.target == "tests" or imp.target.startswith("tests.")
    ]
    # Nor do they run its modules or files, or send readers there: `-m tests.fakes.…`,
    # `tests/fakes/axolotl`, "(``tests/sshd.py``)".
    mention = re.compile(r"(?<![\w.-])tests[./]\w")
    for path in [*outside, ROOT / "justfile"]:
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            if mention.search(text):
                wrong.append(f"{path.relative_to(ROOT)}:{number}: {text.strip()}")
    assert wrong == []


def test_nothing_imports_a_private_name_of_another_module() -> None:
    wrong = []
    for path in sources(*FIRST_PARTY):
        for imp in imports(path):
            if not imp.target.startswith(FIRST_PARTY) or imp.target == imp.source:
                continue
            private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            dunder = [p for p in imp.target.split(".") if p.startswith("__") and p.endswith("__")]
            modules = [p for p in imp.target.split(".") if p.startswith("_") and p not in dunder]
            if private or modules:
                wrong.append(f"{imp.where()}: from {imp.target} import {', '.join(private)}")
    assert wrong == []


def test_the_command_line_loads_no_test_tooling() -> None:
    probe = (
        "import sys\n"
        "from overbrainer.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('overbrainer.testing', 'hypercorn', 'jsonschema', 'pytest', 'tests')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stdout.splitlines()[-1] == "[]"


def test_the_lifecycle_knows_no_kind_of_target() -> None:
    # lifecycle/run.py drives every kind of target through the Target protocol: what a
    # machine or a pod does differently lives in their own modules.
    kinds = (
        "overbrainer.targets.machine.target",
        "overbrainer.targets.runpod.target",
        "overbrainer.targets",
        "overbrainer.runpod",
        "overbrainer.exec.local",
        "overbrainer.exec.ssh",
    )
    found = list(imports(ROOT / "overbrainer" / "lifecycle" / "run.py"))
    wrong = [f"{imp.where()} imports {imp.target}" for imp in found if imp.target.startswith(kinds)]
    assert wrong == []
    assert "overbrainer.lifecycle.target" in {imp.target for imp in found}  # the protocol
