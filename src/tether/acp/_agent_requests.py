"""Requests the agent sends us, and how each is answered.

* ``session/request_permission`` -- by the permission mode (:mod:`tether.acp.policy`);
  undecided ones go to the permission hook when there is one (a human, an
  orchestrator), else they are rejected. A request of a turn that is being cancelled
  is answered ``cancelled`` (the ACP rule), and so is one still waiting for the hook
  when the turn is cancelled or abandoned.
* ``elicitation/create`` -- to the elicitation hook when there is one (else ``-32601``,
  and the capability is not advertised); a cancelled turn answers it ``cancel``.
* ``fs/read_text_file`` / ``fs/write_text_file`` -- confined to the session's cwd.
* ``terminal/*`` -- to :class:`tether.acp.terminals.TerminalRequests` when the options
  carry a terminal host (else ``-32601``, and the capability is not advertised).
* ``fs/*`` and ``terminal/*`` we serve go to the options' :class:`ClientRelay` instead
  when it wants them (a ``tether acp`` client that serves files or terminals itself);
  its answer, result or JSON-RPC error, is the agent's.
* ``$/cancel_request`` (a notification naming one of the agent's requests) -- answered
  ``-32800`` for that request if it is still unanswered, and its hook call cancelled.
* anything else -- ``-32601`` method not found.

Every request is answered exactly once: :meth:`AgentRequests.answer` checks the
core's table of unanswered requests first, so the hook, a cancel and a
``$/cancel_request`` racing for the same id cannot answer twice.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from tether import _log
from tether.acp import policy
from tether.acp.terminals import METHODS as TERMINAL_METHODS
from tether.acp.terminals import TerminalRequests
from tether.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    Request,
)

if TYPE_CHECKING:
    from tether.acp._turn_table import TurnTable, _Turn
    from tether.acp._wire import Wire
    from tether.acp.connection import ClientOptions

FS_METHODS = frozenset({"fs/read_text_file", "fs/write_text_file"})


class ClientRelay(Protocol):
    """Where the agent's ``fs/*`` / ``terminal/*`` requests may be relayed."""

    def wants(self, method: str, params: dict[str, Any]) -> bool:
        """Whether this request goes to the relay (decided when it arrives)."""
        ...

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer: ``{"result": ...}`` or ``{"error": {code, message, data?}}``."""
        ...


class AgentRequests:
    """Answers the agent's requests on behalf of one connection (a collaborator of
    :class:`tether.acp.connection.AgentConnection`: it answers through the wire and finds
    a request's turn in the turn table)."""

    def __init__(self, wire: Wire, table: TurnTable, cwd: str, options: ClientOptions) -> None:
        self._wire = wire
        self._table = table
        self._cwd = cwd
        self._options = options
        host = options.terminal_host
        self.terminals = (
            TerminalRequests(
                host,
                cwd,
                answer=self.answer,
                error=self._error,
                spawn=wire.spawn_handler,
            )
            if host is not None
            else None
        )
        self._relayed: dict[Any, asyncio.Task[None]] = {}  # request id -> its relay

    def answer(self, req_id: Any, result: Any) -> None:
        """Send ``result`` for ``req_id`` unless it was answered already."""
        rpc = self._wire.rpc
        if req_id in rpc.incoming_pending():
            self._wire.send_bytes(rpc.send_result(req_id, result))

    def _error(self, req_id: Any, code: int, message: str) -> None:
        rpc = self._wire.rpc
        if req_id in rpc.incoming_pending():
            self._wire.send_bytes(rpc.send_error(req_id, code, message))

    def on_request(self, req: Request) -> None:
        params = req.params if isinstance(req.params, dict) else {}
        method = req.method
        fs = self._options.fs
        relay = self._options.relay
        served = (fs and method in FS_METHODS) or (
            method in TERMINAL_METHODS and self.terminals is not None
        )
        if served and relay is not None and relay.wants(method, params):
            self._wire.spawn_handler(self._relay(relay, req, params))
        elif method == "session/request_permission":
            self._wire.spawn_handler(self._permission(req, params))
        elif method == "elicitation/create" and self._options.elicitation_hook is not None:
            self._wire.spawn_handler(self._elicitation(req, params))
        elif method == "fs/read_text_file" and fs:
            self._fs(req, params, write=False)
        elif method == "fs/write_text_file" and fs:
            self._fs(req, params, write=True)
        elif method in TERMINAL_METHODS and self.terminals is not None:
            self.terminals.on_request(req, params)
        else:
            self._error(req.id, METHOD_NOT_FOUND, f"method not found: {method}")

    def on_cancel_request(self, params: dict[str, Any]) -> None:
        """``$/cancel_request``: answer the named request ``-32800`` if still unanswered."""
        target = params.get("requestId")
        if target not in self._wire.rpc.incoming_pending():
            return  # already answered: nothing to cancel
        relayed = self._relayed.pop(target, None)
        if relayed is not None:
            relayed.cancel()
        for turn in self._table.running_turns():
            task = turn.pending_permissions.pop(target, None)
            if task is not None:
                task.cancel()
        self._error(target, REQUEST_CANCELLED, "request cancelled")

    async def _relay(self, relay: ClientRelay, req: Request, params: dict[str, Any]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._relayed[req.id] = task
        try:
            answer = await relay.call(req.method, params)
        except asyncio.CancelledError:
            return  # `$/cancel_request`: answered -32800 by whoever cancelled us
        finally:
            self._relayed.pop(req.id, None)
        error = answer.get("error")
        if isinstance(error, dict):
            rpc = self._wire.rpc
            if req.id in rpc.incoming_pending():
                code, message = error.get("code"), str(error.get("message") or "")
                self._wire.send_bytes(
                    rpc.send_error(
                        req.id,
                        code if isinstance(code, int) else INTERNAL_ERROR,
                        message,
                        error.get("data"),
                    )
                )
            return
        self.answer(req.id, answer.get("result") or {})

    def cancel_permissions(self, turn: _Turn) -> None:
        """Answer every pending permission request of ``turn`` ``cancelled`` (the ACP rule)."""
        for req_id, task in list(turn.pending_permissions.items()):
            task.cancel()
            self.answer(req_id, turn.cancel_answers.get(req_id, dict(policy.CANCELLED_OUTCOME)))
        turn.pending_permissions.clear()
        turn.cancel_answers.clear()

    async def _elicitation(self, req: Request, params: dict[str, Any]) -> None:
        """Relay ``elicitation/create`` to the hook; a cancelled turn answers ``cancel``."""
        hook = self._options.elicitation_hook
        turn = self._table.turn_of(params.get("sessionId"))
        cancel = {"action": "cancel"}
        if hook is None or (turn is not None and turn.cancel_requested):
            self.answer(req.id, cancel)
            return
        task = asyncio.current_task()
        if turn is not None and task is not None:
            turn.pending_permissions[req.id] = task
            turn.cancel_answers[req.id] = cancel
        try:
            result = await hook(params)
        except asyncio.CancelledError:
            return  # whoever cancelled us has answered the request already
        finally:
            if turn is not None:
                turn.pending_permissions.pop(req.id, None)
                turn.cancel_answers.pop(req.id, None)
        self.answer(req.id, result)

    async def _permission(self, req: Request, params: dict[str, Any]) -> None:
        session_id = params.get("sessionId")
        turn = self._table.turn_of(session_id)
        raw_tool = params.get("toolCall")
        tool_call: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
        raw_options = params.get("options")
        options: list[dict[str, Any]] = (
            [o for o in raw_options if isinstance(o, dict)] if isinstance(raw_options, list) else []
        )
        if turn is not None and turn.cancel_requested:
            self.answer(req.id, dict(policy.CANCELLED_OUTCOME))
            return
        decision = policy.decide(self._options.permission_mode, tool_call)
        outcome: dict[str, Any] | None = None
        hook = self._options.permission_hook
        if decision is policy.Decision.ASK and hook is not None:
            task = asyncio.current_task()
            if turn is not None and task is not None:
                turn.pending_permissions[req.id] = task
            try:
                outcome = await hook(params)
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
            chosen = next((o for o in options if o.get("optionId") == selected.get("optionId")), {})
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
        if self._options.on_permission is not None:
            self._wire.guard(self._options.on_permission, params, outcome)
        self.answer(req.id, outcome)

    def _fs(self, req: Request, params: dict[str, Any], *, write: bool) -> None:
        try:
            path = policy.confine(self._cwd, params.get("path"))
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
            self._error(req.id, INVALID_PARAMS, str(exc))
            return
        except OSError as exc:
            self._error(req.id, INTERNAL_ERROR, f"{exc.strerror or exc}: {params.get('path')}")
            return
        self.answer(req.id, result)
