"""Pure client-side pieces: permission policy, fs confinement, CLI grammar, output, errors."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import errors
from tether.acp import policy
from tether.cli._parse import parse
from tether.cli.output import Output
from tether.events import (
    AgentMessageChunk,
    AgentNotification,
    Plan,
    SessionUpdate,
    ToolCall,
    event_from_frame,
)

OPTIONS = [
    {"optionId": "a1", "name": "Allow", "kind": "allow_once"},
    {"optionId": "a2", "name": "Always", "kind": "allow_always"},
    {"optionId": "r1", "name": "Reject", "kind": "reject_once"},
]


@pytest.mark.parametrize(
    ("mode", "kind", "decision"),
    [
        pytest.param(
            policy.PermissionMode.APPROVE_ALL, "execute", policy.Decision.ALLOW, id="all-exec"
        ),
        pytest.param(
            policy.PermissionMode.DENY_ALL, "read", policy.Decision.REJECT, id="deny-read"
        ),
        pytest.param(
            policy.PermissionMode.APPROVE_READS, "read", policy.Decision.ALLOW, id="reads-read"
        ),
        pytest.param(
            policy.PermissionMode.APPROVE_READS, "search", policy.Decision.ALLOW, id="reads-search"
        ),
        pytest.param(
            policy.PermissionMode.APPROVE_READS, "edit", policy.Decision.ASK, id="reads-edit"
        ),
        pytest.param(
            policy.PermissionMode.APPROVE_READS, None, policy.Decision.ASK, id="reads-none"
        ),
    ],
)
def test_permission_decisions(
    mode: policy.PermissionMode, kind: str | None, decision: policy.Decision
) -> None:
    """Each permission mode decides by the tool call's kind."""
    assert policy.decide(mode, {"kind": kind}) is decision


def test_options_are_picked_by_kind_not_name() -> None:
    """Options are chosen by kind; with no matching kind the answer is `cancelled`."""
    assert policy.outcome_for(policy.Decision.ALLOW, OPTIONS)["outcome"]["optionId"] == "a1"
    assert policy.outcome_for(policy.Decision.REJECT, OPTIONS)["outcome"]["optionId"] == "r1"
    only_always = [{"optionId": "x", "kind": "allow_always"}]
    assert policy.outcome_for(policy.Decision.ALLOW, only_always)["outcome"]["optionId"] == "x"
    assert policy.outcome_for(policy.Decision.REJECT, only_always) == {
        "outcome": {"outcome": "cancelled"}
    }


