"""The async ACP client connection over an agent transport.

Theory of operation
-------------------
A thin async shell around the sans-IO :class:`tether.jsonrpc.JsonRpcConnection`, over
an :class:`~tether.acp.transport.AgentTransport` (a supervised process in production,
an in-memory fake in tests: this module imports neither). Bytes from the agent arrive
in ``_on_data``, called synchronously by the transport; we feed them to the core and
drain its events at once, in order:

* a ``Response`` resolves the future of the request it answers -- the core has already
  dropped late answers to abandoned requests, so a stale answer can never resolve a
  newer request (openab #732/#760);
* a ``session/update`` (and any other notification, known or not, ``_``-prefixed or
  not) goes to the listener of its ``sessionId`` synchronously, so updates reach the
  caller in arrival order (the SDK's task-per-message design reorders them);
* an agent->client request goes to :class:`~tether.acp._agent_requests.AgentRequests`;
* a ``ProtocolViolation`` (malformed or oversized line) is logged and counted, and the
  stream goes on; an *oversized* one (over ``max_frame_bytes``, config ``frameMaxBytes``)
  also fails every running turn with :class:`~tether.errors.FrameTooLarge`, naming the
  limit: a turn whose agent output was cut must never end as a success.

Observers never break the reader. Listeners and the ``on_frame`` / ``on_line`` /
``on_permission`` observers are the caller's code (a renderer writing to a closed
stdout, a socket to a caller that left); an exception from one is caught where it is
called. During a turn it fails that turn: the turn is abandoned (``session/cancel``
once, its permission requests answered ``cancelled``) and ``prompt`` raises the
observer's exception. Outside a turn there is nobody to give it to: it is logged.

Waiting for a prompt uses a liveness check plus a hard ceiling rather than a flat
receive timeout: a tool run of an hour is fine as long as the agent lives, a dead
agent fails the turn at once (EOF) or within one liveness interval, and the ceiling
*abandons* the request by the pending-table rules (removed, ``session/cancel`` exactly
once, late answer dropped).

Turns -- prompt, cancel, abandon, and the rule that nothing of an abandoned turn
reaches the next one -- are in :mod:`tether.acp._turns`; handshake and session calls in
:mod:`tether.acp._session_methods`; the agent's requests in
:mod:`tether.acp._agent_requests`.

Every outgoing and incoming frame can be observed through ``on_frame`` (used by
``--format json``, which prints raw ACP frames, and by the schema-conformance tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether import _aio, _log
from tether.acp import policy
from tether.acp._agent_requests import AgentRequests, ClientRelay
from tether.acp._session_methods import PROTOCOL_VERSION, SessionMethods
from tether.acp._turns import TurnMethods, TurnResult, UpdateListener, _Turn
from tether.acp.terminals import TerminalHost
from tether.acp.transport import AgentTransport
from tether.acp.turn_state import SessionTurns, TurnInput
from tether.errors import (
    AgentExited,
    BrokenResourceError,
    ClosedResourceError,
    HandshakeTimeout,
    agent_request_error,
)
from tether.jsonrpc import (
    DEFAULT_MAX_FRAME_BYTES,
    EOF,
    NEED_DATA,
    JsonRpcConnection,
    Notification,
    ProtocolViolation,
    Request,
    Response,
)

__all__ = [
    "PROTOCOL_VERSION",
    "AgentConnection",
    "ClientOptions",
    "TurnResult",
    "UpdateListener",
]

DEFAULT_HANDSHAKE_TIMEOUT = 30.0  # acpx allows 15 s for gemini, 60 s for claude session/new
DEFAULT_LIVENESS_INTERVAL = 30.0
DEFAULT_PROMPT_CEILING = 30 * 60.0
# How long the next turn waits for the agent to answer an abandoned one before the
# connection is retired. Agents answer session/cancel in 7-100 ms (acp-protocol.md §9);
# one that honours no cancel but finishes its work (mock `late`) gets this long.
DEFAULT_ABANDONED_TURN_GRACE = 10.0
# EOF usually beats the keeper's `exited` report by a millisecond; we wait this long for
# it so the error can say how the agent ended.
EXIT_STATUS_WAIT_S = 0.5

FrameObserver = Callable[[str, dict[str, Any]], None]
PermissionHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
# elicitation/create params -> the result ({"action": "accept"|"decline"|"cancel", ...})
ElicitationHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

logger = logging.getLogger("tether.acp")


def _raw_of(event: Response | Notification | Request) -> dict[str, Any]:
    return event.raw


@dataclass
class ClientOptions:
    """How the client presents itself and decides for the agent."""

    permission_mode: policy.PermissionMode | policy.PermissionPolicy = (
        policy.PermissionMode.APPROVE_READS
    )
    fs: bool = True
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    liveness_interval: float = DEFAULT_LIVENESS_INTERVAL
    prompt_ceiling: float | None = DEFAULT_PROMPT_CEILING
    abandoned_turn_grace: float = DEFAULT_ABANDONED_TURN_GRACE
    # How long a cancelled turn may take to end; past it the turn is given up and the
    # connection retired (the agent ignores cancel). None: wait for the agent (or the
    # ceiling). See tether.acp._turns.
    cancel_grace: float | None = None
    # The longest line the agent may send; a longer one fails the turn it arrives in.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    # methodId -> credential, passed in authenticate's _meta (acpx: ACPX_AUTH_<ID>)
    auth: Mapping[str, str] = field(default_factory=dict)
    # Advertised auth methods and no credential for any: "skip" (go on; the agent may
    # handle auth itself) or "fail" (AuthRequired) -- acpx's --auth-policy.
    auth_policy: str = "skip"
    # Undecided permission requests go here (a human, an orchestrator); None = reject.
    permission_hook: PermissionHook | None = None
    # Called with (direction "out"|"in", raw frame) for every frame.
    on_frame: FrameObserver | None = None
    # Called with (direction, the frame's bytes without newline) for every frame: the
    # cheap way to relay frames unchanged (the owner does; no decode/encode per update).
    on_line: Callable[[str, bytes], None] | None = None
    # Called with (request params, outcome) for every permission decision we send.
    on_permission: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    # elicitation/create goes here (advertised in initialize only when set); None: -32601.
    elicitation_hook: ElicitationHook | None = None
    # Called with the params of every elicitation/complete notification.
    on_elicitation_complete: Callable[[dict[str, Any]], None] | None = None
    # Send `$/cancel_request` for each request we abandon, beside `session/cancel`.
    cancel_requests: bool = True
    # Runs terminal/* commands (tether.acp.terminals); None: the capability is not
    # advertised and terminal/* is -32601.
    terminal_host: TerminalHost | None = None
    # fs/* and terminal/* requests it wants go to a client of ours instead (the owner's
    # relays to a `tether acp` client: tether.owner.relays); None: we answer them all.
    relay: ClientRelay | None = None


class AgentConnection(TurnMethods, SessionMethods):
    """An ACP client connection to one agent, over a transport."""

    def __init__(self, transport: AgentTransport, cwd: str, options: ClientOptions) -> None:
        self.transport = transport
        self.cwd = cwd
        self.options = options
        self.rpc = JsonRpcConnection(max_frame_bytes=options.max_frame_bytes)
        self.agent_info: dict[str, Any] = {}
        self.agent_capabilities: dict[str, Any] = {}
        self.auth_methods: list[dict[str, Any]] = []
        self.protocol_violations = 0
        self.observer_errors = 0
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._listeners: dict[str, UpdateListener] = {}
        self._turns: dict[str, _Turn] = {}
        self._fallback_listener: UpdateListener | None = None
        self._dead: BaseException | None = None
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._turn_states: dict[str, SessionTurns] = {}  # each session's turn machine
        self._late_answer = asyncio.Event()
        self._requests = AgentRequests(self)
        transport.set_receiver(self._on_data, self._on_eof)

    # --- observers: the caller's code, isolated from the reader ------------------------

    def guard(self, fn: Callable[..., None], *args: Any, fails: Iterable[_Turn] = ()) -> None:
        """Call an observer. An exception fails the turns in ``fails`` instead of reaching
        the reader; with no turn to fail it is logged, since nobody else would see it."""
        try:
            fn(*args)
        except Exception as exc:
            self.observer_errors += 1
            turns = list(fails)
            for turn in turns:
                if not turn.failed.done():
                    turn.failed.set_result(exc)
            if not turns:
                _log.event(
                    "observer_failed", logging.WARNING, agent=self.transport.label, error=repr(exc)
                )

    def _observe(self, direction: str, line: bytes, raw: Callable[[], dict[str, Any]]) -> None:
        on_line = self.options.on_line
        if on_line is not None:
            self.guard(on_line, direction, line, fails=self._turns.values())
        on_frame = self.options.on_frame
        if on_frame is not None:
            self.guard(on_frame, direction, raw(), fails=self._turns.values())

    # --- wire plumbing --------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        """Write frames to the agent, observed first (``out``)."""
        if data and (self.options.on_line is not None or self.options.on_frame is not None):
            for line in data.splitlines():
                if line.strip():
                    self._observe("out", line, functools.partial(json.loads, line))
        self.transport.write(data)

    def spawn_handler(self, coro: Coroutine[Any, Any, None]) -> None:
        _aio.spawn(coro, keep=self._handler_tasks)

    def _on_data(self, data: bytes) -> None:
        if self._closed:
            return  # we stopped listening: nothing the agent says now reaches anyone
        self.rpc.receive_data(data)
        self._drain_events()

    def _on_eof(self) -> None:
        if self._closed:
            return
        self.rpc.receive_data(b"")
        self._drain_events()

    def _drain_events(self) -> None:
        stale_before = self.rpc.stats.stale_responses
        while True:
            event = self.rpc.next_event()
            if event is NEED_DATA:
                if self.rpc.stats.stale_responses != stale_before:
                    self._late_answer.set()
                return
            if event is EOF:
                self.spawn_handler(self._fail_after_exit())
                return
            if isinstance(event, Response | Notification | Request):
                self._observe("in", event.line, functools.partial(_raw_of, event))
            if isinstance(event, Response):
                fut = self._waiters.pop(event.id, None) if isinstance(event.id, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(event)
            elif isinstance(event, Notification):
                self._on_notification(event)
            elif isinstance(event, Request):
                self._requests.on_request(event)
            elif isinstance(event, ProtocolViolation):
                self.protocol_violations += 1
                _log.event(
                    "protocol_violation",
                    logging.WARNING,
                    agent=self.transport.label,
                    reason=event.reason,
                    detail=event.detail,
                )
                if event.reason == "oversized":
                    self.fail_turns_oversized(event.length)

    def _on_notification(self, note: Notification) -> None:
        params = note.params if isinstance(note.params, dict) else {}
        if note.method == "$/cancel_request":
            self._requests.on_cancel_request(params)
            return
        if note.method == "elicitation/complete" and self.options.on_elicitation_complete:
            self.guard(self.options.on_elicitation_complete, params)
        session_id = params.get("sessionId")
        frame = note.raw or {"jsonrpc": "2.0", "method": note.method, "params": note.params}
        listener = self._listeners.get(session_id) if isinstance(session_id, str) else None
        if listener is not None:
            turn = self._turns.get(session_id) if isinstance(session_id, str) else None
            self.guard(listener, frame, fails=(turn,) if turn is not None else ())
        elif self._fallback_listener is not None:
            self.guard(self._fallback_listener, frame)

    async def _fail_after_exit(self) -> None:
        """The agent's output closed: let its exit status arrive (bounded), fail what waits."""
        if self.transport.exit_status() is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_STATUS_WAIT_S):
                    await self.transport.wait_exited()
        if self.transport.exit_status() is None:
            # Alive without a stdout: it can never answer again. Say so (issue 9, item 15)
            # rather than "exited (exit_code=None, signal=None)".
            self._fail_everything(
                AgentExited(
                    "the agent closed its stdout but is still running, so it can no longer"
                    " answer; this agent run is ended",
                    stderr_tail=self.transport.stderr_tail()[-2000:],
                )
            )
            return
        self._fail_everything(self._exit_error("the agent closed its output"))

    def _exit_error(self, why: str) -> BrokenResourceError:
        code, sig = self.transport.exit_status() or (None, None)
        return AgentExited(
            f"{why}: the agent exited"
            + (f" with code {code}" if code is not None else "")
            + (f" on signal {sig}" if sig is not None else ""),
            exit_code=code,
            signal=sig,
            stderr_tail=self.transport.stderr_tail()[-2000:],
        )

    def _fail_everything(self, exc: BaseException) -> None:
        if self._dead is None:
            self._dead = exc
        for machine in self._turn_states.values():
            machine.transition(TurnInput.AGENT_GONE)
        self.rpc.fail_all()
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._waiters.clear()

    def turn_of(self, session_id: object) -> _Turn | None:
        return self._turns.get(session_id) if isinstance(session_id, str) else None

    def running_turns(self) -> list[_Turn]:
        return list(self._turns.values())

    # --- client -> agent requests ---------------------------------------------------------

    def _usable(self) -> bool:
        return not self._closed and self._dead is None

    def _check_usable(self) -> None:
        if self._closed:
            raise ClosedResourceError("the agent connection is closed")
        if self._dead is not None:
            raise self._dead

    def _send_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Response]]:
        self._check_usable()
        request_id, data = self.rpc.send_request(method, params, now=time.monotonic())
        fut: asyncio.Future[Response] = self._loop.create_future()
        self._waiters[request_id] = fut
        self.send_bytes(data)
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
                stderr_tail=self.transport.stderr_tail()[-2000:],
            ) from None
        except asyncio.CancelledError:
            self._abandon(request_id, "cancelled")
            raise
        return self._result_of(method, response)

    def _abandon(self, request_id: int, reason: str) -> None:
        """Stop waiting for ``request_id``: ``session/cancel`` for a prompt (once), then
        ``$/cancel_request`` for any request.

        ``$/cancel_request`` is ACP's protocol-level cancellation of one request; a
        ``$/`` notification may be ignored by an agent that does not implement it, so we
        send it to every agent (``ClientOptions.cancel_requests``). Both current adapters
        honour it for ``session/prompt``, answering ``{"stopReason": "cancelled"}`` within
        ~30 ms (tests/realagents/NOTES.md), which lets the next turn settle sooner.
        """
        self._waiters.pop(request_id, None)
        if request_id in self.rpc.pending:
            data = self.rpc.abandon(request_id, reason=reason)
            if self.options.cancel_requests and self._usable():
                data += self.rpc.send_notification("$/cancel_request", {"requestId": request_id})
            self.send_bytes(data)

    @staticmethod
    def _result_of(method: str, response: Response) -> Any:
        if response.error is not None:
            raise agent_request_error(method, response.error)
        return response.result

    # --- turns ----------------------------------------------------------------------

    def set_fallback_listener(self, listener: UpdateListener | None) -> None:
        """Receive notifications that arrive outside any turn (after session/new, late ones)."""
        self._fallback_listener = listener

    @property
    def is_broken(self) -> bool:
        """Whether the agent side is unusable (EOF, exit, failed liveness check, retired)."""
        return self._dead is not None

    async def aclose(self) -> None:
        """Stop using the connection: fail pending requests, close the agent's input.

        Nothing the agent sends afterwards reaches a listener or an observer.
        """
        if self._closed:
            return
        self._closed = True
        for task in list(self._handler_tasks):
            task.cancel()
        self._fail_everything(ClosedResourceError("the agent connection was closed"))
        self.transport.close_write()
