"""ACP's newer methods against the current adapters, through Tether's owner (issue 14
item 2): claude-agent-acp 0.101.0 and codex-acp 2.6.0 against the loopback fakes.

- ``sessions fork`` on both adapters: the fork is warm at once (its own owner and agent),
  its first turn carries the parent's conversation to the model, and the two branches
  then diverge (the parent's next turn does not see the fork's).
- claude: ``sessions list --agent-sessions`` (``session/list``) shows both conversations;
  ``sessions close --discard`` (``session/delete``) removes one from that list;
  ``sessions new --resume-session ID`` attaches a new Tether session to the parent's
  conversation; ``status`` carries the agent's ``usage_update`` and its title
  (``session_info_update``); ``logout``.
- claude and codex: a turn abandoned at its ``--timeout`` gets ``session/cancel`` and
  ``$/cancel_request``; the agent answers it ``cancelled`` and the next turn is served by
  the same warm agent.
- Every frame Tether sent (from the sessions' journals) validates against the stable v1
  schema; ``session/fork`` is not in it (unstable), so its params are checked as
  ``session/new``'s plus ``sessionId``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.acp_schema import schema_errors, validate_def
from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.fake_openai import FakeOpenAI
from tests.realagents.test_owner_real import (
    Cli,
    Timing,
    close_and_prove,
    owner_session,
    tether_env,
    wait_until,
)

pytestmark = pytest.mark.realagents


def journal(cli: Cli, *name: str) -> list[dict[str, Any]]:
    """The session's journal entries (``sessions export``)."""
    out = cli.ok("--format", "json", "sessions", "export", *name).out
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def sent_frames(cli: Cli, *name: str) -> list[dict[str, Any]]:
    return [
        e["frame"]
        for e in journal(cli, *name)
        if e.get("kind") == "acp" and e.get("direction") == "out"
    ]


def assert_sent_frames_validate(frames: list[dict[str, Any]]) -> None:
    """Requests and notifications Tether sent validate (answers to the agent's requests
    too); session/fork's params are session/new's plus the session to fork."""
    for frame in frames:
        if frame.get("method") == "session/fork":
            params = dict(frame["params"])
            assert isinstance(params.pop("sessionId"), str)
            assert validate_def("NewSessionRequest", params) == [], frame
        elif "method" in frame:
            assert schema_errors(frame, "client") == [], frame


def fork(cli: Cli, name: str, timing: Timing, label: str) -> dict[str, Any]:
    ran = cli.ok("--format", "json", "sessions", "fork", name, timeout=90)
    timing(f"owner: {label} sessions fork (wall, starts the fork's agent)", ran.secs)
    forked = ran.json_last()
    assert forked["action"] == "session_forked", forked
    return forked


def body_text(body: Any) -> str:
    return json.dumps(body)


def turn_asking(fake: FakeOpenAI, text: str) -> Any:
    """The Responses request whose last user message is ``text`` (codex may send others)."""
    from tests.realagents.fake_openai import last_user_text

    found = [r for r in fake.response_requests() if last_user_text(r.body) == text]
    assert found, [last_user_text(r.body) for r in fake.response_requests()]
    return found[0]


def test_claude_fork_list_discard_resume_usage_logout(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli):
        assert cli.ok("--format", "quiet", "prompt", "alpha one", timeout=60).out.strip() == (
            "fake-claude: alpha one"
        )
        parent = cli.status()
        # usage_update (and, once claude has titled the session, session_info_update).
        assert parent["sessionInfo"]["usage"]["used"] > 0, parent["sessionInfo"]
        assert parent["sessionInfo"]["usage"]["size"] > 0
        wait_until(lambda: cli.status()["sessionInfo"]["title"] is not None, 30, "claude's title")

        forked = fork(cli, "fork1", record_timing, "claude")
        try:
            assert forked["acpSessionId"] != parent["acpSessionId"]
            assert forked["forkedFrom"]["acpSessionId"] == parent["acpSessionId"]
            child = cli.ok("--format", "json", "status", "-s", "fork1").json_last()
            assert isinstance(child["agentPid"], int)
            assert child["agentPid"] != parent["agentPid"]

            before = len(fake_anthropic.message_requests())
            ran = cli.ok("--format", "quiet", "prompt", "-s", "fork1", "beta two", timeout=60)
            assert ran.out.strip() == "fake-claude: beta two"
            fork_turn = fake_anthropic.message_requests()[before].body
            assert "alpha one" in body_text(fork_turn)  # the fork continues the conversation

            before = len(fake_anthropic.message_requests())
            assert cli.ok("--format", "quiet", "prompt", "gamma three").out.strip() == (
                "fake-claude: gamma three"
            )
            parent_turn = fake_anthropic.message_requests()[before].body
            assert "alpha one" in body_text(parent_turn)
            assert "beta two" not in body_text(parent_turn)  # the branches diverged

            listed = cli.ok("--format", "json", "sessions", "list", "--agent-sessions")
            ids = [s["sessionId"] for s in listed.json_last()["sessions"]]
            assert {parent["acpSessionId"], forked["acpSessionId"]} <= set(ids), ids

            assert_sent_frames_validate(sent_frames(cli, "fork1"))
            discarded = cli.ok(
                "--format", "json", "sessions", "close", "fork1", "--discard"
            ).json_last()
            assert discarded["discarded"] is True, discarded
            assert discarded["survivors"] == []
            listed = cli.ok("--format", "json", "sessions", "list", "--agent-sessions")
            ids = [s["sessionId"] for s in listed.json_last()["sessions"]]
            assert forked["acpSessionId"] not in ids
            assert parent["acpSessionId"] in ids
        finally:
            cli.run("sessions", "close", "fork1")
        assert_sent_frames_validate(sent_frames(cli))
        close_and_prove(cli, record_timing, "claude (forked)", min_below_agent=1)

    # A new Tether session attached to the closed session's conversation.
    attached = cli.ok(
        "--format",
        "json",
        "sessions",
        "new",
        "attached",
        "--resume-session",
        parent["acpSessionId"],
        timeout=90,
    ).json_last()
    try:
        assert attached["acpSessionId"] == parent["acpSessionId"]
        before = len(fake_anthropic.message_requests())
        cli.ok("--format", "quiet", "prompt", "-s", "attached", "delta four", timeout=60)
        resumed_turn = body_text(fake_anthropic.message_requests()[before].body)
        assert "gamma three" in resumed_turn
        assert "beta two" not in resumed_turn
        assert_sent_frames_validate(sent_frames(cli, "attached"))
    finally:
        cli.run("sessions", "close", "attached")

    assert cli.ok("--format", "json", "logout").json_last()["action"] == "logged_out"


