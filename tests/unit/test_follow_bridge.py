"""One follow bridge (issue 22): the blocking journal follower is carried into an event
loop in ``tether/operations/watching.py`` only; every door reads it from there.

A *bridge* is a definition (a function or a class, at module level) that both names the
follower (``follow_session``, ``Follower``, ``operations.watch``) and hands work across
threads to or from a loop (``call_soon_threadsafe``, ``run_coroutine_threadsafe``,
``to_thread``, ``run_in_executor``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
HOME = SRC / "operations" / "watching.py"
FOLLOWER = {"follow_session", "Follower"}
CROSSING = {"call_soon_threadsafe", "run_coroutine_threadsafe", "to_thread", "run_in_executor"}


def _names_follower(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id in FOLLOWER
    if isinstance(node, ast.Attribute):
        if node.attr in FOLLOWER:
            return True
        return (
            node.attr == "watch"
            and isinstance(node.value, ast.Name)
            and node.value.id == "operations"
        )
    if isinstance(node, ast.ImportFrom):
        return any(alias.name in FOLLOWER for alias in node.names)
    return False


def _crosses(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in CROSSING


def bridges(tree: ast.Module) -> list[str]:
    """The module-level definitions of ``tree`` that bridge a follower into a loop."""
    found = []
    for top in tree.body:
        if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        inside = list(ast.walk(top))
        if any(map(_names_follower, inside)) and any(map(_crosses, inside)):
            found.append(top.name)
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_rule_sees_a_bridge_in_either_spelling() -> None:
    """Positive control: the copies the issue found (a thread handing a follower's
    entries to the loop, a follower run through the executor) are each a bridge; a
    blocking follow, and a loop crossing with no follower, are not."""
    code = (
        "class Hub:\n"
        "    def _run(self):\n"
        "        operations.watch(self.key, self._emit)\n"
        "    def _emit(self, seq, line):\n"
        "        self.loop.call_soon_threadsafe(self._take, line)\n"
        "async def watch_journal(key):\n"
        "    from tether.state.journal.follow import Follower\n"
        "    def emit(seq, line):\n"
        "        asyncio.run_coroutine_threadsafe(queue.put(line), loop).result()\n"
        "    await asyncio.to_thread(with_home, operations.watch, key, emit)\n"
        "def start(self):\n"
        "    def work():\n"
        "        follow_session(self.key, emit)\n"
        "    loop.call_soon_threadsafe(on_entry)\n"
        "def blocking(key):\n"
        "    follow_session(key, print)\n"
        "async def elsewhere():\n"
        "    await asyncio.to_thread(print)\n"
    )
    assert bridges(ast.parse(code)) == ["Hub", "watch_journal", "start"]
    # And the one bridge there is, is seen where it lives.
    assert bridges(ast.parse(HOME.read_text())) == ["_FollowerSide"]


def test_only_operations_watching_bridges_a_follower_into_a_loop() -> None:
    found = {
        f"{path.relative_to(SRC)}:{name}"
        for path in _modules()
        if path != HOME
        for name in bridges(ast.parse(path.read_text()))
    }
    assert not found, f"a follow bridge outside operations/watching.py: {sorted(found)}"
