"""Agents' terminals as real supervised runs: the mock agent's ``terminal`` verb.

Every terminal is a run of its own (keeper, lease marked for the session); these tests
prove that what a terminal starts -- a ``setsid`` grandchild included -- is gone after
``terminal/release``, ``terminal/kill``, ``sessions close`` and the owner's SIGKILL,
with the product's own witnesses (the lease marker scan) and the test's (the process
tree under the suite's subreaper).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests._proctree import marker_carriers
from tests.integration.test_owner import Cli, alive, signal_descendant, wait_for

pytestmark = pytest.mark.integration

# A terminal command that starts a grandchild in a session of its own, says its pid,
# and stays running.
GRANDCHILD = shlex.join(
    [
        sys.executable,
        "-c",
        "import subprocess,time;"
        "p=subprocess.Popen(['sleep','3600'],start_new_session=True);"
        "print('grandchild',p.pid,flush=True);"
        "time.sleep(3600)",
    ]
)
REPORT = re.compile(
    r"terminal id=(?P<id>\w+) exit=(?P<exit>\S+) signal=(?P<signal>\S+) "
    r"truncated=(?P<truncated>\w+)(?: after-release=(?P<after>\S+))?\n(?P<output>.*)",
    re.S,
)


def report(out: str) -> dict[str, str]:
    """The mock's terminal report in a turn's text output."""
    m = REPORT.search(out)
    assert m is not None, out
    fields = {k: v for k, v in m.groupdict().items() if v is not None}
    fields["output"] = fields["output"].split("[done]")[0]  # the turn's end is not output
    return fields


def grandchild(rep: dict[str, str]) -> int:
    m = re.search(r"grandchild (\d+)", rep["output"])
    assert m is not None, (rep, rep["output"])
    return int(m.group(1))


def lease(lease_id: str) -> Any:
    from tether.state.registry import Registry

    registry = Registry()
    try:
        return registry.lease(lease_id)
    finally:
        registry.close()


# --- the end of a terminal, with proof ------------------------------------------------


def test_release_ends_a_setsid_grandchild(mock: Cli) -> None:
    """terminal/release answers only once the terminal's whole tree is proven gone."""
    rep = report(mock.run("prompt", f"terminal --release {GRANDCHILD}").stdout)
    pid = grandchild(rep)
    assert rep["after"] == "-32602"  # released: the id is unknown now
    assert not alive(pid)
    assert marker_carriers(rep["id"]) == []
    row = lease(rep["id"])
    assert (row.state, row.backend_id) == ("closed", "terminal")
    assert row.session_key == mock.status()["sessionKey"]  # marked for the session
    assert alive(mock.status()["agentPid"])  # the agent is untouched


def test_owner_sigkill_ends_every_terminal(mock: Cli) -> None:
    """The owner SIGKILLed: each terminal's keeper ends its tree; the next owner
    reconciles the terminal's lease and the session goes on."""
    rep = report(mock.run("prompt", f"terminal --keep {GRANDCHILD}").stdout)
    pid = grandchild(rep)
    assert alive(pid)
    assert len(marker_carriers(rep["id"])) >= 3  # keeper, the command, the grandchild
    before = mock.status()
    signal_descendant(before["ownerPid"], signal.SIGKILL)
    wait_for(lambda: not alive(pid), "the terminal's grandchild to die")
    wait_for(lambda: not marker_carriers(rep["id"]), "no process with the terminal's marker")
    wait_for(lambda: not marker_carriers(before["leaseId"]), "no process with the agent's marker")
    assert "again" in mock.run("prompt", "echo again").stdout  # a new owner
    # The new owner's reconcile settles the terminal's lease exactly as the agent's:
    # the keepers usually end the trees before it looks ("gone before cleanup": lost).
    term, agent = lease(rep["id"]), lease(before["leaseId"])
    assert term.state == agent.state
    assert term.state in ("closed", "lost")


def test_close_ends_a_kept_terminal(mock: Cli) -> None:
    """sessions close ends the agent's terminals too, and says survivors: []."""
    rep = report(mock.run("prompt", f"terminal --keep {GRANDCHILD}").stdout)
    pid = grandchild(rep)
    agent_lease = mock.status()["leaseId"]
    closed = mock.json("sessions", "close")
    assert closed["survivors"] == []
    assert not alive(pid)
    assert marker_carriers(rep["id"]) == []
    assert lease(rep["id"]).state == "closed"
    assert mock.status()["leaseId"] == agent_lease  # offline status: the agent's run


