"""usage_update and session_info_update: kept for `status` (SessionInfoWatch) and typed
for the library (events); boolean config options typed by the agent's configOptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.acp_schema import schema_errors

from tether.errors import UsageError
from tether.events import SessionInfoUpdate, SessionUpdate, UsageUpdate, event_from_frame
from tether.owner.agent_jobs import config_value
from tether.owner.session_info import SessionInfoWatch

# Verbatim shapes from tests/realagents/NOTES.md (claude-agent-acp 0.101.0, codex-acp 2.6.0).
CLAUDE_USAGE = {
    "sessionUpdate": "usage_update",
    "used": 12207,
    "size": 1000000,
    "cost": {"amount": 0.049, "currency": "USD"},
}
CODEX_USAGE = {"sessionUpdate": "usage_update", "used": 14310, "size": 258400}
TITLE = {"sessionUpdate": "session_info_update", "title": "Fix the bug", "updatedAt": "2026-11-23"}
CODEX_STATUS = {
    "sessionUpdate": "session_info_update",
    "_meta": {"codex": {"threadStatus": {"type": "idle"}}},
}


def frame(update: dict[str, Any]) -> dict[str, Any]:
    out = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": update},
    }
    assert schema_errors(out, "agent") == []
    return out


def line(update: dict[str, Any]) -> bytes:
    return json.dumps(frame(update)).encode()


def test_the_watch_keeps_the_last_usage_and_merges_session_info() -> None:
    """Usage is replaced by each update; session info is merged field by field, and a
    field an update leaves out keeps its value."""
    watch = SessionInfoWatch()
    watch.note_line(line(CLAUDE_USAGE))
    watch.note_line(line(TITLE))
    watch.note_line(line(CODEX_STATUS))
    snap = watch.snapshot()
    assert snap == {
        "usage": {"used": 12207, "size": 1000000, "cost": {"amount": 0.049, "currency": "USD"}},
        "title": "Fix the bug",
        "updatedAt": "2026-11-23",
        "meta": {"codex": {"threadStatus": {"type": "idle"}}},
    }
    watch.note_line(line(CODEX_USAGE))
    watch.note_line(line({"sessionUpdate": "session_info_update", "title": None}))
    snap = watch.snapshot()
    assert snap["usage"] == {"used": 14310, "size": 258400, "cost": None}
    assert snap["title"] is None
    assert snap["updatedAt"] == "2026-11-23"
    assert watch.updates == 5


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"not json usage_update", id="not-json"),
        pytest.param(b'{"jsonrpc":"2.0","id":1,"result":{"x":"usage_update"}}', id="a-response"),
        pytest.param(b'{"method":"session/update","params":{"update":"usage_update"}}', id="bad"),
        pytest.param(
            line(
                {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
            ),
            id="other-kind",
        ),
    ],
)
def test_the_watch_ignores_everything_else(raw: bytes) -> None:
    """Lines that are not one of the two updates change nothing (and never raise)."""
    watch = SessionInfoWatch()
    watch.note_line(raw)
    assert watch.updates == 0
    assert watch.snapshot()["usage"] is None


def test_typed_events_for_the_library() -> None:
    """usage_update and session_info_update become UsageUpdate and SessionInfoUpdate
    (both SessionUpdates, the raw frame kept)."""
    usage = event_from_frame(frame(CLAUDE_USAGE))
    assert isinstance(usage, UsageUpdate)
    assert isinstance(usage, SessionUpdate)
    assert (usage.used, usage.size, usage.cost) == (12207, 1000000, CLAUDE_USAGE["cost"])
    info = event_from_frame(frame(TITLE))
    assert isinstance(info, SessionInfoUpdate)
    assert (info.title, info.updated_at, info.fields) == (
        "Fix the bug",
        "2026-11-23",
        ("title", "updatedAt"),
    )
    meta_only = event_from_frame(frame(CODEX_STATUS))
    assert isinstance(meta_only, SessionInfoUpdate)
    assert meta_only.fields == ("_meta",)
    assert meta_only.update["_meta"]["codex"]["threadStatus"] == {"type": "idle"}


OPTIONS = {
    "configOptions": [
        {"id": "model", "type": "select", "currentValue": "a", "options": []},
        {"id": "fast", "type": "boolean", "currentValue": False},
    ]
}


@pytest.mark.parametrize(
    ("config_id", "given", "sent"),
    [
        pytest.param("fast", "true", True, id="boolean-true"),
        pytest.param("fast", "FALSE", False, id="boolean-false"),
        pytest.param("fast", True, True, id="boolean-already"),
        pytest.param("model", "true", "true", id="select-keeps-the-word"),
        pytest.param("model", True, "true", id="select-gets-a-word"),
        pytest.param("unknown", "true", "true", id="unlisted-as-given"),
    ],
)
def test_config_values_follow_the_option_type(config_id: str, given: Any, sent: Any) -> None:
    """`tether set KEY true|false`: a boolean option gets a boolean, a select the word."""
    assert config_value(OPTIONS, config_id, given) == sent


def test_a_boolean_option_refuses_other_words() -> None:
    """`tether set fast maybe`: a usage error naming the option."""
    with pytest.raises(UsageError, match="fast is a boolean option"):
        config_value(OPTIONS, "fast", "maybe")
