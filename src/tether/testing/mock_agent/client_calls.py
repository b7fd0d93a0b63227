"""The mock agent's requests to its client: permissions, elicitations, fs and terminals.

``tool``, ``cancel-request``, ``elicit``, ``read``, ``write`` and ``terminal`` (see the
package docstring). Each is a step verb: it sends a request and waits for the answer
(always: the client must answer, even after a cancel), then reports it as a chunk.
"""

from __future__ import annotations

import json
import time

from tether.testing import mock_terminal
from tether.testing.mock_agent.protocol import (
    CANCELLED,
    Await,
    Sleep,
    Turn,
    error_code,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.testing.mock_agent.agent import MockAgent
    from tether.testing.mock_agent.protocol import Msg, Step

PERMISSION_OPTIONS = (
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
)
ALLOW_OPTIONS = frozenset({"allow", "allow-always"})


def _fs_error(response: Msg) -> str:
    err = response.get("error")
    if isinstance(err, dict):
        return f"fs error {err.get('code')} {err.get('message')}"
    return f"fs error {err}"


def _tool(agent: MockAgent, turn: Turn, rest: str) -> Step:
    session = turn.session
    kind, _, title = rest.partition(" ")
    title = title.strip() or f"mock {kind}"
    call_id = f"call-{agent.next_call}"
    agent.next_call += 1
    call = {"toolCallId": call_id, "title": title, "kind": kind, "status": "pending"}
    agent.update(session, {"sessionUpdate": "tool_call", **call})
    _, key = agent.request(
        "session/request_permission",
        {"sessionId": session.sid, "toolCall": call, "options": list(PERMISSION_OPTIONS)},
    )
    response = yield Await(key)
    assert isinstance(response, dict)
    if "error" in response:
        agent.chunk(session, f"permission: error {error_code(response)}")
        return None
    result = response.get("result")
    outcome = result.get("outcome") if isinstance(result, dict) else None
    kind_of = outcome.get("outcome") if isinstance(outcome, dict) else None
    if kind_of == "cancelled":
        return CANCELLED
    option = outcome.get("optionId") if isinstance(outcome, dict) else None
    allowed = option in ALLOW_OPTIONS
    status = "completed" if allowed else "failed"
    agent.update(
        session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
    )
    if allowed:
        agent.chunk(session, "permission: allowed")
    elif option == "reject":
        agent.chunk(session, "permission: denied")
    else:
        agent.chunk(session, f"permission: unknown option {option}")
    return None


def _elicit(agent: MockAgent, turn: Turn, rest: str) -> Step:
    session = turn.session
    mode, _, text = rest.partition(" ")
    n = agent.next_call
    agent.next_call += 1
    params: Msg = {"sessionId": session.sid, "mode": mode, "message": text or "mock question"}
    if mode == "url":
        params["elicitationId"] = f"elicit-{n}"
        params["url"] = f"https://example.invalid/{text or 'login'}"
    else:
        params["requestedSchema"] = {
            "type": "object",
            "properties": {"name": {"type": "string", "title": "Name"}},
            "required": ["name"],
        }
    _, key = agent.request("elicitation/create", params)
    response = yield Await(key)
    assert isinstance(response, dict)
    if "error" in response:
        agent.chunk(session, f"elicitation: error {error_code(response)}")
        return None
    result = response.get("result")
    action = result.get("action") if isinstance(result, dict) else None
    if action == "accept":
        content = result.get("content") if isinstance(result, dict) else None
        agent.chunk(session, f"elicitation: accept {json.dumps(content, sort_keys=True)}")
        if mode == "url":
            agent.notify("elicitation/complete", {"elicitationId": params["elicitationId"]})
    else:
        agent.chunk(session, f"elicitation: {action}")
    return None


def _cancel_request(agent: MockAgent, turn: Turn, rest: str) -> Step:
    session = turn.session
    call_id = f"call-{agent.next_call}"
    agent.next_call += 1
    call = {"toolCallId": call_id, "title": "mock cancel_request", "kind": "other"}
    req_id, key = agent.request(
        "session/request_permission",
        {"sessionId": session.sid, "toolCall": call, "options": list(PERMISSION_OPTIONS)},
    )
    agent.notify("$/cancel_request", {"requestId": req_id})
    response = yield Await(key)
    assert isinstance(response, dict)
    if "error" in response:
        agent.chunk(session, f"cancel_request: answered {error_code(response)}")
    else:
        agent.chunk(session, "cancel_request: answered result")
    return None


def _read(agent: MockAgent, turn: Turn, rest: str) -> Step:
    session = turn.session
    _, key = agent.request("fs/read_text_file", {"sessionId": session.sid, "path": rest})
    response = yield Await(key)
    assert isinstance(response, dict)
    if "error" in response:
        agent.chunk(session, _fs_error(response))
    else:
        result = response.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        agent.chunk(session, content if isinstance(content, str) else f"fs bad result {result}")
    return None


def _write(agent: MockAgent, turn: Turn, rest: str) -> Step:
    session = turn.session
    path, _, content = rest.partition(" ")
    _, key = agent.request(
        "fs/write_text_file",
        {"sessionId": session.sid, "path": path, "content": content.strip()},
    )
    response = yield Await(key)
    assert isinstance(response, dict)
    agent.chunk(session, _fs_error(response) if "error" in response else f"wrote {path}")
    return None


def _terminal(agent: MockAgent, turn: Turn, rest: str) -> Step:
    yield from mock_terminal.run(
        agent, turn.session, rest, Await, lambda s: Sleep(time.monotonic() + s, True)
    )
    return None


STEP_VERBS: dict[str, Callable[[MockAgent, Turn, str], Step]] = {
    "tool": _tool,
    "cancel-request": _cancel_request,
    "elicit": _elicit,
    "read": _read,
    "write": _write,
    "terminal": _terminal,
}
