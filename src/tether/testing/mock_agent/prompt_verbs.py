"""The mock agent's prompt verbs: what a turn says and how it ends.

``echo``, ``stream``, ``sleep``, ``big``, ``plan``, ``thought``, ``usage``, ``mode``,
``unknown-update``, ``session-params``, ``stop``, ``error`` and ``exit`` (see the package
docstring). Step verbs are generators ``(agent, turn, rest)``; plain verbs are
``(agent, turn, session, rest)`` and return an :class:`Outcome` to end the turn, or None.
"""

from __future__ import annotations

import json
import time

from tether.testing.mock_agent.protocol import (
    CANCELLED,
    INTERRUPT,
    Outcome,
    Session,
    Sleep,
    Turn,
    dumps,
)
from tether.testing.mock_agent.script import ints

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.testing.mock_agent.agent import MockAgent
    from tether.testing.mock_agent.protocol import Step

STREAM_BATCH = 512  # stream lines per write (and per poll of stdin)


def _stream(agent: MockAgent, turn: Turn, rest: str) -> Step:
    (count,), text = ints(rest, 1)
    head = (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
        + dumps(turn.session.sid)[:-1]
        + b',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
        + b'"text":'
        + dumps(text or "chunk")[:-2]
        + b" "
    )
    tail = b'\\n"}}}}\n'
    for start in range(0, count, STREAM_BATCH):
        end = min(count, start + STREAM_BATCH)
        agent.write(b"".join([head + b"%d" % i + tail for i in range(start, end)]))
        # Poll stdin between batches, so a cancel can stop the stream.
        if end < count and (yield Sleep(0.0, True)) is INTERRUPT:
            return CANCELLED
    return None


def _sleep(agent: MockAgent, turn: Turn, rest: str) -> Step:
    (ms,), _ = ints(rest, 1)
    if (yield Sleep(time.monotonic() + ms / 1000, True)) is INTERRUPT:
        return CANCELLED
    return None


def _echo(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.chunk(session, rest)
    return None


def _big(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    (size,), _ = ints(rest, 1)
    agent.chunk(session, "x" * size)
    return None


def _unknown_update(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.update(
        session,
        {"sessionUpdate": "mock_future_kind", "mockField": 1, "mockNested": {"a": [1, 2]}},
    )
    agent.notify("_mock/notice", {"sessionId": session.sid, "message": "from the future"})
    agent.update(
        session,
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "unknown field"},
            "mockExtra": {"kept": True},
        },
    )
    return None


def _plan(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    entries = [
        {"content": "Read the code", "priority": "high", "status": "completed"},
        {"content": "Write the fix", "priority": "medium", "status": "in_progress"},
    ]
    agent.update(session, {"sessionUpdate": "plan", "entries": entries})
    return None


def _thought(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.chunk(session, rest, "agent_thought_chunk")
    return None


def _usage(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.update(session, {"sessionUpdate": "usage_update", "used": 1234, "size": 200000})
    return None


def _session_params(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    agent.chunk(session, json.dumps(agent.new_params, sort_keys=True))
    return None


def _mode(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    session.mode = rest
    agent.update(session, {"sessionUpdate": "current_mode_update", "currentModeId": rest})
    return None


def _stop(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    return Outcome(rest or "end_turn")


def _error(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    (code,), message = ints(rest, 1)
    return Outcome(None, code, message or "mock error")


def _exit(agent: MockAgent, turn: Turn, session: Session, rest: str) -> Outcome | None:
    turn.exit_code = ints(rest, 1)[0][0] if rest else 0
    return None


STEP_VERBS: dict[str, Callable[[MockAgent, Turn, str], Step]] = {
    "stream": _stream,
    "sleep": _sleep,
}
PLAIN_VERBS: dict[str, Callable[[MockAgent, Turn, Session, str], Outcome | None]] = {
    "echo": _echo,
    "big": _big,
    "unknown-update": _unknown_update,
    "plan": _plan,
    "thought": _thought,
    "usage": _usage,
    "session-params": _session_params,
    "mode": _mode,
    "stop": _stop,
    "error": _error,
    "exit": _exit,
}
