"""The house drawn from its imports (issue 22): which room imports which, measured from
the code, every import counted (at module level or inside a function: a deferred import
is still a dependency).

A *room* is a top-level module or package of ``tether``. The doors -- the CLI, the
library, the gateway, the ACP door, the MCP bridge -- stand side by side on
``tether.operations``: none may import another, and the owner, below them all, imports
none. The doors' imports that still run sideways are listed below, each with why; a new
one fails here, and an entry that no longer exists must be removed (the list only
shrinks). The floors (the longest chain of rooms importing rooms) and the circles
between rooms are measured the same way and may not grow.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent

# Each door's rooms: the library is its package and ``tether/__init__`` (``import tether``).
DOOR_OF = {
    "cli": "cli",
    "client": "library",
    "tether": "library",
    "serve": "gateway",
    "acp_door": "acp",
    "mcp": "mcp",
}
DOORS = frozenset(DOOR_OF)

# Sideways imports between doors that remain, (from room, module imported): why each is
# there. The target is none.
# (ACP over HTTP: the program hands the gateway the ACP door, tether.serve.acp_binding.)
KNOWN_DOOR_TO_DOOR: dict[tuple[str, str], str] = {}
MAX_FLOORS = 9  # the target, measured 2026-11-27 (15 before tether.state/policy)
# One longest chain today, printed by longest_chain(): __main__ -> program -> mcp ->
# operations -> owner_fence -> owner_lost -> supervise -> _table -> errors.
KNOWN_ROOM_CIRCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = ["tether", *path.relative_to(SRC).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """module -> the tether modules it imports."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, frozenset[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                names = [
                    f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target
                    for a in node.names
                ]
            for name in names:
                if name == "tether" or name.startswith("tether."):
                    resolved = known(name)
                    if resolved is not None and resolved != module:
                        found.add(resolved)
        graph[module] = frozenset(found)
    return graph


Graph = dict[str, frozenset[str]]


def room_edges(graph: Graph) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if _room(module) != _room(target):
                edges[_room(module)].add(_room(target))
    return edges


def _components(nodes: set[str], edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components (Tarjan), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.add(member)
                        if member == node:
                            break
                    out.append(frozenset(members))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _floors_of(graph: Graph) -> tuple[dict[str, set[str]], dict[frozenset[str], int]]:
    """The room edges, and each circle of rooms (a lone room is a circle of one) with the
    floor it stands on (1: it imports no other room)."""
    edges = room_edges(graph)
    rooms = {_room(m) for m in graph}
    components = _components(rooms, edges)
    component_of = {room: c for c in components for room in c}

    @functools.cache
    def floor(component: frozenset[str]) -> int:
        below = {component_of[t] for r in component for t in edges.get(r, ())} - {component}
        return 1 + max((floor(c) for c in below), default=0)

    return edges, {c: floor(c) for c in components}


def floors(graph: Graph) -> int:
    _, floor = _floors_of(graph)
    return max(floor.values())


def longest_chain(graph: Graph) -> list[str]:
    """One longest chain of rooms, top first (rooms in a circle joined by ``/``): what to
    cut to lower the floors."""
    edges, floor = _floors_of(graph)
    component = max(floor, key=lambda c: (floor[c], sorted(c)))
    chain = []
    while True:
        chain.append("/".join(sorted(component)))
        below = [
            c
            for c in floor
            if c != component and any(t in c for r in component for t in edges.get(r, ()))
        ]
        if not below:
            return chain
        component = max(below, key=lambda c: (floor[c], sorted(c)))


def door_to_door(graph: Graph) -> set[tuple[str, str]]:
    found = set()
    for module, targets in graph.items():
        for target in targets:
            here, there = _room(module), _room(target)
            if here in DOORS and there in DOORS and DOOR_OF[here] != DOOR_OF[there]:
                found.add((here, target))
    return found


def test_no_door_imports_another_beyond_the_known_list_and_the_list_only_shrinks() -> None:
    found = door_to_door(import_graph())
    new = found - set(KNOWN_DOOR_TO_DOOR)
    assert not new, f"a door imports another door: {sorted(new)} -- go through tether.operations"
    gone = set(KNOWN_DOOR_TO_DOOR) - found
    assert not gone, f"no longer imported, remove from KNOWN_DOOR_TO_DOOR: {sorted(gone)}"


def test_the_owner_imports_no_door() -> None:
    doors = DOORS | {"fleet"}
    found = sorted(
        (module, target)
        for module, targets in import_graph().items()
        if _room(module) == "owner"
        for target in targets
        if _room(target) in doors
    )
    assert not found, f"the owner imports a door: {found}"


def test_circles_between_rooms_and_floors_do_not_grow() -> None:
    graph = import_graph()
    edges = room_edges(graph)
    circles = {c for c in _components({_room(m) for m in graph}, edges) if len(c) > 1}
    assert circles <= KNOWN_ROOM_CIRCLES, f"a new circle between rooms: {circles}"
    gone = KNOWN_ROOM_CIRCLES - circles
    assert not gone, f"no longer a circle, remove from KNOWN_ROOM_CIRCLES: {gone}"
    assert floors(graph) <= MAX_FLOORS, " -> ".join(longest_chain(graph))


def test_the_measure_sees_doors_circles_and_floors() -> None:
    """The lint's own measure on a made-up house: a gateway module importing the CLI is
    a door-to-door import; two rooms importing each other are one circle; floors count
    the longest chain. (Room names the state move's script does not rewrite.)"""
    graph: Graph = {
        "tether.serve.app": frozenset({"tether.cli._render", "tether.operations"}),
        "tether.cli._render": frozenset({"tether.operations"}),
        "tether.operations": frozenset({"tether.ledger"}),
        "tether.ledger": frozenset({"tether.archive.store"}),
        "tether.archive.store": frozenset({"tether.ledger"}),
    }
    assert door_to_door(graph) == {("serve", "tether.cli._render")}
    edges = room_edges(graph)
    circles = {c for c in _components({_room(m) for m in graph}, edges) if len(c) > 1}
    assert circles == {frozenset({"ledger", "archive"})}
    assert floors(graph) == 4  # serve -> cli -> operations -> {ledger, archive}
    assert longest_chain(graph) == ["serve", "cli", "operations", "archive/ledger"]