def test_codex_fork_continues_the_conversation(
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(codex_agent_cmd[0], tether_env(codex_agent_env), project_dir)
    with owner_session(cli):
        assert cli.ok("--format", "quiet", "prompt", "alpha one", timeout=60).out.strip() == (
            "fake-codex: alpha one"
        )
        parent = cli.status()
        assert parent["sessionInfo"]["usage"]["used"] > 0, parent["sessionInfo"]
        forked = fork(cli, "fork1", record_timing, "codex 2.6")
        try:
            assert forked["acpSessionId"] != parent["acpSessionId"]
            ran = cli.ok("--format", "quiet", "prompt", "-s", "fork1", "beta two", timeout=60)
            assert ran.out.strip() == "fake-codex: beta two"
            fork_turn = body_text(turn_asking(fake_openai, "beta two").body)
            assert "alpha one" in fork_turn  # the fork continues the conversation
            cli.ok("--format", "quiet", "prompt", "gamma three", timeout=60)
            parent_turn = body_text(turn_asking(fake_openai, "gamma three").body)
            assert "beta two" not in parent_turn  # the branches diverged
            assert_sent_frames_validate(sent_frames(cli, "fork1"))
        finally:
            cli.run("sessions", "close", "fork1")
        close_and_prove(cli, record_timing, "codex 2.6 (forked)", min_below_agent=1)


@pytest.mark.parametrize("adapter", ["claude", "codex"])
def test_abandoned_turn_gets_cancel_request_and_the_agent_answers(
    adapter: str,
    request: pytest.FixtureRequest,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    """``prompt --timeout`` on a stalled turn: Tether abandons it (exit 3) with
    ``session/cancel`` then ``$/cancel_request`` naming it; the agent answers it (dropped
    as stale) and the next turn runs on the same agent."""
    cmd = request.getfixturevalue(f"{adapter}_agent_cmd")
    env = request.getfixturevalue(f"{adapter}_agent_env")
    cli = Cli(cmd[0], tether_env(env), project_dir)
    with owner_session(cli):
        cli.ok("--format", "quiet", "prompt", "warm up", timeout=60)
        pid = cli.status()["agentPid"]
        timed_out = cli.run("--timeout", "3", "prompt", "HANG here", timeout=60)
        assert timed_out.rc == 3, timed_out.err
        ran = cli.ok("--format", "quiet", "prompt", "after", timeout=60)
        assert ran.out.strip().endswith("after")
        assert cli.status()["agentPid"] == pid
        entries = journal(cli)
        frames = [(e["direction"], e["frame"]) for e in entries if e.get("kind") == "acp"]
        out = [f for d, f in frames if d == "out"]
        methods = [f.get("method") for f in out]
        assert "session/cancel" in methods
        assert "$/cancel_request" in methods
        assert methods.index("session/cancel") < methods.index("$/cancel_request")
        cancel = out[methods.index("$/cancel_request")]
        stalled = next(
            f
            for f in out
            if f.get("method") == "session/prompt" and "HANG" in json.dumps(f["params"])
        )
        assert cancel["params"] == {"requestId": stalled["id"]}
        # The agent's late answer is dropped as stale before anyone sees it; that it came
        # shows in the next turn: it ran on the same agent. Had the agent not answered
        # the abandoned prompt, the next turn would have retired this run and started a
        # new agent (AgentUnresponsive) after the grace.
        assert_sent_frames_validate(out)
