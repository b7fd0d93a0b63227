"""The async ACP client connection over an agent transport.

Theory of operation
-------------------
:class:`AgentConnection` talks to one agent over an
:class:`~tether.acp.transport.AgentTransport` (a supervised process in production, an
in-memory fake in tests: this module imports neither). It is a facade over
collaborators it owns, each the only owner of its fields:

* the wire (:mod:`tether.acp._wire`) -- the sans-IO JSON-RPC core fed synchronously
  by the transport, frames in and out (observed through ``on_frame`` / ``on_line``),
  our requests and their answers, listeners, and the connection's death or close;
* the turn table (:mod:`tether.acp._turn_table`) -- running turns and each session's
  turn machine;
* the turns (:mod:`tether.acp._turns`) -- prompt, cancel, abandon, and the rule that
  nothing of an abandoned turn reaches the next one;
* the session calls (:mod:`tether.acp._session_methods`) -- handshake and session
  methods, and what the agent said about itself;
* the agent's requests (:mod:`tether.acp._agent_requests`) -- permissions,
  elicitations, fs, terminals, ``$/cancel_request``.

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

Every outgoing and incoming frame can be observed through ``on_frame`` (used by
``--format json``, which prints raw ACP frames, and by the schema-conformance tests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.acp import policy
from tether.acp._agent_requests import AgentRequests, ClientRelay
from tether.acp._session_methods import PROTOCOL_VERSION, SessionCalls
from tether.acp._turn_table import TurnResult, TurnTable, UpdateListener
from tether.acp._turns import Turns
from tether.acp._wire import Wire
from tether.acp.terminals import TerminalHost
from tether.acp.transport import AgentTransport
from tether.acp.turn_state import TurnState
from tether.jsonrpc import DEFAULT_MAX_FRAME_BYTES, JsonRpcConnection

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

FrameObserver = Callable[[str, dict[str, Any]], None]
PermissionHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
# elicitation/create params -> the result ({"action": "accept"|"decline"|"cancel", ...})
ElicitationHook = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


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


class AgentConnection:
    """An ACP client connection to one agent, over a transport.

    A facade: each call is carried out by the collaborator that owns it (see the module
    docstring); ``wire``, ``turns``, ``calls`` and ``requests`` are those collaborators.
    """

    def __init__(self, transport: AgentTransport, cwd: str, options: ClientOptions) -> None:
        self.transport = transport
        self.cwd = cwd
        self.options = options
        table = TurnTable()
        self.wire = Wire(transport, options, table)
        self.requests = AgentRequests(self.wire, table, cwd, options)
        self.turns = Turns(self.wire, table, self.requests, options)
        self.calls = SessionCalls(self.wire, options)
        self.wire.start(self.requests)

    # --- the wire -----------------------------------------------------------------------

    @property
    def rpc(self) -> JsonRpcConnection:
        """The sans-IO JSON-RPC core (its pending tables and stats)."""
        return self.wire.rpc

    @property
    def protocol_violations(self) -> int:
        """Malformed or oversized lines the agent sent."""
        return self.wire.protocol_violations

    @property
    def observer_errors(self) -> int:
        """Exceptions raised by listeners and observers (each caught)."""
        return self.wire.observer_errors

    @property
    def is_broken(self) -> bool:
        """Whether the agent side is unusable (EOF, exit, failed liveness check, retired)."""
        return self.wire.is_broken

    async def request(self, method: str, params: Any, *, timeout: float | None) -> Any:
        """Send a request and wait for its result (:meth:`Wire.request`)."""
        return await self.wire.request(method, params, timeout=timeout)

    def set_fallback_listener(self, listener: UpdateListener | None) -> None:
        """Receive notifications that arrive outside any turn (after session/new, late ones)."""
        self.wire.set_fallback_listener(listener)

    def agent_ended(self, why: str) -> None:
        """The agent's run ended under us: what waits on it (a turn) fails with how it
        ended (:class:`~tether.errors.AgentExited`), not with our own closing of the
        connection that follows. A no-op on a connection already broken."""
        if self.wire.usable():
            self.wire.fail_everything(self.wire.exit_error(why))

    async def aclose(self) -> None:
        """Stop using the connection: fail pending requests, close the agent's input.

        Nothing the agent sends afterwards reaches a listener or an observer.
        """
        self.wire.close()

    # --- turns ----------------------------------------------------------------------------

    async def prompt(
        self,
        session_id: str,
        blocks: Sequence[dict[str, Any]],
        listener: UpdateListener,
        *,
        ceiling: float | None = None,
    ) -> TurnResult:
        """Run one turn (:meth:`Turns.prompt`, which documents errors and cancellation)."""
        return await self.turns.prompt(session_id, blocks, listener, ceiling=ceiling)

    async def settle(self, session_id: str, grace: float | None = None) -> bool:
        """Wait until nothing of an abandoned turn can still arrive (:meth:`Turns.settle`)."""
        return await self.turns.settle(session_id, grace)

    def cancel(self, session_id: str) -> bool:
        """Cancel the turn of ``session_id`` (:meth:`Turns.cancel`); False if none runs."""
        return self.turns.cancel(session_id)

    def turn_state(self, session_id: str) -> TurnState:
        """Where the turn of ``session_id`` is (``IDLE`` for a session never prompted)."""
        return self.turns.turn_state(session_id)

    def has_abandoned_turn(self, session_id: str) -> bool:
        """Whether an abandoned turn of ``session_id`` is still unanswered."""
        return self.turns.has_abandoned_turn(session_id)

    def active_turn(self, session_id: str) -> bool:
        """Whether a turn of ``session_id`` is running."""
        return self.turns.active_turn(session_id)

    # --- handshake and session calls --------------------------------------------------

    @property
    def agent_info(self) -> dict[str, Any]:
        """``agentInfo`` from ``initialize``."""
        return self.calls.agent_info

    @property
    def agent_capabilities(self) -> dict[str, Any]:
        """``agentCapabilities`` from ``initialize``."""
        return self.calls.agent_capabilities

    @property
    def auth_methods(self) -> list[dict[str, Any]]:
        """``authMethods`` from ``initialize``."""
        return self.calls.auth_methods

    async def initialize(self) -> dict[str, Any]:
        """``initialize`` (:meth:`SessionCalls.initialize`)."""
        return await self.calls.initialize()

    async def authenticate_if_needed(self) -> str | None:
        """``authenticate`` when configured (:meth:`SessionCalls.authenticate_if_needed`)."""
        return await self.calls.authenticate_if_needed()

    @property
    def can_load(self) -> bool:
        """The agent advertises ``loadSession``."""
        return self.calls.can_load

    @property
    def can_resume(self) -> bool:
        """The agent advertises ``sessionCapabilities.resume``."""
        return self.calls.can_resume

    @property
    def can_close(self) -> bool:
        """The agent advertises ``sessionCapabilities.close``."""
        return self.calls.can_close

    @property
    def can_fork(self) -> bool:
        """The agent advertises ``sessionCapabilities.fork``."""
        return self.calls.can_fork

    @property
    def can_list(self) -> bool:
        """The agent advertises ``sessionCapabilities.list``."""
        return self.calls.can_list

    @property
    def can_delete(self) -> bool:
        """The agent advertises ``sessionCapabilities.delete``."""
        return self.calls.can_delete

    @property
    def can_logout(self) -> bool:
        """The agent advertises ``auth.logout``."""
        return self.calls.can_logout

    async def new_session(
        self, cwd: str, mcp_servers: Sequence[Any] = (), extras: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``session/new`` (:meth:`SessionCalls.new_session`)."""
        return await self.calls.new_session(cwd, mcp_servers, extras)

    async def load_session(
        self,
        session_id: str,
        cwd: str,
        listener: UpdateListener | None = None,
        mcp_servers: Sequence[Any] = (),
        extras: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``session/resume`` or ``session/load`` (:meth:`SessionCalls.load_session`)."""
        return await self.calls.load_session(session_id, cwd, listener, mcp_servers, extras)

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[Any] = ()
    ) -> dict[str, Any]:
        """``session/fork`` (:meth:`SessionCalls.fork_session`)."""
        return await self.calls.fork_session(session_id, cwd, mcp_servers)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """``session/list`` (:meth:`SessionCalls.list_sessions`)."""
        return await self.calls.list_sessions(cwd, cursor)

    async def delete_session(self, session_id: str) -> None:
        """``session/delete`` (:meth:`SessionCalls.delete_session`)."""
        await self.calls.delete_session(session_id)

    async def logout(self) -> None:
        """``logout`` (:meth:`SessionCalls.logout`)."""
        await self.calls.logout()

    async def set_mode(self, session_id: str, mode_id: str) -> Any:
        """``session/set_mode``."""
        return await self.calls.set_mode(session_id, mode_id)

    async def set_config_option(self, session_id: str, config_id: str, value: Any) -> Any:
        """``session/set_config_option``."""
        return await self.calls.set_config_option(session_id, config_id, value)

    async def close_session(self, session_id: str, timeout: float = 2.0) -> bool:
        """``session/close`` when advertised; True if the agent acknowledged it."""
        return await self.calls.close_session(session_id, timeout)
