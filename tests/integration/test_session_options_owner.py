"""acpx's session options kept with a session: every agent run of it starts with them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from tests.integration.test_owner import Cli, wait_for

AGENT = [
    "--agent",
    f"{sys.executable} -m tether.testing.mock_agent --resume-session --system-prompt",
]


def test_a_resumed_session_gets_its_system_prompt_again(cli: Callable[..., Cli]) -> None:
    """`sessions new --system-prompt` is sent on session/new, and again on the
    session/resume of the next owner (claude-agent-acp rebuilds a resumed session from it)."""
    c = cli(AGENT)
    c.run("--ttl", "1", "--system-prompt", "be brief", "sessions", "new")
    first = json.loads(c.run("--format", "quiet", "prompt", "session-params").stdout)
    assert first == {
        "systemPrompt": {"mode": "override", "content": [{"type": "text", "text": "be brief"}]}
    }
    wait_for(lambda: c.status()["status"] != "running" and not c.status().get("ownerPid"), "TTL")
    again = json.loads(c.run("--format", "quiet", "prompt", "session-params").stdout)
    assert again == {"method": "session/resume", **first}


def test_a_refused_option_fails_the_prompt_naming_it_and_the_session_stays(
    cli: Callable[..., Cli],
) -> None:
    """An agent that offers no way: the first prompt fails with the reason (exit 1), no
    session/new is sent, and the session can be recreated without the option."""
    c = cli(["mock"])
    c.run("--max-turns", "2", "sessions", "new")
    r = c.run("prompt", "echo hi", rc=1)
    assert "--max-turns: tether-mock-agent offers no way to set it" in r.stderr
    assert "session/new" not in r.stderr
    c.run("sessions", "new")
    assert c.run("--format", "quiet", "prompt", "echo hi").stdout == "hi\n"
