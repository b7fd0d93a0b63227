"""Issue 20, item 5, with a real npm agent: a stale lease is verified, stolen and reaped.

An npm agent starts through a shim (``#!/usr/bin/env node``), so the process the keeper
started has exec'd twice by the time it runs: its argv is not the one Tether recorded.
``tether reap`` must still prove the lease's root ours (its parent is the lease's own
keeper, that very process), steal the lapsed lease of a stopped owner and end the tree.
Offline: gemini-cli against the loopback fake Gemini API.
"""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pytest

from tests.integration.test_claims import wait_expired
from tests.integration.test_owner import signal_descendant, stop_outside_writes
from tests.realagents.fake_gemini import FakeGemini
from tests.realagents.test_owner_real import Cli, alive_of, owner_session, record_tree, tether_env
from tether.state.registry import Registry
from tether.supervise.verify import command_hash

pytestmark = pytest.mark.realagents


def _proc(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def test_npm_agent_stale_lease_is_stolen_and_its_tree_ended(
    gemini_agent_cmd: list[str],
    gemini_agent_env: dict[str, str],
    fake_gemini: FakeGemini,
    project_dir: Path,
) -> None:
    """gemini-cli's owner is stopped past a 1 s lease: `tether reap` verifies the agent
    (whose argv the shim changed), steals the lease, and ends the whole agent tree."""
    env = tether_env(gemini_agent_env)
    env.update(TETHER_LEASE_HEARTBEAT_S="0.1", TETHER_LEASE_TTL_S="1.0")
    cli = Cli(shlex.join(gemini_agent_cmd), env, project_dir)
    with owner_session(cli):
        assert cli.ok("--format", "quiet", "prompt", "one", timeout=60).out.strip() == (
            "fake-gemini: one"
        )
        status = cli.status()
        owner, agent = status["ownerPid"], status["agentPid"]
        tree = record_tree(agent)
        marker = dict(
            kv.split(b"=", 1) for kv in _proc(agent, "environ").split(b"\0") if b"=" in kv
        )
        lease_id = marker[b"TETHER_LEASE_ID"].decode()
        with Registry() as reg:
            recorded = reg.lease(lease_id)
        assert recorded is not None
        # The premise: the shim exec'd, so the live argv is not the one recorded.
        live_argv = [a for a in _proc(agent, "cmdline").split(b"\0") if a]
        assert recorded.command_hash != command_hash(live_argv)
        stop_outside_writes(owner)
        try:
            wait_expired(lease_id)
            reaped = cli.ok("--format", "json", "reap").json_last()
            mine = [d for d in reaped["decisions"] if d["lease_id"] == lease_id]
            assert [d["kind"] for d in mine] == ["steal", "reap", "markclosed"], mine
            assert mine[1]["extinct"] is True
            assert alive_of(tree) == {}
            with Registry() as reg:
                closed = reg.lease(lease_id)
            assert closed is not None
            assert closed.state == "closed"
        finally:
            signal_descendant(owner, signal.SIGCONT)
