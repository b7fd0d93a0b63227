"""The ACP front door: one ACP client served as an agent, on top of Tether's sessions.

Theory of operation
-------------------
:class:`AcpDoor` is transport-independent: bytes from the client go into
:meth:`AcpDoor.serve`'s ``read``, bytes to the client leave through ``write`` (stdio for
``tether acp``; an HTTP route can hand in its own pair). The JSON-RPC framing and the
request/answer bookkeeping are the sans-IO core :class:`tether.jsonrpc.JsonRpcConnection`;
the translations are :mod:`.translate`. Each client request runs as its own task in
the door's task group, so a ``session/cancel`` (or any request) is read while a prompt
runs; answers go out when each finishes.

What each method does, through the one operations layer (:mod:`tether.operations`):

* ``session/new`` creates a Tether session for the door's agent in the client's
  ``cwd`` (a fresh name, ``acp-<hex>``) and starts its owner and agent, answering the
  agent's ``modes`` and ``configOptions`` (:mod:`.opening`); ``mcpServers`` join the
  configured ones in the session's options (``mcp_servers``), which the owner passes
  to the agent. The ACP ``sessionId`` is the session key.
* ``session/prompt`` is an IPC ``prompt`` to the owner (started on demand): the agent's
  ``session/update`` s are relayed in arrival order with the session id rewritten, and
  the turn's stop reason is the answer. ``session/cancel`` cancels this door's running
  turns of the session; ``set_mode`` / ``set_config_option`` go through the queue.
* ``session/load`` replays the stored journal as ``session/update`` s, then attaches;
  ``session/resume`` attaches without replay (both answer the agent's modes and
  config options); ``session/list`` pages the home's open
  sessions; ``session/close`` closes through the owner (or offline).
* ``_tether/session/terminate`` is :func:`tether.operations.terminate`.
  ``_tether/session/ended`` reaches the client once per attached session from the
  journal's ``session_ended`` (:mod:`.attach`).

When the client goes away (EOF) its running turns are cancelled -- the caller-leaves
rule of :mod:`tether.operations.prompting` -- and its sessions stay warm for the next
client, unless ``close_on_exit``.

The client is a *controller* of the turns it prompts: a permission request the
session's policy leaves open is put to it as ``session/request_permission``, an
elicitation as ``elicitation/create`` when it advertised elicitations
(:mod:`.questions`, :meth:`AcpDoor.controller_hook`); the first answer from any
controller wins. A client that advertised ``fs.readTextFile``, ``fs.writeTextFile``
or ``terminal`` serves those itself for the turns it prompts (:mod:`.relays`).
Otherwise the owner serves them, as for any caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tether import _aio, operations
from tether.acp_door import opening, questions, relays, translate, turns
from tether.acp_door.attach import Attachment, last_seq_of_open, read_entries
from tether.errors import NoSession, UsageError
from tether.ipc import protocol
from tether.jsonrpc import (
    EOF,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    NEED_DATA,
    PARSE_ERROR,
    JsonRpcConnection,
    Notification,
    ProtocolViolation,
    Request,
    Response,
    encode,
)
from tether.jsonrpc.invalid import reply_to_invalid, reply_to_oversized

__all__ = ["AcpDoor", "DoorOptions"]

_UNREADABLE = frozenset({"malformed-json", "not-utf8", "oversized"})
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
# A notification's journal origin: (session key, entry seq, part, parts of that entry)
Origin = tuple[str, int, int, int]


@dataclass
class DoorOptions:
    """What the door needs to create sessions: the agent, and the owners' settings."""

    agent_label: str
    agent_argv: list[str]
    agent_scope: str
    owner_options: dict[str, Any] = field(default_factory=dict)
    auth_config: dict[str, str] = field(default_factory=dict)
    close_on_exit: bool = False
    # The longest line read from the client: a session/prompt frame holding a prompt of
    # the prompt limit (config promptMaxBytes) plus its wrapping.
    max_frame_bytes: int = protocol.DEFAULT_MAX_FRAME_BYTES + protocol.ENVELOPE_SLACK


