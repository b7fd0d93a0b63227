"""The mock agent's delegation verbs (issue 10): ``run CMD...`` and ``mcp-call``.

``run`` runs a command from inside the agent's process tree (how tests make an agent
run ``tether`` as a requester); ``mcp-call`` is a minimal MCP client for the servers the
client named in ``session/new``'s ``mcpServers``. See the verbs in
:mod:`tether.testing.mock_agent`. Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from select import select
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.testing.mock_agent.agent import MockAgent
    from tether.testing.mock_agent.protocol import Session

__all__ = ["INITIALIZE", "RUN_TIMEOUT_S", "mcp_call", "run"]

RUN_TIMEOUT_S = 120.0
#: The MCP client's first frame (also what bench/mcp_start.py times the answer to).
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "tether-mock-agent", "version": "1"},
    },
}


def run(agent: MockAgent, session: Session, rest: str) -> None:
    import shlex
    import subprocess

    try:
        done = subprocess.run(
            shlex.split(rest),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        agent.chunk(session, f"run failed: {e}")
        return
    agent.chunk(session, f"exit={done.returncode}\n{done.stdout}{done.stderr}")


def _mcp_exchange(server: dict[str, Any], tool: str, arguments: Any) -> Any:
    import subprocess

    env = dict(os.environ)
    for pair in server.get("env") or []:
        env[str(pair["name"])] = str(pair["value"])
    argv = [str(server["command"]), *[str(a) for a in server.get("args") or []]]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        frames = [
            INITIALIZE,
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            },
        ]
        proc.stdin.write(b"".join((json.dumps(f) + "\n").encode() for f in frames))
        proc.stdin.flush()
        answer: Any = None
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while answer is None:
            if not select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("the MCP server did not answer")
            line = proc.stdout.readline()
            if not line:
                raise EOFError("the MCP server exited without answering")
            msg = json.loads(line)
            if isinstance(msg, dict) and msg.get("id") == 2:
                answer = msg
        return answer
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own unreaped child: its pid cannot have been recycled
            proc.wait()


def mcp_call(agent: MockAgent, session: Session, rest: str) -> None:
    name, _, tail = rest.partition(" ")
    tool, _, raw_args = tail.strip().partition(" ")
    try:
        arguments = json.loads(raw_args) if raw_args.strip() else {}
        servers = [s for s in agent.mcp_servers if isinstance(s, dict) and s.get("name") == name]
        if not servers or not tool:
            raise LookupError(f"no MCP server {name!r} in session/new (or no tool named)")
        answer = _mcp_exchange(servers[0], tool, arguments)
    except (OSError, ValueError, LookupError, EOFError, TimeoutError, KeyError) as e:
        agent.chunk(session, f"mcp-call failed: {e}")
        return
    agent.chunk(session, json.dumps(answer))
