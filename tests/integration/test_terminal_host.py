"""``ProcessTerminals`` in-process: real supervised runs behind the in-memory ACP driver.

The agent is :class:`tether.acp.in_memory.FakeAgent`, so every answer is seen exactly and
validated against the schema; the terminals are real processes under their keepers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tests._proctree import marker_carriers
from tests.unit.test_acp_terminals import call

from tether.acp.connection import AgentConnection, ClientOptions
from tether.acp.in_memory import FakeAgent
from tether.process_terminals import ProcessTerminals, TerminalSettings

pytestmark = pytest.mark.integration


def test_the_run_ending_ends_every_terminal_and_refuses_new_ones(project_dir: Path) -> None:
    """aclose() (the agent run ends) proves every terminal gone, answers a pending
    wait_for_exit, and a later terminal/create is refused."""
    from tether.state.registry import Registry

    async def main() -> None:
        registry = Registry()
        host = ProcessTerminals(registry, "session-1", None, TerminalSettings(grace=0.5))
        agent = FakeAgent()
        conn = AgentConnection(agent.transport, str(project_dir), ClientOptions(terminal_host=host))
        try:
            await conn.initialize()
            await conn.new_session(str(project_dir))
            term = (await call(agent, "terminal/create", command="echo hi; sleep 60"))["result"]
            for _ in range(500):
                out = (await call(agent, "terminal/output", **term))["result"]
                if out["output"]:
                    break
                await asyncio.sleep(0.01)
            assert out == {"output": "hi\n", "truncated": False}
            assert marker_carriers(term["terminalId"])
            waiting = asyncio.ensure_future(call(agent, "terminal/wait_for_exit", **term))
            reports = await host.aclose()
            assert [r.survivors for r in reports] == [()]
            assert marker_carriers(term["terminalId"]) == []
            assert (await waiting)["result"]["signal"] == "SIGTERM"
            assert registry.lease(term["terminalId"]).session_key == "session-1"
            refused = await call(agent, "terminal/create", command="true")
            assert refused["error"]["code"] == -32603
            assert "no new terminals" in refused["error"]["message"]
        finally:
            await host.aclose()
            await conn.aclose()
            registry.close()

    asyncio.run(main())
