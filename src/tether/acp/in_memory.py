"""An in-memory agent transport and a scripted fake agent, for testing the ACP driver.

After httpcore's mock backend: the test seam is "swap the transport", never
monkeypatching. :class:`MemoryTransport` satisfies
:class:`~tether.acp.transport.AgentTransport` with no process and no pipe;
:class:`FakeAgent` sits on its other end, answers the handshake by itself and hands
every ``session/prompt`` to the test, which then plays the agent's part of the turn
(updates, permission requests, a late answer, no answer at all)::

    agent = FakeAgent()
    conn = AgentConnection(agent.transport, "/tmp", ClientOptions())
    await conn.initialize()
    session_id = (await conn.new_session("/tmp"))["sessionId"]
    turn = asyncio.ensure_future(conn.prompt(session_id, [text("hi")], seen.append))
    prompt = await agent.next_prompt()
    agent.chunk("hello")
    agent.answer(prompt["id"], {"stopReason": "end_turn"})
    assert (await turn).stop_reason == "end_turn"

Bytes travel as they would through a pipe: what the agent sends is delivered on a
later pass of the event loop (``call_soon``), in order, never inside the caller's
``write``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from tether.acp.transport import ExitStatus

__all__ = ["FakeAgent", "MemoryTransport"]

Frame = dict[str, Any]


class MemoryTransport:
    """An :class:`~tether.acp.transport.AgentTransport` whose agent is a Python callable.

    Args:
        on_client_frame: called with every frame the client writes, decoded.
        label: the name logs give this agent.
    """

    def __init__(self, on_client_frame: Callable[[Frame], None], label: str = "memory") -> None:
        self._label = label
        self._on_client_frame = on_client_frame
        self._on_data: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[], None] | None = None
        self._early: list[bytes | None] = []  # None = EOF
        self._partial = b""
        self._status: ExitStatus | None = None
        self._exited: asyncio.Future[ExitStatus] | None = None
        self.stdin_closed = False
        self.output_closed = False
        self.stderr = ""

    # --- the transport side (what the driver calls) ----------------------------------

    @property
    def label(self) -> str:
        return self._label

    def set_receiver(self, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self._on_data, self._on_eof = on_data, on_eof
        early, self._early = self._early, []
        for item in early:
            self._deliver(item)

    def write(self, data: bytes) -> None:
        if self.stdin_closed or not data:
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._on_client_frame(json.loads(line))

    def close_write(self) -> None:
        self.stdin_closed = True

    def exit_status(self) -> ExitStatus | None:
        return self._status

    async def wait_exited(self) -> ExitStatus:
        if self._status is not None:
            return self._status
        if self._exited is None:
            self._exited = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._exited)

    def is_alive(self) -> bool:
        return self._status is None

    def stderr_tail(self) -> str:
        return self.stderr

    # --- the agent side (what the fake agent calls) ----------------------------------

    def _deliver(self, item: bytes | None) -> None:
        if self._on_data is None or self._on_eof is None:
            self._early.append(item)
        elif item is None:
            self._on_eof()
        else:
            self._on_data(item)

    def send_bytes(self, data: bytes) -> None:
        """Bytes on the agent's stdout, delivered on a later loop pass."""
        if self.output_closed:
            raise RuntimeError("the agent's output is closed")
        asyncio.get_running_loop().call_soon(self._deliver, data)

    def close_output(self) -> None:
        """EOF on the agent's stdout."""
        if not self.output_closed:
            self.output_closed = True
            asyncio.get_running_loop().call_soon(self._deliver, None)

    def exit(self, code: int | None = 0, signal: int | None = None) -> None:
        """The agent process exits: its output closes and its status is known."""
        self._status = (code, signal)
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(self._status)
        self.close_output()


