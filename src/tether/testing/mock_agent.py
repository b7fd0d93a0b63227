"""A scriptable ACP agent for tests and benchmarks: ``tether-mock-agent``.

Run it as ``tether-mock-agent [FLAGS]`` or ``python -m tether.testing.mock_agent [FLAGS]``.
It speaks ACP v1 (JSON-RPC 2.0, one JSON object per line) on stdin/stdout, uses the
standard library only and answers ``initialize`` within a few tens of milliseconds of
being started. What it does in a turn is decided by the prompt text: a tiny script.

Script language
===============

The script is the concatenation of every ``text`` content block of the prompt. It is
split into commands at newlines and at ``" ; "`` (space, semicolon, space). Each command
is ``verb args...``; TEXT/TITLE/MSG arguments are the rest of the command verbatim
(inner spacing kept, outer whitespace trimmed).

If the first word of the script is not a known verb, the whole text is echoed back as one
``agent_message_chunk`` and the turn ends ``end_turn`` (so ``hello world`` echoes
``hello world``). If the first word is a verb, the whole script is checked before anything
runs: an unknown verb or a bad argument later on answers the prompt with error ``-32602``.

Commands run in order. Unless stated otherwise the turn ends with stopReason ``end_turn``
after the last one. A ``session/cancel`` is noticed while sleeping and between commands;
the turn then ends at once with stopReason ``cancelled``. Requests the agent sends
(permission, fs) are always waited for: the client must answer them, even after a cancel.

``echo TEXT``
    One ``agent_message_chunk`` with TEXT.
``stream N [TEXT]``
    N ``agent_message_chunk`` notifications; chunk i (0-based) has text ``"TEXT i\\n"``
    (TEXT defaults to ``chunk``). Written in batches of 512 lines; stdin is polled between
    batches, so a cancel stops the stream early.
``sleep MS``
    Wait MS milliseconds. A ``session/cancel`` ends the turn at once (``cancelled``).
``hang``
    Never answer this prompt, not even on cancel or ``$/cancel_request``. The rest of the
    script is not run. The agent keeps serving everything else.
``late MS [TEXT]``
    From now on ignore ``session/cancel``; after MS ms send ``agent_message_chunk`` TEXT
    (default ``late answer``) and answer the prompt ``end_turn``. This ends the turn; the
    rest of the script is not run. (The "answers late after it was cancelled" case.)
``tool KIND [TITLE]``
    ``tool_call`` (toolCallId ``call-<n>``, n counting from 1 per process, kind KIND sent
    as given, status ``pending``, title TITLE, default ``mock KIND``), then
    ``session/request_permission`` with options ``allow`` (allow_once), ``allow-always``
    (allow_always) and ``reject`` (reject_once). Selected allow/allow-always:
    ``tool_call_update`` status ``completed`` and chunk ``permission: allowed``. Selected
    reject: ``tool_call_update`` status ``failed`` and chunk ``permission: denied``
    (an unknown optionId is also treated as denied, chunk
    ``permission: unknown option <id>``). Outcome ``cancelled``: the turn ends
    ``cancelled``. A JSON-RPC error answer: chunk ``permission: error <code>``, continue.
``elicit MODE [TEXT]``
    ``elicitation/create`` (sent whatever the client advertised). MODE ``form``: message
    TEXT (default ``mock question``), a schema asking for a string ``name`` (required).
    MODE ``url``: elicitationId ``elicit-<n>``, url ``https://example.invalid/<TEXT>``;
    once answered ``accept``, an ``elicitation/complete`` notification follows. The
    answer becomes a chunk: ``elicitation: accept {content JSON}``, ``elicitation:
    decline``, ``elicitation: cancel`` or ``elicitation: error <code>``; then continue.
``cancel-request``
    Send a ``session/request_permission`` and immediately a ``$/cancel_request`` naming it.
    When it is answered, chunk ``cancel_request: answered <code>`` for an error answer
    (the client should use -32800), or ``cancel_request: answered result`` for a result.
``read PATH``
    ``fs/read_text_file {sessionId, path}``; chunk with the content, or
    ``fs error <code> <message>``. (Sent whatever the client's capabilities say.)
``write PATH [TEXT...]``
    ``fs/write_text_file`` with content TEXT; chunk ``wrote PATH`` or
    ``fs error <code> <message>``.
``spawn-group``
    Start ``sleep 3600`` in its own process group; chunk ``spawned pid=<pid> kind=group``.
``spawn-setsid``
    Start ``sleep 3600`` in a new session (setsid); chunk ``spawned pid=<pid> kind=setsid``.
``spawn-daemon``
    Classic double fork + setsid daemon; the reported pid is the grandchild's (orphaned,
    re-parented away from the agent): chunk ``spawned pid=<pid> kind=daemon``.
``spawn-envclear``
    ``sleep 3600`` with an empty environment in a new session; chunk
    ``spawned pid=<pid> kind=envclear``.

    Spawned children have stdin, stdout and stderr on ``/dev/null`` (so the client sees
    EOF when the agent itself exits) and outlive the agent. The pid is reported only
    after the child has exec'd ``sleep``, so its group/session is already in place.
    They keep default signal handling, except that ``--ignore-sigterm`` is inherited.
``crash [CODE]``
    One chunk ``crashing``, then exit immediately with CODE (default 1), no answer.
``stderr BYTES``
    Write BYTES bytes to stderr in 64 KiB writes (blocks if nobody drains it), then
    chunk ``stderr done``.
``malformed``
    Write the line ``{this is not json`` to stdout, then continue.
``oversized BYTES``
    Write one line of BYTES ``x`` bytes (plus the newline) to stdout, then continue.
``big BYTES``
    One ``agent_message_chunk`` whose text is BYTES ``x`` characters (a valid ACP frame
    of about BYTES bytes), then continue.
``unknown-update``
    A ``session/update`` with sessionUpdate ``mock_future_kind`` (and extra fields), a
    ``_mock/notice`` notification, and an ``agent_message_chunk`` (text
    ``unknown field``) carrying an unknown extra field ``mockExtra``; then continue.
``plan``
    A ``plan`` update with 2 entries.
``thought TEXT``
    One ``agent_thought_chunk`` with TEXT.
``usage``
    A ``usage_update`` with used 1234, size 200000.
``session-params``
    One chunk: the JSON of the last ``session/new`` params without ``cwd`` and
    ``mcpServers`` (what else the client sent: ``_meta``, ``systemPrompt``); after a
    ``session/load`` or ``session/resume``, its params (without ``sessionId``) with
    ``"method"`` naming it.
``mode ID``
    A ``current_mode_update`` to ID (and the session's mode becomes ID).
``stop [REASON]``
    End the turn now with stopReason REASON (default ``end_turn``; sent as given).
``error CODE [MSG]``
    End the turn now by answering the prompt with JSON-RPC error CODE, MSG (default
    ``mock error``).
``exit [CODE]``
    Exit with CODE (default 0) right after the prompt is answered (result or error,
    including ``cancelled``); the script goes on until then.

``run CMD...``
    Run CMD (split like a shell would, never run by one) in the agent's directory with
    the agent's environment, stdin on ``/dev/null``, and wait for it (at most 120 s);
    one chunk ``exit=<code>`` followed by a newline and its stdout then stderr. (How
    delegation tests make an agent run ``tether`` commands from inside its own tree.)
``mcp-call SERVER TOOL [JSON]``
    Start the stdio MCP server named SERVER in ``session/new``'s ``mcpServers``, speak
    ``initialize``, ``notifications/initialized`` and ``tools/call`` TOOL with the JSON
    object arguments (default ``{}``), close its stdin and wait for it to exit; one chunk
    with the ``tools/call`` response as JSON, or ``mcp-call failed: <why>``.
``terminal [--limit N] [--cwd DIR] [--env NAME=VALUE]... [--kill|--release|--keep] CMD...``
    Drive the client's ``terminal/*`` methods (create, output, wait_for_exit, kill,
    release) and report in one chunk ``terminal id=<id> exit=<code> signal=<sig>
    truncated=<bool>`` plus the output; see :mod:`tether.testing.mock_terminal`.

Extra words after a verb that takes no arguments are ignored.

Flags
=====

``--ignore-sigterm``
    SIGTERM is ignored (SIG_IGN, inherited by spawned children).
``--hang-on-initialize`` / ``--hang-on-new-session``
    Never answer ``initialize`` / ``session/new``.
``--startup-delay-ms N``
    Sleep N ms before reading stdin.
``--load-session``
    Advertise ``loadSession: true`` and handle ``session/load``: replay a
    ``user_message_chunk`` ``previous prompt`` and an ``agent_message_chunk``
    ``previous answer``, then answer. Without the flag it is -32601.
``--resume-session`` / ``--close-session``
    Advertise ``sessionCapabilities.resume`` / ``.close`` and handle ``session/resume``
    (no replay; like ``session/load``, an id starting with ``gone-`` is a conversation
    the agent no longer has: -32002) / ``session/close`` (cancels running turns like
    ``session/cancel``, then answers ``{}``; later prompts get -32603 ``Session not
    found``). Otherwise -32601.
``--fork-session`` / ``--list-sessions`` / ``--delete-session`` / ``--logout``
    Advertise ``sessionCapabilities.fork`` / ``.list`` / ``.delete`` / ``auth.logout``.
    ``session/fork`` of any id answers a new ``fork-<n>`` session (it announces
    ``forked from <id>`` as an ``agent_message_chunk`` on its first prompt);
    ``session/list`` answers the sessions of this process plus a stored one,
    ``mock-stored-1`` titled ``stored conversation`` (in the request's ``cwd``, or
    ``/``); ``session/delete`` forgets a session and answers ``{}``; ``logout``
    answers ``{}``. Otherwise -32601.
``--modes``
    Session results carry ``modes`` (``default``, ``plan``, ``yolo``; current
    ``default``); ``session/set_mode`` sends ``current_mode_update`` then answers ``{}``.
    Without the flag ``session/set_mode`` is -32601.
``--config-options``
    Session results carry ``configOptions``: select ``model`` (``mock-small``,
    ``mock-large``; category ``model``) and boolean ``fast``;
    ``session/set_config_option`` answers the full new list. Otherwise -32601.
``--system-prompt``
    Advertise ``sessionCapabilities.systemPrompt`` (``{"mode": {"override": {}}}``, as
    claude-agent-acp 0.101.0 does).
``--agent-name NAME``
    Answer ``initialize`` with agentInfo name NAME (e.g. ``claude-agent-acp``, so that a
    client sends what it sends only to that agent).
``--auth-required``
    Advertise authMethods ``[{id: "mock-key", name: "Mock key"}]``; ``session/new``,
    ``session/load`` and ``session/resume`` fail with -32000 ``Authentication required``
    until ``authenticate {methodId: "mock-key"}`` succeeds. ``authenticate`` (with or
    without the flag) succeeds only for ``mock-key`` with env ``MOCK_AGENT_KEY`` set
    non-empty, else -32000.
``--no-exit-on-eof``
    Keep running after stdin EOF (like old claude-agent-acp); exit only on a signal.
``--log-stderr``
    One line per received message on stderr: ``mock-agent <- <the line>``.

Other behaviour
===============

- ``initialize`` answers protocolVersion 1, agentInfo name ``tether-mock-agent``.
- ``session/new`` answers sessionId ``mock-<n>`` (n from 1), then sends an
  ``available_commands_update`` listing the verbs.
- Updates always carry the sessionId of the turn they belong to. Turns of different
  sessions (or several prompts of one session) run concurrently.
- ``$/cancel_request`` naming a running prompt cancels it like ``session/cancel`` but the
  prompt is answered with error -32800. Other names are ignored.
- Unknown methods get -32601; unknown notifications and responses to unknown ids are
  ignored; a line that is not JSON gets -32700 (id null).
- Request ids are echoed back as decoded by ``json`` (strings, integers of any size,
  null). The agent's own request ids are integers counting from 1.
- The agent exits 0 on stdin EOF (default) or when stdout is closed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from select import select

from tether.testing import mock_delegation, mock_terminal

# mypy treats a name called TYPE_CHECKING as true; at run time this avoids importing
# typing and collections.abc, which would cost a few milliseconds of start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from typing import Any, TypeAlias

    Json: TypeAlias = Any
    Msg: TypeAlias = dict[str, Any]
    # A turn step yields what it waits for and is resumed with what arrived.
    Step: TypeAlias = Generator["_Sleep | _Await", object, "_Outcome | None"]

AGENT_NAME = "tether-mock-agent"
AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1

STREAM_BATCH = 512  # stream lines per write (and per poll of stdin)
STDERR_BLOCK = 64 * 1024
WRITE_BLOCK = 1024 * 1024

# Error codes (ACP section 8).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002

MODES = (
    {"id": "default", "name": "Default", "description": "Ask before acting"},
    {"id": "plan", "name": "Plan", "description": "Plan only, change nothing"},
    {"id": "yolo", "name": "Yolo", "description": "Act without asking"},
)
MODELS = (
    {"value": "mock-small", "name": "Mock small"},
    {"value": "mock-large", "name": "Mock large"},
)
PERMISSION_OPTIONS = (
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
)
ALLOW_OPTIONS = frozenset({"allow", "allow-always"})

# verb -> (hint for available_commands_update, required int args, optional int args).
# Int args come first; anything after them is free text.
VERBS: dict[str, tuple[str, int, int]] = {
    "echo": ("TEXT", 0, 0),
    "stream": ("N [TEXT]", 1, 0),
    "sleep": ("MS", 1, 0),
    "hang": ("", 0, 0),
    "late": ("MS [TEXT]", 1, 0),
    "tool": ("KIND [TITLE]", 0, 0),
    "cancel-request": ("", 0, 0),
    "elicit": ("form|url [TEXT]", 0, 0),
    "read": ("PATH", 0, 0),
    "write": ("PATH TEXT...", 0, 0),
    "spawn-group": ("", 0, 0),
    "spawn-setsid": ("", 0, 0),
    "spawn-daemon": ("", 0, 0),
    "spawn-envclear": ("", 0, 0),
    "crash": ("[CODE]", 0, 1),
    "stderr": ("BYTES", 1, 0),
    "malformed": ("", 0, 0),
    "oversized": ("BYTES", 1, 0),
    "big": ("BYTES", 1, 0),
    "unknown-update": ("", 0, 0),
    "plan": ("", 0, 0),
    "thought": ("TEXT", 0, 0),
    "usage": ("", 0, 0),
    "session-params": ("", 0, 0),
    "mode": ("ID", 0, 0),
    "stop": ("[REASON]", 0, 0),
    "error": ("CODE [MSG]", 1, 0),
    "exit": ("[CODE]", 0, 1),
    "run": ("CMD...", 0, 0),
    "mcp-call": ("SERVER TOOL [JSON]", 0, 0),
    "terminal": ("[--kill|--release|--keep] CMD...", 0, 0),
}
# Verbs whose first free-text word is required.
NEEDS_WORD = frozenset({"tool", "read", "write", "mode", "run", "mcp-call", "elicit", "terminal"})

USAGE = """\
usage: tether-mock-agent [--ignore-sigterm] [--hang-on-initialize] [--hang-on-new-session]
                         [--startup-delay-ms N] [--load-session] [--resume-session]
                         [--close-session] [--modes] [--config-options] [--auth-required]
                         [--no-exit-on-eof] [--log-stderr] [--fork-session]
                         [--list-sessions] [--delete-session] [--logout]
