"""The ACP driver's elicitation path over the in-memory transport (issue 11)."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.acp.connection import AgentConnection, ClientOptions
from tether.acp.in_memory import FakeAgent
from tether.acp.policy import PermissionPolicy

Frame = dict[str, Any]
TEXT = [{"type": "text", "text": "hi"}]
FORM = {"mode": "form", "message": "who?", "requestedSchema": {"type": "object"}}


async def connect(agent: FakeAgent, **options: Any) -> tuple[AgentConnection, str]:
    conn = AgentConnection(agent.transport, "/nonexistent", ClientOptions(**options))
    await conn.initialize()
    return conn, (await conn.new_session("/nonexistent"))["sessionId"]


def capabilities(agent: FakeAgent) -> dict[str, Any]:
    init = next(f for f in agent.frames if f.get("method") == "initialize")
    caps: dict[str, Any] = init["params"]["clientCapabilities"]
    return caps


def test_without_a_hook_elicitation_is_not_offered() -> None:
    """No hook: the capability is not advertised and a request gets -32601."""

    async def main() -> None:
        agent = FakeAgent()
        await connect(agent)
        assert "elicitation" not in capabilities(agent)
        rid = agent.request("elicitation/create", {**FORM, "sessionId": agent.session_id})
        assert (await agent.answer_to(rid))["error"]["code"] == -32601

    asyncio.run(main())


def test_the_hook_answers_and_complete_is_observed() -> None:
    """The hook's result goes back to the agent; elicitation/complete reaches its observer."""
    completed: list[Frame] = []

    async def hook(params: Frame) -> Frame:
        assert params["message"] == "who?"
        return {"action": "accept", "content": {"name": "Ada"}}

    async def main() -> None:
        agent = FakeAgent()
        await connect(agent, elicitation_hook=hook, on_elicitation_complete=completed.append)
        assert capabilities(agent)["elicitation"] == {"form": {}, "url": {}}
        rid = agent.request("elicitation/create", {**FORM, "sessionId": agent.session_id})
        answer = await agent.answer_to(rid)
        assert answer["result"] == {"action": "accept", "content": {"name": "Ada"}}
        agent.notify("elicitation/complete", {"elicitationId": "e-1"})
        for _ in range(5):
            await asyncio.sleep(0)
        assert completed == [{"elicitationId": "e-1"}]

    asyncio.run(main())


def test_cancelling_the_turn_answers_a_waiting_elicitation_cancel() -> None:
    """A turn cancelled while its elicitation waits: the agent gets `cancel` once, the
    hook is cancelled; a permission waiting alongside gets the permission `cancelled`."""
    waiting: list[asyncio.Task[Any]] = []
    both = asyncio.Event()

    async def forever(_params: Frame) -> Frame:
        task = asyncio.current_task()
        assert task is not None
        waiting.append(task)
        if len(waiting) == 2:
            both.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def main() -> None:
        agent = FakeAgent()
        conn, sid = await connect(
            agent,
            elicitation_hook=forever,
            permission_hook=forever,
            permission_mode=PermissionPolicy.preset("approve-reads"),
        )
        turn = asyncio.ensure_future(conn.prompt(sid, TEXT, lambda _f: None))
        prompt = await agent.next_prompt()
        form = agent.request("elicitation/create", {**FORM, "sessionId": sid})
        perm = agent.ask_permission()
        await both.wait()
        assert conn.cancel(sid)
        assert (await agent.answer_to(form))["result"] == {"action": "cancel"}
        assert (await agent.answer_to(perm))["result"] == {"outcome": {"outcome": "cancelled"}}
        agent.answer(prompt["id"], {"stopReason": "cancelled"})
        assert (await turn).stop_reason == "cancelled"
        for _ in range(5):
            await asyncio.sleep(0)
        assert all(t.done() for t in waiting)  # the handlers ended with their hooks
        answered = [f for f in agent.frames if f.get("id") in (form, perm)]
        assert len(answered) == 2  # each answered exactly once

    asyncio.run(main())
