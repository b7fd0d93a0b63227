"""The async ACP client connection over an agent's stdin/stdout.

Theory of operation
-------------------
A thin async shell around the sans-IO :class:`tether.jsonrpc.JsonRpcConnection`. Bytes
from the agent's stdout arrive in ``_on_data`` (called synchronously from the pipe's
``data_received``); we feed them to the core and drain its events at once, in order:

* a ``Response`` resolves the future of the request it answers -- the core has already
  dropped late answers to abandoned requests, so a stale answer can never resolve a
  newer request (openab #732/#760);
* a ``session/update`` (and any other notification, known or not, ``_``-prefixed or
  not) goes to the listener of its ``sessionId`` synchronously, so updates reach the
  caller in arrival order (the SDK's task-per-message design reorders them);
* an agent->client request is answered by a handler: permissions by the permission
  mode (or an async hook), ``fs/*`` confined to the session cwd, ``$/cancel_request``
  answered ``-32800`` for the named request, anything else ``-32601``;
* a ``ProtocolViolation`` (malformed or oversized line) is logged and counted, and the
  stream goes on.

Waiting for a prompt uses a liveness check plus a hard ceiling rather than a flat
receive timeout: a tool run of an hour is fine as long as the agent lives, a dead
agent fails the turn at once (stdout EOF) or within one liveness interval, and the
ceiling *abandons* the request by the pending-table rules (removed, ``session/cancel``
exactly once, late answer dropped).

Every outgoing and incoming frame can be observed through ``on_frame`` (used by
``--format json``, which prints raw ACP frames, and by the schema-conformance tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether import _log
from tether._version import __version__
from tether.acp import policy
from tether.errors import (
    AgentExited,
    AgentRequestError,
    BrokenResourceError,
    ClosedResourceError,
    HandshakeTimeout,
    PromptTimeout,
    RemoteProtocolError,
)
from tether.jsonrpc import (
    EOF,
    NEED_DATA,
    JsonRpcConnection,
    Notification,
    ProtocolViolation,
    Request,
    Response,
)
from tether.supervise.runner import AgentProcess

PROTOCOL_VERSION = 1
DEFAULT_HANDSHAKE_TIMEOUT = 30.0  # acpx allows 15 s for gemini, 60 s for claude session/new
DEFAULT_LIVENESS_INTERVAL = 30.0
DEFAULT_PROMPT_CEILING = 30 * 60.0
# After an abandoned turn, how long the next turn waits for the agent to answer the
# abandoned one (agents answer session/cancel in 7-100 ms; see acp-protocol.md §9).
QUIESCE_S = 2.0
REQUEST_CANCELLED = -32800
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

UpdateListener = Callable[[dict[str, Any]], None]
FrameObserver = Callable[[str, dict[str, Any]], None]
PermissionHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]

logger = logging.getLogger("tether.acp")


@dataclass
class ClientOptions:
    """How the client presents itself and decides for the agent."""

    permission_mode: policy.PermissionMode = policy.PermissionMode.APPROVE_READS
    fs: bool = True
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    liveness_interval: float = DEFAULT_LIVENESS_INTERVAL
    prompt_ceiling: float | None = DEFAULT_PROMPT_CEILING
    # methodId -> credential, passed in authenticate's _meta (acpx: ACPX_AUTH_<ID>)
    auth: Mapping[str, str] = field(default_factory=dict)
    # Undecided permission requests go here (a human, an orchestrator); None = reject.
    permission_hook: PermissionHook | None = None
    # Called with (direction "out"|"in", raw frame) for every frame.
    on_frame: FrameObserver | None = None
    # Called with (direction, the frame's bytes without newline) for every frame: the
    # cheap way to relay frames unchanged (the owner does; no decode/encode per update).
    on_line: Callable[[str, bytes], None] | None = None
    # Called with (request params, outcome) for every permission decision we send.
    on_permission: Callable[[dict[str, Any], dict[str, Any]], None] | None = None


@dataclass
class TurnResult:
    """How a prompt turn ended."""

    stop_reason: str
    result: dict[str, Any]
    permission_denied: int = 0


@dataclass
class _Turn:
    session_id: str
    request_id: int
    listener: UpdateListener
    cancel_requested: bool = False
    permission_denied: int = 0
    # agent->client permission requests of this turn still waiting for a decision
    pending_permissions: dict[Any, asyncio.Task[None]] = field(default_factory=dict)


class AgentConnection:
    """An ACP client connection to one agent process. Use :func:`open_connection`."""

    def __init__(self, proc: AgentProcess, cwd: str, options: ClientOptions) -> None:
        self.proc = proc
        self.cwd = cwd
        self.options = options
        self.rpc = JsonRpcConnection()
        self.agent_info: dict[str, Any] = {}
        self.agent_capabilities: dict[str, Any] = {}
        self.auth_methods: list[dict[str, Any]] = []
        self.protocol_violations = 0
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._listeners: dict[str, UpdateListener] = {}
        self._turns: dict[str, _Turn] = {}
        self._fallback_listener: UpdateListener | None = None
        self._dead: BaseException | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._stale_turns: dict[str, int] = {}  # session -> abandoned prompt id
        self._late_answer = asyncio.Event()
        proc.set_stdout_handler(self._on_data, self._on_eof)

    # --- wire plumbing --------------------------------------------------------------

    def _observe_out(self, data: bytes) -> None:
        on_line = self.options.on_line
        if on_line is not None and data:
            for line in data.splitlines():
                if line.strip():
                    on_line("out", line)
        if self.options.on_frame is not None and data:
            import json

            for line in data.splitlines():
                if line.strip():
                    self.options.on_frame("out", json.loads(line))

    def _send_bytes(self, data: bytes) -> None:
        self._observe_out(data)
        self.proc.write(data)

    def _on_data(self, data: bytes) -> None:
        self.rpc.receive_data(data)
        self._drain_events()

    def _on_eof(self) -> None:
        self.rpc.receive_data(b"")
        self._drain_events()

    def _drain_events(self) -> None:
        observe = self.options.on_frame
        on_line = self.options.on_line
        stale_before = self.rpc.stats.stale_responses
        while True:
            event = self.rpc.next_event()
            if event is NEED_DATA:
                if self.rpc.stats.stale_responses != stale_before:
                    self._late_answer.set()
                return
            if event is EOF:
                self._spawn_handler(self._fail_after_exit())
                return
            if isinstance(event, Response):
                if on_line is not None:
                    on_line("in", event.line)
                if observe is not None:
                    observe("in", event.raw)
                fut = self._waiters.pop(event.id, None) if isinstance(event.id, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(event)
            elif isinstance(event, Notification):
                if on_line is not None:
                    on_line("in", event.line)
                if observe is not None:
                    observe("in", event.raw)
                self._on_notification(event)
            elif isinstance(event, Request):
                if on_line is not None:
                    on_line("in", event.line)
                if observe is not None:
                    observe("in", event.raw)
                self._on_request(event)
            elif isinstance(event, ProtocolViolation):
                self.protocol_violations += 1
                _log.event(
                    "protocol_violation",
                    logging.WARNING,
                    lease_id=self.proc.lease_id,
                    reason=event.reason,
                    detail=event.detail,
                )

    async def _fail_after_exit(self) -> None:
        """stdout closed: give the exit status a moment to arrive, then fail what waits.

        EOF usually beats the keeper's ``exited`` report by a millisecond; waiting for it
        (bounded) lets the error say how the agent ended instead of "unknown".
        """
        exited = self.proc.exited
        if exited is not None and not exited.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):
                    await asyncio.shield(exited)
        if exited is not None and not exited.done():
            # Alive without a stdout: it can never answer again. Say so (issue 9, item 15)
            # rather than "exited (exit_code=None, signal=None)".
            self._fail_everything(
                AgentExited(
                    "the agent closed its stdout but is still running, so it can no longer"
                    " answer; this agent run is ended",
                    stderr_tail=self.proc.stderr_tail()[-2000:],
                )
            )
            return
        self._fail_everything(self._exit_error("the agent closed its output"))

    def _exit_error(self, why: str) -> BrokenResourceError:
        code, sig = (None, None)
        if self.proc.exited is not None and self.proc.exited.done():
            code, sig = self.proc.exited.result()
        return AgentExited(
            f"{why}: the agent exited"
            + (f" with code {code}" if code is not None else "")
            + (f" on signal {sig}" if sig is not None else ""),
            exit_code=code,
            signal=sig,
            stderr_tail=self.proc.stderr_tail()[-2000:],
        )

    def _fail_everything(self, exc: BaseException) -> None:
        if self._dead is None:
            self._dead = exc
        self.rpc.fail_all()
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._waiters.clear()

    # --- agent -> client --------------------------------------------------------------

    def _on_notification(self, note: Notification) -> None:
        params = note.params if isinstance(note.params, dict) else {}
        session_id = params.get("sessionId")
        if note.method == "$/cancel_request":
            self._on_cancel_request(params)
            return
        frame = note.raw or {"jsonrpc": "2.0", "method": note.method, "params": note.params}
        listener = self._listeners.get(session_id) if isinstance(session_id, str) else None
        if listener is None:
            listener = self._fallback_listener
        if listener is not None:
            listener(frame)

    def _on_request(self, req: Request) -> None:
        params = req.params if isinstance(req.params, dict) else {}
        method = req.method
        if method == "session/request_permission":
            self._spawn_handler(self._handle_permission(req, params))
        elif method == "fs/read_text_file" and self.options.fs:
            self._answer_fs(req, params, write=False)
        elif method == "fs/write_text_file" and self.options.fs:
            self._answer_fs(req, params, write=True)
        else:
            self._send_bytes(
                self.rpc.send_error(req.id, METHOD_NOT_FOUND, f"method not found: {method}")
            )

    def _spawn_handler(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = self._loop.create_task(coro)  # type: ignore[arg-type]
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    def _answer(self, req_id: Any, result: Any) -> None:
        if req_id in self.rpc.incoming_pending():
            self._send_bytes(self.rpc.send_result(req_id, result))

    async def _handle_permission(self, req: Request, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        turn = self._turns.get(session_id) if isinstance(session_id, str) else None
        raw_tool = params.get("toolCall")
        tool_call: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
        raw_options = params.get("options")
        options: list[dict[str, Any]] = (
            [o for o in raw_options if isinstance(o, dict)] if isinstance(raw_options, list) else []
        )
        if turn is not None and turn.cancel_requested:
            self._answer(req.id, dict(policy.CANCELLED_OUTCOME))
            return
        decision = policy.decide(self.options.permission_mode, tool_call)
        outcome: dict[str, Any] | None = None
        if decision is policy.Decision.ASK and self.options.permission_hook is not None:
            task = asyncio.current_task()
            if turn is not None and task is not None:
                turn.pending_permissions[req.id] = task
            try:
                outcome = await self.options.permission_hook(params)
            except asyncio.CancelledError:
                # The turn was cancelled (or the request cancelled by the agent); whoever
                # cancelled us has answered the request already.
                return
            finally:
                if turn is not None:
                    turn.pending_permissions.pop(req.id, None)
        if outcome is None:
            final = policy.Decision.REJECT if decision is policy.Decision.ASK else decision
            outcome = policy.outcome_for(final, options)
        selected = outcome.get("outcome", {})
        if (
            turn is not None
            and isinstance(selected, dict)
            and selected.get("outcome") == "selected"
        ):
            chosen = next(
                (o for o in options if o.get("optionId") == selected.get("optionId")),
                {},
            )
            if str(chosen.get("kind", "")).startswith("reject"):
                turn.permission_denied += 1
        _log.event(
            "permission",
            logging.DEBUG,
            session_id=session_id,
            tool=tool_call.get("title"),
            kind=tool_call.get("kind"),
            outcome=selected,
        )
        if self.options.on_permission is not None:
            self.options.on_permission(params, outcome)
        self._answer(req.id, outcome)

    def _on_cancel_request(self, params: dict[str, Any]) -> None:
        target = params.get("requestId")
        pending = self.rpc.incoming_pending()
        if target not in pending:
            return  # already answered: nothing to cancel
        for turn in self._turns.values():
            task = turn.pending_permissions.pop(target, None)
            if task is not None:
                task.cancel()
        self._send_bytes(self.rpc.send_error(target, REQUEST_CANCELLED, "request cancelled"))

    def _answer_fs(self, req: Request, params: dict[str, Any], *, write: bool) -> None:
        try:
            path = policy.confine(self.cwd, params.get("path"))
            if write:
                content = params.get("content")
                if not isinstance(content, str):
                    raise policy.PathRefused("content must be a string")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content, encoding="utf-8")
                result: dict[str, Any] = {}
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
                result = {
                    "content": policy.slice_lines(text, params.get("line"), params.get("limit"))
                }
        except policy.PathRefused as exc:
            self._send_bytes(self.rpc.send_error(req.id, INVALID_PARAMS, str(exc)))
            return
        except OSError as exc:
            self._send_bytes(
                self.rpc.send_error(
                    req.id, INTERNAL_ERROR, f"{exc.strerror or exc}: {params.get('path')}"
                )
            )
            return
        self._send_bytes(self.rpc.send_result(req.id, result))

    # --- client -> agent requests ---------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedResourceError("the agent connection is closed")
        if self._dead is not None:
            raise self._dead

    def _send_request(
        self, method: str, params: Any, *, deadline: float | None = None
    ) -> tuple[int, asyncio.Future[Response]]:
        self._check_usable()
        request_id, data = self.rpc.send_request(
            method, params, now=time.monotonic(), deadline=deadline
        )
        fut: asyncio.Future[Response] = self._loop.create_future()
        self._waiters[request_id] = fut
        self._send_bytes(data)
        return request_id, fut

    async def request(self, method: str, params: Any, *, timeout: float | None) -> Any:
        """Send a request and wait for its result; abandon it on timeout or cancellation.

        Raises:
            HandshakeTimeout: no answer within ``timeout`` (the request is abandoned).
            AgentRequestError: the agent answered with a JSON-RPC error.
            AgentExited: the agent died first.
        """
        request_id, fut = self._send_request(method, params)
        try:
            async with asyncio.timeout(timeout):
                response = await fut
        except TimeoutError:
            self._abandon(request_id, "deadline")
            raise HandshakeTimeout(
                f"the agent did not answer {method} within {timeout:g} s",
                method=method,
                stderr_tail=self.proc.stderr_tail()[-2000:],
            ) from None
        except asyncio.CancelledError:
            self._abandon(request_id, "cancelled")
            raise
        return self._result_of(method, response)

    def _abandon(self, request_id: int, reason: str) -> None:
        self._waiters.pop(request_id, None)
        with contextlib.suppress(Exception):
            self._send_bytes(self.rpc.abandon(request_id, reason=reason))

    @staticmethod
    def _result_of(method: str, response: Response) -> Any:
        if response.error is not None:
            err = response.error
            raise AgentRequestError(
                f"{method} failed: {err.get('message', 'error')} (code {err.get('code')})",
                acp=err,
                method=method,
            )
        return response.result

    # --- the ACP methods ----------------------------------------------------------------

    async def initialize(self) -> dict[str, Any]:
        """Send ``initialize`` (protocol 1, fs capabilities) under the handshake deadline."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": self.options.fs, "writeTextFile": self.options.fs},
                "terminal": False,
            },
            "clientInfo": {"name": "tether", "title": "Tether", "version": __version__},
        }
        result = await self.request("initialize", params, timeout=self.options.handshake_timeout)
        if not isinstance(result, dict):
            raise RemoteProtocolError("initialize returned no result object")
        version = result.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"the agent speaks ACP protocol version {version!r}; "
                f"Tether speaks {PROTOCOL_VERSION}"
            )
        self.agent_capabilities = result.get("agentCapabilities") or {}
        self.agent_info = result.get("agentInfo") or {}
        methods = result.get("authMethods")
        self.auth_methods = (
            [m for m in methods if isinstance(m, dict)] if isinstance(methods, list) else []
        )
        return result

    async def authenticate_if_needed(self) -> str | None:
        """Authenticate with the first advertised method that has credentials configured.

        Methods of type ``agent`` (the default) are called directly; ``env_var`` methods
        (legacy codex-acp) work when their variable is in the agent's environment.
        Returns the method id used, or None when nothing was configured.
        """
        for method in self.auth_methods:
            method_id = method.get("id")
            if not isinstance(method_id, str):
                continue
            if method.get("type") == "terminal":
                continue
            credential = self.options.auth.get(method_id)
            if credential is None:
                continue
            params: dict[str, Any] = {"methodId": method_id}
            if credential:
                params["_meta"] = {method_id: {"apiKey": credential}}
            await self.request("authenticate", params, timeout=self.options.handshake_timeout)
            return method_id
        return None

    def _session_caps(self) -> dict[str, Any]:
        caps = self.agent_capabilities.get("sessionCapabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def can_load(self) -> bool:
        return bool(self.agent_capabilities.get("loadSession"))

    @property
    def can_resume(self) -> bool:
        return self._session_caps().get("resume") is not None

    @property
    def can_close(self) -> bool:
        return self._session_caps().get("close") is not None

    async def new_session(self, cwd: str, mcp_servers: Sequence[Any] = ()) -> dict[str, Any]:
        result = await self.request(
            "session/new",
            {"cwd": cwd, "mcpServers": list(mcp_servers)},
            timeout=self.options.handshake_timeout,
        )
        if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
            raise RemoteProtocolError("session/new returned no sessionId")
        return result

    async def load_session(
        self,
        session_id: str,
        cwd: str,
        listener: UpdateListener | None = None,
        mcp_servers: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """``session/load`` (replays history as updates to ``listener``) or ``session/resume``."""
        method = "session/resume" if self.can_resume else "session/load"
        params: dict[str, Any] = {
            "sessionId": session_id,
            "cwd": cwd,
            "mcpServers": list(mcp_servers),
        }
        if listener is not None:
            self._listeners[session_id] = listener
        try:
            result = await self.request(method, params, timeout=self.options.handshake_timeout)
        finally:
            if listener is not None:
                self._listeners.pop(session_id, None)
        return result if isinstance(result, dict) else {}

    async def set_mode(self, session_id: str, mode_id: str) -> Any:
        return await self.request(
            "session/set_mode",
            {"sessionId": session_id, "modeId": mode_id},
            timeout=self.options.handshake_timeout,
        )

    async def set_config_option(self, session_id: str, config_id: str, value: Any) -> Any:
        params: dict[str, Any] = {"sessionId": session_id, "configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        return await self.request(
            "session/set_config_option", params, timeout=self.options.handshake_timeout
        )

    async def close_session(self, session_id: str, timeout: float = 2.0) -> bool:
        """Send ``session/close`` when advertised; True if the agent acknowledged it."""
        if not self.can_close or self._dead is not None or self._closed:
            return False
        try:
            await self.request("session/close", {"sessionId": session_id}, timeout=timeout)
        except (AgentRequestError, HandshakeTimeout, BrokenResourceError):
            return False
        return True

    def set_fallback_listener(self, listener: UpdateListener | None) -> None:
        """Receive notifications that arrive outside any turn (after session/new, late ones)."""
        self._fallback_listener = listener

    async def prompt(
        self,
        session_id: str,
        blocks: Sequence[dict[str, Any]],
        listener: UpdateListener,
        *,
        ceiling: float | None = None,
    ) -> TurnResult:
        """Run one turn: send ``session/prompt`` and stream its updates to ``listener``.

        Args:
            session_id: the ACP session.
            blocks: the prompt content blocks.
            listener: called synchronously, in arrival order, with every raw notification
                frame for this session during the turn.
            ceiling: the hard ceiling in seconds (default: the connection's
                ``prompt_ceiling``); None for none.

        Returns:
            The turn's stop reason and raw result.

        Raises:
            PromptTimeout: the ceiling passed; the request was abandoned
                (``session/cancel`` sent once, a late answer will be dropped).
            AgentExited: the agent died during the turn (noticed at once on EOF, or
                within one liveness interval).
            AgentRequestError: the agent answered with an error.

        Cancellation: the request is abandoned (``session/cancel`` sent once, pending
        permission requests answered ``cancelled``) before the cancellation propagates;
        the connection stays usable for the next turn.
        """
        if session_id in self._turns:
            raise RuntimeError(f"a turn is already running in session {session_id}")
        ceiling = self.options.prompt_ceiling if ceiling is None else ceiling
        started = time.monotonic()
        await self._quiesce(session_id)
        # Register the turn before sending, so observers see its request frame as part of it.
        turn = _Turn(session_id, -1, listener)
        self._turns[session_id] = turn
        self._listeners[session_id] = listener
        try:
            request_id, fut = self._send_request(
                "session/prompt", {"sessionId": session_id, "prompt": list(blocks)}
            )
        except BaseException:
            self._turns.pop(session_id, None)
            self._listeners.pop(session_id, None)
            raise
        turn.request_id = request_id
        try:
            while True:
                wait = self.options.liveness_interval
                if ceiling is not None:
                    remaining = started + ceiling - time.monotonic()
                    if remaining <= 0:
                        self._cancel_permissions(turn)
                        self._abandon(request_id, "ceiling")
                        self._stale_turns[session_id] = request_id
                        raise PromptTimeout(
                            f"the turn did not finish within {ceiling:g} s; it was cancelled",
                            session_id=session_id,
                        )
                    wait = min(wait, remaining)
                done, _ = await asyncio.wait({fut}, timeout=wait)
                if done:
                    break
                if not self._agent_alive():
                    self._fail_everything(self._exit_error("liveness check failed"))
                    break
            response = fut.result()
        except asyncio.CancelledError:
            self._cancel_permissions(turn)
            self._abandon(request_id, "cancelled")
            self._stale_turns[session_id] = request_id
            raise
        finally:
            self._turns.pop(session_id, None)
            self._listeners.pop(session_id, None)
            self._cancel_permissions(turn)
        result = self._result_of("session/prompt", response)
        result = result if isinstance(result, dict) else {}
        stop_reason = result.get("stopReason")
        return TurnResult(
            stop_reason=str(stop_reason) if stop_reason is not None else "end_turn",
            result=result,
            permission_denied=turn.permission_denied,
        )

    async def _quiesce(self, session_id: str) -> None:
        """Before a new turn, let an abandoned turn of this session finish (bounded).

        An abandoned prompt's late *answer* is dropped by id, but its trailing
        ``session/update``s carry only the session id: if the next turn started at once,
        they would be delivered as part of it. So we wait until the agent has answered
        the abandoned prompt (we sent it ``session/cancel``), at most ``QUIESCE_S``.
        Updates arriving meanwhile belong to no turn and go to the out-of-turn listener.
        """
        stale = self._stale_turns.pop(session_id, None)
        if stale is None:
            return
        deadline = time.monotonic() + QUIESCE_S
        while not self.rpc.was_answered_late(stale) and self._dead is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _log.event("quiesce_timeout", session_id=session_id, request_id=stale)
                return
            self._late_answer.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._late_answer.wait()

    def _agent_alive(self) -> bool:
        if self.proc.exited is not None and self.proc.exited.done():
            return False
        pid = self.proc.pid
        if pid is None:
            return False
        st = self.proc.table.stat(pid)
        return st is not None and st.state != "Z"

    def _cancel_permissions(self, turn: _Turn) -> None:
        """Answer every pending permission request of the turn ``cancelled`` (the ACP rule)."""
        for req_id, task in list(turn.pending_permissions.items()):
            task.cancel()
            self._answer(req_id, dict(policy.CANCELLED_OUTCOME))
        turn.pending_permissions.clear()

    def cancel(self, session_id: str) -> bool:
        """Cancel the turn of ``session_id``: ``session/cancel`` once, permissions cancelled.

        Returns False if no turn is running. Never kills anything; the turn still ends
        with the agent's answer (normally stopReason ``cancelled``).
        """
        turn = self._turns.get(session_id)
        if turn is None:
            return False
        turn.cancel_requested = True
        self._cancel_permissions(turn)
        with contextlib.suppress(Exception):
            self._send_bytes(self.rpc.cancel_turn(turn.request_id))
        return True

    @property
    def is_broken(self) -> bool:
        """Whether the agent side is gone (EOF, exit, failed liveness check)."""
        return self._dead is not None

    def active_turn(self, session_id: str) -> bool:
        return session_id in self._turns

    async def aclose(self) -> None:
        """Stop using the connection: fail pending requests and close the agent's stdin."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._handler_tasks):
            task.cancel()
        self._fail_everything(ClosedResourceError("the agent connection was closed"))
        self.proc.close_stdin()


async def open_connection(
    proc: AgentProcess, cwd: str, options: ClientOptions | None = None
) -> AgentConnection:
    """Wrap a running agent in an ACP connection and run ``initialize`` (+ ``authenticate``)."""
    conn = AgentConnection(proc, cwd, options or ClientOptions())
    await conn.initialize()
    await conn.authenticate_if_needed()
    return conn