A scriptable ACP v1 agent on stdin/stdout; see `pydoc tether.testing.mock_agent`.
"""


def _dumps(obj: Json) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _key(req_id: Json) -> str:
    """Request ids match by exact JSON value: 1, 1.0, "1" and true are all different."""
    return json.dumps(req_id)


class ScriptError(ValueError):
    """A prompt script that cannot run: answered with -32602 before anything happens."""


class Options:
    """The agent's command-line flags."""

    def __init__(self) -> None:
        self.ignore_sigterm = False
        self.hang_on_initialize = False
        self.hang_on_new_session = False
        self.startup_delay_ms = 0
        self.load_session = False
        self.resume_session = False
        self.close_session = False
        self.modes = False
        self.config_options = False
        self.auth_required = False
        self.exit_on_eof = True
        self.log_stderr = False
        self.system_prompt = False
        self.agent_name = AGENT_NAME
        self.fork_session = False
        self.list_sessions = False
        self.delete_session = False
        self.logout = False

    @classmethod
    def parse(cls, argv: list[str]) -> Options:
        """Parse argv (without the program name); raise ValueError on a bad flag."""
        opts = cls()
        switches = {
            "--ignore-sigterm": "ignore_sigterm",
            "--hang-on-initialize": "hang_on_initialize",
            "--hang-on-new-session": "hang_on_new_session",
            "--load-session": "load_session",
            "--resume-session": "resume_session",
            "--close-session": "close_session",
            "--modes": "modes",
            "--config-options": "config_options",
            "--auth-required": "auth_required",
            "--log-stderr": "log_stderr",
            "--system-prompt": "system_prompt",
            "--fork-session": "fork_session",
            "--list-sessions": "list_sessions",
            "--delete-session": "delete_session",
            "--logout": "logout",
        }
        args = iter(argv)
        for arg in args:
            name, eq, value = arg.partition("=")
            if name in switches and not eq:
                setattr(opts, switches[name], True)
            elif name == "--no-exit-on-eof" and not eq:
                opts.exit_on_eof = False
            elif name == "--agent-name":
                opts.agent_name = value if eq else next(args, "")
            elif name == "--startup-delay-ms":
                raw = value if eq else next(args, "")
                try:
                    opts.startup_delay_ms = int(raw)
                except ValueError:
                    raise ValueError(f"--startup-delay-ms needs an integer, got {raw!r}") from None
            else:
                raise ValueError(f"unknown argument {arg!r}")
        return opts


