"""Questions for a human through the library: the callback, the events, elicitations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.errors import AlreadyAnswered

pytestmark = pytest.mark.integration


def chunks(events: list[tether.Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, tether.AgentMessageChunk)]


def test_a_per_prompt_callback_answers_and_the_agent_gets_it(
    tether_home: Path, project_dir: Path
) -> None:
    """A prompt's `on_question` callback sees the tool call and its answer reaches the
    agent; the turn yields the question and its resolution as typed events."""
    asked: list[tether.PermissionRequested] = []

    async def decide(question: tether.Question) -> str:
        assert isinstance(question, tether.PermissionRequested)
        asked.append(question)
        return "allow" if question.title == "safe" else "deny"

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                events = [
                    e
                    async for e in session.prompt(
                        "tool edit safe ; tool edit risky", on_question=decide
                    )
                ]
            finally:
                await session.close()
        assert [q.title for q in asked] == ["safe", "risky"]
        assert [q.tool_kind for q in asked] == ["edit", "edit"]
        kinds = [o["kind"] for o in asked[0].options]
        assert kinds == ["allow_once", "allow_always", "reject_once"]
        assert chunks(events) == ["permission: allowed", "permission: denied"]
        resolved = [e for e in events if isinstance(e, tether.QuestionResolved)]
        assert [(r.answer, r.how) for r in resolved] == [
            ("allow", "controller"),
            ("deny", "controller"),
        ]
        assert all(r.by and r.by["pid"] > 0 for r in resolved)

    asyncio.run(main())


def test_a_client_callback_and_a_late_answer_from_the_event(
    tether_home: Path, project_dir: Path
) -> None:
    """The client's `on_question` answers every prompt's questions; answering the same
    event again afterwards raises AlreadyAnswered."""
    seen: list[tether.Question] = []

    async def always(question: tether.Question) -> str:
        seen.append(question)
        return "always"

    async def main() -> None:
        async with tether.Client(home=tether_home, on_question=always) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                events = [e async for e in session.prompt("tool execute ls")]
                assert chunks(events) == ["permission: allowed"]
                with pytest.raises(AlreadyAnswered):
                    await seen[0].answer("deny")
            finally:
                await session.close()

    asyncio.run(main())


def test_events_without_a_callback_are_answered_with_answer(
    tether_home: Path, project_dir: Path
) -> None:
    """With `control=True` and no callback, the PermissionRequested event's answer()
    answers it."""

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                events: list[tether.Event] = []
                async for event in session.prompt("tool edit x", control=True):
                    events.append(event)
                    if isinstance(event, tether.PermissionRequested):
                        result = await event.answer("deny")
                        assert result["interaction"]["answer"] == "deny"
                assert chunks(events) == ["permission: denied"]
            finally:
                await session.close()

    asyncio.run(main())


def test_elicitations_are_relayed_declined_and_cancelled(
    tether_home: Path, project_dir: Path
) -> None:
    """A form elicitation reaches the callback and its content the agent; with nobody
    to ask it is declined; a URL one accepted is followed by elicitation/complete."""
    forms: list[tether.ElicitationRequested] = []

    async def fill(question: tether.Question) -> dict[str, Any] | str:
        assert isinstance(question, tether.ElicitationRequested)
        forms.append(question)
        return {"name": "Ada"} if question.mode == "form" else "accept"

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            session = await client.ensure_session("mock", cwd=project_dir)
            try:
                nobody = [e async for e in session.prompt("elicit form who?")]
                assert chunks(nobody) == ["elicitation: decline"]
                asked = [
                    e
                    async for e in session.prompt(
                        "elicit form who? ; elicit url login", on_question=fill
                    )
                ]
                assert chunks(asked) == [
                    'elicitation: accept {"name": "Ada"}',
                    "elicitation: accept {}",
                ]
                journal = await session.read()
                assert journal  # the turns are there
            finally:
                await session.close()
        assert forms[0].message == "who?"
        assert forms[0].requested_schema is not None
        assert forms[1].url == "https://example.invalid/login"

    asyncio.run(main())


def test_the_readme_example_runs(tether_home: Path, project_dir: Path) -> None:
    """The README's "Questions for a human" example runs as printed."""
    import re
    import subprocess
    import sys

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Questions for a human") :]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    code = code.replace('home="/tmp/tether-demo"', f"home={str(tether_home)!r}")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project_dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "the agent wants to edit: README.md" in out
    assert "allow (controller)" in out
    assert "permission: allowed" in out
