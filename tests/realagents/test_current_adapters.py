"""The current adapters (Node 22) through Tether's owner: codex-acp 2.6.0 and rate limits.

- codex-acp 2.6.0 against the loopback fake Responses API: a warm session serves several
  prompts on one agent, ``tether cancel`` ends a stalled turn, and ``sessions close``
  proves the whole tree gone (the Node adapter, ``codex app-server`` and its children).
- gemini-cli 0.61.0 (``gemini --acp``) against the loopback fake Gemini API: raw turns,
  a mid-stream cancel, and a warm session through the owner closed with the proof.
- A usage limit is a state, not a crash: claude-agent-acp 0.101.0, signed in with a
  (dummy) subscription token, gets a 429 "5-hour limit" from the fake Messages API. The
  waiting ``prompt`` exits 6 with ``RATE_LIMITED`` and the reset time, ``status`` shows
  the session ``limited`` with ``resetsAt`` from the agent's ``_claude/rateLimit`` usage
  data, and the next turn that goes through clears it, on the same warm agent.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import pytest

from tests.acp_schema import SCHEMA_PATH
from tests.realagents import install
from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.fake_gemini import FakeGemini
from tests.realagents.fake_openai import FakeOpenAI
from tests.realagents.test_owner_real import (
    Cli,
    Timing,
    cancel_waiting_prompt,
    close_and_prove,
    owner_session,
    tether_env,
    wait_until,
)
from tests.realagents.test_probe_raw import INIT_PARAMS, StartAgent, ok, prompt_params

pytestmark = pytest.mark.realagents


def test_owner_codex_warm_session_cancel_and_close(
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(codex_agent_cmd[0], tether_env(codex_agent_env), project_dir)
    with owner_session(cli, timing=record_timing):
        pids = []
        for i, text in enumerate(["one", "two"]):
            ran = cli.ok("--format", "quiet", "prompt", text, timeout=60)
            record_timing(
                "owner: codex 2.6 prompt, " + ("first (starts agent)" if i == 0 else "warm"),
                ran.secs,
            )
            assert ran.out.strip() == f"fake-codex: {text}"
            pids.append(cli.status()["agentPid"])
        assert len(set(pids)) == 1, pids

        with cli.popen("prompt", "HANG here") as waiting:
            wait_until(
                lambda: any(r.reply_kind == "hang" for r in fake_openai.response_requests()),
                30,
                "the stalled Responses request",
            )
            cancel_waiting_prompt(cli, waiting, record_timing, "codex 2.6")
        assert cli.ok("--format", "quiet", "prompt", "three").out.strip() == "fake-codex: three"
        assert cli.status()["agentPid"] == pids[0]
        proof = close_and_prove(cli, record_timing, "codex 2.6", min_below_agent=1)
    assert any("codex" in cmd for cmd in proof.below_agent.values()), proof.below_agent


def test_exec_codex_usage_limit_exits_rate_limited(
    codex_agent_cmd: list[str],
    codex_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
) -> None:
    """codex-acp 2.6.0's ``usageLimitExceeded`` (a 429 from the Responses API) through
    ``tether exec``: exit 6, ``RATE_LIMITED``, the reset time in the agent's words."""
    ran = Cli(codex_agent_cmd[0], tether_env(codex_agent_env), project_dir).run(
        "--format", "json", "exec", "please RATELIMIT", timeout=60
    )
    assert ran.rc == 6, (ran.rc, ran.err)
    data = ran.json_last()["error"]["data"]
    assert data["acpxCode"] == "RATE_LIMITED"
    assert data["acp"]["data"]["codexErrorInfo"] == "usageLimitExceeded"
    assert "resets=" in ran.err, ran.err  # "try again at 3:23 PM." -> resets='3:23 PM'
    assert [r.reply_kind for r in fake_openai.response_requests()] == ["rate_limit"]


def subscription_env(claude_agent_env: dict[str, str]) -> dict[str, str]:
    """claude signed in with a (dummy) subscription token instead of an API key."""
    env = {k: v for k, v in claude_agent_env.items() if k != "ANTHROPIC_API_KEY"}
    env["CLAUDE_CODE_OAUTH_TOKEN"] = "sk-ant-oat01-dummy-tether-tests"
    return env


