"""Provider limits reported by today's adapters become a typed, retryable ``RateLimited``.

The error objects are the ones claude-agent-acp 0.101.0 and codex-acp 2.6.0 really sent in
the realagents tier (fake model APIs answering 429), byte for byte.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from tether.errors import AgentRequestError, RateLimited, agent_request_error, error_from_wire

CLAUDE_SUBSCRIPTION = {
    "code": -32603,
    "message": "Internal error: You've hit your 5-hour limit \u00b7 resets 3:16pm (UTC)",
    "data": {"errorKind": "rate_limit"},
}
CLAUDE_SESSION_LIMIT = {  # the wording in issue 14 (older Claude Code)
    "code": -32603,
    "message": "You've hit your session limit \u00b7 resets 3:30am",
    "data": {"errorKind": "rate_limit"},
}
CLAUDE_API_KEY = {
    "code": -32603,
    "message": "Internal error: API Error: Request rejected (429) \u00b7 fake: rate limit reached",
    "data": {"errorKind": "rate_limit"},
}
CODEX_USAGE = {
    "code": -32603,
    "message": "Internal error",
    "data": {
        "message": "You\u2019ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore"
        "/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try"
        " again at 3:23 PM.",
        "codexErrorInfo": "usageLimitExceeded",
    },
}


@pytest.mark.parametrize(
    ("error", "resets", "kind"),
    [
        (CLAUDE_SUBSCRIPTION, "3:16pm (UTC)", "rate_limit"),
        (CLAUDE_SESSION_LIMIT, "3:30am", "rate_limit"),
        (CLAUDE_API_KEY, None, "rate_limit"),
        (CODEX_USAGE, "3:23 PM", "usageLimitExceeded"),
    ],
)
def test_adapter_limit_errors_map_to_rate_limited(
    error: dict[str, Any], resets: str | None, kind: str
) -> None:
    exc = agent_request_error("session/prompt", error)
    assert type(exc) is RateLimited
    assert isinstance(exc, AgentRequestError)  # existing handlers still catch it
    assert exc.fields["resets"] == resets
    assert exc.fields["limit_kind"] == kind
    assert exc.acp == error
    assert exc.retryable is True
    assert exc.exit_code == 6
    assert exc.to_wire()["code"] == "RATE_LIMITED"
    assert exc.to_wire()["detailCode"] == "RATE_LIMITED"


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32603, "message": "Internal error", "data": {"errorKind": "no_result"}},
        {"code": -32603, "message": "resets 3:30am, but no marker"},
        {"code": -32000, "message": "Authentication required"},
        {"code": -32603, "message": "x", "data": ["rate_limit"]},
        {"code": -32603, "message": "x", "data": {"errorKind": 429}},
    ],
)
def test_other_agent_errors_stay_plain(error: dict[str, Any]) -> None:
    exc = agent_request_error("session/prompt", error)
    assert type(exc) is AgentRequestError
    assert exc.exit_code == 1
    assert not exc.retryable
    assert "session/prompt failed" in str(exc)


def test_rate_limited_survives_the_wire_and_pickling() -> None:
    exc = agent_request_error("session/prompt", CLAUDE_SUBSCRIPTION)
    exc.fields["resets_at"] = 1795446982
    back = error_from_wire(exc.to_wire())
    assert type(back) is RateLimited
    assert back.fields == exc.fields
    assert back.acp == CLAUDE_SUBSCRIPTION
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is RateLimited
    assert again.fields["resets_at"] == 1795446982
