"""The agent connection's wire: frames in and out, requests and their answers, failure.

Theory of operation
-------------------
A thin async shell around the sans-IO :class:`tether.jsonrpc.JsonRpcConnection`, over
an :class:`~tether.acp.transport.AgentTransport`. Bytes from the agent arrive in
:meth:`Wire.on_data`, called synchronously by the transport; we feed them to the core
and drain its events at once, in order:

* a ``Response`` resolves the future of the request it answers -- the core has already
  dropped late answers to abandoned requests, so a stale answer can never resolve a
  newer request (openab #732/#760); a dropped one sets the turn table's
  ``late_answer``, which a settling turn waits for;
* a ``session/update`` (and any other notification, known or not, ``_``-prefixed or
  not) goes to the listener of its ``sessionId`` synchronously, so updates reach the
  caller in arrival order (the SDK's task-per-message design reorders them);
* an agent->client request goes to :class:`~tether.acp._agent_requests.AgentRequests`;
* a ``ProtocolViolation`` (malformed or oversized line) is logged and counted, and the
  stream goes on; an *oversized* one (over ``max_frame_bytes``, config ``frameMaxBytes``)
  also fails every running turn with :class:`~tether.errors.FrameTooLarge`, naming the
  limit: a turn whose agent output was cut must never end as a success.

Observers (``on_frame``, ``on_line``, listeners, ``on_permission``) are the caller's
code and go through :meth:`Wire.guard`: an exception fails the running turns it
concerns instead of reaching the reader, or is logged when there is none.

The wire owns the core, the futures of our requests, the listeners, and whether the
connection is closed or dead; :mod:`tether.acp._turn_table` owns the turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from tether import _aio, _log
from tether.acp._turn_table import TurnTable, UpdateListener, _Turn
from tether.errors import (
    AgentExited,
    BrokenResourceError,
    ClosedResourceError,
    FrameTooLarge,
    HandshakeTimeout,
    agent_request_error,
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

if TYPE_CHECKING:
    from tether.acp._agent_requests import AgentRequests
    from tether.acp.connection import ClientOptions
    from tether.acp.transport import AgentTransport

# EOF usually beats the keeper's `exited` report by a millisecond; we wait this long for
# it so the error can say how the agent ended.
EXIT_STATUS_WAIT_S = 0.5


def _raw_of(event: Response | Notification | Request) -> dict[str, Any]:
    return event.raw


class Wire:
    """Frames, requests and failure of one agent connection; see the module docstring.

    Receiving starts with :meth:`start`, once the handler of the agent's requests exists.
    """

    _requests: AgentRequests  # set once, by start()

    def __init__(self, transport: AgentTransport, options: ClientOptions, table: TurnTable):
        self.transport = transport
        self.options = options
        self.rpc = JsonRpcConnection(max_frame_bytes=options.max_frame_bytes)
        self.protocol_violations = 0
        self.observer_errors = 0
        self._table = table
        self._waiters: dict[int, asyncio.Future[Response]] = {}
        self._listeners: dict[str, UpdateListener] = {}
        self._fallback_listener: UpdateListener | None = None
        self._dead: BaseException | None = None
        self._closed = False
        self.loop = asyncio.get_running_loop()
        self._handler_tasks: set[asyncio.Task[None]] = set()

    def start(self, requests: AgentRequests) -> None:
        """Start receiving from the transport; the agent's requests go to ``requests``."""
        self._requests = requests
        self.transport.set_receiver(self.on_data, self.on_eof)

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
            self.guard(on_line, direction, line, fails=self._table.running_turns())
        on_frame = self.options.on_frame
        if on_frame is not None:
            self.guard(on_frame, direction, raw(), fails=self._table.running_turns())

    def listen(self, session_id: str, listener: UpdateListener) -> None:
        """Notifications of ``session_id`` go to ``listener`` until :meth:`unlisten`."""
        self._listeners[session_id] = listener

    def unlisten(self, session_id: str) -> None:
        """Notifications of ``session_id`` go to the fallback listener again."""
        self._listeners.pop(session_id, None)

    def set_fallback_listener(self, listener: UpdateListener | None) -> None:
        """Receive notifications that arrive outside any turn (after session/new, late ones)."""
        self._fallback_listener = listener

    # --- wire plumbing --------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        """Write frames to the agent, observed first (``out``)."""
        if data and (self.options.on_line is not None or self.options.on_frame is not None):
            for line in data.splitlines():
                if line.strip():
                    self._observe("out", line, functools.partial(json.loads, line))
        self.transport.write(data)

    def spawn_handler(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of this connection (cancelled by :meth:`close`)."""
        _aio.spawn(coro, keep=self._handler_tasks)

    def on_data(self, data: bytes) -> None:
        """Bytes from the agent (called synchronously by the transport)."""
        if self._closed:
            return  # we stopped listening: nothing the agent says now reaches anyone
        self.rpc.receive_data(data)
        self._drain_events()

    def on_eof(self) -> None:
        """The agent's output ended."""
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
                    self._table.late_answer.set()
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
            turn = self._table.turn_of(session_id)
            self.guard(listener, frame, fails=(turn,) if turn is not None else ())
        elif self._fallback_listener is not None:
            self.guard(self._fallback_listener, frame)

    def fail_turns_oversized(self, length: int) -> None:
        """The agent sent a line of at least ``length`` bytes, over the frame limit, and
        it was dropped: every running turn fails with ``FrameTooLarge`` (each is then
        abandoned) -- a turn whose output was cut must never end as a success."""
        limit = self.rpc.max_frame_bytes
        self._table.fail_running(
            FrameTooLarge(
                f"the agent sent a message of at least {length} bytes, over the limit of"
                f" {limit} bytes (config frameMaxBytes); it was dropped, so this turn's"
                " output is incomplete",
                limit=limit,
            )
        )

    # --- failure --------------------------------------------------------------------

    async def _fail_after_exit(self) -> None:
        """The agent's output closed: let its exit status arrive (bounded), fail what waits."""
        if self.transport.exit_status() is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_STATUS_WAIT_S):
                    await self.transport.wait_exited()
        if self.transport.exit_status() is None:
            # Alive without a stdout: it can never answer again. Say so (issue 9, item 15)
            # rather than "exited (exit_code=None, signal=None)".
            self.fail_everything(
                AgentExited(
                    "the agent closed its stdout but is still running, so it can no longer"
                    " answer; this agent run is ended",
                    stderr_tail=self.transport.stderr_tail()[-2000:],
                )
            )
            return
        self.fail_everything(self.exit_error("the agent closed its output"))

    def exit_error(self, why: str) -> BrokenResourceError:
        """The error that says how the agent ended (exit code, signal, stderr tail)."""
        code, sig = self.transport.exit_status() or (None, None)
        return AgentExited(
            f"{why}: the agent exited"
            + (f" with code {code}" if code is not None else "")
            + (f" on signal {sig}" if sig is not None else ""),
            exit_code=code,
            signal=sig,
            stderr_tail=self.transport.stderr_tail()[-2000:],
        )

    def fail_everything(self, exc: BaseException) -> None:
        """The connection is unusable from now on: every waiter fails with ``exc``."""
        if self._dead is None:
            self._dead = exc
        self._table.agent_gone()
        self.rpc.fail_all()
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
        self._waiters.clear()

    @property
    def is_broken(self) -> bool:
        """Whether the agent side is unusable (EOF, exit, failed liveness check, retired)."""
        return self._dead is not None

    def usable(self) -> bool:
        """Neither closed nor broken."""
        return not self._closed and self._dead is None

    def check_usable(self) -> None:
        """Raise why the connection cannot be used, if it cannot."""
        if self._closed:
            raise ClosedResourceError("the agent connection is closed")
        if self._dead is not None:
            raise self._dead

    def close(self) -> None:
        """Stop listening: cancel handlers, fail what waits, close the agent's input."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._handler_tasks):
            task.cancel()
        self.fail_everything(ClosedResourceError("the agent connection was closed"))
        self.transport.close_write()

    # --- client -> agent requests ---------------------------------------------------------

    def send_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Response]]:
        """Send a request; return its id and the future of its answer."""
        self.check_usable()
        request_id, data = self.rpc.send_request(method, params, now=time.monotonic())
        fut: asyncio.Future[Response] = self.loop.create_future()
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
        request_id, fut = self.send_request(method, params)
        try:
            async with asyncio.timeout(timeout):
                response = await fut
        except TimeoutError:
            self.abandon(request_id, "deadline")
            raise HandshakeTimeout(
                f"the agent did not answer {method} within {timeout:g} s",
                method=method,
                stderr_tail=self.transport.stderr_tail()[-2000:],
            ) from None
        except asyncio.CancelledError:
            self.abandon(request_id, "cancelled")
            raise
        return self.result_of(method, response)

    def abandon(self, request_id: int, reason: str) -> None:
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
            if self.options.cancel_requests and self.usable():
                data += self.rpc.send_notification("$/cancel_request", {"requestId": request_id})
            self.send_bytes(data)

    def forget(self, request_id: int) -> None:
        """Stop waiting for ``request_id`` without telling the agent anything."""
        self._waiters.pop(request_id, None)

    @staticmethod
    def result_of(method: str, response: Response) -> Any:
        """The result of ``response``; raise the agent's JSON-RPC error."""
        if response.error is not None:
            raise agent_request_error(method, response.error)
        return response.result