def test_owner_claude_rate_limit_is_a_state(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    tether_home: Path,
    record_timing: Timing,
) -> None:
    # Only a subscription sign-in gets the "5-hour limit" wording and the _claude/rateLimit
    # usage data; with an API key the same 429 is "API Error: Request rejected (429)".
    env = subscription_env(claude_agent_env)
    # The limit resets in 3 h: no holding the next turn for that (see the next test).
    (tether_home / "config.toml").write_text("rateLimitHold = 0\n")
    cli = Cli(claude_agent_cmd[0], tether_env(env), project_dir)
    with owner_session(cli):
        # claude-agent-acp sends its _claude/rateLimit usage data only once the session
        # has a usage total, i.e. after a turn that reached the model.
        assert cli.ok("--format", "quiet", "prompt", "warm up", timeout=60).out.strip() == (
            "fake-claude: warm up"
        )
        assert cli.status()["rateLimit"]["limited"] is False
        pid = cli.status()["agentPid"]

        t0 = time.time()
        ran = cli.run("--format", "json", "prompt", "please RATELIMIT")
        expect_reset = int(t0 + fake_anthropic.rate_limit_reset_in_s)
        assert ran.rc == 6, (ran.rc, ran.err)
        envelope = ran.json_last()
        data = envelope["error"]["data"]
        assert data["acpxCode"] == "RATE_LIMITED"
        assert data["retryable"] is True
        assert data["acp"]["data"] == {"errorKind": "rate_limit"}
        assert "You've hit your 5-hour limit" in envelope["error"]["message"]
        assert "resets_at=" in ran.err, ran.err  # the fields, on stderr

        st = cli.status()
        limit = st["rateLimit"]
        assert limit["limited"] is True, limit
        assert limit["limitType"] == "five_hour"
        assert abs(limit["resetsAt"] - expect_reset) <= 5, (limit, expect_reset)
        assert limit["resets"], limit  # the agent's words, e.g. "3:16pm (UTC)"
        assert limit["reported"]["status"] == "rejected"
        assert st["agentPid"] == pid  # a limit is not a crash: the agent stays warm

        again = cli.ok("--format", "quiet", "prompt", "after the limit", timeout=60)
        assert again.out.strip() == "fake-claude: after the limit"
        st = cli.status()
        assert st["rateLimit"]["limited"] is False, st["rateLimit"]
        assert st["agentPid"] == pid
        close_and_prove(cli, record_timing, "claude", min_below_agent=1)


