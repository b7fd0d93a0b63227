"""The bundled mock agent, driven as a real subprocess over raw NDJSON.

The driver here is deliberately tiny and independent of Tether's own client: a reader
thread per pipe, a queue of stdout lines, and helpers to run a turn. Every frame the agent
writes is checked against the official ACP schema when the agent is closed (fixture
teardown): the envelope against the schema's root (agent or protocol-level message), and
the payload against the ``$defs`` entry whose ``x-method`` names its method.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests import _proctree

pytestmark = pytest.mark.integration

SCHEMA_PATH = Path(__file__).parents[1] / "golden" / "acp-schema.json"
AGENT_CMD = [sys.executable, "-m", "tether.testing.mock_agent"]
INIT = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}
TIMEOUT = 10.0

Msg = dict[str, Any]


# -- schema oracle ------------------------------------------------------------------


class SchemaOracle:
    """Validators for the envelope and for each method's payload, built from the schema."""

    def __init__(self, schema: Msg) -> None:
        from jsonschema import Draft202012Validator

        defs = schema["$defs"]
        # The root is anyOf [Agent, Client, ProtocolLevel]; the agent may send the first
        # and the last ($/cancel_request).
        agent_side = [b for b in schema["anyOf"] if b.get("title") in ("Agent", "ProtocolLevel")]
        assert len(agent_side) == 2
        self._root = Draft202012Validator({"$defs": defs, "anyOf": agent_side})
        self._by_def: dict[str, Any] = {}
        self._cls = Draft202012Validator
        self._defs = defs
        self.requests: dict[str, str] = {}  # agent->client request method -> def
        self.responses: dict[str, str] = {}  # client->agent request method -> result def
        self.notifications: dict[str, str] = {}
        for name, d in defs.items():
            method, side = d.get("x-method"), d.get("x-side")
            if method is None:
                continue
            if side == "client" and name.endswith("Request"):
                self.requests[method] = name
            elif side == "agent" and name.endswith("Response"):
                self.responses[method] = name
            elif name.endswith("Notification"):
                self.notifications[method] = name

    def check(self, instance: Any, def_name: str) -> list[str]:
        v = self._by_def.get(def_name)
        if v is None:
            v = self._by_def[def_name] = self._cls(
                {"$defs": self._defs, "$ref": f"#/$defs/{def_name}"}
            )
        return [f"{def_name}: {e.message}" for e in v.iter_errors(instance)]

    def check_root(self, frame: Msg) -> list[str]:
        return [f"root: {e.message}" for e in self._root.iter_errors(frame)]


_ORACLE: SchemaOracle | None = None


def oracle() -> SchemaOracle:
    global _ORACLE
    if not SCHEMA_PATH.exists():
        pytest.skip(f"ACP schema not found at {SCHEMA_PATH}")
    if _ORACLE is None:
        _ORACLE = SchemaOracle(json.loads(SCHEMA_PATH.read_text()))
    return _ORACLE


