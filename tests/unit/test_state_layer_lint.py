"""Nobody reaches around the state layer: outside its package (``tether.state``), no code
touches a SQLite connection -- no ``._db`` (a registry's private connection), no
``sqlite3.connect``, no ``open_db``, no ``import sqlite3`` at all -- it calls the
registry's public API instead, and catches ``Registry.ERRORS`` (issue 22)."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent

# The state layer is the package tether.state: the registry and its parts, the schema,
# the journal, and the one place sqlite3's errors are translated. Paths relative to
# src/tether; the modules named must exist.
STATE_PACKAGE = "state/"
STATE_LAYER = frozenset(
    {
        "state/registry.py",
        "state/schema.py",
        "state/translate.py",
        "state/inspect.py",
        "state/journal/store.py",
        "state/journal/writer.py",
        "state/journal/chunks.py",
        "state/journal/damage.py",
    }
)


def _in_state_layer(relative: str) -> bool:
    return relative.startswith(STATE_PACKAGE)


def imports_sqlite3(source: str) -> list[int]:
    """The lines where ``source`` imports sqlite3 (at module level or in a function)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n.partition(".")[0] in ("sqlite3", "_sqlite3") for n in names):
            found.append(node.lineno)
    return sorted(found)


def reaches_around(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every place ``source`` touches a SQLite connection itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "_db":
            found.append((node.lineno, f"{ast.unparse(node)}: a registry's private connection"))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "connect"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sqlite3"
        ):
            found.append((node.lineno, "sqlite3.connect: a connection of its own"))
        elif isinstance(node, ast.ImportFrom) and node.module in (
            "sqlite3",
            "tether.state.journal.writer",
        ):
            for alias in node.names:
                if alias.name in ("connect", "open_db"):
                    found.append((node.lineno, f"imports {node.module}.{alias.name}"))
        elif isinstance(node, ast.Attribute) and node.attr == "open_db":
            found.append((node.lineno, f"{ast.unparse(node)}: a connection of its own"))
    return sorted(found)


def test_the_lint_reports_each_way_around_with_its_line() -> None:
    """The positive control: each way of reaching a connection is reported, where."""
    source = (
        "import sqlite3\n"
        "from tether.state.journal.writer import open_db\n"
        "def f(registry):\n"
        "    registry._db.execute('SELECT 1')\n"
        "    return sqlite3.connect(':memory:')\n"
    )
    assert [line for line, _ in reaches_around(source)] == [2, 4, 5]
    assert reaches_around("def f(registry):\n    return registry.journal_last_seq('k')\n") == []


def test_no_module_outside_the_state_layer_touches_a_sqlite_connection() -> None:
    """Every module of src/tether but the state layer's goes through its public API."""
    offences = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if _in_state_layer(relative):
            continue
        offences += [
            f"{relative}:{line}: {what}"
            for line, what in reaches_around(path.read_text(encoding="utf-8"))
        ]
    assert offences == [], "reaching around the state layer:\n" + "\n".join(offences)


def test_the_state_layer_modules_named_exist() -> None:
    """A renamed state module must be renamed here too, not silently linted."""
    missing = [name for name in sorted(STATE_LAYER) if not (SRC / name).is_file()]
    assert missing == []


def test_supervision_is_handed_an_opener_and_imports_no_registry() -> None:
    """``tether.supervise`` receives what it needs (the heartbeat an opener) instead of
    importing the registry."""
    offences = []
    for path in sorted((SRC / "supervise").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            # Record types (``_registry_members.Member``) are vocabulary; the registry is not.
            if any(
                n == "tether.state.registry" or n.startswith("tether.state.registry.")
                for n in names
            ):
                offences.append(f"supervise/{path.relative_to(SRC / 'supervise')}:{node.lineno}")
    assert offences == []


def test_the_sqlite3_lint_sees_every_import_of_it() -> None:
    """The positive control: a module or function importing sqlite3 is reported, where;
    a name that merely mentions it is not."""
    source = (
        "import os, sqlite3\n"
        "from sqlite3 import Error\n"
        "def f():\n"
        "    import _sqlite3\n"
        "    from tether.state.registry import Registry\n"
        "    return Registry.ERRORS\n"
    )
    assert imports_sqlite3(source) == [1, 2, 4]
    assert imports_sqlite3("import sqlite3_helpers\nsqlite3 = None\n") == []


def test_no_module_outside_the_state_package_imports_sqlite3() -> None:
    """sqlite3 is the state layer's business: whoever must survive a failing database
    catches ``Registry.ERRORS``."""
    offences = [
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if not _in_state_layer(path.relative_to(SRC).as_posix())
        for line in imports_sqlite3(path.read_text(encoding="utf-8"))
    ]
    assert offences == [], "imports sqlite3 outside tether.state: " + ", ".join(offences)


def test_supervision_imports_nothing_from_the_state_package() -> None:
    """Supervision sits below the state layer: it is handed an opener and members, and
    imports no module of ``tether.state`` (not even its record types)."""
    offences = []
    for path in sorted((SRC / "supervise").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == "tether.state" or n.startswith("tether.state.") for n in names):
                offences.append(f"supervise/{path.relative_to(SRC / 'supervise')}:{node.lineno}")
    assert offences == []


def private_state_imports(source: str) -> list[int]:
    """The lines where ``source`` imports a private module of ``tether.state``
    (``tether.state._x``, or ``_x`` from ``tether.state``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        if any(n.startswith("tether.state._") for n in names):
            found.append(node.lineno)
    return sorted(found)


def test_the_private_module_lint_sees_each_form() -> None:
    """The positive control: both import forms are reported; the public modules are not."""
    source = (
        "from tether.state._registry_journal import JournalReader\n"
        "from tether.state import _registry_runs, registry\n"
        "import tether.state._registry_prune\n"
        "from tether.state.registry import JournalReader, Registry\n"
        "from tether.state import inspect, translate\n"
    )
    assert private_state_imports(source) == [1, 2, 3]


def test_no_module_outside_the_state_package_imports_its_private_modules() -> None:
    """Outside tether.state, code imports its public modules (``registry``, ``inspect``,
    ``translate``, ``schema``, ``journal``), never the registry's private parts."""
    offences = [
        f"{path.relative_to(SRC).as_posix()}:{line}"
        for path in sorted(SRC.rglob("*.py"))
        if not _in_state_layer(path.relative_to(SRC).as_posix())
        for line in private_state_imports(path.read_text(encoding="utf-8"))
    ]
    assert offences == [], "imports a private module of tether.state: " + ", ".join(offences)