def test_owner_claude_holds_the_next_turn_until_the_reset(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    """After a refused turn whose reset time is known, the next turn waits for the reset
    (``status`` names it in ``rateLimit.holding``) and then runs, instead of being refused
    too. ``tether cancel`` ends a hold without sending the turn."""
    fake_anthropic.rate_limit_reset_in_s = 4.0
    env = subscription_env(claude_agent_env)
    cli = Cli(claude_agent_cmd[0], tether_env(env), project_dir)
    with owner_session(cli):
        cli.ok("prompt", "warm up", timeout=60)  # see above: usage data needs a usage total
        assert cli.run("prompt", "please RATELIMIT", timeout=60).rc == 6
        resets_at = cli.status()["rateLimit"]["resetsAt"]
        assert isinstance(resets_at, int)
        turns = len(fake_anthropic.message_requests())

        # A held turn can be cancelled: it never reaches the agent.
        with cli.popen("prompt", "cancel me while held") as held:
            wait_until(lambda: cli.status()["rateLimit"]["holding"] is not None, 30, "hold")
            assert cli.ok("--format", "json", "cancel").json_last()["cancelled"] is True
            out, err = held.communicate(timeout=30)
        assert held.returncode == 0, err
        assert out.rstrip().rpartition("\n")[2].startswith("[done] cancelled ("), (out, err)
        assert len(fake_anthropic.message_requests()) == turns

        with cli.popen("--format", "quiet", "prompt", "held until the reset") as waiting:
            wait_until(lambda: cli.status()["rateLimit"]["holding"] is not None, 30, "hold")
            assert len(fake_anthropic.message_requests()) == turns  # not sent yet
            out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert out.strip() == "fake-claude: held until the reset"
        sent = fake_anthropic.message_requests()[-1]
        assert time.time() - (time.monotonic() - sent.at) >= resets_at - 1  # not before it
        record_timing("owner: claude turn held past the reset by (s)", time.time() - resets_at)
        st = cli.status()["rateLimit"]
        assert (st["limited"], st["holding"]) == (False, None), st
        close_and_prove(cli, record_timing, "claude", min_below_agent=1)


# --- gemini-cli (`gemini --acp`) ---------------------------------------------------------


def test_gemini_raw_turn_cancel_and_go_on(
    raw_agent: StartAgent,
    gemini_agent_cmd: list[str],
    gemini_agent_env: dict[str, str],
    fake_gemini: FakeGemini,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(gemini_agent_cmd, env=gemini_agent_env)
    init = ok(agent.call("initialize", INIT_PARAMS, 60))
    record_timing("gemini spawn->initialize", time.monotonic() - agent.started_at)
    assert init["agentInfo"]["name"] == "gemini-cli"
    # No sessionCapabilities (fork, list, ...) and no logout: only loadSession.
    assert "sessionCapabilities" not in init["agentCapabilities"]
    # With GEMINI_API_KEY in its environment it needs no `authenticate`.
    assert "gemini-api-key" in [m["id"] for m in init["authMethods"]]
    sid = ok(agent.call("session/new", {"cwd": str(project_dir), "mcpServers": []}, 30))[
        "sessionId"
    ]

    t0 = time.monotonic()
    resp = agent.call("session/prompt", prompt_params(sid, "hello gemini"), 60)
    record_timing("gemini prompt (canned text)", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text() == "fake-gemini: hello gemini"

    rid = agent.request("session/prompt", prompt_params(sid, "please HANG"))
    wait_until(
        lambda: any(r.reply_kind == "hang" for r in fake_gemini.stream_requests()),
        30,
        "the stalled Gemini stream",
    )
    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    assert ok(agent.wait_response(rid, 30))["stopReason"] == "cancelled"
    record_timing("gemini cancel->cancelled (mid-stream)", time.monotonic() - t0)
    resp = agent.call("session/prompt", prompt_params(sid, "after"), 60)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text().endswith("fake-gemini: after")
    assert fake_gemini.unknown_paths == []


def test_owner_gemini_warm_session_then_close(
    gemini_agent_cmd: list[str],
    gemini_agent_env: dict[str, str],
    fake_gemini: FakeGemini,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(shlex.join(gemini_agent_cmd), tether_env(gemini_agent_env), project_dir)
    with owner_session(cli, timing=record_timing):
        pids = []
        for i, text in enumerate(["one", "two words", "three"]):
            ran = cli.ok("--format", "quiet", "prompt", text, timeout=60)
            record_timing(
                "owner: gemini prompt, " + ("first (starts agent)" if i == 0 else "warm"),
                ran.secs,
            )
            assert ran.out.strip() == f"fake-gemini: {text}"
            pids.append(cli.status()["agentPid"])
        assert len(set(pids)) == 1, pids
        assert len(fake_gemini.stream_requests()) == 3
        close_and_prove(cli, record_timing, "gemini", min_below_agent=0)


# --- opencode (`opencode acp`) -------------------------------------------------------------


def test_opencode_raw_turn_against_fake_responses_api(
    raw_agent: StartAgent,
    opencode_agent_cmd: list[str],
    opencode_agent_env: dict[str, str],
    fake_openai: FakeOpenAI,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    agent = raw_agent(opencode_agent_cmd, env=opencode_agent_env)
    init = ok(agent.call("initialize", INIT_PARAMS, 60))
    record_timing("opencode spawn->initialize", time.monotonic() - agent.started_at)
    assert init["agentInfo"]["name"] == "OpenCode"
    assert {"fork", "list", "resume", "close"} <= set(
        init["agentCapabilities"]["sessionCapabilities"]
    )
    new = ok(agent.call("session/new", {"cwd": str(project_dir), "mcpServers": []}, 60))
    model = next(o for o in new["configOptions"] if o["id"] == "model")
    assert model["currentValue"] == "openai/gpt-fake-1"
    t0 = time.monotonic()
    resp = agent.call("session/prompt", prompt_params(new["sessionId"], "hello opencode"), 60)
    record_timing("opencode prompt (canned text)", time.monotonic() - t0)
    assert ok(resp)["stopReason"] == "end_turn"
    assert agent.agent_text() == "fake-codex: hello opencode"
    assert fake_openai.unknown_paths == []


# --- the schema copy ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["claude22", "codex22"])
def test_schema_copy_is_the_one_the_adapters_ship(
    prefix: str, claude_agent_cmd: list[str], codex_agent_cmd: list[str]
) -> None:
    """tests/golden/acp-schema.json is the stable v1 schema of @agentclientprotocol/sdk,
    the copy both current adapters bundle (2.4.0 for both, November 2026). The PyPI SDK
    (agent-client-protocol 0.12.1) ships no schema file and was generated from an older
    one (schema-v1.19.0), so it cannot be the source."""
    sdk = install.CACHE_DIR / prefix / "node_modules" / "@agentclientprotocol" / "sdk"
    shipped = json.loads((sdk / "schema" / "v1" / "schema.json").read_text())
    assert shipped == json.loads(SCHEMA_PATH.read_text()), (
        f"{sdk} ships another v1 schema: refresh tests/golden/acp-schema.json from it"
    )
