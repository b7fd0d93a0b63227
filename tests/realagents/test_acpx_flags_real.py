"""acpx's session flags against claude-agent-acp 0.101.0 (Node 22) and the fake Messages API.

What the flags turn into is checked where it lands: the system prompt the model API
receives, and the model it is asked for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.realagents.fake_anthropic import FakeAnthropic
from tests.realagents.test_exec_real import run_tether, tether_env

pytestmark = pytest.mark.realagents


def _system_text(body: Any) -> str:
    system = body.get("system") if isinstance(body, dict) else None
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system or "")


def _turns(api: FakeAnthropic) -> list[Any]:
    return [r.body for r in api.message_requests()]


@pytest.mark.parametrize("flag", ["--system-prompt", "--append-system-prompt"])
def test_claude_gets_the_system_prompt(
    flag: str,
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    """--system-prompt replaces claude's system prompt; --append-system-prompt adds to it."""
    probe = "TETHER-PROBE answer in one word"
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], flag, probe, "--format", "quiet", "exec", "hello"],
        tether_env(claude_agent_env),
        project_dir,
    )
    assert rc == 0, err
    assert out.strip() == "fake-claude: hello"
    systems = [_system_text(body) for body in _turns(fake_anthropic)]
    assert systems
    assert all(probe in s for s in systems), systems
    if flag == "--system-prompt":
        assert all(len(s) < 2 * len(probe) + 200 for s in systems), systems  # replaced
    else:
        assert all(len(s) > 10 * len(probe) for s in systems), systems  # claude's own kept


def test_claude_model_is_selected_through_its_model_option(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    """--model goes through the session's model config option; the API is asked for it."""
    env = tether_env(claude_agent_env)
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], "--format", "json", "exec", "hello"], env, project_dir
    )
    assert rc == 0, err
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    new = next(f for f in frames if f.get("result", {}).get("sessionId"))
    option = next(o for o in new["result"]["configOptions"] if o.get("category") == "model")
    values = [v["value"] for v in option["options"] if isinstance(v, dict) and "value" in v]
    # the last offered (haiku here): "default" and the first alias may be the same model
    other = values[-1]
    assert other != option["currentValue"]
    rc, out, err, _ = run_tether(
        ["--agent", claude_agent_cmd[0], "--model", other, "--format", "json", "exec", "again"],
        env,
        project_dir,
    )
    assert rc == 0, err
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    sets = [f for f in frames if f.get("method") == "session/set_config_option"]
    assert [(s["params"]["configId"], s["params"]["value"]) for s in sets] == [
        (option["id"], other)
    ]
    models = [b.get("model") for b in _turns(fake_anthropic)]
    assert models[-1] != models[0], (values, other, models)
