"""The mock agent's plumbing: the select loop, line dispatch, and turns as generators.

:class:`MockAgent` reads NDJSON from stdin, routes requests to the session methods
(:mod:`.sessions`) or to ``session/prompt``, and runs each prompt's script as a
generator over the verb tables of the behaviour families (:mod:`.prompt_verbs`,
:mod:`.client_calls`, :mod:`.misbehaviour`, and the delegation verbs).
"""

from __future__ import annotations

import json
import os
import time
from select import select

from tether.testing import mock_delegation
from tether.testing.mock_agent import client_calls, misbehaviour, prompt_verbs
from tether.testing.mock_agent import sessions as session_methods
from tether.testing.mock_agent.protocol import (
    CANCELLED,
    HANG,
    INTERNAL_ERROR,
    INTERRUPT,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    Outcome,
    Session,
    Sleep,
    Turn,
    dumps,
    key,
)
from tether.testing.mock_agent.script import ScriptError, parse_script

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.testing.mock_agent.options import Options
    from tether.testing.mock_agent.protocol import Json, Msg, Step


class MockAgent:
    """The agent: a select loop over stdin that drives each turn as a generator."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.sessions: dict[str, Session] = {}
        self.turns: dict[str, Turn] = {}  # running prompts by the client's request id
        self.awaiting: dict[str, Turn] = {}  # our requests by id, and who waits for them
        self.sleepers: dict[Turn, float] = {}  # sleeping turns and their deadlines
        self.authenticated = False
        self.next_session = 1
        self.mcp_servers: list[Json] = []  # session/new's mcpServers (the mcp-call verb)
        self.new_params: Msg = {}  # the rest of session/new's params (session-params)
        self.next_request = 1
        self.next_call = 1
        self.eof = False
        self.stdout_open = True
        self.children: list[int] = []

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
        self.write(dumps(msg))

    def respond(self, req_id: Json, result: Json) -> None:
        self.write(dumps({"jsonrpc": "2.0", "id": req_id, "result": result}))

    def error(self, req_id: Json, code: int, message: str) -> None:
        self.write(
            dumps({"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}})
        )

    def notify(self, method: str, params: Json) -> None:
        self.write(dumps({"jsonrpc": "2.0", "method": method, "params": params}))

    def update(self, session: Session, update: Msg) -> None:
        self.notify("session/update", {"sessionId": session.sid, "update": update})

    def chunk(self, session: Session, text: str, kind: str = "agent_message_chunk") -> None:
        self.update(session, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})

    def request(self, method: str, params: Msg) -> tuple[int, str]:
        """Send a request to the client; return its id and the key to await."""
        req_id = self.next_request
        self.next_request += 1
        self.write(dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}))
        return req_id, key(req_id)

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
            turn = self.awaiting.pop(key(msg["id"]), None)
            if turn is not None:
                self._step(turn, msg)
        elif "id" in msg:
            self.error(msg["id"], INVALID_REQUEST, "Invalid request")

    def _on_request(self, req_id: Json, method: str, params: Msg) -> None:
        if method == "session/prompt":
            self._prompt(req_id, params)
            return
        handler = session_methods.HANDLERS.get(method)
        if handler is None:
            self.error(req_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        handler(self, req_id, params)

    def _on_notification(self, method: str, params: Msg) -> None:
        if method == "session/cancel":
            sid = params.get("sessionId")
            for turn in list(self.turns.values()):
                if turn.session.sid == sid:
                    self.cancel(turn, as_error=False)
        elif method == "$/cancel_request" and "requestId" in params:
            named = self.turns.get(key(params["requestId"]))
            if named is not None:
                self.cancel(named, as_error=True)
        # Anything else (session/cancel for unknown sessions, _extensions) is ignored.

    # -- turns ----------------------------------------------------------------------

    def cancel(self, turn: Turn, *, as_error: bool) -> None:
        if turn.ignore_cancel or turn.cancelled:
            return
        turn.cancelled = True
        turn.cancel_error = as_error
        waiting = turn.waiting
        if isinstance(waiting, Sleep) and waiting.cancellable:
            self._step(turn, INTERRUPT)

    def _step(self, turn: Turn, value: object) -> None:
        """Resume a turn with ``value`` and run it up to its next wait (or its end)."""
        if isinstance(turn.waiting, Sleep):
            del self.sleepers[turn]
        turn.waiting = None
        assert turn.gen is not None
        try:
            waiting = turn.gen.send(value)
        except StopIteration as stop:
            outcome = stop.value
            self._finish(turn, outcome if isinstance(outcome, Outcome) else Outcome("end_turn"))
            return
        except Exception as e:  # a bug in a verb: answer the prompt, keep the agent up
            self._finish(turn, Outcome(None, INTERNAL_ERROR, f"mock agent bug: {e!r}"))
            return
        turn.waiting = waiting
        if isinstance(waiting, Sleep):
            self.sleepers[turn] = waiting.deadline
        else:
            self.awaiting[waiting.key] = turn

    def _finish(self, turn: Turn, outcome: Outcome) -> None:
        self.turns.pop(turn.key, None)
        if outcome is HANG:
            return
        if outcome.stop_reason == "cancelled" and turn.cancel_error:
            self.error(turn.req_id, REQUEST_CANCELLED, "Request cancelled")
        elif outcome.stop_reason is not None:
            self.respond(turn.req_id, {"stopReason": outcome.stop_reason})
        else:
            self.error(turn.req_id, outcome.code, outcome.message)
        if turn.exit_code is not None:
            os._exit(turn.exit_code)

    def _run_script(self, turn: Turn, commands: list[tuple[str, str]]) -> Step:
        session = turn.session
        for verb, rest in commands:
            if turn.cancelled and not turn.ignore_cancel:
                return CANCELLED
            if verb in _STEP_VERBS:
                outcome = yield from _STEP_VERBS[verb](self, turn, rest)
            else:
                outcome = _PLAIN_VERBS[verb](self, turn, session, rest)
            if outcome is not None:
                return outcome
        if turn.cancelled and not turn.ignore_cancel:
            return CANCELLED
        return None

    def _prompt(self, req_id: Json, params: Msg) -> None:
        session = session_methods.live_session(self, req_id, params)
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
        turn = Turn(session, req_id)
        turn.gen = self._run_script(turn, commands)
        self.turns[turn.key] = turn
        self._step(turn, None)


_STEP_VERBS: dict[str, Callable[[MockAgent, Turn, str], Step]] = {
    **prompt_verbs.STEP_VERBS,
    **client_calls.STEP_VERBS,
    **misbehaviour.STEP_VERBS,
}
_PLAIN_VERBS: dict[str, Callable[[MockAgent, Turn, Session, str], Outcome | None]] = {
    **prompt_verbs.PLAIN_VERBS,
    **misbehaviour.PLAIN_VERBS,
    "run": lambda agent, turn, session, rest: mock_delegation.run(agent, session, rest),
    "mcp-call": lambda agent, turn, session, rest: mock_delegation.mcp_call(agent, session, rest),
}
