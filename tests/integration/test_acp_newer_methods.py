"""ACP's newer methods end to end through the CLI and the bundled mock agent:
``sessions fork``, ``sessions list --agent-sessions``, ``sessions new --resume-session``,
``sessions close --discard``, ``logout``, usage and session info in ``status``, and a
boolean config option."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_owner import MOCK_ARGV, Cli

pytestmark = pytest.mark.integration

FULL = [*MOCK_ARGV, "--fork-session", "--list-sessions", "--delete-session", "--logout"]


@pytest.fixture
def mock_full(project_dir: Path) -> Iterator[Cli]:
    """A CLI on a mock agent that offers fork, list, delete and logout; every session it
    may have made (default, ``fork1``, ``fork2``, ``attached``) is closed at the end."""
    c = Cli(project_dir, ["--agent", shlex.join([*FULL, "--resume-session", "--log-stderr"])])
    try:
        yield c
    finally:
        for name in ("fork1", "fork2", "attached"):
            c.run("sessions", "close", name, rc=None)
        c.close()


@pytest.fixture
def mock_plain(project_dir: Path) -> Iterator[Cli]:
    c = Cli(project_dir, ["--agent", shlex.join(MOCK_ARGV)])
    try:
        yield c
    finally:
        c.run("sessions", "close", "fork1", rc=None)
        c.close()


def test_fork_gives_a_warm_session_continuing_the_conversation(mock_full: Cli) -> None:
    """`sessions fork NEW` brings up a new owner and agent at once, whose ACP session is
    the agent's fork of the parent's; the parent goes on unchanged."""
    c = mock_full
    c.run("sessions", "new")
    c.run("prompt", "first")
    parent = c.status()
    forked = c.json("sessions", "fork", "fork1")
    assert forked["action"] == "session_forked"
    assert forked["forkedFrom"]["acpSessionId"] == parent["acpSessionId"]
    assert forked["acpSessionId"].startswith("fork-")
    child = c.json("status", "-s", "fork1")
    assert child["agentPid"]
    assert child["agentPid"] != parent["agentPid"]
    assert child["acpSessionId"] == forked["acpSessionId"]
    out = c.run("prompt", "-s", "fork1", "second").stdout
    assert f"forked from {parent['acpSessionId']}" in out
    show = c.json("sessions", "show", "fork1")
    assert show["forkedFrom"] == {
        "sessionKey": parent["sessionKey"],
        "acpSessionId": parent["acpSessionId"],
    }
    assert show["parentSessionKey"] is None  # a fork is the operator's, not a child
    assert c.status()["acpSessionId"] == parent["acpSessionId"]
    # Closing the parent leaves the fork alone (no ownership cascade).
    c.run("sessions", "close")
    assert c.json("status", "-s", "fork1")["agentConnected"] is True


def test_fork_refusals_are_clear(mock_full: Cli, mock_plain: Cli) -> None:
    """No conversation yet, a taken name, or an agent without session/fork: exit 1 or 2
    with a message, and no session left behind."""
    c = mock_full
    c.run("sessions", "new")
    refused = c.run("sessions", "fork", "fork1", rc=2)
    assert "prompt it first" in refused.stderr
    c.run("prompt", "hello")
    c.run("sessions", "new", "fork2")
    taken = c.run("sessions", "fork", "fork2", rc=2)
    assert "open already" in taken.stderr

    p = mock_plain
    p.run("sessions", "new")
    p.run("prompt", "hello")
    plain = p.run("sessions", "fork", "fork1", rc=1)
    assert "does not advertise session/fork" in plain.stderr
    assert p.json("sessions", "show", "fork1")["state"] == "closed"


def test_agent_sessions_then_resume_one(mock_full: Cli) -> None:
    """`sessions list --agent-sessions` shows the agent's own sessions (session/list);
    `sessions new --resume-session ID` attaches a Tether session to one."""
    c = mock_full
    page = c.json("sessions", "list", "--agent-sessions")
    assert page["action"] == "agent_sessions"
    stored = page["sessions"][0]
    assert stored["sessionId"] == "mock-stored-1"
    assert stored["cwd"] == str(c.project)
    assert "stored conversation" in c.run("sessions", "list", "--agent-sessions").stdout
    made = c.json("sessions", "new", "attached", "--resume-session", "mock-stored-1")
    assert made["acpSessionId"] == "mock-stored-1"
    assert c.json("status", "-s", "attached")["acpSessionId"] == "mock-stored-1"


def test_agent_sessions_refused_when_not_advertised(mock_plain: Cli) -> None:
    """An agent without session/list: exit 1, naming the method."""
    out = mock_plain.run("sessions", "list", "--agent-sessions", rc=1)
    assert "does not advertise session/list" in out.stderr


def test_close_discard_deletes_the_agent_session(mock_full: Cli) -> None:
    """`sessions close --discard` sends session/delete for the session's ACP id (after
    session/close); a plain close does not."""
    c = mock_full
    c.run("sessions", "new")
    c.run("prompt", "hello")
    acp_id = c.status()["acpSessionId"]
    closed = c.json("sessions", "close", "--discard")
    assert closed["discarded"] is True
    exported = c.run("sessions", "export", fmt="json").stdout
    deletes = [line for line in exported.splitlines() if "session/delete" in line]
    assert deletes
    assert acp_id in deletes[0]
    c.run("sessions", "new", "fork2")
    c.run("prompt", "-s", "fork2", "hello")
    plain = c.json("sessions", "close", "fork2")
    assert "discarded" not in plain
    exported = c.run("sessions", "export", "fork2", fmt="json").stdout
    assert "session/delete" not in exported


def test_logout(mock_full: Cli, mock_plain: Cli) -> None:
    """`logout` sends ACP logout when the agent offers it; else exit 1 naming it."""
    assert mock_full.json("logout")["action"] == "logged_out"
    assert "does not advertise logout" in mock_plain.run("logout", rc=1).stderr


def test_status_shows_usage_and_session_info(mock_full: Cli) -> None:
    """A turn's usage_update lands in status.sessionInfo.usage."""
    c = mock_full
    c.run("sessions", "new")
    c.run("prompt", "usage")
    info = c.status()["sessionInfo"]
    assert info["usage"] == {"used": 1234, "size": 200000, "cost": None}


