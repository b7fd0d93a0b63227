"""Probe real ACP agents with the raw NDJSON driver, offline.

What these pin down (and what Tether's client must cope with):

- claude-agent-acp against the loopback fake Messages API: streamed
  ``agent_message_chunk`` + ``end_turn``; a scripted Bash tool use asks
  ``session/request_permission``; allow really runs the command, reject/cancelled do not;
  ``session/cancel`` while that permission request is still open ends the turn
  ``cancelled``, and 0.101.0 withdraws its request with ``$/cancel_request``.
- claude-agent-acp and codex-acp 2.6.0 advertise fork, list, resume, close and delete.
- codex-acp 2.6.0 against the loopback fake Responses API: a streamed turn, and a stalled
  one cancelled, after which the session goes on.
- codex-acp 0.16.0 (legacy): env-var auth, a prompt that hangs against a black-hole
  provider, and ``session/cancel`` -> ``cancelled``.
- the official Python SDK's example echo agent echoes.

Every frame the driver sends is schema-validated (an invalid one raises); frames from the
agents that do not validate are collected and shown in the terminal summary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import _tiers
from tests.acp_schema import schema_errors
from tests.realagents import install
from tests.realagents.blackhole import BlackHole
from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.fake_openai import FakeOpenAI
from tests.realagents.rawdriver import Frame, RawAgent

pytestmark = pytest.mark.realagents

INIT_PARAMS: dict[str, Any] = {
    "protocolVersion": 1,
    "clientCapabilities": {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
    },
    "clientInfo": {"name": "tether-rawdriver", "title": "Tether raw probe", "version": "0.1.0"},
}

TOOL_PROMPT = 'TOOL:Bash:{"command":"echo hi > out.txt","description":"write out.txt"}'

Timing = Callable[[str, float], None]
StartAgent = Callable[..., RawAgent]


def ok(frame: Frame) -> Any:
    assert "error" not in frame, f"agent answered with an error: {frame}"
    return frame["result"]


def timed_call(
    agent: RawAgent, method: str, params: dict[str, Any], timeout: float
) -> tuple[Frame, float]:
    t0 = time.monotonic()
    frame = agent.call(method, params, timeout)
    return frame, time.monotonic() - t0


def handshake(
    agent: RawAgent, cwd: Path, record: Timing, label: str, auth: str | None = None
) -> str:
    init, dt = timed_call(agent, "initialize", INIT_PARAMS, 30)
    record(f"{label} initialize", dt)
    record(f"{label} spawn->initialize", time.monotonic() - agent.started_at)
    assert ok(init)["protocolVersion"] == 1
    if auth is not None:
        methods = [m["id"] for m in ok(init).get("authMethods", [])]
        assert auth in methods
        res, dt = timed_call(agent, "authenticate", {"methodId": auth}, 30)
        record(f"{label} authenticate", dt)
        ok(res)
    new, dt = timed_call(agent, "session/new", {"cwd": str(cwd), "mcpServers": []}, 30)
    record(f"{label} session/new", dt)
    sid = ok(new)["sessionId"]
    assert isinstance(sid, str)
    assert sid
    return sid


def prompt_params(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def is_permission_request(frame: Frame) -> bool:
    return frame.get("method") == "session/request_permission" and "id" in frame


def option_by_kind(perm: Frame, kind: str) -> str:
    for opt in perm["params"]["options"]:
        if opt["kind"] == kind:
            return str(opt["optionId"])
    raise AssertionError(f"no {kind} option in {perm['params']['options']}")


# --- claude-agent-acp --------------------------------------------------------------------


def test_claude_plain_turn_streams_chunks_and_ends_turn(
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(claude_agent_cmd, env=claude_agent_env)
    sid = handshake(agent, project_dir, record_timing, "claude")

    resp, dt = timed_call(agent, "session/prompt", prompt_params(sid, "hello tether"), 60)
    record_timing("claude prompt (canned text)", dt)
    assert ok(resp)["stopReason"] == "end_turn"
    chunks = list(agent.updates("agent_message_chunk"))
    assert chunks, "no agent_message_chunk streamed"
    assert all(c["content"]["type"] == "text" for c in chunks)
    assert agent.agent_text() == "fake-claude: hello tether"
    # Every chunk arrived before the prompt response that ends the turn.
    frames = agent.frames()
    resp_at = frames.index(resp)
    chunk_at = [
        i
        for i, f in enumerate(frames)
        if f.get("method") == "session/update"
        and f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
    ]
    assert max(chunk_at) < resp_at

    calls = fake_anthropic.message_requests()
    assert calls, "the agent never called the fake Messages API"
    assert all(c.query.get("beta") == ["true"] for c in calls)
    assert all(c.body.get("stream") is True for c in calls)
    assert fake_anthropic.unknown_paths == []


@pytest.mark.parametrize("answer", ["allow_once", "allow_always"])
def test_claude_tool_permission_allowed_runs_the_command(
    answer: str,
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(claude_agent_cmd, env=claude_agent_env)
    sid = handshake(agent, project_dir, record_timing, "claude")

    t0 = time.monotonic()
    rid = agent.request("session/prompt", prompt_params(sid, TOOL_PROMPT))
    perm = agent.wait_for(is_permission_request, 60)
    record_timing("claude prompt->request_permission", time.monotonic() - t0)
    assert perm["params"]["sessionId"] == sid
    assert perm["params"]["toolCall"]["kind"] == "execute"
    # tool_call (pending) is announced before the permission request
    assert any(u["sessionUpdate"] == "tool_call" for u in agent.updates())
    assert not (project_dir / "out.txt").exists()

    agent.respond(
        perm["id"], {"outcome": {"outcome": "selected", "optionId": option_by_kind(perm, answer)}}
    )
    resp = agent.wait_response(rid, 60)
    assert ok(resp)["stopReason"] == "end_turn"
    assert (project_dir / "out.txt").read_text().strip() == "hi"
    assert "fake-claude: tool result ok" in agent.agent_text()
    statuses = [
        u.get("status") for u in agent.updates("tool_call_update") if u.get("status") is not None
    ]
    assert "completed" in statuses


@pytest.mark.parametrize("answer", ["reject_once", "cancelled"])
def test_claude_tool_permission_refused_does_not_run(
    answer: str,
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(claude_agent_cmd, env=claude_agent_env)
    sid = handshake(agent, project_dir, record_timing, "claude")

    rid = agent.request("session/prompt", prompt_params(sid, TOOL_PROMPT))
    perm = agent.wait_for(is_permission_request, 60)
    if answer == "cancelled":
        outcome: dict[str, Any] = {"outcome": "cancelled"}
    else:
        outcome = {"outcome": "selected", "optionId": option_by_kind(perm, answer)}
    agent.respond(perm["id"], {"outcome": outcome})
    resp = agent.wait_response(rid, 60)

    # The turn is not cancelled by a refused tool: the model sees an error tool_result.
    assert ok(resp)["stopReason"] == "end_turn"
    assert not (project_dir / "out.txt").exists()
    assert "fake-claude: tool result error" in agent.agent_text()
    results = [
        b
        for r in fake_anthropic.message_requests()
        for m in r.body.get("messages", [])
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert results
    assert results[-1].get("is_error") is True
    statuses = [
        u.get("status") for u in agent.updates("tool_call_update") if u.get("status") is not None
    ]
    assert "failed" in statuses


def test_claude_cancel_while_permission_pending(
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(claude_agent_cmd, env=claude_agent_env)
    sid = handshake(agent, project_dir, record_timing, "claude")

    rid = agent.request("session/prompt", prompt_params(sid, TOOL_PROMPT))
    perm = agent.wait_for(is_permission_request, 60)

    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    seen_after_cancel: list[Frame] = []

    def done(f: Frame) -> bool:
        seen_after_cancel.append(f)
        return "method" not in f and f.get("id") == rid

    resp = agent.wait_for(done, 30)
    record_timing("claude cancel->cancelled (permission pending)", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "cancelled"
    # 0.101.0 withdraws its open permission request with `$/cancel_request` (0.49.0 never
    # did, so a client had to close it out itself).
    withdrawn = [
        f
        for f in seen_after_cancel
        if f.get("method") == "$/cancel_request" and f["params"].get("requestId") == perm["id"]
    ]
    assert len(withdrawn) == 1, seen_after_cancel
    # The client still answers the request (cancelled): a late answer is harmless.
    agent.respond(perm["id"], {"outcome": {"outcome": "cancelled"}})
    agent.drain(0.3)
    assert not (project_dir / "out.txt").exists()

    # The session survives a cancelled turn.
    resp = agent.call("session/prompt", prompt_params(sid, "still there?"), 60)
    assert ok(resp)["stopReason"] == "end_turn"
    assert "fake-claude: still there?" in agent.agent_text()
    # Quirk: the interrupted tool use is closed in the *next* model request, which carries
    # a synthetic is_error tool_result next to the new prompt text.
    last = fake_anthropic.message_requests()[-1].body["messages"][-1]["content"]
    kinds = [b.get("type") for b in last]
    assert "tool_result" in kinds
    assert next(b for b in last if b.get("type") == "tool_result").get("is_error") is True


def test_claude_cancel_mid_stream(
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    """The fake holds the SSE stream open after message_start; cancel must still end it."""
    agent = raw_agent(claude_agent_cmd, env=claude_agent_env)
    sid = handshake(agent, project_dir, record_timing, "claude")

    rid = agent.request("session/prompt", prompt_params(sid, "please HANG now"))
    deadline = time.monotonic() + 30
    while not any(r.reply_kind == "hang" for r in fake_anthropic.message_requests()):
        assert time.monotonic() < deadline, "the agent never reached the fake API"
        time.sleep(0.02)
    time.sleep(0.2)
    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    resp = agent.wait_response(rid, 30)
    record_timing("claude cancel->cancelled (mid-stream)", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "cancelled"


def test_claude_and_codex_advertise_the_newer_session_methods(
    raw_agent: StartAgent,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
) -> None:
    """Both current adapters advertise fork, list, resume, close and delete (issue 14)."""
    for cmd, env in ((claude_agent_cmd, claude_agent_env), (codex_agent_cmd, codex_agent_env)):
        agent = raw_agent(cmd, env=env)
        caps = ok(agent.call("initialize", INIT_PARAMS, 30))["agentCapabilities"]
        assert {"fork", "list", "resume", "close", "delete"} <= set(caps["sessionCapabilities"])
        assert caps["auth"] == {"logout": {}}
        assert caps["loadSession"] is True


# --- codex-acp 2.6.0 -----------------------------------------------------------------------


def test_codex_turn_against_fake_responses_api(
    raw_agent: StartAgent,
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    """A custom provider needs no ``authenticate``; a turn streams the fake's text."""
    agent = raw_agent(codex_agent_cmd, env=codex_agent_env, eof_grace_s=5.0)
    sid = handshake(agent, project_dir, record_timing, "codex 2.6")
    resp, dt = timed_call(agent, "session/prompt", prompt_params(sid, "hello codex"), 60)
    record_timing("codex 2.6 prompt (canned text)", dt)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text() == "fake-codex: hello codex"
    assert [r.reply_kind for r in fake_openai.response_requests()] == ["text"]
    assert fake_openai.unknown_paths == []
    # The thread's status comes as session_info_update with codex's own _meta.
    assert any(u.get("_meta", {}).get("codex") for u in agent.updates("session_info_update"))
    assert any(u.get("used") for u in agent.updates("usage_update"))