class AcpDoor:
    """One ACP client's connection to Tether. See the module docstring."""

    def __init__(self, write: Callable[[bytes], None], options: DoorOptions) -> None:
        self._write = write
        self.options = options
        self._rpc = JsonRpcConnection(max_frame_bytes=options.max_frame_bytes)
        self._attached: dict[str, Attachment] = {}
        self._own_requests: dict[str, set[str]] = {}  # session -> this door's turn ids
        self._inflight: set[asyncio.Task[None]] = set()
        self.to_client = relays.ClientRequests(self._rpc, self._send, self._spawn)
        self._tg: asyncio.TaskGroup | None = None
        self._auth_method: str | None = None
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        # Told the journal origin of each notification that relays an entry, just
        # before it is written (the HTTP channel's event ids: .event_ids).
        self.on_origin: Callable[[Origin], None] | None = None
        self._handlers: dict[str, Handler] = {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "session/new": self._new,
            "session/load": self._load,
            "session/resume": self._resume,
            "session/list": self._list,
            "session/close": self._close,
            "session/prompt": self._prompt,
            "session/set_mode": self._set_mode,
            "session/set_config_option": self._set_config_option,
            translate.TERMINATE_METHOD: self._terminate,
        }

    # --- the loop ----------------------------------------------------------------------

    async def serve(self, read: Callable[[], Awaitable[bytes]]) -> None:
        """Serve the client until ``read`` returns b"" (EOF), then let go of its sessions.

        Cancellation: the client's running turns are cancelled in their owners and
        every follower stopped before the cancellation propagates.
        """
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                while True:
                    data = await read()
                    if not data:
                        break
                    self._rpc.receive_data(data)
                    self._dispatch()
                for task in tuple(self._inflight):
                    task.cancel()  # nobody is left to hear the answer
        finally:
            self._tg = None
            await asyncio.shield(self._detach_all())

    def _send(self, data: bytes) -> None:
        if data:
            self._write(data)

    def notify(self, method: str, params: dict[str, Any], origin: Origin | None = None) -> None:
        if origin is not None and self.on_origin is not None:
            self.on_origin(origin)
        self._send(self._rpc.send_notification(method, params))

    def _relay_entry(self, key: str, seq: int, notes: list[tuple[str, dict[str, Any]]]) -> None:
        for part, (method, params) in enumerate(notes, 1):
            self.notify(method, params, (key, seq, part, len(notes)))

    def _dispatch(self) -> None:
        while True:
            event = self._rpc.next_event()
            if event is NEED_DATA or event is EOF:
                return
            if isinstance(event, Request):
                self._start(event)
            elif isinstance(event, Notification):
                self._on_notification(event)
            elif isinstance(event, ProtocolViolation) and event.reason in _UNREADABLE:
                limit = self._rpc.max_frame_bytes
                if event.reason == "oversized" and (
                    reply := reply_to_oversized(
                        event.excerpt, limit, event.length, "config promptMaxBytes"
                    )
                ):
                    self._send(reply)  # answered under its id: its client stops waiting
                    continue
                message = f"parse error: {event.detail}"
                error = {"code": PARSE_ERROR, "message": message}
                self._send(encode({"jsonrpc": "2.0", "id": None, "error": error}))
            elif isinstance(event, ProtocolViolation) and event.reason == "invalid-message":
                # Every request is answered, an invalid one too (-32600 / -32602).
                self._send(reply_to_invalid(event.raw, event.detail) or b"")
            elif isinstance(event, Response):
                self.to_client.answered(event)

    def _start(self, req: Request) -> None:
        handler = self._handlers.get(req.method)
        if handler is None or self._tg is None:
            self._send(
                self._rpc.send_error(req.id, METHOD_NOT_FOUND, f"method not found: {req.method}")
            )
            return
        if req.params is not None and not isinstance(req.params, dict):
            # ACP's methods take an object; positional params are not "no params".
            message = f"invalid params for {req.method}: an object is required"
            self._send(self._rpc.send_error(req.id, INVALID_PARAMS, message))
            return
        self._spawn(self._answer(req, handler))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        if self._tg is None:  # closing: nobody is left to hear it
            coro.close()
            return None
        return _aio.spawn(coro, keep=self._inflight, group=self._tg)

    async def _answer(self, req: Request, handler: Handler) -> None:
        params = req.params if isinstance(req.params, dict) else {}
        try:
            result = await handler(params)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure becomes the request's JSON-RPC error
            code, message, data = translate.error_for(exc)
            self._send(self._rpc.send_error(req.id, code, message, data))
            return
        self._send(self._rpc.send_result(req.id, result))

    def _on_notification(self, note: Notification) -> None:
        params = note.params if isinstance(note.params, dict) else {}
        att = self._attached.get(str(params.get("sessionId")))
        if note.method == "session/cancel" and att is not None and self._tg is not None:
            for rid in list(att.running):
                self._spawn(self._cancel(att.key, rid))
        # Other notifications (``_``-prefixed extensions included) are ignored, as ACP says.

    async def _cancel(self, key: str, rid: str) -> None:
        with contextlib.suppress(Exception):  # a cancel that finds nothing is no failure
            await asyncio.to_thread(operations.cancel, key, rid)

    # --- attachments -------------------------------------------------------------------

    async def _attach(self, key: str, from_seq: int) -> Attachment:
        old = self._attached.pop(key, None)
        att = Attachment(key)
        # One set per session for the door's life: a resumed stream still tells its
        # own turns from others' after the door let go (.channel's journal replay).
        att.own_requests = self._own_requests.setdefault(key, set())
        if old is not None:
            await old.stop()
        self._attached[key] = att
        att.start(from_seq, self._on_entry)
        return att

    def _on_entry(self, att: Attachment, entry: dict[str, Any]) -> None:
        if att.ended or self._attached.get(att.key) is not att:
            return
        if entry.get("kind") == "session_ended":
            att.ended = True
        elif entry.get("requestId") in att.own_requests:
            return  # this door's own turn: relayed from its IPC stream already
        self._relay_entry(
            att.key, int(entry.get("seq") or 0), translate.relayed_notes(att.key, entry)
        )

    def journal_notes(self, key: str, entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """What this door relayed (or would have) for a journal entry of session ``key``:
        for a stream that resumes from the journal (:mod:`.channel`)."""
        return translate.relayed_notes(key, entry, self._own_requests.get(key, frozenset()))

    def _session_of(self, params: dict[str, Any]) -> Attachment:
        key = translate.session_id_of(params)
        att = self._attached.get(key)
        if att is None:
            raise NoSession(
                "this client has not opened the session (session/new, load or resume)",
                session_key=key,
            )
        return att

    async def _detach_all(self) -> None:
        attached, self._attached = list(self._attached.values()), {}
        for att in attached:
            await att.stop()
        if self.options.close_on_exit:
            for att in attached:
                if not att.ended:
                    with contextlib.suppress(Exception):
                        await asyncio.to_thread(operations.close_session, att.key)

    def controller_hook(self, key: str, item: dict[str, Any]) -> None:
        """An agent's question the owner offered this client (a controller): put it to
        the client (:mod:`.questions`)."""
        modes = questions.elicitation_modes(self.client_capabilities)
        if item.get("question") == "elicitation_completed":
            if "url" in modes:  # only such a client was shown the URL elicitation
                self.notify("elicitation/complete", {"elicitationId": item["elicitationId"]})
            return
        self._spawn(questions.put_question(self.to_client.ask, key, item, modes))

    # --- methods -----------------------------------------------------------------------

    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        info = params.get("clientInfo")
        caps = params.get("clientCapabilities")
        self.client_info = info if isinstance(info, dict) else {}
        self.client_capabilities = caps if isinstance(caps, dict) else {}
        return translate.initialize_result(self.options.agent_label)

    async def _authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        method = params.get("methodId")
        if not isinstance(method, str) or not method:
            raise UsageError("methodId is required")
        # Passed through: the owner authenticates the agent with this method (and the
        # configured credential, if any) when it starts it.
        self._auth_method = method
        return {}

    async def _new(self, params: dict[str, Any]) -> dict[str, Any]:
        key, name, state = await opening.new_session(self.options, params, self._auth_method)
        await self._attach(key, 1)
        return {**state, "sessionId": key, "_meta": {"tether": {"name": name, "sessionKey": key}}}

    async def _open_session(self, params: dict[str, Any], action: str) -> tuple[str, int]:
        """The open session ``params`` names, and its journal's last seq."""
        key = translate.session_id_of(params)
        return key, await asyncio.to_thread(last_seq_of_open, key, action)

    async def _load(self, params: dict[str, Any]) -> dict[str, Any]:
        key, last = await self._open_session(params, "history")
        cursor = 1
        while cursor <= last:
            rows = await asyncio.to_thread(read_entries, key, cursor, last)
            if not rows:
                break
            for seq, entry in rows:
                cursor = seq + 1
                updates = translate.updates_of_entry(entry)
                notes = [("session/update", {"sessionId": key, "update": u}) for u in updates]
                self._relay_entry(key, seq, notes)
        await self._attach(key, last + 1)
        return await opening.agent_state(key, tolerant=True)

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        key, last = await self._open_session(params, "watch")
        await self._attach(key, last + 1)
        return await opening.agent_state(key, tolerant=True)

    async def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = params.get("cwd")
        cursor = params.get("cursor")
        records = await asyncio.to_thread(operations.list_sessions)
        page, next_cursor = translate.list_page(
            records,
            cwd=cwd if isinstance(cwd, str) else None,
            cursor=cursor if isinstance(cursor, str) else None,
        )
        return {"sessions": page, **({"nextCursor": next_cursor} if next_cursor else {})}

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        key = translate.session_id_of(params)
        await asyncio.to_thread(operations.close_session, key)
        return {}

    async def _terminate(self, params: dict[str, Any]) -> dict[str, Any]:
        key = translate.session_id_of(params)
        by = {"door": "acp", "doorPid": os.getpid()}
        name = self.client_info.get("name")
        if isinstance(name, str):
            by["client"] = name[:80]
        result = await asyncio.to_thread(operations.terminate, key, by=by)
        return translate.terminate_answer(result)

    async def _set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        att = self._session_of(params)
        mode = params.get("modeId")
        if not isinstance(mode, str):
            raise UsageError("modeId is required")
        await asyncio.to_thread(operations.set_mode, att.key, mode)
        return {}

    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        att = self._session_of(params)
        config_id, value = params.get("configId"), params.get("value")
        if not isinstance(config_id, str) or not isinstance(value, str | bool):
            raise UsageError("configId and value are required")
        result = await asyncio.to_thread(operations.set_config_option, att.key, config_id, value)
        options = result.get("configOptions")
        return {"configOptions": options if isinstance(options, list) else []}

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        att = self._session_of(params)
        blocks = params.get("prompt")
        if not (isinstance(blocks, list) and blocks and all(isinstance(b, dict) for b in blocks)):
            raise UsageError("prompt must be a non-empty list of content blocks")
        relay = self.to_client.relay_spec(self.client_capabilities)
        return await turns.run_prompt(att, blocks, self.notify, self.controller_hook, relay)
