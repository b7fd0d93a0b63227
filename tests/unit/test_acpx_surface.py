"""The CLI's acpx flags: parsing, --suppress-reads, [done] time, config masking, retries."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from tether.cli import _retry
from tether.cli._config_cmd import masked
from tether.cli._parse import parse
from tether.cli.output import SUPPRESSED, Output
from tether.errors import AgentRequestError, RateLimited, UsageError


def test_session_option_flags_parse() -> None:
    """Global --model/--allowed-tools/--max-turns/--system-prompt become session options."""
    inv = parse(
        ["--model", "m", "--allowed-tools", "Read, Grep", "--max-turns", "3", "mock", "exec", "x"]
    )
    assert inv.session_options() == {"model": "m", "allowedTools": ["Read", "Grep"], "maxTurns": 3}
    assert parse(["--allowed-tools", "", "exec", "x"]).allowed_tools == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-turns", "0", "exec", "x"], "at least 1"),
        (["--prompt-retries", "-1", "exec", "x"], "at least 0"),
        (["--auth-policy", "ask", "exec", "x"], "skip or fail"),
        (["--model", " ", "exec", "x"], "needs a model id"),
        (["--system-prompt", "", "exec", "x"], "needs text"),
        (["--append-system-prompt", "a", "--system-prompt", "b", "exec", "x"], "exclusive"),
        (["exec", "--config-option", "novalue", "x"], "KEY=VALUE"),
        (["config", "edit"], "show or init"),
        (["sessions", "import", "a.json"], "sessions read"),
        (["flow", "run", "f.json"], "tether prompt"),
    ],
)
def test_bad_or_refused_input_is_a_usage_error(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse(argv)


def test_config_options_repeat_in_order() -> None:
    inv = parse(["exec", "--config-option", "a=1", "--config-option=b=x=y", "t"])
    assert inv.config_options == [("a", "1"), ("b", "x=y")]


def _read_frames() -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "in",
            {"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file", "params": {"path": "/p"}},
        ),
        ("out", {"jsonrpc": "2.0", "id": 1, "result": {"content": "secret"}}),
        # the agent's answer to *our* request id 1 is not a file read
        ("in", {"jsonrpc": "2.0", "id": 1, "result": {"content": "kept"}}),
        (
            "in",
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "kind": "read"}
                },
            },
        ),
        (
            "in",
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "update": {
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": "c",
                        "rawOutput": "secret",
                        "content": [
                            {"type": "content", "content": {"type": "text", "text": "secret"}}
                        ],
                    }
                },
            },
        ),
    ]


def test_suppress_reads_hides_read_contents_and_nothing_else() -> None:
    """fs/read_text_file answers and read tool calls' contents are replaced in json."""
    stdout = io.StringIO()
    out = Output("json", suppress_reads=True, stdout=stdout)
    for direction, frame in _read_frames():
        out.frame(direction, frame)
    lines = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert "secret" not in stdout.getvalue()
    assert lines[1]["result"]["content"] == SUPPRESSED
    assert lines[2]["result"]["content"] == "kept"
    assert "rawOutput" not in lines[4]["params"]["update"]


def test_without_the_flag_frames_are_unchanged() -> None:
    stdout = io.StringIO()
    out = Output("json", stdout=stdout)
    for direction, frame in _read_frames():
        out.frame(direction, frame)
    assert [json.loads(x) for x in stdout.getvalue().splitlines()] == [f for _, f in _read_frames()]


def test_done_shows_the_elapsed_time() -> None:
    stdout = io.StringIO()
    Output("text", stdout=stdout).done("end_turn", 1.234)
    assert stdout.getvalue() == "[done] end_turn (1.2 s)\n"


def test_config_show_masks_secrets_but_names_them() -> None:
    cfg = {
        "auth": {"api-key": "sk-1"},
        "mcpServers": [{"name": "s", "env": [{"name": "TOKEN", "value": "t"}], "headers": []}],
        "ttl": 5.0,
    }
    shown = masked(cfg)
    assert shown["auth"] == {"api-key": "***"}
    assert shown["mcpServers"][0]["env"] == [{"name": "TOKEN", "value": "***"}]
    assert shown["ttl"] == 5.0
    assert cfg["auth"] == {"api-key": "sk-1"}  # the loaded config is left alone


def test_only_transient_failures_before_any_work_are_retried() -> None:
    internal = AgentRequestError("boom", acp={"code": -32603, "message": "boom"})
    assert _retry.retryable(internal, updates_seen=0)
    assert not _retry.retryable(internal, updates_seen=1)
    assert not _retry.retryable(AgentRequestError("x", acp={"code": -32602}), updates_seen=0)
    assert not _retry.retryable(RateLimited("limit", acp={"code": -32603}), updates_seen=0)
    assert [_retry.delay(n) for n in range(5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
