"""The prompt is written once (issue 22): only ``tether.operations`` builds the IPC
``prompt`` request's payload, sends a ``prompt`` request, reads a turn's frames, or sends
a control (``set_mode``, ``set_config_option``); every door presents what it returns.

Measured from the code by an AST scan of ``src/tether``: a door that builds the payload
by hand (a dict literal with the payload's ``prompt`` and ``client`` keys), sends the
request itself (``send``/``request``/``request_frame`` with the kind ``"prompt"`` or a
control kind), or reads a request's frames to their terminal one itself (``.frames(`` /
``.wait(`` on an owner connection next to its own ``"lagged"`` handling) fails here. The
positive controls below show each check catches a door that re-implements it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
PROMPTING = frozenset({"operations/prompting.py", "operations/prompting_aio.py"})
CONTROLLING = frozenset({"operations/controlling.py"})
SENDERS = frozenset({"send", "request", "request_frame"})
CONTROL_KINDS = frozenset({"set_mode", "set_config_option"})


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _strings(call: ast.Call) -> set[str]:
    values = [*call.args, *(k.value for k in call.keywords)]
    return {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}


def findings(source: str) -> list[tuple[str, int]]:
    """(what, line) of each place in ``source`` that builds or sends a prompt or control."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"prompt", "client"} <= keys:
                out.append(("prompt payload", node.lineno))
        elif isinstance(node, ast.Call) and _name(node.func) in SENDERS:
            kinds = _strings(node)
            if "prompt" in kinds:
                out.append(("prompt request", node.lineno))
            if kinds & CONTROL_KINDS:
                out.append(("control request", node.lineno))
        if isinstance(node, ast.Constant) and node.value == "lagged":
            out.append(("turn loop", node.lineno))
    return out


# Who else may name a ``lagged`` frame, and why: not a prompt turn's loop.
LAGGED_ELSEWHERE = {
    "owner/job.py": "the owner sends it",
    "owner/watchers.py": "the owner sends it (a watch)",
    "ipc/protocol.py": "a terminal frame of the protocol",
    "ipc/client.py": "the IPC client raises WatchLagged for it",
    "serve/stream_clients.py": "the SSE stream's own lagged event (HTTP)",
    "remote/client.py": "the remote CLI reads the SSE event (HTTP)",
    "client/remote_stream.py": "the remote library reads the SSE event (HTTP)",
    "serve/prompt_wait.py": "the wait route reads a turn's rest itself (AsyncTurn's option)",
}


def _allowed(what: str, rel: str) -> bool:
    if what == "control request":
        return rel in CONTROLLING
    if what == "turn loop":
        return rel in PROMPTING or rel in LAGGED_ELSEWHERE
    return rel in PROMPTING


def test_only_operations_builds_sends_and_reads_a_prompt() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for what, line in findings(path.read_text()):
            if not _allowed(what, rel):
                offenders.append(f"{rel}:{line}: {what}")
    assert offenders == [], "re-implemented outside tether.operations:\n" + "\n".join(offenders)


def test_the_scan_sees_a_door_that_builds_its_own_prompt() -> None:
    """Positive control: each way of writing the prompt again is caught."""
    door = """
payload = {"prompt": blocks, "wait": True, "client": "door"}
rid = conn.send("prompt", payload, deadline_ms=None)
frame = protocol.request_frame(rid, "prompt", payload)
conn.request("set_mode", {"modeId": mode})
if frame.get("type") == "lagged":
    pass
"""
    assert sorted(what for what, _line in findings(door)) == [
        "control request",
        "prompt payload",
        "prompt request",
        "prompt request",
        "turn loop",
    ]


def test_the_operations_modules_are_where_the_scan_looks() -> None:
    """The allowed modules exist and hold what the scan looks for (a rename fails here)."""
    assert findings((SRC / "operations/prompting.py").read_text())
    assert findings((SRC / "operations/prompting_aio.py").read_text())
    assert (SRC / "operations/controlling.py").is_file()