class _Sleep:
    """Resume at ``deadline`` (monotonic); a cancellable sleep is cut short by a cancel."""

    __slots__ = ("cancellable", "deadline")

    def __init__(self, deadline: float, cancellable: bool) -> None:
        self.deadline = deadline
        self.cancellable = cancellable


class _Await:
    """Resume with the client's response (the whole message) to our request ``key``."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


class _Outcome:
    """How a turn ends: a stopReason, a JSON-RPC error, or never (hang)."""

    __slots__ = ("code", "message", "stop_reason")

    def __init__(self, stop_reason: str | None, code: int = 0, message: str = "") -> None:
        self.stop_reason = stop_reason
        self.code = code
        self.message = message


_HANG = _Outcome(None)
_CANCELLED = _Outcome("cancelled")
_INTERRUPT = object()  # what a cancellable sleep is resumed with on cancel


class _Session:
    __slots__ = ("closed", "fast", "forked_from", "mode", "model", "sid")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.mode = "default"
        self.model = "mock-small"
        self.fast = False
        self.closed = False
        self.forked_from: str | None = None  # announced once, on the first prompt


class _Turn:
    __slots__ = (
        "cancel_error",
        "cancelled",
        "exit_code",
        "gen",
        "ignore_cancel",
        "key",
        "req_id",
        "session",
        "waiting",
    )

    def __init__(self, session: _Session, req_id: Json) -> None:
        self.session = session
        self.req_id = req_id
        self.key = _key(req_id)
        self.cancelled = False
        self.cancel_error = False  # cancelled by $/cancel_request: answer -32800
        self.ignore_cancel = False
        self.exit_code: int | None = None
        self.waiting: _Sleep | _Await | None = None
        self.gen: Step | None = None


def parse_script(text: str) -> list[tuple[str, str]] | None:
    """Split a prompt into ``(verb, rest)`` commands; None means "echo the text back".

    Raises ScriptError when the first word is a verb but some command is invalid.
    """
    words = text.split(None, 1)
    if not words or words[0] not in VERBS:
        return None
    commands: list[tuple[str, str]] = []
    for line in text.splitlines():
        for part in line.split(" ; "):
            part = part.strip()
            if not part:
                continue
            verb, _, rest = part.partition(" ")
            verb, rest = verb.strip(), rest.strip()
            spec = VERBS.get(verb)
            if spec is None:
                raise ScriptError(f"unknown verb {verb!r} in {part!r}")
            _, required, optional = spec
            fields = rest.split(None, required + optional)
            for i in range(required + optional):
                if i >= len(fields):
                    if i < required:
                        raise ScriptError(f"{verb}: missing argument in {part!r}")
                    break
                try:
                    int(fields[i])
                except ValueError:
                    raise ScriptError(f"{verb}: {fields[i]!r} is not an integer") from None
            if verb in NEEDS_WORD and len(fields) <= required + optional:
                raise ScriptError(f"{verb}: missing argument in {part!r}")
            commands.append((verb, rest))
    return commands


def _ints(rest: str, count: int) -> tuple[list[int], str]:
    """The first ``count`` words of ``rest`` as ints (already validated) and the rest."""
    fields = rest.split(None, count)
    nums = [int(f) for f in fields[:count]]
    return nums, fields[count] if len(fields) > count else ""


def _sleep_argv() -> list[str]:
    for d in os.get_exec_path():
        path = os.path.join(d, "sleep")
        if os.access(path, os.X_OK):
            return [path, "3600"]
    return ["/bin/sleep", "3600"]


class MockAgent:
    """The agent: a select loop over stdin that drives each turn as a generator."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.sessions: dict[str, _Session] = {}
        self.turns: dict[str, _Turn] = {}  # running prompts by the client's request id
        self.awaiting: dict[str, _Turn] = {}  # our requests by id, and who waits for them
        self.sleepers: dict[_Turn, float] = {}  # sleeping turns and their deadlines
        self.authenticated = False
        self.next_session = 1
        self.mcp_servers: list[Json] = []  # session/new's mcpServers (the mcp-call verb)
        self.new_params: Msg = {}  # the rest of session/new's params (session-params)
        self.next_request = 1
        self.next_call = 1
        self.eof = False
        self.stdout_open = True
        self.children: list[int] = []
        self._handlers: dict[str, Callable[[Json, Msg], None]] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._session_new,
            "session/load": self._session_load,
            "session/resume": self._session_resume,
            "session/close": self._session_close,
            "session/fork": self._session_fork,
            "session/list": self._session_list,
            "session/delete": self._session_delete,
            "logout": self._logout,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
            "session/prompt": self._prompt,
        }

    # -- output ---------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write all of ``data`` to stdout; on a closed stdout exit (or go quiet)."""
        if not self.stdout_open:
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(1, view)
                view = view[n:]
        except OSError:  # EPIPE: the client is gone
            if self.opts.exit_on_eof:
                os._exit(0)
            self.stdout_open = False

    def send(self, msg: Msg) -> None:
        self.write(_dumps(msg))

    def respond(self, req_id: Json, result: Json) -> None:
        self.write(_dumps({"jsonrpc": "2.0", "id": req_id, "result": result}))

    def error(self, req_id: Json, code: int, message: str) -> None:
        self.write(
            _dumps({"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}})
        )

    def notify(self, method: str, params: Json) -> None:
        self.write(_dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    def update(self, session: _Session, update: Msg) -> None:
        self.notify("session/update", {"sessionId": session.sid, "update": update})

    def chunk(self, session: _Session, text: str, kind: str = "agent_message_chunk") -> None:
        self.update(session, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    def request(self, method: str, params: Msg) -> tuple[int, str]:
        """Send a request to the client; return its id and the key to await."""
        req_id = self.next_request
        self.next_request += 1
        self.write(_dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}))
        return req_id, _key(req_id)

    # -- main loop --------------------------------------------------------------------

    def run(self) -> int:
        if self.opts.startup_delay_ms > 0:
            time.sleep(self.opts.startup_delay_ms / 1000)
        buf = b""
        while True:
            timeout = self._next_timeout()
            if self.eof:
                # --no-exit-on-eof: nothing more will arrive; run out the sleeping turns,
                # then wait for a signal.
                time.sleep(3600 if timeout is None else timeout)
            elif select([0], [], [], timeout)[0]:
                data = os.read(0, 1 << 20)
                if data:
                    buf += data
                    if b"\n" in data:
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            if line.strip():
                                self._handle_line(line)
                else:
                    self.eof = True
                    if buf.strip():
                        self._handle_line(buf)
                    buf = b""
                    if self.opts.exit_on_eof:
                        return 0
            # Wake sleepers only after stdin was polled: a stream yields a zero-length
            # sleep between batches precisely so that a cancel can get in.
            now = time.monotonic()
            for turn in [t for t, deadline in self.sleepers.items() if deadline <= now]:
                self._step(turn, None)
            if self.children:
                self._reap()

    def _next_timeout(self) -> float | None:
        if not self.sleepers:
            return None
        return max(0.0, min(self.sleepers.values()) - time.monotonic())

    def _reap(self) -> None:
        """Collect spawned children that were killed while we still run (no zombies)."""
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.remove(pid)

    def _handle_line(self, line: bytes) -> None:
        if self.opts.log_stderr:
            try:
                os.write(2, b"mock-agent <- " + line[:4000] + b"\n")
            except OSError:
                pass
        try:
            msg = json.loads(line)
        except ValueError:
            self.error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(msg, dict):
            self.error(None, INVALID_REQUEST, "Invalid request")
            return
        method = msg.get("method")
        if isinstance(method, str):
            params = msg.get("params")
            if not isinstance(params, dict):
                params = {}
            if "id" in msg:
                self._on_request(msg["id"], method, params)
            else:
                self._on_notification(method, params)
        elif "id" in msg and ("result" in msg or "error" in msg):
            turn = self.awaiting.pop(_key(msg["id"]), None)
            if turn is not None:
                self._step(turn, msg)
        elif "id" in msg:
            self.error(msg["id"], INVALID_REQUEST, "Invalid request")

    def _on_request(self, req_id: Json, method: str, params: Msg) -> None:
        handler = self._handlers.get(method)
        if handler is None:
            self.error(req_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        handler(req_id, params)

    def _on_notification(self, method: str, params: Msg) -> None:
        if method == "session/cancel":
            sid = params.get("sessionId")
            for turn in list(self.turns.values()):
                if turn.session.sid == sid:
                    self._cancel(turn, as_error=False)
        elif method == "$/cancel_request" and "requestId" in params:
            named = self.turns.get(_key(params["requestId"]))
            if named is not None:
                self._cancel(named, as_error=True)
        # Anything else (session/cancel for unknown sessions, _extensions) is ignored.

    # -- turns ----------------------------------------------------------------------

    def _cancel(self, turn: _Turn, *, as_error: bool) -> None:
        if turn.ignore_cancel or turn.cancelled:
            return
        turn.cancelled = True
        turn.cancel_error = as_error
        waiting = turn.waiting
        if isinstance(waiting, _Sleep) and waiting.cancellable:
            self._step(turn, _INTERRUPT)

    def _step(self, turn: _Turn, value: object) -> None:
        """Resume a turn with ``value`` and run it up to its next wait (or its end)."""
        if isinstance(turn.waiting, _Sleep):
            del self.sleepers[turn]
        turn.waiting = None
        assert turn.gen is not None
        try:
            waiting = turn.gen.send(value)
        except StopIteration as stop:
            outcome = stop.value
            self._finish(turn, outcome if isinstance(outcome, _Outcome) else _Outcome("end_turn"))
            return
        except Exception as e:  # a bug in a verb: answer the prompt, keep the agent up
            self._finish(turn, _Outcome(None, INTERNAL_ERROR, f"mock agent bug: {e!r}"))
            return
        turn.waiting = waiting
        if isinstance(waiting, _Sleep):
            self.sleepers[turn] = waiting.deadline
        else:
            self.awaiting[waiting.key] = turn

    def _finish(self, turn: _Turn, outcome: _Outcome) -> None:
        self.turns.pop(turn.key, None)
        if outcome is _HANG:
            return
        if outcome.stop_reason == "cancelled" and turn.cancel_error:
            self.error(turn.req_id, REQUEST_CANCELLED, "Request cancelled")
        elif outcome.stop_reason is not None:
            self.respond(turn.req_id, {"stopReason": outcome.stop_reason})
        else:
            self.error(turn.req_id, outcome.code, outcome.message)
        if turn.exit_code is not None:
            os._exit(turn.exit_code)

    def _run_script(self, turn: _Turn, commands: list[tuple[str, str]]) -> Step:
        session = turn.session
        for verb, rest in commands:
            if turn.cancelled and not turn.ignore_cancel:
                return _CANCELLED
            if verb in _STEP_VERBS:
                outcome = yield from _STEP_VERBS[verb](self, turn, rest)
            else:
                outcome = _PLAIN_VERBS[verb](self, turn, session, rest)
            if outcome is not None:
                return outcome
        if turn.cancelled and not turn.ignore_cancel:
            return _CANCELLED
        return None

    # Verbs that wait (generators). Each returns an _Outcome to end the turn, or None.

    def v_stream(self, turn: _Turn, rest: str) -> Step:
        (count,), text = _ints(rest, 1)
        head = (
            b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
            + _dumps(turn.session.sid)[:-1]
            + b',"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text",'
            + b'"text":'
            + _dumps(text or "chunk")[:-2]
            + b" "
        )
        tail = b'\\n"}}}}\n'
        for start in range(0, count, STREAM_BATCH):
            end = min(count, start + STREAM_BATCH)
            self.write(b"".join([head + b"%d" % i + tail for i in range(start, end)]))
            # Poll stdin between batches, so a cancel can stop the stream.
            if end < count and (yield _Sleep(0.0, True)) is _INTERRUPT:
                return _CANCELLED
        return None

    def v_sleep(self, turn: _Turn, rest: str) -> Step:
        (ms,), _ = _ints(rest, 1)
        if (yield _Sleep(time.monotonic() + ms / 1000, True)) is _INTERRUPT:
            return _CANCELLED
        return None

    def v_late(self, turn: _Turn, rest: str) -> Step:
        (ms,), text = _ints(rest, 1)
        turn.ignore_cancel = True
        yield _Sleep(time.monotonic() + ms / 1000, False)
        self.chunk(turn.session, text or "late answer")
        return _Outcome("end_turn")

    def v_tool(self, turn: _Turn, rest: str) -> Step:
        session = turn.session
        kind, _, title = rest.partition(" ")
        title = title.strip() or f"mock {kind}"
        call_id = f"call-{self.next_call}"
        self.next_call += 1
        call = {"toolCallId": call_id, "title": title, "kind": kind, "status": "pending"}
        self.update(session, {"sessionUpdate": "tool_call", **call})
        _, key = self.request(
            "session/request_permission",
            {"sessionId": session.sid, "toolCall": call, "options": list(PERMISSION_OPTIONS)},
        )
        response = yield _Await(key)
        assert isinstance(response, dict)
        if "error" in response:
            self.chunk(session, f"permission: error {_error_code(response)}")
            return None
        result = response.get("result")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        kind_of = outcome.get("outcome") if isinstance(outcome, dict) else None
        if kind_of == "cancelled":
            return _CANCELLED
        option = outcome.get("optionId") if isinstance(outcome, dict) else None
        allowed = option in ALLOW_OPTIONS
        status = "completed" if allowed else "failed"
        self.update(
            session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
        )
        if allowed:
            self.chunk(session, "permission: allowed")
        elif option == "reject":
            self.chunk(session, "permission: denied")
        else:
            self.chunk(session, f"permission: unknown option {option}")
        return None

    def v_elicit(self, turn: _Turn, rest: str) -> Step:
        session = turn.session
        mode, _, text = rest.partition(" ")
        n = self.next_call
        self.next_call += 1
        params: Msg = {"sessionId": session.sid, "mode": mode, "message": text or "mock question"}
        if mode == "url":
            params["elicitationId"] = f"elicit-{n}"
            params["url"] = f"https://example.invalid/{text or 'login'}"
        else:
            params["requestedSchema"] = {
                "type": "object",
                "properties": {"name": {"type": "string", "title": "Name"}},
                "required": ["name"],
            }
        _, key = self.request("elicitation/create", params)
        response = yield _Await(key)
        assert isinstance(response, dict)
        if "error" in response:
            self.chunk(session, f"elicitation: error {_error_code(response)}")
            return None
        result = response.get("result")
        action = result.get("action") if isinstance(result, dict) else None
        if action == "accept":
            content = result.get("content") if isinstance(result, dict) else None
            self.chunk(session, f"elicitation: accept {json.dumps(content, sort_keys=True)}")
            if mode == "url":
                self.notify("elicitation/complete", {"elicitationId": params["elicitationId"]})
        else:
            self.chunk(session, f"elicitation: {action}")
        return None

    def v_cancel_request(self, turn: _Turn, rest: str) -> Step:
        session = turn.session
        call_id = f"call-{self.next_call}"
        self.next_call += 1
        call = {"toolCallId": call_id, "title": "mock cancel_request", "kind": "other"}
        req_id, key = self.request(
            "session/request_permission",
            {"sessionId": session.sid, "toolCall": call, "options": list(PERMISSION_OPTIONS)},
        )
        self.notify("$/cancel_request", {"requestId": req_id})
        response = yield _Await(key)
        assert isinstance(response, dict)
        if "error" in response:
            self.chunk(session, f"cancel_request: answered {_error_code(response)}")
        else:
            self.chunk(session, "cancel_request: answered result")
        return None

    def v_read(self, turn: _Turn, rest: str) -> Step:
        session = turn.session
        _, key = self.request("fs/read_text_file", {"sessionId": session.sid, "path": rest})
        response = yield _Await(key)
        assert isinstance(response, dict)
        if "error" in response:
            self.chunk(session, _fs_error(response))
        else:
            result = response.get("result")
            content = result.get("content") if isinstance(result, dict) else None
            self.chunk(session, content if isinstance(content, str) else f"fs bad result {result}")
        return None

    def v_terminal(self, turn: _Turn, rest: str) -> Step:
        yield from mock_terminal.run(
            self, turn.session, rest, _Await, lambda s: _Sleep(time.monotonic() + s, True)
        )
        return None

    def v_write(self, turn: _Turn, rest: str) -> Step:
        session = turn.session
        path, _, content = rest.partition(" ")
        _, key = self.request(
            "fs/write_text_file",
            {"sessionId": session.sid, "path": path, "content": content.strip()},
        )
        response = yield _Await(key)
        assert isinstance(response, dict)
        self.chunk(session, _fs_error(response) if "error" in response else f"wrote {path}")
        return None

    # Verbs that never wait (plain functions).

    def v_echo(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.chunk(session, rest)
        return None

    def v_hang(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        return _HANG

    def v_spawn(self, turn: _Turn, session: _Session, rest: str, kind: str) -> _Outcome | None:
        try:
            pid = self.spawn(kind)
        except OSError as e:
            self.chunk(session, f"spawn failed kind={kind}: {e}")
            return None
        self.chunk(session, f"spawned pid={pid} kind={kind}")
        return None

    def v_crash(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        (code,), _ = _ints(rest, 1) if rest else ([1], "")
        self.chunk(session, "crashing")
        os._exit(code)

    def v_stderr(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        (size,), _ = _ints(rest, 1)
        block = (b"x" * 1023 + b"\n") * (STDERR_BLOCK // 1024)
        left = size
        try:
            while left > 0:
                left -= os.write(2, block[: min(left, STDERR_BLOCK)])
        except OSError:
            pass
        self.chunk(session, "stderr done")
        return None

    def v_malformed(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.write(b"{this is not json\n")
        return None

    def v_oversized(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        (size,), _ = _ints(rest, 1)
        block = b"x" * min(size, WRITE_BLOCK)
        left = size
        while left > 0:
            piece = block[: min(left, WRITE_BLOCK)]
            self.write(piece)
            left -= len(piece)
        self.write(b"\n")
        return None

    def v_big(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        (size,), _ = _ints(rest, 1)
        self.chunk(session, "x" * size)
        return None

    def v_unknown_update(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.update(
            session,
            {"sessionUpdate": "mock_future_kind", "mockField": 1, "mockNested": {"a": [1, 2]}},
        )
        self.notify("_mock/notice", {"sessionId": session.sid, "message": "from the future"})
        self.update(
            session,
            {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "unknown field"},
                "mockExtra": {"kept": True},
            },
        )
        return None

    def v_plan(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        entries = [
            {"content": "Read the code", "priority": "high", "status": "completed"},
            {"content": "Write the fix", "priority": "medium", "status": "in_progress"},
        ]
        self.update(session, {"sessionUpdate": "plan", "entries": entries})
        return None

    def v_thought(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.chunk(session, rest, "agent_thought_chunk")
        return None

    def v_usage(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.update(session, {"sessionUpdate": "usage_update", "used": 1234, "size": 200000})
        return None

    def v_session_params(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        self.chunk(session, json.dumps(self.new_params, sort_keys=True))
        return None

    def v_mode(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        session.mode = rest
        self.update(session, {"sessionUpdate": "current_mode_update", "currentModeId": rest})
        return None

    def v_stop(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        return _Outcome(rest or "end_turn")

    def v_error(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        (code,), message = _ints(rest, 1)
        return _Outcome(None, code, message or "mock error")

    def v_exit(self, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        turn.exit_code = _ints(rest, 1)[0][0] if rest else 0
        return None

    # -- processes ------------------------------------------------------------------

    def spawn(self, kind: str) -> int:
        """Start ``sleep 3600`` detached in the way ``kind`` names; return its pid.

        The pid is returned only once the child has exec'd: a close-on-exec pipe reaches
        EOF at the exec (or carries the error if it failed). For a daemon the middle
        process writes the grandchild's pid into the same pipe before it exits.
        """
        argv = _sleep_argv()
        env = {} if kind == "envclear" else dict(os.environ)
        r, w = os.pipe()  # both ends are close-on-exec (PEP 446)
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(r)
                if kind == "group":
                    os.setpgid(0, 0)
                else:
                    os.setsid()
                if kind == "daemon":
                    if os.fork() != 0:
                        os._exit(0)  # the middle process: leave the grandchild orphaned
                    os.write(w, b"%d\n" % os.getpid())
                _exec_detached(argv, env)
            except BaseException as e:
                try:
                    os.write(w, f"!{e}".encode())
                finally:
                    os._exit(127)
        os.close(w)
        if kind == "group":
            try:
                os.setpgid(pid, pid)  # also from the parent: no window where it is unset
            except OSError:
                pass  # already exec'd (EACCES) or already done: fine
        chunks = []
        while True:
            data = os.read(r, 4096)
            if not data:
                break
            chunks.append(data)
        os.close(r)
        report = b"".join(chunks).decode(errors="replace")
        if kind == "daemon":
            os.waitpid(pid, 0)  # reap the middle process
            head, _, rest = report.partition("\n")
            if rest.startswith("!") or not head.isdigit():
                raise OSError(f"daemon spawn failed: {report.strip()}")
            return int(head)
        if report.startswith("!"):
            raise OSError(f"spawn failed: {report[1:]}")
        self.children.append(pid)
        return pid

    # -- request handlers -------------------------------------------------------------

    def _initialize(self, req_id: Json, params: Msg) -> None:
        if self.opts.hang_on_initialize:
            return
        session_caps: Msg = {}
        if self.opts.resume_session:
            session_caps["resume"] = {}
        if self.opts.close_session:
            session_caps["close"] = {}
        if self.opts.system_prompt:
            session_caps["systemPrompt"] = {"mode": {"override": {}}}
        for cap, on in (
            ("fork", self.opts.fork_session),
            ("list", self.opts.list_sessions),
            ("delete", self.opts.delete_session),
        ):
            if on:
                session_caps[cap] = {}
        result: Msg = {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": self.opts.load_session,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
                "sessionCapabilities": session_caps,
                **({"auth": {"logout": {}}} if self.opts.logout else {}),
            },
            "agentInfo": {
                "name": self.opts.agent_name,
                "title": "Tether mock agent",
                "version": AGENT_VERSION,
            },
            "authMethods": (
                [{"id": "mock-key", "name": "Mock key", "description": "Set MOCK_AGENT_KEY"}]
                if self.opts.auth_required
                else []
            ),
        }
        self.respond(req_id, result)

    def _authenticate(self, req_id: Json, params: Msg) -> None:
        if params.get("methodId") != "mock-key":
            self.error(req_id, AUTH_REQUIRED, f"Unknown auth method {params.get('methodId')!r}")
        elif not os.environ.get("MOCK_AGENT_KEY"):
            self.error(req_id, AUTH_REQUIRED, "Authentication failed: MOCK_AGENT_KEY is not set")
        else:
            self.authenticated = True
            self.respond(req_id, {})

    def _needs_auth(self, req_id: Json) -> bool:
        if self.opts.auth_required and not self.authenticated:
            self.error(req_id, AUTH_REQUIRED, "Authentication required")
            return True
        return False

    def _session_extras(self, session: _Session) -> Msg:
        extras: Msg = {}
        if self.opts.modes:
            extras["modes"] = {"currentModeId": session.mode, "availableModes": list(MODES)}
        if self.opts.config_options:
            extras["configOptions"] = self._config_options(session)
        return extras

    def _config_options(self, session: _Session) -> list[Msg]:
        return [
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": session.model,
                "options": list(MODELS),
            },
            {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": session.fast},
        ]

    def _open(self, sid: str) -> _Session:
        session = self.sessions.get(sid)
        if session is None:
            session = self.sessions[sid] = _Session(sid)
        session.closed = False
        return session

    def _live_session(self, req_id: Json, params: Msg) -> _Session | None:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None or session.closed:
            self.error(req_id, INTERNAL_ERROR, "Session not found")
            return None
        return session

    def _session_new(self, req_id: Json, params: Msg) -> None:
        if self.opts.hang_on_new_session or self._needs_auth(req_id):
            return
        session = self._open(f"mock-{self.next_session}")
        self.next_session += 1
        servers = params.get("mcpServers")
        self.mcp_servers = servers if isinstance(servers, list) else []
        self.new_params = {k: v for k, v in params.items() if k not in ("cwd", "mcpServers")}
        self.respond(req_id, {"sessionId": session.sid, **self._session_extras(session)})
        commands = [
            {"name": verb, "description": f"mock verb {verb}", "input": {"hint": hint}}
            if hint
            else {"name": verb, "description": f"mock verb {verb}"}
            for verb, (hint, _, _) in VERBS.items()
        ]
        self.update(
            session, {"sessionUpdate": "available_commands_update", "availableCommands": commands}
        )

    def _restore(self, req_id: Json, params: Msg, *, replay: bool) -> None:
        sid = params.get("sessionId")
        if not isinstance(sid, str):
            self.error(req_id, INVALID_PARAMS, "Invalid params: sessionId")
            return
        if self._needs_auth(req_id):
            return
        if sid.startswith("gone-"):
            self.error(req_id, RESOURCE_NOT_FOUND, f"Resource not found: session {sid}")
            return
        session = self._open(sid)
        self.new_params = {
            "method": "session/load" if replay else "session/resume",
            **{k: v for k, v in params.items() if k not in ("cwd", "mcpServers", "sessionId")},
        }
        if replay:
            self.chunk(session, "previous prompt", "user_message_chunk")
            self.chunk(session, "previous answer")
        self.respond(req_id, self._session_extras(session))

    def _session_load(self, req_id: Json, params: Msg) -> None:
        if not self.opts.load_session:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/load")
            return
        self._restore(req_id, params, replay=True)

    def _session_resume(self, req_id: Json, params: Msg) -> None:
        if not self.opts.resume_session:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/resume")
            return
        self._restore(req_id, params, replay=False)

    def _session_close(self, req_id: Json, params: Msg) -> None:
        if not self.opts.close_session:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/close")
            return
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            self.error(req_id, INTERNAL_ERROR, "Session not found")
            return
        for turn in list(self.turns.values()):
            if turn.session is session:
                self._cancel(turn, as_error=False)
        session.closed = True
        self.respond(req_id, {})

    def _session_fork(self, req_id: Json, params: Msg) -> None:
        if not self.opts.fork_session:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/fork")
            return
        parent = params.get("sessionId")
        if not isinstance(parent, str) or self._needs_auth(req_id):
            if not isinstance(parent, str):
                self.error(req_id, INVALID_PARAMS, "Invalid params: sessionId")
            return
        session = self._open(f"fork-{self.next_session}")
        self.next_session += 1
        session.forked_from = parent
        self.respond(req_id, {"sessionId": session.sid, **self._session_extras(session)})

    def _session_list(self, req_id: Json, params: Msg) -> None:
        if not self.opts.list_sessions:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/list")
            return
        cwd = params.get("cwd") if isinstance(params.get("cwd"), str) else "/"
        listed = [{"sessionId": "mock-stored-1", "cwd": cwd, "title": "stored conversation"}]
        listed += [
            {"sessionId": sid, "cwd": cwd} for sid, s in self.sessions.items() if not s.closed
        ]
        self.respond(req_id, {"sessions": listed})

    def _session_delete(self, req_id: Json, params: Msg) -> None:
        if not self.opts.delete_session:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/delete")
            return
        sid = params.get("sessionId")
        if isinstance(sid, str):
            self.sessions.pop(sid, None)
        if self.opts.log_stderr:
            sys.stderr.write(f"mock-agent deleted {sid}\n")
        self.respond(req_id, {})

    def _logout(self, req_id: Json, params: Msg) -> None:
        if not self.opts.logout:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: logout")
            return
        self.authenticated = False
        self.respond(req_id, {})

    def _set_mode(self, req_id: Json, params: Msg) -> None:
        if not self.opts.modes:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/set_mode")
            return
        session = self._live_session(req_id, params)
        if session is None:
            return
        mode = params.get("modeId")
        if mode not in {m["id"] for m in MODES}:
            self.error(req_id, INVALID_PARAMS, f"Invalid params: unknown mode {mode!r}")
            return
        assert isinstance(mode, str)
        session.mode = mode
        self.update(session, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
        self.respond(req_id, {})

    def _set_config_option(self, req_id: Json, params: Msg) -> None:
        if not self.opts.config_options:
            self.error(req_id, METHOD_NOT_FOUND, "Method not found: session/set_config_option")
            return
        session = self._live_session(req_id, params)
        if session is None:
            return
        config_id, value = params.get("configId"), params.get("value")
        if config_id == "model" and value in {m["value"] for m in MODELS}:
            assert isinstance(value, str)
            session.model = value
        elif config_id == "fast" and isinstance(value, bool):
            session.fast = value
        else:
            self.error(req_id, INVALID_PARAMS, f"Invalid params: {config_id!r} = {value!r}")
            return
        self.respond(req_id, {"configOptions": self._config_options(session)})

    def _prompt(self, req_id: Json, params: Msg) -> None:
        session = self._live_session(req_id, params)
        if session is None:
            return
        blocks = params.get("prompt")
        text = "".join(
            b["text"]
            for b in (blocks if isinstance(blocks, list) else [])
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        try:
            commands = parse_script(text)
        except ScriptError as e:
            self.error(req_id, INVALID_PARAMS, f"mock script: {e}")
            return
        if commands is None:
            commands = [("echo", text)]
        if session.forked_from is not None:
            self.chunk(session, f"forked from {session.forked_from}\n")
            session.forked_from = None
        turn = _Turn(session, req_id)
        turn.gen = self._run_script(turn, commands)
        self.turns[turn.key] = turn
        self._step(turn, None)


def _error_code(response: Msg) -> object:
    err = response.get("error")
    return err.get("code") if isinstance(err, dict) else err


def _fs_error(response: Msg) -> str:
    err = response.get("error")
    if isinstance(err, dict):
        return f"fs error {err.get('code')} {err.get('message')}"
    return f"fs error {err}"


def _exec_detached(argv: list[str], env: dict[str, str]) -> None:
    """In a forked child: stdio on /dev/null, default SIGPIPE/SIGINT, then exec."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    # Python ignores SIGPIPE, and that would be inherited through exec. SIGTERM keeps
    # whatever the agent has (SIG_IGN under --ignore-sigterm), as the flag promises.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execve(argv[0], argv, env)  # noqa: S606 -- a fixed argv (sleep 3600), no shell


def _spawner(kind: str) -> Callable[[MockAgent, _Turn, _Session, str], _Outcome | None]:
    def verb(agent: MockAgent, turn: _Turn, session: _Session, rest: str) -> _Outcome | None:
        return agent.v_spawn(turn, session, rest, kind)

    return verb


_STEP_VERBS: dict[str, Callable[[MockAgent, _Turn, str], Step]] = {
    "stream": MockAgent.v_stream,
    "sleep": MockAgent.v_sleep,
    "late": MockAgent.v_late,
    "tool": MockAgent.v_tool,
    "cancel-request": MockAgent.v_cancel_request,
    "elicit": MockAgent.v_elicit,
    "read": MockAgent.v_read,
    "write": MockAgent.v_write,
    "terminal": MockAgent.v_terminal,
}
_PLAIN_VERBS: dict[str, Callable[[MockAgent, _Turn, _Session, str], _Outcome | None]] = {
    "echo": MockAgent.v_echo,
    "hang": MockAgent.v_hang,
    "spawn-group": _spawner("group"),
    "spawn-setsid": _spawner("setsid"),
    "spawn-daemon": _spawner("daemon"),
    "spawn-envclear": _spawner("envclear"),
    "crash": MockAgent.v_crash,
    "stderr": MockAgent.v_stderr,
    "malformed": MockAgent.v_malformed,
    "oversized": MockAgent.v_oversized,
    "big": MockAgent.v_big,
    "unknown-update": MockAgent.v_unknown_update,
    "plan": MockAgent.v_plan,
    "thought": MockAgent.v_thought,
    "usage": MockAgent.v_usage,
    "session-params": MockAgent.v_session_params,
    "mode": MockAgent.v_mode,
    "stop": MockAgent.v_stop,
    "error": MockAgent.v_error,
    "exit": MockAgent.v_exit,
    "run": lambda agent, turn, session, rest: mock_delegation.run(agent, session, rest),
    "mcp-call": lambda agent, turn, session, rest: mock_delegation.mcp_call(agent, session, rest),
}


def main(argv: list[str] | None = None) -> int:
    """Run the mock agent on this process's stdin/stdout; return the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if "-h" in args or "--help" in args:
        sys.stdout.write(USAGE + (__doc__ or ""))
        return 0
    try:
        opts = Options.parse(args)
    except ValueError as e:
        sys.stderr.write(f"tether-mock-agent: {e}\n{USAGE}")
        return 2
    # Die on SIGINT like a plain program instead of printing a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return MockAgent(opts).run()


if __name__ == "__main__":
    sys.exit(main())