class FakeAgent:
    """A scripted ACP agent: answers the handshake, leaves each turn to the test.

    It answers ``initialize`` (protocol 1; ``loadSession`` / ``resume`` / ``close`` /
    ``fork`` / ``list`` / ``delete`` / ``logout`` as asked), ``session/new``,
    ``session/load``, ``session/resume``, ``session/fork`` (a new id, ``fork-N``),
    ``session/list`` (:attr:`listed`), ``session/delete``, ``logout``,
    ``session/set_mode``, ``session/set_config_option`` and ``session/close`` at once. A
    ``session/prompt`` is queued for :meth:`next_prompt`; ``session/cancel`` and
    ``$/cancel_request`` notifications are recorded in :attr:`cancels` and
    :attr:`cancel_requests`; the client's answers to our requests in :attr:`answers`.
    """

    def __init__(
        self,
        *,
        session_id: str = "sess-1",
        load_session: bool = False,
        resume: bool = False,
        close: bool = False,
        fork: bool = False,
        list_sessions: bool = False,
        delete: bool = False,
        logout: bool = False,
    ) -> None:
        self.transport = MemoryTransport(self._on_client_frame)
        self.session_id = session_id
        self.load_session = load_session
        self.resume = resume
        self.close = close
        self.fork = fork
        self.list_sessions = list_sessions
        self.delete = delete
        self.logout = logout
        self.list_sessions_hangs = False  # True: session/list is never answered
        self.listed: list[Frame] = [{"sessionId": session_id, "cwd": "/", "title": "first"}]
        self.frames: list[Frame] = []  # everything the client wrote, in order
        self.cancels: list[Frame] = []
        self.cancel_requests: list[Frame] = []
        self.answers: dict[Any, Frame] = {}
        self._prompts: asyncio.Queue[Frame] = asyncio.Queue()
        self._answered: dict[Any, asyncio.Future[Frame]] = {}
        self._next_id = 0

    def _on_client_frame(self, frame: Frame) -> None:
        self.frames.append(frame)
        method = frame.get("method")
        if method is None:
            self.answers[frame.get("id")] = frame
            waiter = self._answered.get(frame.get("id"))
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
        elif method == "initialize":
            caps: dict[str, Any] = {}
            if self.resume:
                caps["resume"] = {}
            for name, on in (
                ("close", self.close),
                ("fork", self.fork),
                ("list", self.list_sessions),
                ("delete", self.delete),
            ):
                if on:
                    caps[name] = {}
            self.answer(
                frame["id"],
                {
                    "protocolVersion": 1,
                    "agentCapabilities": {
                        "loadSession": self.load_session,
                        "sessionCapabilities": caps,
                        **({"auth": {"logout": {}}} if self.logout else {}),
                    },
                    "agentInfo": {"name": "fake-agent", "version": "0"},
                    "authMethods": [],
                },
            )
        elif method == "session/new":
            self.answer(frame["id"], {"sessionId": self.session_id})
        elif method == "session/fork":
            self._next_id += 1
            self.answer(frame["id"], {"sessionId": f"fork-{self._next_id}"})
        elif method == "session/list":
            if not self.list_sessions_hangs:
                self.answer(frame["id"], {"sessions": self.listed})
        elif method in (
            "session/load",
            "session/resume",
            "session/set_mode",
            "session/set_config_option",
            "session/close",
            "session/delete",
            "logout",
        ):
            self.answer(frame["id"], {})
        elif method == "session/prompt":
            self._prompts.put_nowait(frame)
        elif method == "session/cancel":
            self.cancels.append(frame)
        elif method == "$/cancel_request":
            self.cancel_requests.append(frame)

    # --- what the test makes the agent do ----------------------------------------------

    def send(self, frame: Frame) -> None:
        self.transport.send_bytes(json.dumps(frame).encode() + b"\n")

    def answer(self, request_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def error(self, request_id: Any, code: int, message: str) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def update(self, update: Frame, session_id: str | None = None) -> None:
        params = {"sessionId": session_id or self.session_id, "update": update}
        self.notify("session/update", params)

    def chunk(self, text: str, session_id: str | None = None) -> None:
        """One ``agent_message_chunk`` with ``text``."""
        update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        self.update(update, session_id)

    def request(self, method: str, params: Any) -> str:
        """Send the client a request; returns its id (answers land in :attr:`answers`)."""
        self._next_id += 1
        request_id = f"agent-{self._next_id}"
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def ask_permission(self, title: str = "edit file", kind: str = "edit") -> str:
        """A ``session/request_permission`` with allow / reject options; returns its id."""
        tool_call = {"toolCallId": f"call-{self._next_id + 1}", "title": title, "kind": kind}
        options = [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
        ]
        params = {"sessionId": self.session_id, "toolCall": tool_call, "options": options}
        return self.request("session/request_permission", params)

    async def answer_to(self, request_id: str) -> Frame:
        """Wait for the client's answer to our request ``request_id``."""
        if request_id in self.answers:
            return self.answers[request_id]
        waiter = self._answered.setdefault(request_id, asyncio.get_running_loop().create_future())
        return await waiter

    async def next_prompt(self) -> Frame:
        """Wait for the next ``session/prompt`` the client sends."""
        return await self._prompts.get()
