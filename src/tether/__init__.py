"""Tether: a warm, owned, honest runtime and CLI for ACP coding agents.

The public API, imported lazily so that ``import tether`` (and the CLI's thin paths)
stay cheap: nothing below loads asyncio until it is used.

    async with tether.Client() as client:
        session = await client.ensure_session("claude", cwd=".", name="review")
        async for event in session.prompt("explain this repo"):
            ...
"""

from __future__ import annotations

from tether._version import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.client import Client, Session
    from tether.errors import TetherError
    from tether.events import (
        AgentMessageChunk,
        AgentNotification,
        AgentThoughtChunk,
        ElicitationRequested,
        Event,
        JournalRecord,
        PermissionRequested,
        Plan,
        Question,
        QuestionResolved,
        SessionEnded,
        SessionInfoUpdate,
        SessionUpdate,
        ToolCall,
        ToolCallUpdate,
        TurnEnded,
        UsageUpdate,
    )

__all__ = [
    "AgentMessageChunk",
    "AgentNotification",
    "AgentThoughtChunk",
    "Client",
    "ElicitationRequested",
    "Event",
    "JournalRecord",
    "PermissionRequested",
    "Plan",
    "Question",
    "QuestionResolved",
    "Session",
    "SessionEnded",
    "SessionInfoUpdate",
    "SessionUpdate",
    "TetherError",
    "ToolCall",
    "ToolCallUpdate",
    "TurnEnded",
    "UsageUpdate",
    "__version__",
]

_LAZY = {
    "Client": "tether.client",
    "Session": "tether.client",
    "TetherError": "tether.errors",
    **dict.fromkeys(
        (
            "AgentMessageChunk",
            "AgentNotification",
            "AgentThoughtChunk",
            "ElicitationRequested",
            "Event",
            "JournalRecord",
            "PermissionRequested",
            "Plan",
            "Question",
            "QuestionResolved",
            "SessionEnded",
            "SessionInfoUpdate",
            "SessionUpdate",
            "ToolCall",
            "ToolCallUpdate",
            "TurnEnded",
            "UsageUpdate",
        ),
        "tether.events",
    ),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
