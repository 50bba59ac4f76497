"""The journal is the only door trio code has to the event store, read from the source.

A store call blocks (SQLite, PostgreSQL over the network): made directly in an async
command it stalls every other task of the command, Ctrl-C handling included, and a MockClock
test cannot swap it for an inline call. So in ``overbrainer/``, outside the store itself
(``overbrainer.events``) and the journal (``overbrainer.session.journal``), async code only
opens a store, hands it to a ``Journal`` and closes it; and nothing anywhere reaches through
a journal to its store. The synchronous commands (``events``, ``runs``, ``store migrate``)
run no trio and read the store directly.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "overbrainer"
# The store, the journal, and the stand-ins whose MockClock rigs read the store inline on
# purpose (their test code inspects a run's log between steps).
OWNERS = (PACKAGE / "events", PACKAGE / "session" / "journal.py", PACKAGE / "testing")
SOURCES = ("overbrainer", "tests", "bench", "reliability", "demo", "e2e")
OPENERS = {"RunStore", "open_store"}


def _python(top: Path) -> Iterator[Path]:
    yield from (p for p in sorted(top.rglob("*.py")) if ".venv" not in p.parts)


def _where(path: Path, node: ast.expr) -> str:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)
    return f"{shown}:{node.lineno}: {ast.unparse(node)}"


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_store(node: ast.AST, names: frozenset[str] = frozenset({"store"})) -> bool:
    """A name of ``names`` (``store``, and whatever the function binds a store to), or
    ``x.store`` or ``x._store`` — but not ``settings.store``, the configuration's
    ``[store]`` table."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute) and node.attr in ("store", "_store"):
        return not (isinstance(node.value, ast.Name) and node.value.id == "settings")
    return False


def _store_names(function: ast.AST) -> frozenset[str]:
    """``store``, the names ``function`` binds to ``RunStore(...)`` or ``open_store(...)``,
    and its parameters annotated as a ``RunStore``."""
    names = {"store"}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _last_name(node.value.func) in OPENERS:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.arg) and node.annotation is not None:
            names.update([node.arg] if "RunStore" in ast.unparse(node.annotation) else [])
    return frozenset(names)


def _allowed_uses(function: ast.AST, names: frozenset[str]) -> set[int]:
    """The ids of the store expressions ``function`` may hold: ``store = RunStore(...)``,
    ``Journal(store, ...)`` and ``store.close()`` (and a function called, such as
    ``open_store(...)``, is no store)."""
    allowed: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _last_name(node.value.func) in OPENERS:
                allowed.update(id(target) for target in node.targets)
        elif isinstance(node, ast.Call):
            if _last_name(node.func) == "Journal":
                allowed.update(id(arg) for arg in node.args if _is_store(arg, names))
            elif (
                isinstance(node.func, ast.Attribute)
                and node.func.attr == "close"
                and _is_store(node.func.value, names)
            ):
                allowed.add(id(node.func.value))
    return allowed


def store_uses_in_async_code(path: Path) -> list[str]:
    """Where an async function of ``path`` (or a function inside one) touches a store other
    than to open it, hand it to a journal or close it."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[tuple[int, int], str] = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.AsyncFunctionDef):
            continue
        names = _store_names(function)
        allowed = _allowed_uses(function, names)
        for node in ast.walk(function):
            if _is_store(node, names) and id(node) not in allowed:
                found[node.lineno, node.col_offset] = _where(path, node)
    return [found[key] for key in sorted(found)]


def reaches_into_a_journal(path: Path) -> list[str]:
    """Where ``path`` reads a journal's store (``session.journal.store``, ``journal._store``)."""
    tree = ast.parse(path.read_text(), str(path))
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("store", "_store")
        and _last_name(node.value) in ("journal", "_journal")
    ]
    return [_where(path, node) for node in sorted(found, key=lambda n: n.lineno)]


def test_async_code_outside_the_journal_touches_no_store() -> None:
    found = [
        where
        for path in _python(PACKAGE)
        if not any(path.is_relative_to(owner) for owner in OWNERS)
        for where in store_uses_in_async_code(path)
    ]
    assert found == [], "use the session's journal (await session.journal.…) instead"


def test_nothing_reaches_through_a_journal_to_its_store() -> None:
    found = [
        where
        for top in SOURCES
        for path in _python(ROOT / top)
        if path != PACKAGE / "session" / "journal.py"
        for where in reaches_into_a_journal(path)
    ]
    assert found == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    # The two readers above, on code as it was before the journal was the only door.
    code = tmp_path / "bad.py"
    code.write_text(
        "async def rm(ctx, store, settings):\n"
        "    store = RunStore(settings.store.url)\n"
        "    journal = Journal(store, here)\n"
        "    states = {r: store.state(r) for r in ids}\n"
        "    home = await trio.to_thread.run_sync(run_home, ctx.session.journal.store, s)\n"
        "    def read():\n"
        "        return self._store.history(run_id)\n"
        "    store.close()\n"
        "    async with open_store(settings) as session:\n"
        "        return session.journal._store\n"
        "def sync_command(store):\n"
        "    return store.history(run_id)\n"
        "async def check(settings, theirs: RunStore):\n"
        "    mine = RunStore(None)\n"
        "    local_store = settings.store.url is None\n"
        "    return mine.get(run_id), theirs.history(run_id), local_store\n"
    )
    assert store_uses_in_async_code(code) == [
        "bad.py:4: store",
        "bad.py:5: ctx.session.journal.store",
        "bad.py:7: self._store",
        "bad.py:10: session.journal._store",
        "bad.py:16: mine",
        "bad.py:16: theirs",
    ]
    assert reaches_into_a_journal(code) == [
        "bad.py:5: ctx.session.journal.store",
        "bad.py:10: session.journal._store",
    ]
