"""The shape of supervision, enforced (issue 22, item 4): ``AgentProcess`` is composed of
collaborators, never built by inheritance; each field has one owner; and no function in
``tether.supervise`` runs over ~60 lines, no class over ~300, no module over ~400."""

from __future__ import annotations

import ast
from pathlib import Path

import tether.supervise

SUPERVISE = Path(tether.supervise.__file__).parent
MAX_FUNCTION = 60
MAX_CLASS = 300
MAX_MODULE = 400
# The collaborators of AgentProcess: each assigns only its own fields.
PARTS = ("runner", "run_lease", "run_io", "spawning", "watchdog", "finalizer", "witnesses")
# The one write to another object's field: Popen's returncode, once we reaped the keeper
# ourselves (so its finalizer neither warns nor waits on a reaped pid).
FOREIGN_WRITES_ALLOWED = {("spawning", "self.keeper.returncode")}


def _sources() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(SUPERVISE.glob("*.py"))}


def oversized(module: str, tree: ast.Module, lines: int) -> list[tuple[str, str, int, int]]:
    """``(module, name, length, limit)`` of every function, class or module over its limit."""
    found = [(module, "<module>", lines, MAX_MODULE)] if lines > MAX_MODULE else []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            limit = MAX_CLASS if isinstance(node, ast.ClassDef) else MAX_FUNCTION
            if length > limit:
                found.append((module, node.name, length, limit))
    return found


def inheriting(trees: dict[str, ast.Module]) -> list[tuple[str, str, str]]:
    """``(module, class, base)`` of every class built on another class of supervise."""
    ours = {
        node.name
        for tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    found: list[tuple[str, str, str]] = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if name in ours:
                    found.append((module, node.name, name))
    return found


def foreign_writes(tree: ast.Module) -> list[str]:
    """Every assignment to a field of an object other than ``self`` (``a.b = ...``,
    ``self.part.field = ...``): a field written by someone who does not own it."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for sub in ast.walk(target):
                if not isinstance(sub, ast.Attribute) or not isinstance(sub.ctx, ast.Store):
                    continue
                if not (isinstance(sub.value, ast.Name) and sub.value.id == "self"):
                    found.append(ast.unparse(sub))
    return found


def test_no_oversized_function_class_or_module_in_supervise() -> None:
    """Functions stay under 60 lines, classes under 300, modules under 400."""
    trees = _sources()
    over = []
    for module, tree in trees.items():
        lines = len((SUPERVISE / f"{module}.py").read_text().splitlines())
        over += oversized(module, tree, lines)
    assert over == []


def test_no_supervise_class_inherits_another() -> None:
    """No class in supervise is built on another one there: AgentProcess is composed."""
    assert inheriting(_sources()) == []


def test_agent_process_parts_write_only_their_own_fields() -> None:
    """Each collaborator of AgentProcess assigns only ``self.<field>``: one owner per field."""
    trees = _sources()
    found = [
        (module, write)
        for module in PARTS
        for write in foreign_writes(trees[module])
        if (module, write) not in FOREIGN_WRITES_ALLOWED
    ]
    assert found == []


def composition(tree: ast.Module, name: str) -> tuple[list[ast.expr], set[str]]:
    """Class ``name``'s bases, and what its ``__init__`` builds and assigns (``x = C(...)``)."""
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    built = {ast.unparse(n.value.func) for n in ast.walk(init) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call)}  # fmt: skip
    return cls.bases, built


def test_agent_process_is_composed_of_its_parts() -> None:
    """AgentProcess has no base class and holds each collaborator as a field."""
    bases, built = composition(_sources()["runner"], "AgentProcess")
    assert bases == []
    assert {"RunLease", "RunIO", "Spawner", "Watchdog", "Finalizer"} <= built


def test_the_checks_catch_what_they_forbid() -> None:
    """Positive control: a long function, a layered class and a foreign write are caught."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION))
    src = f"class Base:\n    pass\n\nclass Layer(Base):\n    pass\n\ndef long():\n{body}\n"
    src += "\ndef poke(part):\n    part.field = 1\n"
    tree = ast.parse(src)
    assert [(n, ln) for _, n, ln, _ in oversized("m", tree, 10)] == [("long", MAX_FUNCTION + 1)]
    assert oversized("m", tree, MAX_MODULE + 1)[0][1] == "<module>"
    assert inheriting({"m": tree}) == [("m", "Layer", "Base")]
    assert foreign_writes(tree) == ["part.field"]
