"""The team store's modules (``overbrainer/events/pg*.py``) use eventsourcing through its
public API only: no attribute whose name starts with ``_`` is read, called or overridden on
anything but names these modules define themselves — so an eventsourcing release may change
its insides without breaking the team store, and the ``postgres`` extra can follow its
public compatibility."""

import ast
import importlib
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG_FILES = sorted((ROOT / "overbrainer" / "events").glob("pg*.py"))
# Python's own instance dictionary: not another package's part.
LANGUAGE = frozenset({"__dict__"})


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _private(name: str) -> bool:
    return name.startswith("_")


def foreign_private_names(module_name: str) -> set[str]:
    """The ``_`` names (dunders aside) that eventsourcing's classes, the bases of the
    module's classes, define: what a subclass must neither call nor override."""
    module = importlib.import_module(module_name)
    found: set[str] = set()
    for _, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__:
            continue
        for base in cls.__mro__[1:]:
            if base.__module__.split(".")[0] == "eventsourcing":
                found |= {n for n in vars(base) if _private(n) and not _is_dunder(n)}
    return found


def private_uses(source: str, foreign: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Each use in ``source`` of a ``_`` attribute that is not the module's own, as
    ``line N: what``. ``foreign``: private names of the classes the module subclasses."""
    tree = ast.parse(source)
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in {"self", "cls"}
        ):
            own.add(node.attr)
    own -= foreign
    hits: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in foreign:
            hits.append(f"line {node.lineno}: overrides {node.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            on_self = isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}
            # super().__init__(…) from our own __init__: the base's public constructor.
            on_super = (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "super"
                and _is_dunder(node.attr)
                and node.attr in own
            )
            if not (on_super or (on_self and (node.attr in own or node.attr in LANGUAGE))):
                hits.append(f"line {node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            hits.append(f"line {node.lineno}: {node.func.id}(…, {node.args[1].value!r})")
    return hits


def test_the_team_store_modules_use_no_private_attribute_of_eventsourcing() -> None:
    assert [p.name for p in PG_FILES] == ["pg.py", "pg_recorder.py"]
    found = {}
    for path in PG_FILES:
        foreign = foreign_private_names(f"overbrainer.events.{path.stem}")
        hits = private_uses(path.read_text(encoding="utf-8"), foreign)
        if hits:
            found[path.name] = hits
    assert found == {}


def test_the_check_catches_calls_overrides_and_unwrapping_of_private_parts() -> None:
    foreign = foreign_private_names("overbrainer.events.pg_recorder")
    assert {"_lock_table", "_insert_stored_events", "_insert_events"} <= foreign
    source = """
class Recorder(Base):
    def __init__(self):
        super().__init__()
        self._mine = 1

    def _helper(self):
        return self._mine

    def _insert_events(self, curs):
        self._lock_table(curs)
        super()._insert_stored_events(curs, [])
        return getattr(Base.insert_events, "__wrapped__", None), self._helper()
"""
    assert private_uses(source, foreign) == [
        "line 10: overrides _insert_events",
        "line 11: ._lock_table",
        "line 12: ._insert_stored_events",
        "line 13: getattr(…, '__wrapped__')",
    ]