def test_kill_ends_the_tree_and_keeps_the_output(cli: Callable[..., Cli]) -> None:
    """terminal/kill: the tree goes (SIGTERM), the output and exit status stay readable."""
    c = cli()
    rep = report(c.run("exec", f"terminal --kill {GRANDCHILD}").stdout)
    assert (rep["exit"], rep["signal"]) == ("None", "SIGTERM")
    assert not alive(grandchild(rep))
    assert marker_carriers(rep["id"]) == []


def test_exec_ends_a_kept_terminal(cli: Callable[..., Cli]) -> None:
    """tether exec tears its agent run down with the terminals the agent left running."""
    c = cli()
    rep = report(c.run("exec", f"terminal --keep {GRANDCHILD}").stdout)
    assert not alive(grandchild(rep))
    assert marker_carriers(rep["id"]) == []
    assert lease(rep["id"]).state == "closed"


# --- what a terminal runs and shows ------------------------------------------------------


def test_exit_code_and_stderr_in_one_stream(cli: Callable[..., Cli]) -> None:
    """stdout and stderr are one stream, as on a terminal; the exit code is reported."""
    c = cli()
    rep = report(c.run("exec", "terminal 'echo out; echo err >&2; exit 3'").stdout)
    assert (rep["exit"], rep["signal"], rep["truncated"]) == ("3", "None", "false")
    assert rep["output"].split() == ["out", "err"]


def test_output_is_capped_by_the_agent_and_by_config(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """outputByteLimit keeps the newest bytes and says truncated; terminalOutputLimit caps
    whatever the agent asks for."""
    c = cli()
    flood = "terminal --limit {} sh -c 'yes abcdefg | head -c 100000; echo END'"
    rep = report(c.run("exec", flood.format(20)).stdout)
    assert rep["truncated"] == "true"
    assert rep["output"].endswith("END\n")
    assert len(rep["output"].encode()) <= 20
    (tether_home / "config.toml").write_text("terminalOutputLimit = 64\n")
    rep = report(c.run("exec", flood.format(10**9)).stdout)
    assert rep["truncated"] == "true"
    assert rep["output"].endswith("END\n")
    assert 50 < len(rep["output"].encode()) <= 64


def test_cwd_is_confined_and_env_is_honoured(cli: Callable[..., Cli], project_dir: Path) -> None:
    """A cwd inside the workspace and env entries are used; a cwd outside it is refused."""
    c = cli()
    sub = project_dir / "sub"
    sub.mkdir()
    out = c.run("exec", f"terminal --cwd {sub} --env FOO=bar sh -c 'pwd; echo $FOO'").stdout
    assert report(out)["output"].split() == [str(sub.resolve()), "bar"]
    refused = c.run("exec", "terminal --cwd / pwd").stdout
    assert "terminal error terminal/create -32602" in refused
    assert "outside" in refused


def test_pty_terminals(cli: Callable[..., Cli], tether_home: Path) -> None:
    """terminalPty runs terminals on a pseudo-terminal; by default they have pipes."""
    c = cli()
    probe = "terminal sh -c 'if test -t 1; then echo tty; else echo pipe; fi'"
    assert report(c.run("exec", probe).stdout)["output"].split() == ["pipe"]
    (tether_home / "config.toml").write_text("terminalPty = true\n")
    assert report(c.run("exec", probe).stdout)["output"].split() == ["tty"]


# --- not offered ------------------------------------------------------------------------


def frames_of(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def offered(frames: list[dict[str, Any]]) -> bool:
    init = next(f for f in frames if f.get("method") == "initialize")
    return bool(init["params"]["clientCapabilities"]["terminal"])


def test_no_terminal_is_not_advertised_and_answers_method_not_found(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """--no-terminal (or terminal = false): terminal false in initialize, terminal/* -32601."""
    c = cli()
    on = frames_of(c.run("exec", "terminal echo hi", fmt="json").stdout)
    assert offered(on)
    off = c.run("--no-terminal", "exec", "terminal echo hi", fmt="json").stdout
    assert not offered(frames_of(off))
    assert "terminal error terminal/create -32601" in off
    (tether_home / "config.toml").write_text("terminal = false\n")
    assert not offered(frames_of(c.run("exec", "terminal echo hi", fmt="json").stdout))


def test_no_terminal_holds_for_a_session(cli: Callable[..., Cli]) -> None:
    """A session created with --no-terminal never offers terminals to its agent."""
    c = cli()
    c.run("--no-terminal", "sessions", "new")
    out = c.run("prompt", "terminal echo hi").stdout
    assert "terminal error terminal/create -32601" in out