def test_library_fork_list_resume_discard_and_logout(tether_home: Path, project_dir: Path) -> None:
    """The library's doors to the same operations: Session.fork, Client.agent_sessions,
    ensure_session(resume_session=), Session.close(discard=True), Client.logout; and a
    turn's usage_update arrives as a typed UsageUpdate."""
    import asyncio

    import tether

    argv = [*FULL, "--resume-session"]

    async def main() -> None:
        async with tether.Client(home=tether_home) as client:
            parent = await client.ensure_session(argv, cwd=project_dir, name="lib")
            opened: list[tether.Session] = [parent]
            try:
                events = [e async for e in parent.prompt("usage")]
                usage = [e for e in events if isinstance(e, tether.UsageUpdate)]
                assert [(u.used, u.size) for u in usage] == [(1234, 200000)]
                child = await parent.fork("lib-fork")
                opened.append(child)
                text, _stop = await child.run("echo hi")
                acp_parent = (await parent.status())["acpSessionId"]
                assert text.startswith(f"forked from {acp_parent}")
                page = await client.agent_sessions(argv, cwd=project_dir)
                assert page["sessions"][0]["sessionId"] == "mock-stored-1"
                attached = await client.ensure_session(
                    argv, cwd=project_dir, name="lib-attached", resume_session="mock-stored-1"
                )
                opened.append(attached)
                assert (await attached.status())["acpSessionId"] == "mock-stored-1"
                await client.logout(argv, cwd=project_dir)
                report = await child.close(discard=True)
                assert report["discarded"] is True
                assert report["survivors"] == []
            finally:
                for session in opened:
                    await session.close()

    asyncio.run(main())


def test_resume_session_of_an_unknown_conversation_fails_and_leaves_no_session(
    mock_full: Cli,
) -> None:
    """`sessions new --resume-session ID` where the agent no longer has ID: exit 1 with
    the agent's error, the Tether session closed again (no silent new conversation)."""
    c = mock_full
    refused = c.run("sessions", "new", "attached", "--resume-session", "gone-1", rc=1)
    assert "Resource not found" in refused.stderr
    assert c.json("sessions", "show", "attached")["state"] == "closed"


def test_discard_with_no_owner_running_starts_one_to_delete(mock_full: Cli) -> None:
    """An open session whose owner retired (idle TTL): `close --discard` still has the
    agent delete the conversation (a short run that only initializes and deletes)."""
    import time

    c = mock_full
    c.run("--ttl", "0.3", "sessions", "new")
    c.run("prompt", "hello")
    acp_id = c.status()["acpSessionId"]
    deadline = time.monotonic() + 15
    while c.status().get("ownerPid") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not c.status().get("ownerPid"), "the owner did not retire"
    closed = c.json("sessions", "close", "--discard")
    assert closed["discarded"] is True
    exported = c.run("sessions", "export", fmt="json").stdout
    deletes = [line for line in exported.splitlines() if "session/delete" in line]
    assert deletes
    assert acp_id in deletes[0]


def test_a_fork_starts_from_the_parents_mode_and_options(project_dir: Path) -> None:
    """The parent's mode and config options are the fork's desired ones: replayed on the
    forked ACP session (and after any restart of the fork's agent)."""
    argv = [*MOCK_ARGV, "--fork-session", "--modes", "--config-options"]
    c = Cli(project_dir, ["--agent", shlex.join(argv)])
    try:
        c.run("sessions", "new")
        c.run("set-mode", "plan")
        c.run("set", "fast", "true")
        c.run("prompt", "hello")
        c.run("sessions", "fork", "fork1")
        sent = c.run("sessions", "export", "fork1", fmt="json").stdout
        assert '"session/set_mode"' in sent
        assert '"modeId":"plan"' in sent.replace(" ", "")
        assert '"configId":"fast"' in sent.replace(" ", "")
    finally:
        c.run("sessions", "close", "fork1", rc=None)
        c.close()
