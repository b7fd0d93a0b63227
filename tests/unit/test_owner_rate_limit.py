"""The owner's rate-limit state (``status``'s ``rateLimit``), fed the frames claude sent."""

from __future__ import annotations

from typing import Any

from tether.errors import agent_request_error
from tether.owner.rate_limit import RateLimitWatch


def usage(info: Any) -> dict[str, Any]:
    update = {
        "sessionUpdate": "usage_update",
        "used": 12141,
        "size": 1000000,
        "_meta": {"_claude/rateLimit": info, "_claude/model": "claude-sonnet-5-5"},
    }
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": update},
    }


REJECTED = {
    "status": "rejected",
    "resetsAt": 1795446982,
    "rateLimitType": "five_hour",
    "isUsingOverage": False,
}
ERROR = {
    "code": -32603,
    "message": "Internal error: You've hit your 5-hour limit \u00b7 resets 3:16pm (UTC)",
    "data": {"errorKind": "rate_limit"},
}


def test_refused_turn_takes_reset_time_from_usage_data() -> None:
    watch = RateLimitWatch()
    assert watch.snapshot()["limited"] is False
    watch.note_frame(usage(REJECTED))
    exc = agent_request_error("session/prompt", ERROR)
    watch.note_refused(exc, 1000.0)
    assert exc.fields["resets_at"] == 1795446982
    assert exc.fields["limit_type"] == "five_hour"
    snap = watch.snapshot()
    assert snap["limited"] is True
    assert snap["resetsAt"] == 1795446982
    assert snap["resets"] == "3:16pm (UTC)"
    assert snap["since"] == 1000.0
    watch.note_turn_ok()
    assert watch.snapshot()["limited"] is False
    assert watch.snapshot()["reported"]["status"] == "rejected"  # the agent's last word


def test_a_warning_is_reported_but_not_a_limit() -> None:
    watch = RateLimitWatch()
    watch.note_frame(usage({**REJECTED, "status": "allowed_warning", "utilization": 0.93}))
    assert watch.snapshot()["limited"] is False
    assert watch.snapshot()["reported"]["utilization"] == 0.93
    exc = agent_request_error("session/prompt", ERROR)
    watch.note_refused(exc, 5.0)  # no rejected usage data: no invented reset time
    assert "resets_at" not in exc.fields
    assert watch.snapshot()["resets"] == "3:16pm (UTC)"


def test_other_frames_and_bad_meta_are_ignored() -> None:
    watch = RateLimitWatch()
    watch.note_frame({"jsonrpc": "2.0", "method": "session/update", "params": None})
    watch.note_frame(usage("not a dict"))
    chunk = usage(REJECTED)
    chunk["params"]["update"]["sessionUpdate"] = "agent_message_chunk"
    watch.note_frame(chunk)
    assert watch.snapshot()["reported"] is None
    watch.note_frame(usage({**REJECTED, "resetsAt": True}))
    assert watch.snapshot()["reported"]["resetsAt"] is None


def test_hold_for_counts_down_to_a_known_reset_only() -> None:
    watch = RateLimitWatch()
    assert watch.hold_for(1000.0) == 0.0  # not limited
    exc = agent_request_error("session/prompt", ERROR)
    watch.note_refused(exc, 1000.0)
    assert watch.hold_for(1000.0) == 0.0  # limited, but no reset time known
    watch.note_frame(usage({**REJECTED, "resetsAt": 1060}))
    exc = agent_request_error("session/prompt", ERROR)
    watch.note_refused(exc, 1000.0)
    assert watch.hold_for(1000.0) == 60.0
    assert watch.hold_for(1075.0) == 0.0  # past the reset
    watch.holding = "r1"
    assert watch.snapshot()["holding"] == "r1"
    watch.note_turn_ok()
    assert watch.hold_for(1000.0) == 0.0