def _shape(obj: Any) -> Any:
    """The frame with every "text" value blanked: frames of one shape validate alike."""
    if isinstance(obj, dict):
        return {
            k: ("" if k == "text" and isinstance(v, str) else _shape(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_shape(x) for x in obj]
    return obj


# -- the driver -----------------------------------------------------------------------


@dataclass
class Turn:
    """Everything the agent sent during one prompt turn, in order."""

    response: Msg | None
    updates: list[Msg] = field(default_factory=list)  # session/update params
    requests: list[Msg] = field(default_factory=list)  # agent -> client requests
    notifications: list[Msg] = field(default_factory=list)  # any other notification
    raw: list[bytes] = field(default_factory=list)  # lines that are not JSON

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [
            u["update"]["content"]["text"]
            for u in self.updates
            if u["update"].get("sessionUpdate") == kind
        ]

    def kinds(self) -> list[str]:
        return [u["update"]["sessionUpdate"] for u in self.updates]

    @property
    def stop_reason(self) -> str:
        assert self.response is not None
        assert "result" in self.response, self.response
        return str(self.response["result"]["stopReason"])


class Agent:
    """One mock agent process and a raw NDJSON conversation with it."""

    def __init__(self, flags: tuple[str, ...], env: dict[str, str] | None, cmd: list[str]) -> None:
        full_env = dict(os.environ)
        full_env.pop("MOCK_AGENT_KEY", None)
        full_env.update(env or {})
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [*cmd, *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.emitted: list[bytes] = []  # every stdout line, for schema validation
        self.stderr = bytearray()
        self.stdout_eof = threading.Event()
        self.sent_methods: dict[str, str] = {}  # our request id (JSON) -> method
        self.next_id = 1
        self.allow_non_json = False
        self.allow_unknown_kinds = False
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip(b"\n")
            self.emitted.append(line)
            self.lines.put(line)
        self.stdout_eof.set()
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.stderr += chunk

    # sending

    def send(self, msg: Msg) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: Msg, req_id: Any = ...) -> Any:
        if req_id is ...:
            req_id = self.next_id
            self.next_id += 1
        self.sent_methods[json.dumps(req_id)] = method
        self.send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        return req_id

    def notify(self, method: str, params: Msg) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # receiving

    def recv(self, timeout: float = TIMEOUT) -> Msg | bytes:
        """The next stdout frame, parsed (or the raw line if it is not JSON)."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no frame from the agent within {timeout} s") from None
        if line is None:
            self.lines.put(None)
            raise EOFError("agent stdout closed")
        try:
            msg = json.loads(line)
        except ValueError:
            return line
        assert isinstance(msg, dict)
        return msg

    def expect_silence(self, seconds: float) -> None:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected frame: {(line or b'EOF')[:300]!r}")

    def call(self, method: str, params: Msg, req_id: Any = ...) -> tuple[Msg, list[Msg]]:
        """Send a request; return its response and the notifications before it."""
        req_id = self.request(method, params, req_id)
        return self.wait_response(req_id)

    def wait_response(self, req_id: Any, timeout: float = TIMEOUT) -> tuple[Msg, list[Msg]]:
        notes: list[Msg] = []
        deadline = time.monotonic() + timeout
        while True:
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            assert isinstance(msg, dict), msg
            if "method" not in msg and json.dumps(msg.get("id")) == json.dumps(req_id):
                return msg, notes
            notes.append(msg)

    def handshake(self, **new_params: Any) -> str:
        response, _ = self.call("initialize", INIT)
        assert "result" in response, response
        return self.new_session(**new_params)

    def new_session(self, **params: Any) -> str:
        response, _ = self.call("session/new", {"cwd": "/tmp", "mcpServers": [], **params})
        assert "result" in response, response
        update = self.recv()
        assert isinstance(update, dict)
        assert update["method"] == "session/update", update
        assert update["params"]["update"]["sessionUpdate"] == "available_commands_update"
        return str(response["result"]["sessionId"])

    def start_prompt(self, sid: str, text: str, req_id: Any = ...) -> Any:
        return self.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}, req_id
        )

    def collect(
        self,
        req_id: Any,
        on_request: Callable[[Msg], Msg | None] | None = None,
        timeout: float = TIMEOUT,
        until: Callable[[Turn], bool] | None = None,
    ) -> Turn:
        """Gather frames until the response to ``req_id`` (or ``until`` holds)."""
        turn = Turn(response=None)
        deadline = time.monotonic() + timeout
        while until is None or not until(turn):
            msg = self.recv(max(0.01, deadline - time.monotonic()))
            if isinstance(msg, bytes):
                turn.raw.append(msg)
            elif "method" not in msg:
                if json.dumps(msg.get("id")) == json.dumps(req_id):
                    turn.response = msg
                    return turn
                raise AssertionError(f"unexpected response {msg}")
            elif "id" in msg:
                turn.requests.append(msg)
                if on_request is not None:
                    reply = on_request(msg)
                    if reply is not None:
                        self.send({"jsonrpc": "2.0", "id": msg["id"], **reply})
            elif msg["method"] == "session/update":
                turn.updates.append(msg["params"])
            else:
                turn.notifications.append(msg)
        return turn

    def prompt(
        self, sid: str, text: str, on_request: Callable[[Msg], Msg | None] | None = None
    ) -> Turn:
        return self.collect(self.start_prompt(sid, text), on_request)

    # ending

    def close(self, timeout: float = 5.0) -> int | None:
        """Close stdin and wait for exit; SIGKILL our own child if it does not go."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own unreaped child: its pid cannot have been reused
            code = None
            self.proc.wait()
        for t in self._threads:
            t.join(5)
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code

    def validate(self) -> None:
        """Check every frame the agent wrote against the ACP schema."""
        orc = oracle()
        errors: list[str] = []
        seen: set[str] = set()
        for line in self.emitted:
            try:
                frame = json.loads(line)
            except ValueError:
                if not self.allow_non_json:
                    errors.append(f"not JSON: {line[:200]!r}")
                continue
            shape = json.dumps(_shape(frame), sort_keys=True)
            if shape in seen:
                continue
            seen.add(shape)
            problems = orc.check_root(frame)
            method = frame.get("method")
            if method is not None and "id" in frame:
                def_name = orc.requests.get(method)
                if def_name is None:
                    problems.append(f"agent sent unknown request {method}")
                else:
                    problems += orc.check(frame.get("params"), def_name)
            elif method is not None:
                def_name = orc.notifications.get(method)
                if def_name is not None:
                    params = frame.get("params")
                    kind = (params or {}).get("update", {}).get("sessionUpdate")
                    if not (self.allow_unknown_kinds and kind == "mock_future_kind"):
                        problems += orc.check(params, def_name)
                elif not method.startswith("_"):
                    problems.append(f"agent sent unknown notification {method}")
            else:
                if ("result" in frame) == ("error" in frame):
                    problems.append("response needs exactly one of result/error")
                if "error" in frame:
                    problems += orc.check(frame["error"], "Error")
                else:
                    asked = self.sent_methods.get(json.dumps(frame.get("id")))
                    if asked is None:
                        problems.append("response to an id we never sent")
                    else:
                        problems += orc.check(frame["result"], orc.responses[asked])
            errors += [f"{p} in {line[:300]!r}" for p in problems]
        assert not errors, "\n".join(errors[:20])


@pytest.fixture
def start() -> Iterator[Callable[..., Agent]]:
    """Start mock agents; at teardown close them all and validate what they sent."""
    oracle()  # skip early if there is no schema to validate against
    agents: list[Agent] = []

    def _start(
        *flags: str, env: dict[str, str] | None = None, cmd: list[str] | None = None
    ) -> Agent:
        agent = Agent(flags, env, AGENT_CMD if cmd is None else cmd)
        agents.append(agent)
        return agent

    yield _start
    for agent in agents:
        agent.close()
    for agent in agents:
        agent.validate()


def allow(msg: Msg) -> Msg:
    return {"result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}


# -- process helpers ------------------------------------------------------------------


def kill_verified(pid: int, starttime: int) -> None:
    """SIGKILL ``pid`` only if it is still our descendant with the same starttime."""
    st = _proctree.descendants().get(pid)
    if st is None or st[1] != starttime:
        return
    fd = os.pidfd_open(pid)
    try:
        again = _proctree.descendants().get(pid)
        if again is not None and again[1] == starttime:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        os.close(fd)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        st = _proctree.descendants().get(pid)
        if st is None or st[0] == "Z":
            break
        time.sleep(0.01)
    _proctree.reap_zombie_children()


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


# -- handshake and plumbing -------------------------------------------------------------


def test_initialize_answers_v1_with_agent_info(start: Callable[..., Agent]) -> None:
    """initialize answers protocolVersion 1, the agent's name and no optional capabilities."""
    agent = start()
    response, notes = agent.call("initialize", INIT)
    result = response["result"]
    assert notes == []
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == "tether-mock-agent"
    caps = result["agentCapabilities"]
    assert caps["loadSession"] is False
    assert caps["sessionCapabilities"] == {}
    assert result["authMethods"] == []


def test_startup_to_initialize_is_fast(start: Callable[..., Agent]) -> None:
    """From process start to the initialize answer takes well under 100 ms."""
    times = []
    for _ in range(7):
        agent = start()
        agent.call("initialize", INIT)
        times.append(time.monotonic() - agent.started)
        agent.close()
    print(
        f"mock agent start -> initialize answered: min {min(times) * 1000:.1f} ms, "
        f"median {statistics.median(times) * 1000:.1f} ms"
    )
    assert min(times) < 0.1


def test_console_script_runs(start: Callable[..., Agent]) -> None:
    """The tether-mock-agent console script starts the same agent."""
    script = Path(sys.executable).parent / "tether-mock-agent"
    if not script.exists():
        pytest.skip("tether-mock-agent is not installed next to this Python")
    agent = start(cmd=[str(script)])
    response, _ = agent.call("initialize", INIT)
    assert response["result"]["agentInfo"]["name"] == "tether-mock-agent"


@pytest.mark.parametrize("req_id", ["abc", 0, -7, 2**63 + 5, None, "1"])
def test_request_ids_are_echoed_exactly(start: Callable[..., Agent], req_id: Any) -> None:
    """Responses carry the request's id with its exact JSON value and type."""
    agent = start()
    response, _ = agent.call("initialize", INIT, req_id=req_id)
    assert "id" in response
    assert json.dumps(response["id"]) == json.dumps(req_id)


def test_unknown_method_is_method_not_found(start: Callable[..., Agent]) -> None:
    """Unknown requests get -32601 and unknown notifications are ignored."""
    agent = start()
    agent.notify("_tether/whatever", {})
    response, notes = agent.call("session/list", {})
    assert response["error"]["code"] == -32601
    assert notes == []


def test_garbage_input_is_a_parse_error(start: Callable[..., Agent]) -> None:
    """A line that is not JSON gets -32700 with id null, and the agent carries on."""
    agent = start()
    assert agent.proc.stdin is not None
    agent.proc.stdin.write(b"{nope\n")
    agent.proc.stdin.flush()
    msg = agent.recv()
    assert isinstance(msg, dict)
    assert msg["id"] is None
    assert msg["error"]["code"] == -32700
    response, _ = agent.call("initialize", INIT)
    assert "result" in response


def test_session_new_numbers_sessions_and_lists_commands(start: Callable[..., Agent]) -> None:
    """session/new answers mock-<n> and then sends an available_commands_update."""
    agent = start()
    agent.call("initialize", INIT)
    response, _ = agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert response["result"] == {"sessionId": "mock-1"}
    update = agent.recv()
    assert isinstance(update, dict)
    assert update["params"]["sessionId"] == "mock-1"
    names = [c["name"] for c in update["params"]["update"]["availableCommands"]]
    assert {"echo", "stream", "tool", "spawn-daemon"} <= set(names)
    assert agent.new_session() == "mock-2"


def test_agent_exits_on_stdin_eof(start: Callable[..., Agent]) -> None:
    """Closing stdin makes the agent exit 0 promptly, even in the middle of a turn."""
    agent = start()
    sid = agent.handshake()
    agent.start_prompt(sid, "sleep 60000")
    t0 = time.monotonic()
    assert agent.close() == 0
    assert time.monotonic() - t0 < 2


# -- prompt basics ---------------------------------------------------------------------


def test_plain_text_is_echoed(start: Callable[..., Agent]) -> None:
    """A prompt whose first word is not a verb is echoed whole and ends end_turn."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "hello world ; echo not a script")
    assert turn.texts() == ["hello world ; echo not a script"]
    assert turn.stop_reason == "end_turn"
    assert all(u["sessionId"] == sid for u in turn.updates)


def test_prompt_text_joins_all_text_blocks(start: Callable[..., Agent]) -> None:
    """The script is the concatenation of the text blocks; other blocks are skipped."""
    agent = start()
    sid = agent.handshake()
    blocks = [
        {"type": "text", "text": "echo one"},
        {"type": "resource_link", "uri": "file:///tmp/x", "name": "x"},
        {"type": "text", "text": "\necho two"},
    ]
    req = agent.request("session/prompt", {"sessionId": sid, "prompt": blocks})
    turn = agent.collect(req)
    assert turn.texts() == ["one", "two"]


def test_echo_and_separators(start: Callable[..., Agent]) -> None:
    """Commands split at newlines and at ' ; ', and echo keeps its text verbatim."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "echo a  b ; echo c;d\necho   e")
    assert turn.texts() == ["a  b", "c;d", "e"]


def test_bad_script_is_invalid_params(start: Callable[..., Agent]) -> None:
    """A script with an unknown verb or a bad number is refused with -32602 before running."""
    agent = start()
    sid = agent.handshake()
    for text in ("echo hi ; frobnicate", "sleep soon", "stream"):
        turn = agent.prompt(sid, text)
        assert turn.response is not None
        assert turn.response["error"]["code"] == -32602, text
        assert turn.updates == []


def test_stream_10000_chunks_fast_and_in_order(start: Callable[..., Agent]) -> None:
    """stream 10000 sends 10,000 numbered chunks, all before the end_turn answer."""
    agent = start()
    sid = agent.handshake()
    t0 = time.monotonic()
    turn = agent.prompt(sid, "stream 10000")
    elapsed = time.monotonic() - t0
    print(f"stream 10000: {elapsed * 1000:.0f} ms including this test's reader")
    assert turn.texts() == [f"chunk {i}\n" for i in range(10000)]
    assert turn.stop_reason == "end_turn"
    assert elapsed < 5


def test_stream_with_text(start: Callable[..., Agent]) -> None:
    """stream N TEXT uses TEXT (JSON-escaped correctly) in every chunk."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, 'stream 3 say "hi" \\ ünï')
    assert turn.texts() == [f'say "hi" \\ ünï {i}\n' for i in range(3)]


def test_cancel_stops_a_long_stream(start: Callable[..., Agent]) -> None:
    """A session/cancel during a stream stops it early with stopReason cancelled."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "stream 1000000")
    agent.collect(req, until=lambda t: len(t.updates) >= 1)
    agent.notify("session/cancel", {"sessionId": sid})
    turn = agent.collect(req, timeout=30)
    assert turn.stop_reason == "cancelled"
    assert len(turn.updates) < 999_999


def test_sleep_then_end_turn(start: Callable[..., Agent]) -> None:
    """sleep MS waits about MS milliseconds and the turn then goes on."""
    agent = start()
    sid = agent.handshake()
    t0 = time.monotonic()
    turn = agent.prompt(sid, "sleep 200 ; echo woke")
    assert time.monotonic() - t0 >= 0.2
    assert turn.texts() == ["woke"]
    assert turn.stop_reason == "end_turn"


def test_cancel_ends_sleep_at_once(start: Callable[..., Agent]) -> None:
    """A session/cancel during sleep answers the prompt cancelled immediately."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "echo before ; sleep 60000 ; echo after")
    agent.collect(req, until=lambda t: len(t.updates) >= 1)
    t0 = time.monotonic()
    agent.notify("session/cancel", {"sessionId": sid})
    turn = agent.collect(req)
    assert time.monotonic() - t0 < 1
    assert turn.stop_reason == "cancelled"
    assert turn.texts() == []


def test_cancel_request_on_prompt_answers_32800(start: Callable[..., Agent]) -> None:
    """A $/cancel_request naming a running prompt answers it with error -32800."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "sleep 60000", req_id="p-1")
    agent.notify("$/cancel_request", {"requestId": "p-other"})
    agent.notify("$/cancel_request", {"requestId": "p-1"})
    turn = agent.collect(req)
    assert turn.response is not None
    assert turn.response["error"]["code"] == -32800


def test_hang_never_answers_but_agent_serves_others(start: Callable[..., Agent]) -> None:
    """hang leaves the prompt unanswered even on cancel while other sessions still work."""
    agent = start()
    sid = agent.handshake()
    hung = agent.start_prompt(sid, "hang ; echo never")
    agent.notify("session/cancel", {"sessionId": sid})
    agent.notify("$/cancel_request", {"requestId": hung})
    other = agent.new_session()
    turn = agent.prompt(other, "echo alive")
    assert turn.texts() == ["alive"]
    agent.expect_silence(0.3)


def test_late_answers_after_cancel(start: Callable[..., Agent]) -> None:
    """late ignores session/cancel and answers end_turn with its text after the delay."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "late 300 sorry I'm late ; echo never")
    agent.notify("session/cancel", {"sessionId": sid})
    agent.expect_silence(0.15)
    turn = agent.collect(req)
    assert turn.texts() == ["sorry I'm late"]
    assert turn.stop_reason == "end_turn"


def test_late_default_text(start: Callable[..., Agent]) -> None:
    """late without TEXT says "late answer"."""
    agent = start()
    sid = agent.handshake()
    assert agent.prompt(sid, "late 10").texts() == ["late answer"]


def test_concurrent_turns_in_two_sessions(start: Callable[..., Agent]) -> None:
    """Turns of different sessions run concurrently and updates carry their own sessionId."""
    agent = start()
    sid_a = agent.handshake()
    sid_b = agent.new_session()
    slow = agent.start_prompt(sid_a, "sleep 300 ; echo slow")
    fast = agent.start_prompt(sid_b, "echo fast")
    frames: list[Msg] = []
    while len([f for f in frames if "method" not in f]) < 2:
        msg = agent.recv()
        assert isinstance(msg, dict)
        frames.append(msg)
    answers = [f["id"] for f in frames if "method" not in f]
    assert answers == [fast, slow]
    by_session = {
        f["params"]["update"]["content"]["text"]: f["params"]["sessionId"]
        for f in frames
        if f.get("method") == "session/update"
    }
    assert by_session == {"fast": sid_b, "slow": sid_a}


# -- tools, permissions, fs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "status", "text"),
    [
        ("allow", "completed", "permission: allowed"),
        ("allow-always", "completed", "permission: allowed"),
        ("reject", "failed", "permission: denied"),
    ],
)
def test_tool_permission_selected(
    start: Callable[..., Agent], option: str, status: str, text: str
) -> None:
    """tool sends tool_call and a permission request, then reports the chosen option."""
    agent = start()
    sid = agent.handshake()

    def answer(msg: Msg) -> Msg:
        return {"result": {"outcome": {"outcome": "selected", "optionId": option}}}

    turn = agent.prompt(sid, "tool execute Run ls", answer)
    assert turn.stop_reason == "end_turn"
    (req,) = turn.requests
    assert req["method"] == "session/request_permission"
    params = req["params"]
    assert params["sessionId"] == sid
    assert params["toolCall"]["toolCallId"] == "call-1"
    kinds = {o["optionId"]: o["kind"] for o in params["options"]}
    assert kinds == {"allow": "allow_once", "allow-always": "allow_always", "reject": "reject_once"}
    call, update, chunk = (u["update"] for u in turn.updates)
    assert call["sessionUpdate"] == "tool_call"
    assert (call["toolCallId"], call["kind"], call["status"], call["title"]) == (
        "call-1",
        "execute",
        "pending",
        "Run ls",
    )
    assert update == {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": status}
    assert chunk["content"]["text"] == text


def test_tool_permission_cancelled_ends_turn(start: Callable[..., Agent]) -> None:
    """A cancelled permission outcome ends the turn with stopReason cancelled."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "tool edit ; echo never")
    turn = agent.collect(req, until=lambda t: bool(t.requests))
    assert turn.updates[0]["update"]["title"] == "mock edit"
    agent.notify("session/cancel", {"sessionId": sid})
    agent.send(
        {
            "jsonrpc": "2.0",
            "id": turn.requests[0]["id"],
            "result": {"outcome": {"outcome": "cancelled"}},
        }
    )
    rest = agent.collect(req)
    assert rest.stop_reason == "cancelled"
    assert rest.texts() == []


def test_tool_permission_error_continues(start: Callable[..., Agent]) -> None:
    """An error answer to the permission request is reported and the script goes on."""
    agent = start()
    sid = agent.handshake()

    def refuse(msg: Msg) -> Msg:
        return {"error": {"code": -32603, "message": "no"}}

    turn = agent.prompt(sid, "tool read ; echo next", refuse)
    assert turn.texts() == ["permission: error -32603", "next"]
    assert turn.stop_reason == "end_turn"


def test_cancel_request_verb(start: Callable[..., Agent]) -> None:
    """cancel-request sends a permission request, cancels it, and reports the -32800 answer."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "cancel-request ; echo next")
    turn = agent.collect(req, until=lambda t: bool(t.notifications))
    (perm,) = turn.requests
    (cancel,) = turn.notifications
    assert cancel["method"] == "$/cancel_request"
    assert cancel["params"] == {"requestId": perm["id"]}
    agent.send(
        {"jsonrpc": "2.0", "id": perm["id"], "error": {"code": -32800, "message": "Cancelled"}}
    )
    rest = agent.collect(req)
    assert rest.texts() == ["cancel_request: answered -32800", "next"]


def test_fs_read_and_write(start: Callable[..., Agent], tmp_path: Path) -> None:
    """read and write ask the client through fs/* and report content, success or errors."""
    agent = start()
    sid = agent.handshake()
    target = tmp_path / "f.txt"

    def fs(msg: Msg) -> Msg:
        params = msg["params"]
        assert params["sessionId"] == sid
        path = Path(params["path"])
        if msg["method"] == "fs/write_text_file":
            path.write_text(params["content"])
            return {"result": {}}
        if not path.exists():
            return {"error": {"code": -32002, "message": "Resource not found"}}
        return {"result": {"content": path.read_text()}}

    turn = agent.prompt(
        sid, f"write {target} two  words ; read {target} ; read {tmp_path}/nope", fs
    )
    assert [r["method"] for r in turn.requests] == [
        "fs/write_text_file",
        "fs/read_text_file",
        "fs/read_text_file",
    ]
    assert turn.texts() == [f"wrote {target}", "two  words", "fs error -32002 Resource not found"]
    assert target.read_text() == "two  words"


def test_fs_write_error(start: Callable[..., Agent]) -> None:
    """A refused fs/write_text_file is reported as fs error CODE MESSAGE."""
    agent = start()
    sid = agent.handshake()

    def refuse(msg: Msg) -> Msg:
        return {"error": {"code": -32602, "message": "outside workspace"}}

    turn = agent.prompt(sid, "write /etc/x hi", refuse)
    assert turn.texts() == ["fs error -32602 outside workspace"]


# -- processes ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["group", "setsid", "daemon", "envclear"])
def test_spawn_outlives_agent_without_holding_its_pipes(
    start: Callable[..., Agent], kind: str
) -> None:
    """spawn-* children are detached as named, on /dev/null, and survive the agent's exit."""
    agent = start("--ignore-sigterm") if kind == "group" else start()
    sid = agent.handshake()
    turn = agent.prompt(sid, f"spawn-{kind}")
    (text,) = turn.texts()
    assert text.startswith("spawned pid=")
    assert text.endswith(f" kind={kind}")
    pid = int(text.split()[1].removeprefix("pid="))
    st = _proctree.descendants()[pid]
    try:
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null"
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[1:2] == [b"3600"]
        status = proc_status(pid)
        agent_sid = os.getsid(agent.proc.pid)
        if kind == "group":
            assert os.getpgid(pid) == pid
            assert os.getsid(pid) == agent_sid
            assert int(status["PPid"]) == agent.proc.pid
            assert int(status["SigIgn"], 16) & (1 << (signal.SIGTERM - 1))  # inherited
        elif kind == "daemon":
            assert os.getsid(pid) not in (pid, agent_sid)  # new session, not its leader
            assert int(status["PPid"]) == os.getpid()  # orphaned: re-parented to us
        else:
            assert os.getsid(pid) == pid
            assert int(status["PPid"]) == agent.proc.pid
            assert not int(status["SigIgn"], 16) & (1 << (signal.SIGTERM - 1))
        if kind == "envclear":
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert f.read() == b""
        assert agent.close() == 0
        assert agent.stdout_eof.wait(5)
        assert _proctree.descendants()[pid][0] != "Z"  # still alive after the agent
    finally:
        kill_verified(pid, st[1])


def test_crash_exits_mid_turn(start: Callable[..., Agent]) -> None:
    """crash CODE sends "crashing" and exits with CODE without answering."""
    agent = start()
    sid = agent.handshake()
    req = agent.start_prompt(sid, "crash 3 ; echo never")
    turn = agent.collect(req, until=lambda t: bool(t.updates))
    assert turn.texts() == ["crashing"]
    assert agent.proc.wait(5) == 3
    with pytest.raises(EOFError):
        agent.recv()


def test_exit_after_answer(start: Callable[..., Agent]) -> None:
    """exit CODE answers the turn first, then exits with CODE."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "exit 7 ; echo last ; stop max_tokens")
    assert turn.texts() == ["last"]
    assert turn.stop_reason == "max_tokens"
    assert agent.proc.wait(5) == 7


def test_stderr_flood(start: Callable[..., Agent]) -> None:
    """stderr BYTES writes exactly BYTES bytes to stderr, then says "stderr done"."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "stderr 3000000")
    assert turn.texts() == ["stderr done"]
    agent.close()
    assert len(agent.stderr) == 3_000_000


def test_log_stderr_logs_each_received_message(start: Callable[..., Agent]) -> None:
    """--log-stderr writes one stderr line per message the agent receives."""
    agent = start("--log-stderr")
    agent.handshake()
    agent.notify("_x/y", {})
    agent.close()
    lines = bytes(agent.stderr).splitlines()
    assert len(lines) == 3
    assert all(line.startswith(b"mock-agent <- {") for line in lines)


def test_malformed_and_oversized_lines(start: Callable[..., Agent]) -> None:
    """malformed and oversized write non-JSON lines to stdout and the turn carries on."""
    agent = start()
    agent.allow_non_json = True
    sid = agent.handshake()
    turn = agent.prompt(sid, "malformed ; oversized 5000000 ; echo still here")
    assert turn.raw == [b"{this is not json", b"x" * 5_000_000]
    assert turn.texts() == ["still here"]
    assert turn.stop_reason == "end_turn"


def test_unknown_update_kinds(start: Callable[..., Agent]) -> None:
    """unknown-update sends a future update kind, an extension notification and an extra field."""
    agent = start()
    agent.allow_unknown_kinds = True
    sid = agent.handshake()
    turn = agent.prompt(sid, "unknown-update ; echo after")
    assert turn.kinds() == ["mock_future_kind", "agent_message_chunk", "agent_message_chunk"]
    assert [n["method"] for n in turn.notifications] == ["_mock/notice"]
    assert turn.updates[1]["update"]["mockExtra"] == {"kept": True}
    assert turn.texts() == ["unknown field", "after"]


def test_plan_thought_usage_mode(start: Callable[..., Agent]) -> None:
    """plan, thought, usage and mode each send their session/update kind."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "plan ; thought deep thought ; usage ; mode plan")
    assert turn.kinds() == ["plan", "agent_thought_chunk", "usage_update", "current_mode_update"]
    assert len(turn.updates[0]["update"]["entries"]) == 2
    assert turn.texts("agent_thought_chunk") == ["deep thought"]
    assert turn.updates[2]["update"]["used"] == 1234
    assert turn.updates[3]["update"]["currentModeId"] == "plan"


@pytest.mark.parametrize("reason", ["max_tokens", "max_turn_requests", "refusal", "cancelled"])
def test_stop_reason(start: Callable[..., Agent], reason: str) -> None:
    """stop REASON ends the turn at once with that stopReason."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, f"stop {reason} ; echo never")
    assert turn.stop_reason == reason
    assert turn.updates == []


def test_error_answers_prompt_with_jsonrpc_error(start: Callable[..., Agent]) -> None:
    """error CODE MSG answers the prompt with that JSON-RPC error."""
    agent = start()
    sid = agent.handshake()
    turn = agent.prompt(sid, "echo first ; error -32000 Authentication required ; echo never")
    assert turn.texts() == ["first"]
    assert turn.response is not None
    assert turn.response["error"] == {"code": -32000, "message": "Authentication required"}


# -- flags -------------------------------------------------------------------------------


def test_ignore_sigterm(start: Callable[..., Agent]) -> None:
    """--ignore-sigterm keeps the agent alive and answering after SIGTERM."""
    agent = start("--ignore-sigterm")
    agent.call("initialize", INIT)
    agent.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert agent.proc.poll() is None
    assert "result" in agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})[0]


def test_sigterm_kills_by_default(start: Callable[..., Agent]) -> None:
    """Without --ignore-sigterm the agent dies of SIGTERM."""
    agent = start()
    agent.call("initialize", INIT)
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(5) == -signal.SIGTERM


def test_hang_on_initialize(start: Callable[..., Agent]) -> None:
    """--hang-on-initialize never answers initialize but still exits on EOF."""
    agent = start("--hang-on-initialize")
    agent.request("initialize", INIT)
    agent.expect_silence(0.5)
    assert agent.close() == 0


def test_hang_on_new_session(start: Callable[..., Agent]) -> None:
    """--hang-on-new-session answers initialize but never session/new."""
    agent = start("--hang-on-new-session")
    assert "result" in agent.call("initialize", INIT)[0]
    agent.request("session/new", {"cwd": "/tmp", "mcpServers": []})
    agent.expect_silence(0.5)


def test_startup_delay(start: Callable[..., Agent]) -> None:
    """--startup-delay-ms N delays the first answer by at least N ms."""
    agent = start("--startup-delay-ms", "300")
    agent.call("initialize", INIT)
    assert time.monotonic() - agent.started >= 0.3


def test_load_session_replays_history(start: Callable[..., Agent]) -> None:
    """--load-session advertises loadSession and session/load replays history before answering."""
    agent = start("--load-session", "--modes")
    response, _ = agent.call("initialize", INIT)
    assert response["result"]["agentCapabilities"]["loadSession"] is True
    response, notes = agent.call(
        "session/load", {"sessionId": "old-1", "cwd": "/tmp", "mcpServers": []}
    )
    assert [n["params"]["update"]["sessionUpdate"] for n in notes] == [
        "user_message_chunk",
        "agent_message_chunk",
    ]
    assert all(n["params"]["sessionId"] == "old-1" for n in notes)
    assert response["result"]["modes"]["currentModeId"] == "default"
    assert agent.prompt("old-1", "echo loaded").texts() == ["loaded"]


def test_session_load_resume_close_are_gated(start: Callable[..., Agent]) -> None:
    """Without their flags session/load, resume and close are method-not-found."""
    agent = start()
    sid = agent.handshake()
    for method in ("session/load", "session/resume", "session/close"):
        params = {"sessionId": sid, "cwd": "/tmp", "mcpServers": []}
        assert agent.call(method, params)[0]["error"]["code"] == -32601


def test_resume_session(start: Callable[..., Agent]) -> None:
    """--resume-session advertises resume and session/resume answers without replay."""
    agent = start("--resume-session", "--config-options")
    response, _ = agent.call("initialize", INIT)
    assert response["result"]["agentCapabilities"]["sessionCapabilities"] == {"resume": {}}
    response, notes = agent.call("session/resume", {"sessionId": "old-2", "cwd": "/tmp"})
    assert notes == []
    assert [o["id"] for o in response["result"]["configOptions"]] == ["model", "fast"]
    assert agent.prompt("old-2", "echo resumed").texts() == ["resumed"]


def test_close_session_cancels_and_forgets(start: Callable[..., Agent]) -> None:
    """session/close cancels the running turn first, and later prompts are Session not found."""
    agent = start("--close-session")
    response, _ = agent.call("initialize", INIT)
    assert response["result"]["agentCapabilities"]["sessionCapabilities"] == {"close": {}}
    sid = agent.new_session()
    prompt = agent.start_prompt(sid, "sleep 60000")
    response, notes = agent.call("session/close", {"sessionId": sid})
    assert response["result"] == {}
    assert [n["id"] for n in notes] == [prompt]
    assert notes[0]["result"]["stopReason"] == "cancelled"
    turn = agent.prompt(sid, "echo hi")
    assert turn.response is not None
    assert turn.response["error"]["code"] == -32603
    assert turn.response["error"]["message"] == "Session not found"


def test_modes_and_set_mode(start: Callable[..., Agent]) -> None:
    """--modes puts modes in session results; set_mode sends current_mode_update and answers."""
    agent = start("--modes")
    agent.call("initialize", INIT)
    response, _ = agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    modes = response["result"]["modes"]
    assert modes["currentModeId"] == "default"
    assert [m["id"] for m in modes["availableModes"]] == ["default", "plan", "yolo"]
    agent.recv()  # available_commands_update
    sid = response["result"]["sessionId"]
    response, notes = agent.call("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
    assert response["result"] == {}
    assert [n["params"]["update"] for n in notes] == [
        {"sessionUpdate": "current_mode_update", "currentModeId": "yolo"}
    ]
    bad, _ = agent.call("session/set_mode", {"sessionId": sid, "modeId": "nope"})
    assert bad["error"]["code"] == -32602


def test_config_options(start: Callable[..., Agent]) -> None:
    """--config-options offers model and fast; set_config_option answers the full new list."""
    agent = start("--config-options")
    agent.call("initialize", INIT)
    response, _ = agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    options = {o["id"]: o for o in response["result"]["configOptions"]}
    assert options["model"]["category"] == "model"
    assert [v["value"] for v in options["model"]["options"]] == ["mock-small", "mock-large"]
    assert options["fast"] == {
        "id": "fast",
        "name": "Fast",
        "type": "boolean",
        "currentValue": False,
    }
    agent.recv()  # available_commands_update
    sid = response["result"]["sessionId"]
    response, _ = agent.call(
        "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "mock-large"}
    )
    response, _ = agent.call(
        "session/set_config_option",
        {"sessionId": sid, "configId": "fast", "type": "boolean", "value": True},
    )
    current = {o["id"]: o["currentValue"] for o in response["result"]["configOptions"]}
    assert current == {"model": "mock-large", "fast": True}
    bad, _ = agent.call(
        "session/set_config_option", {"sessionId": sid, "configId": "model", "value": "gpt"}
    )
    assert bad["error"]["code"] == -32602


def test_auth_required(start: Callable[..., Agent]) -> None:
    """--auth-required refuses session/new with -32000 until authenticate succeeds."""
    agent = start("--auth-required", env={"MOCK_AGENT_KEY": "sk-mock"})
    response, _ = agent.call("initialize", INIT)
    assert response["result"]["authMethods"][0]["id"] == "mock-key"
    refused, _ = agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert refused["error"] == {"code": -32000, "message": "Authentication required"}
    assert agent.call("authenticate", {"methodId": "other"})[0]["error"]["code"] == -32000
    assert agent.call("authenticate", {"methodId": "mock-key"})[0]["result"] == {}
    assert agent.new_session() == "mock-1"


def test_authenticate_fails_without_key(start: Callable[..., Agent]) -> None:
    """authenticate fails with -32000 when MOCK_AGENT_KEY is unset."""
    agent = start("--auth-required")
    agent.call("initialize", INIT)
    assert agent.call("authenticate", {"methodId": "mock-key"})[0]["error"]["code"] == -32000
    refused, _ = agent.call("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert refused["error"]["code"] == -32000


def test_no_exit_on_eof(start: Callable[..., Agent]) -> None:
    """--no-exit-on-eof keeps the agent running after stdin EOF until it gets a signal."""
    agent = start("--no-exit-on-eof")
    agent.call("initialize", INIT)
    assert agent.proc.stdin is not None
    agent.proc.stdin.close()
    time.sleep(0.5)
    assert agent.proc.poll() is None
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(5) == -signal.SIGTERM


def test_bad_flag_is_a_usage_error() -> None:
    """An unknown flag exits 2 with a usage message."""
    out = subprocess.run(
        [*AGENT_CMD, "--bogus"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 2
    assert b"unknown argument" in out.stderr


def test_everything_in_one_session_validates(start: Callable[..., Agent], tmp_path: Path) -> None:
    """One session exercising every schema-valid verb emits only schema-valid frames."""
    agent = start("--modes", "--config-options", "--load-session", "--close-session")
    sid = agent.handshake()

    def answer(msg: Msg) -> Msg:
        if msg["method"] == "fs/read_text_file":
            return {"result": {"content": "x"}}
        if msg["method"] == "fs/write_text_file":
            return {"result": {}}
        return allow(msg)

    script = "\n".join(
        [
            "echo hi",
            "stream 3",
            "sleep 1",
            "tool read",
            f"read {tmp_path}/a",
            f"write {tmp_path}/a x",
            "plan",
            "thought t",
            "usage",
            "mode plan",
            "stop refusal",
        ]
    )
    assert agent.prompt(sid, script, answer).stop_reason == "refusal"

    def refuse_cancelled(msg: Msg) -> Msg:
        return {"error": {"code": -32800, "message": "Request cancelled"}}

    turn = agent.prompt(sid, "cancel-request", refuse_cancelled)
    assert turn.texts() == ["cancel_request: answered -32800"]
    turn = agent.prompt(sid, "error 1 x")
    assert turn.response is not None
    assert "error" in turn.response
    agent.close()
    agent.validate()
