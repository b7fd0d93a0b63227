"""Nobody reaches around the state layer: outside its modules, no code touches a SQLite
connection -- no ``._db`` (a registry's private connection), no ``sqlite3.connect``, no
``open_db`` -- it calls the registry's public API instead (issue 22)."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent

# The state layer: the registry and its parts, the schema, the journal's storage, and
# the one place sqlite3's errors are translated. Paths relative to src/tether.
STATE_LAYER = frozenset(
    {
        "registry.py",
        "schema.py",
        "_state_errors.py",
        "journal/store.py",
        "journal/writer.py",
        "journal/chunks.py",
        "journal/damage.py",
    }
)


def _in_state_layer(relative: str) -> bool:
    return relative in STATE_LAYER or (
        "/" not in relative and relative.startswith("_registry_") and relative.endswith(".py")
    )


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