def test_codex_hanging_turn_cancels_and_session_goes_on(
    raw_agent: StartAgent,
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(codex_agent_cmd, env=codex_agent_env, eof_grace_s=5.0)
    sid = handshake(agent, project_dir, record_timing, "codex 2.6")
    rid = agent.request("session/prompt", prompt_params(sid, "please HANG"))
    deadline = time.monotonic() + 30
    while not any(r.reply_kind == "hang" for r in fake_openai.response_requests()):
        assert time.monotonic() < deadline, "codex never reached the fake Responses API"
        time.sleep(0.02)
    with pytest.raises(TimeoutError):
        agent.wait_response(rid, 0.5)
    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    resp = agent.wait_response(rid, 30)
    record_timing("codex 2.6 cancel->cancelled (mid-stream)", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "cancelled"
    resp = agent.call("session/prompt", prompt_params(sid, "after"), 60)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text().endswith("fake-codex: after")


# --- codex-acp 0.16.0 (legacy) -------------------------------------------------------------


def test_codex_auth_then_hanging_prompt_cancels(
    raw_agent: StartAgent,
    codex_legacy_agent_cmd: list[str],
    codex_legacy_agent_env: dict[str, str],
    blackhole: BlackHole,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    # codex-acp 0.16.0 does not exit on stdin EOF at all: don't wait long for it.
    agent = raw_agent(codex_legacy_agent_cmd, env=codex_legacy_agent_env, eof_grace_s=0.5)
    sid = handshake(agent, project_dir, record_timing, "codex 0.16", auth="openai-api-key")

    rid = agent.request("session/prompt", prompt_params(sid, "hello codex"))
    assert blackhole.wait_for_connection(20), "codex never contacted its (black-hole) provider"
    # Hangs: no response while the provider is silent.
    with pytest.raises(TimeoutError):
        agent.wait_response(rid, 1.0)

    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    resp = agent.wait_response(rid, 30)
    record_timing("codex 0.16 cancel->cancelled", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "cancelled"


@pytest.mark.parametrize("provider", ["openai", "custom"])
def test_codex_session_new_before_authenticate(
    provider: str,
    raw_agent: StartAgent,
    codex_legacy_agent_cmd: list[str],
    codex_legacy_agent_env: dict[str, str],
    agent_home: Path,
    project_dir: Path,
) -> None:
    """With the built-in OpenAI provider, OPENAI_API_KEY in the env is not enough: codex-acp
    0.16.0 answers session/new with -32000 until `authenticate` names a method. With a
    custom model provider (our black hole) it needs no authenticate at all."""
    env = dict(codex_legacy_agent_env)
    if provider == "openai":
        env["CODEX_HOME"] = str(agent_home / ".codex-plain")
        Path(env["CODEX_HOME"]).mkdir()
    agent = raw_agent(codex_legacy_agent_cmd, env=env, eof_grace_s=0.2)
    ok(agent.call("initialize", INIT_PARAMS, 30))
    resp = agent.call("session/new", {"cwd": str(project_dir), "mcpServers": []}, 30)
    if provider == "openai":
        assert resp.get("error", {}).get("code") == -32000, resp
    else:
        assert ok(resp)["sessionId"]


# --- the official Python SDK's echo agent ------------------------------------------------


def test_sdk_echo_agent_echoes(
    raw_agent: StartAgent,
    sdk_echo_agent_cmd: list[str],
    sdk_echo_agent_env: dict[str, str],
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(sdk_echo_agent_cmd, env=sdk_echo_agent_env)
    sid = handshake(agent, project_dir, record_timing, "sdk-echo")
    params = {
        "sessionId": sid,
        "prompt": [{"type": "text", "text": "one"}, {"type": "text", "text": " two"}],
    }
    resp, dt = timed_call(agent, "session/prompt", params, 30)
    record_timing("sdk-echo prompt", dt)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text() == "one two"
    chunks = list(agent.updates("agent_message_chunk"))
    assert len(chunks) == 2
    assert chunks[0].get("_meta") == {"echo": True}


# --- the infrastructure itself -----------------------------------------------------------


def test_install_is_idempotent() -> None:
    first = install.ensure_installed()
    if isinstance(first, install.SkipReason):
        _tiers.unavailable("realagents", f"realagents: {first}")
    again = install.ensure_installed()
    assert not isinstance(again, install.SkipReason)
    assert set(again.components) == set(first.components)
    for comp in again.components.values():
        assert not comp.installed_now, f"{comp.name} was reinstalled"
        assert comp.path.exists()
    assert again.components.get("claude") is None or (
        again.components["claude"].version == install.CLAUDE_VERSION
    )


def test_schema_validation_catches_bad_frames() -> None:
    bad_init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "1"},
    }
    assert schema_errors(bad_init, "client")
    bad_stop = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "bogus"}}
    assert schema_errors(bad_stop, "agent", "session/prompt")
    good_stop = {"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}
    assert schema_errors(good_stop, "agent", "session/prompt") == []
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}
    assert schema_errors(cancel, "client") == []
    assert schema_errors({**cancel, "params": {}}, "client")


def test_engines_matcher() -> None:
    node20 = (20, 20, 2)
    assert install.engines_satisfied(None, node20)
    assert install.engines_satisfied(">=18.0.0", node20)
    assert not install.engines_satisfied(">=22", node20)
    assert install.engines_satisfied("^18 || ^20", node20)
    assert not install.engines_satisfied(">=18 <20", node20)
    assert not install.engines_satisfied("a weird range", node20)


def test_fake_anthropic_answers_and_records() -> None:
    import http.client

    with FakeAnthropic(max_lifetime_s=20) as api:
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
        conn.request("HEAD", "/")
        r = conn.getresponse()
        r.read()
        assert r.status == 200

        def post(path: str, body: dict[str, Any]) -> tuple[int, bytes]:
            conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()

        status, data = post(
            "/v1/messages?beta=true",
            {
                "model": "m",
                "tools": [{"name": "Bash"}],
                "messages": [{"role": "user", "content": "hi"}],
                "stream": False,
            },
        )
        assert status == 200
        assert json.loads(data)["content"][0]["text"] == "fake-claude: hi"

        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
        status, data = post(
            "/v1/messages?beta=true",
            {
                "model": "m",
                "stream": True,
                "tools": [{"name": "Bash"}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": TOOL_PROMPT}]}],
            },
        )
        events = [ln[7:] for ln in data.decode().splitlines() if ln.startswith("event: ")]
        assert events[0] == "message_start"
        assert events[-1] == "message_stop"
        assert '"stop_reason": "tool_use"' in data.decode()

        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
        status, data = post("/v1/messages/count_tokens", {"messages": []})
        assert status == 200
        assert json.loads(data)["input_tokens"] >= 1
        status, _ = post("/v1/nope", {})
        assert status == 404
        assert api.unknown_paths == ["POST /v1/nope"]
        conn.close()
        assert [r.path for r in api.requests][:2] == ["/", "/v1/messages"]
