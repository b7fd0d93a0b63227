"""Structured concurrency, enforced: tasks start only in ``tether._aio``, and no shield
hides inside ``suppress(...)`` (the `_aio` rule in AGENTS.md; issue 22)."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
ALLOWED = {SRC / "_aio.py"}
BANNED_CALLS = {"create_task", "ensure_future"}
BROAD = {"Exception", "BaseException"}


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_suppress(item: ast.withitem) -> bool:
    """``suppress(Exception)`` or ``suppress(BaseException)``, in either spelling (a
    ``suppress(TimeoutError)`` around a timeout scope is the bounded-wait idiom)."""
    expr = item.context_expr
    return (
        isinstance(expr, ast.Call)
        and _called_name(expr) == "suppress"
        and any(isinstance(a, ast.Name) and a.id in BROAD for a in expr.args)
    )


def bare_task_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``create_task``/``ensure_future`` call (attribute or name) in ``tree``."""
    return [
        (node.lineno, name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (name := _called_name(node)) in BANNED_CALLS
    ]


def shields_in_suppress(tree: ast.AST) -> list[int]:
    """Lines of every ``shield(...)`` call inside a ``with suppress(Exception)`` block."""
    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith) and any(map(_is_suppress, node.items)):
            for stmt in node.body:
                found.extend(
                    inner.lineno
                    for inner in ast.walk(stmt)
                    if isinstance(inner, ast.Call) and _called_name(inner) == "shield"
                )
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_rule_sees_what_it_bans() -> None:
    """Positive control: each banned shape is found, in either spelling."""
    code = (
        "import asyncio, contextlib\n"
        "t = asyncio.get_running_loop().create_task(f())\n"
        "u = ensure_future(g())\n"
        "async def h():\n"
        "    with contextlib.suppress(Exception):\n"
        "        await asyncio.shield(x)\n"
        "    with suppress(BaseException, OSError):\n"
        "        await shield(y)\n"
        "    with contextlib.suppress(TimeoutError):\n"
        "        await asyncio.shield(z)\n"
    )
    tree = ast.parse(code)
    assert bare_task_calls(tree) == [(2, "create_task"), (3, "ensure_future")]
    assert shields_in_suppress(tree) == [6, 8]


def test_tasks_start_only_in_aio() -> None:
    """No module under src/tether but ``_aio`` calls create_task or ensure_future."""
    assert len(_modules()) > 50
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line}: {name} (use tether._aio.spawn)"
        for path in _modules()
        if path not in ALLOWED
        for line, name in bare_task_calls(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_no_shield_inside_suppress() -> None:
    """No ``shield`` inside ``with suppress(Exception)``: cleanup goes through tether._aio."""
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line}: shield inside suppress (use tether._aio.cleanup)"
        for path in _modules()
        for line in shields_in_suppress(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []
