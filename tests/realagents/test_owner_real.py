"""Real agents through Tether's warm session owner (CLI and library API), offline.

The owner path as a user runs it: ``tether --agent CMD sessions new`` starts a detached
owner (it inherits the environment of *that* call, so the agent's scratch environment is
set there), ``prompt`` / ``cancel`` / ``status`` talk to it over its Unix socket from
separate processes, and ``sessions close`` tears the agent tree down and proves it gone.

What these pin down:

- claude-agent-acp 0.101.0 (loopback fake Messages API): one agent process serves several
  prompts, each with its own canned answer; ``--approve-all`` really runs a tool;
  ``tether cancel`` from another process ends a mid-stream turn ``cancelled`` and the
  session stays warm; every frame Tether sends on the owner path validates against the
  schema; ``sessions close`` (idle, or with a turn running) leaves no process of the
  recorded tree and no process carrying the run's lease marker.
- A permission request left *pending* while the turn is cancelled: the owner has no
  interactive permission hook (under approve-reads an ``execute`` tool is rejected at
  once), so this is driven one level down, on ``LiveAgent`` with a hook that never
  decides: Tether answers the request ``cancelled`` and the turn ends ``cancelled``.
- codex-acp 0.16.0 (black-hole provider): a prompt that cannot reach a model is
  cancelled by ``tether cancel`` from another process; close reaps the Node wrapper and
  its native child.
- The SDK's echo agent: a warm session of three prompts via the CLI and via the library.

Every session opened here is closed in a ``finally``; the suite's leak check proves the
rest (owners included).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import _proctree, _tiers
from tests._proctree import marker_carriers
from tests.acp_schema import _method_defs, _schema, schema_errors
from tests.realagents.blackhole import BlackHole
from tests.realagents.cli_group import TETHER, tether
from tests.realagents.fake_anthropic import FakeAnthropic, last_user_text

pytestmark = pytest.mark.realagents

TOOL_PROMPT = 'TOOL:Bash:{"command":"echo hi > out.txt","description":"write out.txt"}'
# After `sessions close` answers, how long the owner process (not the agent tree, which
# must be gone by then) may take to exit.
OWNER_EXIT_GRACE_S = 10.0

Timing = Callable[[str, float], None]
ReportInvalid = Callable[[str, dict[str, Any], list[str]], None]


# --- running the CLI -------------------------------------------------------------------


def tether_env(agent_env: dict[str, str]) -> dict[str, str]:
    """The agent's scratch environment plus Tether's own (private TETHER_HOME etc.).

    Built from scratch, not from ``os.environ``: this container sets ``IS_SANDBOX=yes``,
    which makes claude-agent-acp's bundled Claude Code exit 1 when running as root. The
    owner (and through it the agent) inherits the environment of the ``sessions new`` call.
    """
    env = dict(agent_env)
    for key in ("TETHER_HOME", "XDG_CONFIG_HOME"):  # set per test by tests/conftest.py
        env[key] = os.environ[key]
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Ran:
    rc: int
    out: str
    err: str
    secs: float

    def json_last(self) -> dict[str, Any]:
        lines = [ln for ln in self.out.splitlines() if ln.strip()]
        assert lines, f"no output (rc {self.rc}): {self.err}"
        obj = json.loads(lines[-1])
        assert isinstance(obj, dict)
        return obj


class Cli:
    """``tether --agent AGENT ...`` in one environment and cwd, a subprocess per call."""

    def __init__(self, agent: str, env: dict[str, str], cwd: Path) -> None:
        if not TETHER.exists():
            _tiers.unavailable(
                "realagents", f"realagents: {TETHER} is not installed (pip install -e .)"
            )
        self.agent = agent
        self.env = env
        self.cwd = cwd

    @contextmanager
    def popen(self, *args: str) -> Iterator[subprocess.Popen[str]]:
        """Start a call in its own process group; kill that group if it outlives us."""
        with tether(["--agent", self.agent, *args], self.env, self.cwd) as proc:
            yield proc

    def run(self, *args: str, timeout: float = 45) -> Ran:
        t0 = time.monotonic()
        with self.popen(*args) as proc:
            out, err = proc.communicate(timeout=timeout)
        return Ran(proc.returncode, out, err, time.monotonic() - t0)

    def ok(self, *args: str, timeout: float = 45) -> Ran:
        ran = self.run(*args, timeout=timeout)
        assert ran.rc == 0, f"tether {' '.join(args)} -> {ran.rc}: {ran.err}\n{ran.out}"
        return ran

    def status(self) -> dict[str, Any]:
        return self.ok("--format", "json", "status").json_last()


@contextmanager
def owner_session(cli: Cli, *flags: str, timing: Timing | None = None) -> Iterator[dict[str, Any]]:
    """``sessions new`` (starts the owner), and ``sessions close`` whatever happens.

    A second close (the test closed already) finds no owner and only marks the session
    closed, so the ``finally`` is always safe.
    """
    ran = cli.ok(*flags, "--format", "json", "sessions", "new")
    if timing is not None:
        timing("owner: sessions new (wall)", ran.secs)
    ensured = ran.json_last()
    assert ensured["action"] == "session_ensured"
    try:
        yield ensured
    finally:
        cli.run("--format", "json", "sessions", "close")


def wait_until(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def cancel_waiting_prompt(
    cli: Cli, waiting: subprocess.Popen[str], timing: Timing, label: str
) -> None:
    """``tether cancel`` from another process; the waiting ``prompt`` ends ``cancelled``, 0."""
    running = cli.status()
    assert running["status"] == "running", running
    assert running["currentKind"] == "prompt"
    t0 = time.monotonic()
    cancelled = cli.ok("--format", "json", "cancel").json_last()
    assert cancelled["cancelled"] is True, cancelled
    out, err = waiting.communicate(timeout=30)
    timing(f"owner: {label} `tether cancel` -> waiting prompt exits", time.monotonic() - t0)
    assert waiting.returncode == 0, err
    assert out.rstrip().rpartition("\n")[2].startswith("[done] cancelled ("), (out, err)


# --- process-tree proofs ---------------------------------------------------------------


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def record_tree(*roots: int) -> dict[int, int]:
    """pid -> starttime of every root and every descendant (via /proc/*/task/*/children)."""
    tree: dict[int, int] = {}
    for root in roots:
        st = _proctree._stat(root)
        if st is not None and st[0] != "Z":
            tree[root] = st[1]
        for pid, (state, start) in _proctree.descendants(root).items():
            if state != "Z":
                tree[pid] = start
    return tree


def alive_of(tree: dict[int, int]) -> dict[int, str]:
    """The recorded processes still alive: same pid, same starttime, not a zombie."""
    alive: dict[int, str] = {}
    for pid, start in tree.items():
        st = _proctree._stat(pid)
        if st is None or st[1] != start or st[0] in ("Z", "X"):
            continue
        alive[pid] = cmdline(pid)
    return alive


@dataclass
class CloseProof:
    closed: dict[str, Any]
    tree: dict[int, int]
    below_agent: dict[int, str]  # the agent's descendants (pid -> cmdline), before close


def assert_close_proved(tree: dict[int, int], lease: str, closed: dict[str, Any]) -> None:
    """Close answered with no survivors; nothing recorded before it, nothing marked, lives."""
    assert closed["survivors"] == [], closed
    assert alive_of(tree) == {}
    assert marker_carriers(lease) == []


def close_and_prove(cli: Cli, timing: Timing, label: str, *, min_below_agent: int) -> CloseProof:
    """Record the agent's whole tree, ``sessions close``, and prove every part of it gone.

    Gone means: pid missing, a different starttime, or a zombie; and no process anywhere
    carries the run's lease marker. The owner itself must exit shortly after answering.
    """
    st = cli.status()
    agent, keeper, owner, lease = st["agentPid"], st["keeperPid"], st["ownerPid"], st["leaseId"]
    assert isinstance(agent, int), st
    assert isinstance(keeper, int), st
    assert isinstance(owner, int), st
    assert isinstance(lease, str), st
    assert lease, st
    tree = record_tree(keeper, agent)
    assert {agent, keeper} <= tree.keys(), (st, tree)
    below = {p: cmdline(p) for p in record_tree(agent) if p != agent}
    assert len(below) >= min_below_agent, f"{label}: expected agent children, got {below}"
    # Positive control: the scan does see the marker while the run is alive.
    assert agent in marker_carriers(lease)
    owner_stat = _proctree._stat(owner)
    assert owner_stat is not None

    ran = cli.ok("--format", "json", "sessions", "close")
    timing(f"owner: {label} sessions close (wall)", ran.secs)
    closed = ran.json_last()
    timing(f"owner: {label} close teardownMs/1000", float(closed["teardownMs"]) / 1000)
    assert closed["action"] == "session_closed", closed
    assert closed["survivors"] == [], closed
    assert closed["agentWasRunning"] is True, closed

    # The owner proved extinction before answering: nothing of the tree may be alive now.
    left = alive_of(tree)
    assert left == {}, f"{label}: alive after `sessions close` answered: {left}"
    assert marker_carriers(lease) == [], f"{label}: processes still carry lease {lease}"
    wait_until(
        lambda: not alive_of({owner: owner_stat[1]}), OWNER_EXIT_GRACE_S, f"owner {owner} to exit"
    )
    after = cli.status()
    assert after["status"] == "closed", after
    return CloseProof(closed, tree, below)


# --- JSON output of `prompt`: who sent what, and does it validate -----------------------


def ndjson(out: str) -> list[dict[str, Any]]:
    frames = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert all(isinstance(f, dict) for f in frames)
    return frames


def _handler_side(method: str) -> str | None:
    defs = _schema()["$defs"]
    for (m, _kind), name in _method_defs().items():
        if m == method:
            side = defs[name].get("x-side")
            return side if isinstance(side, str) else None
    return None


def classify(frames: list[dict[str, Any]]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(sender "client"|"agent", answered method or None, frame) for every ACP frame.

    The owner relays raw frames without their direction. Requests and notifications are
    placed by the schema's ``x-side``; a response by the request id it answers. The agent
    numbers its own requests from 0 (claude-agent-acp), so an id can be pending on both
    sides: then a ``stopReason`` in the result means the agent answered ``session/prompt``.
    """
    pending: dict[str, dict[Any, str]] = {"client": {}, "agent": {}}
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    for f in frames:
        if "action" in f or ("id" in f and f["id"] is None):
            continue  # Tether's control objects and its own error envelopes
        if "method" in f:
            handler = _handler_side(str(f["method"]))
            sender = "client" if handler == "agent" else "agent"
            if "id" in f:
                pending[sender][f["id"]] = str(f["method"])
            out.append((sender, None, f))
            continue
        rid = f.get("id")
        in_client, in_agent = rid in pending["client"], rid in pending["agent"]
        if in_client and in_agent:
            result = f.get("result")
            answers_prompt = isinstance(result, dict) and "stopReason" in result
            in_agent = not answers_prompt
            in_client = answers_prompt
        if in_agent:  # Tether answering the agent's request
            out.append(("client", pending["agent"].pop(rid), f))
        elif in_client:
            out.append(("agent", pending["client"].pop(rid), f))
        else:
            raise AssertionError(f"a response that answers nothing seen: {f}")
    return out


def check_owner_frames(
    frames: list[dict[str, Any]], report: ReportInvalid, agent: str
) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Tether's frames must validate; the agent's problems are only collected."""
    sorted_frames = classify(frames)
    bad: list[tuple[dict[str, Any], list[str]]] = []
    for sender, answered, f in sorted_frames:
        errs = schema_errors(f, sender, answered)
        if not errs:
            continue
        if sender == "client":
            bad.append((f, errs))
        else:
            report(agent, f, errs)
    assert not bad, f"tether sent frames on the owner path that do not validate: {bad}"
    return sorted_frames


def chunks_text(frames: list[dict[str, Any]]) -> str:
    return "".join(
        f["params"]["update"]["content"].get("text", "")
        for f in frames
        if f.get("method") == "session/update"
        and f["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    )


# --- claude-agent-acp through the owner --------------------------------------------------


def typed_prompts(api: FakeAnthropic) -> list[str]:
    return [last_user_text(r.body) for r in api.message_requests()]


def test_owner_claude_warm_session_then_close_leaves_nothing(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    texts = ["first question", "second question", "third question"]
    with owner_session(cli, timing=record_timing):
        idle = cli.status()
        assert idle["agentPid"] is None  # the agent starts lazily, on the first prompt
        runs: list[tuple[Any, Any, Any]] = []
        for i, text in enumerate(texts):
            ran = cli.ok("prompt", text)
            record_timing(
                "owner: claude prompt, first (starts agent)"
                if i == 0
                else "owner: claude prompt, warm",
                ran.secs,
            )
            assert f"fake-claude: {text}" in ran.out
            assert ran.out.rstrip().rpartition("\n")[2].startswith("[done] end_turn")
            st = cli.status()
            runs.append((st["agentPid"], st["keeperPid"], st["leaseId"]))
        assert len(set(runs)) == 1, f"the agent changed between prompts: {runs}"
        assert isinstance(runs[0][0], int)
        # One model request per prompt, each answered with its own canned text.
        assert typed_prompts(fake_anthropic) == texts
        close_and_prove(cli, record_timing, "claude", min_below_agent=1)


def test_owner_claude_approve_all_runs_tool(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli, "--approve-all"):
        ran = cli.ok("--approve-all", "prompt", TOOL_PROMPT)
        assert (project_dir / "out.txt").read_text().strip() == "hi"
        assert "[tool]" in ran.out
        assert "fake-claude: tool result ok" in ran.out
        assert ran.out.rstrip().rpartition("\n")[2].startswith("[done] end_turn")
        # The same warm agent answers the next prompt.
        pid = cli.status()["agentPid"]
        assert "fake-claude: and now plain text" in cli.ok("prompt", "and now plain text").out
        assert cli.status()["agentPid"] == pid


def test_owner_claude_session_permission_mode_applies_without_prompt_flag(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli, "--approve-all"):
        ran = cli.ok("prompt", TOOL_PROMPT)
        assert "fake-claude: tool result ok" in ran.out, ran.out
        assert (project_dir / "out.txt").exists()


def test_owner_claude_json_frames_validate(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    report_invalid_agent_frame: ReportInvalid,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli, "--approve-all"):
        ran = cli.ok("--approve-all", "--format", "json", "prompt", TOOL_PROMPT)
        frames = ndjson(ran.out)
        sorted_frames = check_owner_frames(frames, report_invalid_agent_frame, "claude-agent-acp")
        sent = [(m or f.get("method")) for s, m, f in sorted_frames if s == "client"]
        # What Tether sent on this turn: the prompt and its answer to the permission request.
        assert sent == ["session/prompt", "session/request_permission"], sent
        answer = next(f for s, m, f in sorted_frames if m == "session/request_permission")
        assert answer["result"]["outcome"]["outcome"] == "selected"
        (prompt_resp,) = [f for s, m, f in sorted_frames if m == "session/prompt"]
        assert prompt_resp["result"]["stopReason"] == "end_turn"
        assert (project_dir / "out.txt").read_text().strip() == "hi"

        ran = cli.ok("--format", "json", "prompt", "plain json turn")
        frames = ndjson(ran.out)
        sorted_frames = check_owner_frames(frames, report_invalid_agent_frame, "claude-agent-acp")
        assert [f.get("method") for s, _, f in sorted_frames if s == "client"] == ["session/prompt"]
        assert chunks_text(frames) == "fake-claude: plain json turn"


def test_owner_claude_cancel_mid_stream_from_another_process(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli):
        cli.ok("prompt", "warm up")
        pid = cli.status()["agentPid"]
        with cli.popen("prompt", "please HANG now") as waiting:
            wait_until(
                lambda: any(r.reply_kind == "hang" for r in fake_anthropic.message_requests()),
                30,
                "the agent's stalled model request",
            )
            cancel_waiting_prompt(cli, waiting, record_timing, "claude")
        # The session stays warm: same agent, and the next prompt gets its own answer.
        assert cli.status()["agentPid"] == pid
        after = cli.ok("prompt", "after the cancel")
        assert "fake-claude: after the cancel" in after.out
        assert after.out.rstrip().rpartition("\n")[2].startswith("[done] end_turn")


def test_owner_claude_close_during_a_turn_leaves_nothing(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(claude_agent_cmd[0], tether_env(claude_agent_env), project_dir)
    with owner_session(cli):
        with cli.popen("prompt", "HANG until the session is closed") as waiting:
            wait_until(
                lambda: any(r.reply_kind == "hang" for r in fake_anthropic.message_requests()),
                30,
                "the agent's stalled model request",
            )
            close_and_prove(cli, record_timing, "claude (turn running)", min_below_agent=1)
            out, err = waiting.communicate(timeout=30)
        # The running turn's caller is told the session was closed under it (issue 9
        # item 7: SESSION_CLOSED, exit 1), after the session_ended banner.
        assert waiting.returncode == 1, (out, err)
        assert "[error] the session was closed while this request ran" in err, (out, err)


def test_library_claude_cancel_and_abandoned_iterator(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    tether_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_timing: Timing,
) -> None:
    """The library path: ``session.cancel()``, and a consumer that walks away mid-turn.

    ``tether.Client`` has no agent-environment parameter: the owner it starts inherits
    this process's environment. So the agent's scratch environment goes into ours (and
    ``IS_SANDBOX`` out of it) for the duration of the test.
    """
    import tether

    for key in list(os.environ):
        if key not in ("PATH", "LANG", "LC_ALL", "TZ", "TETHER_HOME", "XDG_CONFIG_HOME"):
            monkeypatch.delenv(key)
    for key, value in claude_agent_env.items():
        if key != "XDG_CONFIG_HOME":
            monkeypatch.setenv(key, value)

    def hangs() -> int:
        return sum(r.reply_kind == "hang" for r in fake_anthropic.message_requests())

    async def wait_hangs(n: int) -> None:
        await asyncio.to_thread(wait_until, lambda: hangs() >= n, 30, f"stalled request {n}")

    async def wait_idle(session: Any) -> None:
        async with asyncio.timeout(10):
            while True:  # the owner's status, polled (it has no push for "idle")
                if (await session.status())["status"] == "idle":
                    return
                await asyncio.sleep(0.02)

    async def main() -> tuple[dict[int, int], str, dict[str, Any]]:
        client = tether.Client(home=tether_home)
        session = await client.ensure_session(claude_agent_cmd, cwd=project_dir, name="lib")
        try:
            text, stop = await session.run("warm up", timeout=60)
            assert (text, stop) == ("fake-claude: warm up", "end_turn")
            pid = (await session.status())["agentPid"]

            # 1. session.cancel() from another task: the turn ends `cancelled`.
            async def consume(prompt: str) -> list[Any]:
                return [e async for e in session.prompt(prompt, timeout=60)]

            task = asyncio.ensure_future(consume("HANG one"))
            await wait_hangs(1)
            t0 = asyncio.get_running_loop().time()
            assert await session.cancel() is True
            events = await asyncio.wait_for(task, 30)
            record_timing(
                "library: claude session.cancel() -> TurnEnded",
                asyncio.get_running_loop().time() - t0,
            )
            assert isinstance(events[-1], tether.TurnEnded)
            assert events[-1].stop_reason == "cancelled"

            # 2. The consumer is cancelled mid-turn: the owner's turn is cancelled too,
            #    so the next prompt runs at once instead of queueing behind it.
            task = asyncio.ensure_future(consume("HANG two"))
            await wait_hangs(2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await wait_idle(session)
            text, stop = await session.run("after the cancels", timeout=30)
            assert (text, stop) == ("fake-claude: after the cancels", "end_turn")
            st = await session.status()
            assert st["agentPid"] == pid
            tree = record_tree(st["keeperPid"], st["agentPid"])
            lease = str(st["leaseId"])
        finally:
            closed = await session.close()
        return tree, lease, closed

    tree, lease, closed = asyncio.run(main())
    assert_close_proved(tree, lease, closed)


def test_connection_claude_pending_permission_answered_cancelled(
    claude_agent_cmd: list[str],
    claude_agent_env: dict[str, str],
    fake_anthropic: FakeAnthropic,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    """Cancel while claude's permission request is still undecided (LiveAgent level).

    Through the owner this state cannot be reached: it has no interactive permission hook,
    so approve-reads rejects an ``execute`` tool at once. Here a hook that never decides
    keeps the request open, as an orchestrator waiting for a human would.
    """
    from tether.acp.connection import ClientOptions
    from tether.acp.policy import PermissionMode
    from tether.live_agent import AgentConfig, LiveAgent
    from tether.state.registry import Registry

    frames: list[tuple[str, dict[str, Any]]] = []

    async def main() -> tuple[dict[int, int], str]:
        asked = asyncio.Event()

        async def never_decides(_params: dict[str, Any]) -> dict[str, Any] | None:
            asked.set()
            await asyncio.Event().wait()
            return None

        registry = Registry()
        cfg = AgentConfig(
            argv=claude_agent_cmd,
            cwd=str(project_dir),
            env=claude_agent_env,
            client=ClientOptions(
                permission_mode=PermissionMode.APPROVE_READS,
                permission_hook=never_decides,
                on_frame=lambda d, f: frames.append((d, f)),
            ),
        )
        live = await LiveAgent.start(cfg, registry)
        tree: dict[int, int] = {}
        try:
            loop = asyncio.get_running_loop()
            task = asyncio.ensure_future(
                live.prompt([{"type": "text", "text": TOOL_PROMPT}], lambda f: None, ceiling=60)
            )
            await asyncio.wait_for(asked.wait(), 60)
            t0 = loop.time()
            assert live.cancel()
            result = await asyncio.wait_for(task, 30)
            record_timing(
                "LiveAgent claude cancel (permission pending) -> turn ends", loop.time() - t0
            )
            assert result.stop_reason == "cancelled"

            (perm,) = [
                f
                for d, f in frames
                if d == "in" and f.get("method") == "session/request_permission"
            ]
            answers = [
                f
                for d, f in frames
                if d == "out" and "method" not in f and f.get("id") == perm["id"]
            ]
            assert [a.get("result") for a in answers] == [{"outcome": {"outcome": "cancelled"}}]
            assert not (project_dir / "out.txt").exists()

            # The session stays usable; the interrupted tool use is closed by the agent.
            updates: list[dict[str, Any]] = []
            again = await live.prompt(
                [{"type": "text", "text": "after the cancel"}], updates.append, ceiling=60
            )
            assert again.stop_reason == "end_turn"
            assert chunks_text(updates) == "fake-claude: after the cancel"
            assert live.proc.keeper_pid is not None
            assert live.proc.pid is not None
            tree = record_tree(live.proc.keeper_pid, live.proc.pid)
            assert len(tree) >= 3  # keeper, agent, and the Claude Code child
        finally:
            report = await live.aclose(close_session=True)
            registry.close()
        assert report.survivors == ()
        return tree, live.proc.lease_id

    tree, lease = asyncio.run(main())
    assert alive_of(tree) == {}
    assert marker_carriers(lease) == []
    # Every frame Tether sent validates (requests by method, answers by what they answer).
    theirs = {f["id"]: f["method"] for d, f in frames if d == "in" and "method" in f and "id" in f}
    bad = []
    for d, f in frames:
        if d != "out":
            continue
        errs = schema_errors(f, "client", None if "method" in f else theirs.get(f.get("id")))
        if errs:
            bad.append((f, errs))
    assert not bad, bad


# --- codex-acp 0.16.0 through the owner ---------------------------------------------------


@pytest.fixture
def codex_owner_env(codex_legacy_agent_env: dict[str, str], tether_home: Path) -> dict[str, str]:
    # legacy codex-acp authenticates by an env_var method; the owner reads this itself.
    (tether_home / "config.toml").write_text('[auth]\n"openai-api-key" = ""\n')
    return tether_env(codex_legacy_agent_env)


def test_owner_codex_cancel_from_another_process_then_close(
    codex_legacy_agent_cmd: list[str],
    codex_owner_env: dict[str, str],
    blackhole: BlackHole,
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(codex_legacy_agent_cmd[0], codex_owner_env, project_dir)
    with owner_session(cli, timing=record_timing):
        with cli.popen("prompt", "hello codex") as waiting:
            assert blackhole.wait_for_connection(30), "codex never reached its provider"
            cancel_waiting_prompt(cli, waiting, record_timing, "codex 0.16")
        proof = close_and_prove(cli, record_timing, "codex 0.16", min_below_agent=1)
    # The Node wrapper's native child was part of the recorded (and now dead) tree.
    assert any("codex-acp-linux" in cmd for cmd in proof.below_agent.values()), proof.below_agent


# --- the SDK's echo agent through the owner ----------------------------------------------


def test_owner_sdk_echo_three_prompts_cli(
    sdk_echo_agent_cmd: list[str],
    sdk_echo_agent_env: dict[str, str],
    project_dir: Path,
    record_timing: Timing,
) -> None:
    cli = Cli(shlex.join(sdk_echo_agent_cmd), tether_env(sdk_echo_agent_env), project_dir)
    with owner_session(cli):
        pids = []
        for i, text in enumerate(["one", "two words", "three: the last"]):
            ran = cli.ok("--format", "quiet", "prompt", text)
            record_timing(
                "owner: sdk echo prompt, first (starts agent)"
                if i == 0
                else "owner: sdk echo prompt, warm",
                ran.secs,
            )
            assert ran.out.strip() == text
            pids.append(cli.status()["agentPid"])
        assert len(set(pids)) == 1, pids
        assert isinstance(pids[0], int), pids
        close_and_prove(cli, record_timing, "sdk echo", min_below_agent=0)


def test_owner_sdk_echo_three_prompts_library(
    sdk_echo_agent_cmd: list[str],
    project_dir: Path,
    tether_home: Path,
) -> None:
    import tether

    async def main() -> tuple[dict[int, int], str, dict[str, Any]]:
        client = tether.Client(home=tether_home)
        session = await client.ensure_session(sdk_echo_agent_cmd, cwd=project_dir, name="lib")
        try:
            pids = []
            for text in ["one", "two words", "three: the last"]:
                events = [e async for e in session.prompt(text, timeout=30)]
                chunks = "".join(e.text for e in events if isinstance(e, tether.AgentMessageChunk))
                assert chunks == text
                assert isinstance(events[-1], tether.TurnEnded)
                assert events[-1].stop_reason == "end_turn"
                pids.append((await session.status())["agentPid"])
            assert len(set(pids)) == 1, pids
            assert isinstance(pids[0], int), pids
            st = await session.status()
            tree = record_tree(st["keeperPid"], st["agentPid"])
            lease = str(st["leaseId"])
        finally:
            closed = await session.close()
        return tree, lease, closed

    tree, lease, closed = asyncio.run(main())
    assert_close_proved(tree, lease, closed)