def test_confine_refuses_escapes(tmp_path: Path) -> None:
    """Paths must be absolute and resolve (symlinks followed) inside the workspace."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "ok.txt").write_text("x")
    (tmp_path / "out.txt").write_text("y")
    (root / "link").symlink_to(tmp_path / "out.txt")
    assert policy.confine(root, str(root / "ok.txt")) == (root / "ok.txt").resolve()
    assert policy.confine(root, str(root / "new" / "file.txt")).name == "file.txt"
    for bad in ("ok.txt", str(root / ".." / "out.txt"), str(root / "link"), "", None, 3):
        with pytest.raises(policy.PathRefused):
            policy.confine(root, bad)


def test_slice_lines_is_one_based() -> None:
    """`line` and `limit` select lines 1-based, as ACP says."""
    text = "a\nb\nc\nd\n"
    assert policy.slice_lines(text, None, None) == text
    assert policy.slice_lines(text, 2, 2) == "b\nc\n"
    assert policy.slice_lines(text, 3, None) == "c\nd\n"


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        pytest.param(
            ["mock", "exec", "hi", "there"],
            {"command": "exec", "agent": "mock", "words": ["hi", "there"]},
            id="agent-exec",
        ),
        pytest.param(["exec", "hi"], {"command": "exec", "agent": None}, id="default-agent"),
        pytest.param(
            ["mock", "hello"],
            {"command": "prompt", "agent": "mock", "words": ["hello"]},
            id="implicit",
        ),
        pytest.param(
            ["just", "text"],
            {"command": "prompt", "agent": None, "words": ["just", "text"]},
            id="implicit-default",
        ),
        pytest.param(
            ["--agent", "node a.js", "prompt", "-s", "x", "--no-wait", "go"],
            {"agent_cmd": "node a.js", "session": "x", "no_wait": True},
            id="prompt-opts",
        ),
        pytest.param(
            ["mock", "sessions"],
            {"command": "sessions", "subcommand": "list"},
            id="sessions-default",
        ),
        pytest.param(
            ["mock", "sessions", "close", "work"],
            {"subcommand": "close", "session": "work"},
            id="sessions-close-name",
        ),
        pytest.param(
            ["--timeout=1.5", "--format", "json", "mock", "status"],
            {"timeout": 1.5, "format": "json"},
            id="inline-values",
        ),
        pytest.param(
            ["mock", "exec", "--", "--not-a-flag"], {"words": ["--not-a-flag"]}, id="literal"
        ),
        pytest.param(
            ["mock", "set", "model", "big"], {"command": "set", "words": ["model", "big"]}, id="set"
        ),
    ],
)
def test_parse_grammar(argv: list[str], expect: dict[str, object]) -> None:
    """The acpx grammar: optional agent, command, options anywhere, implicit prompt."""
    inv = parse(argv, lambda token, _cwd=None: token == "mock")
    for key, value in expect.items():
        assert getattr(inv, key) == value, key


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="empty"),
        pytest.param(["--approve-all", "--deny-all", "exec", "x"], id="exclusive"),
        pytest.param(["--format", "yaml", "exec"], id="format"),
        pytest.param(["--timeout", "soon", "exec"], id="timeout"),
        pytest.param(["--agent", "x", "mock", "exec"], id="agent-twice"),
        pytest.param(["mock", "sessions", "frobnicate"], id="sessions-sub"),
        pytest.param(["--cwd"], id="missing-value"),
        pytest.param(["--wat", "exec"], id="unknown"),
    ],
)
def test_parse_usage_errors(argv: list[str]) -> None:
    """Bad command lines are usage errors (exit 2)."""
    with pytest.raises(errors.UsageError) as info:
        parse(argv, lambda token, _cwd=None: token == "mock")
    assert info.value.exit_code == 2


def _update(update_kind: str, **fields: object) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": {"sessionUpdate": update_kind, **fields}},
    }


def test_text_output_renders_updates() -> None:
    """Text output streams message text and renders tool calls, plans and the stop reason."""
    out, err = io.StringIO(), io.StringIO()
    o = Output("text", stdout=out, stderr=err)
    o.frame("in", _update("agent_message_chunk", content={"type": "text", "text": "hel"}))
    o.frame("in", _update("agent_message_chunk", content={"type": "text", "text": "lo"}))
    o.frame(
        "in", _update("tool_call", toolCallId="t", title="Run ls", kind="execute", status="pending")
    )
    o.frame("in", _update("tool_call_update", toolCallId="t", status="completed"))
    o.frame(
        "in",
        _update("plan", entries=[{"content": "do it", "priority": "high", "status": "completed"}]),
    )
    o.frame("in", _update("mock_future_kind"))
    o.done("end_turn")
    assert out.getvalue() == (
        "hello\n[tool] Run ls (execute) pending\n[tool] Run ls completed\n"
        "[plan]\n  [x] do it\n[done] end_turn\n"
    )


def test_json_output_is_raw_frames_and_envelopes() -> None:
    """JSON output prints frames unchanged and errors as JSON-RPC envelopes with acpxCode."""
    out, err = io.StringIO(), io.StringIO()
    o = Output("json", stdout=out, stderr=err, json_strict=True)
    frame = _update("whatever", extra={"x": 1})
    o.frame("in", frame)
    o.error(errors.PromptTimeout("too slow"))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0] == frame
    assert lines[1]["error"]["data"]["acpxCode"] == "TIMEOUT"
    assert err.getvalue() == ""  # --json-strict keeps stderr clean


def test_errors_round_trip_and_keep_exit_codes() -> None:
    """Errors survive the IPC hop (and pickling) as the same class with their fields."""
    for exc in (
        errors.NoSession("none", session_key="k"),
        errors.QueueOverloaded("full"),
        errors.PromptTimeout("slow", session_id="s"),
        errors.AgentExited("died", exit_code=3, signal=None),
        errors.PermissionDenied("no"),
    ):
        back = errors.error_from_wire(json.loads(json.dumps(exc.to_wire())))
        assert type(back) is type(exc)
        assert back.fields == exc.fields
        assert back.exit_code == exc.exit_code
        assert type(pickle.loads(pickle.dumps(exc))) is type(exc)
    assert errors.QueueOverloaded("x").retryable is True
    assert isinstance(errors.HandshakeTimeout("x"), TimeoutError)
    assert errors.error_from_wire({"type": "Nope", "message": "m"}).__class__ is errors.TetherError


def test_events_are_typed_and_keep_unknown_kinds() -> None:
    """Frames become typed events; unknown kinds and extension notifications are kept raw."""
    assert isinstance(
        event_from_frame(_update("agent_message_chunk", content={"type": "text", "text": "x"})),
        AgentMessageChunk,
    )
    call = event_from_frame(_update("tool_call", toolCallId="t", title="T", kind="read"))
    assert isinstance(call, ToolCall)
    assert call.tool_kind == "read"
    assert isinstance(event_from_frame(_update("plan", entries=[{"content": "a"}])), Plan)
    unknown = event_from_frame(_update("brand_new", foo=1))
    assert type(unknown) is SessionUpdate
    assert unknown.kind == "brand_new"
    ext = event_from_frame({"jsonrpc": "2.0", "method": "_vendor/ping", "params": {}})
    assert isinstance(ext, AgentNotification)
    assert event_from_frame({"jsonrpc": "2.0", "id": 1, "result": {}}) is None


@given(st.lists(st.text(max_size=8), max_size=6))
def test_parse_never_crashes(argv: list[str]) -> None:
    """Any command line parses or raises UsageError, nothing else."""
    try:
        parse(argv, lambda token, _cwd=None: token == "mock")
    except errors.UsageError:
        pass


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), max_size=6), max_size=5
    )
)
def test_split_command_matches_shlex(words: list[str]) -> None:
    """Agent commands split exactly as shlex.split would split them."""
    import shlex

    from tether.agents import split_command

    command = " ".join(words)
    try:
        expected = shlex.split(command)
    except ValueError:
        return  # unbalanced quotes: shlex's own error is what the user sees
    assert split_command(command) == expected
