"""The client's ACP calls other than ``session/prompt``: handshake and session setup.

``initialize`` (protocol 1, our fs capabilities), ``authenticate`` (when a credential is
configured for an advertised method), ``session/new``, ``session/load`` or
``session/resume``, ``session/fork``, ``session/list``, ``session/delete``, ``logout``,
``session/set_mode``, ``session/set_config_option`` and ``session/close``. Each is one
request under the handshake deadline; what the agent advertised in ``initialize``
decides which exist, and calling one the agent did not advertise raises
:class:`~tether.errors.NotAdvertised` without sending anything. :class:`SessionCalls`
is a collaborator of :class:`tether.acp.connection.AgentConnection`: it sends through the
connection's wire and owns what the agent said about itself in ``initialize``.

``session/fork`` is still unstable in ACP (it is in ``schema.unstable.json``, not in the
stable v1 schema): both current adapters ship it with the params of ``session/new``
plus the ``sessionId`` to fork, and answer like ``session/new``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether import _fastjson
from tether._version import __version__
from tether.errors import (
    AgentRequestError,
    AuthRequired,
    BrokenResourceError,
    HandshakeTimeout,
    NotAdvertised,
    RemoteProtocolError,
)

if TYPE_CHECKING:
    from tether.acp._wire import Wire
    from tether.acp.connection import ClientOptions

PROTOCOL_VERSION = 1


class SessionCalls:
    """Handshake and session calls of one connection; see the module docstring."""

    def __init__(self, wire: Wire, options: ClientOptions) -> None:
        self._wire = wire
        self._options = options
        self.agent_info: dict[str, Any] = {}
        self.agent_capabilities: dict[str, Any] = {}
        self.auth_methods: list[dict[str, Any]] = []

    async def _handshake(self, method: str, params: Any) -> Any:
        return await self._wire.request(method, params, timeout=self._options.handshake_timeout)

    async def initialize(self) -> dict[str, Any]:
        """Send ``initialize`` (protocol 1, fs capabilities) under the handshake deadline.

        Raises:
            RemoteProtocolError: no result object, or another protocol version.
            HandshakeTimeout / AgentRequestError / AgentExited: as :meth:`request`.
        """
        fs = self._options.fs
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": fs, "writeTextFile": fs},
                "terminal": self._options.terminal_host is not None,
                # Elicitations (form and URL) are relayed to whoever can answer them.
                **(
                    {"elicitation": {"form": {}, "url": {}}}
                    if self._options.elicitation_hook is not None
                    else {}
                ),
            },
            "clientInfo": {"name": "tether", "title": "Tether", "version": __version__},
        }
        result = await self._handshake("initialize", params)
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
            if not isinstance(method_id, str) or method.get("type") == "terminal":
                continue
            credential = self._options.auth.get(method_id)
            if credential is None:
                continue
            params: dict[str, Any] = {"methodId": method_id}
            if credential:
                params["_meta"] = {method_id: {"apiKey": credential}}
            await self._handshake("authenticate", params)
            return method_id
        if self.auth_methods and self._options.auth_policy == "fail":
            ids = ", ".join(str(m.get("id")) for m in self.auth_methods)
            raise AuthRequired(
                f"the agent advertises auth methods [{ids}] and none has a credential"
                " (--auth-policy fail); set one in the config's [auth] table or"
                " TETHER_AUTH_<METHOD>, or use --auth-policy skip"
            )
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

    @property
    def can_fork(self) -> bool:
        return self._session_caps().get("fork") is not None

    @property
    def can_list(self) -> bool:
        return self._session_caps().get("list") is not None

    @property
    def can_delete(self) -> bool:
        return self._session_caps().get("delete") is not None

    @property
    def can_logout(self) -> bool:
        auth = self.agent_capabilities.get("auth")
        return isinstance(auth, dict) and auth.get("logout") is not None

    def _require(self, advertised: bool, method: str) -> None:
        if not advertised:
            name = self.agent_info.get("name") or "the agent"
            raise NotAdvertised(f"{name} does not advertise {method}", method=method)

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: Sequence[Any] = ()
    ) -> dict[str, Any]:
        """``session/fork``: a new agent session continuing ``session_id``'s conversation.

        Returns the result (``sessionId`` is the new session's id; modes and config
        options as on ``session/new``).

        Raises:
            NotAdvertised: the agent does not advertise ``sessionCapabilities.fork``.
            RemoteProtocolError: the answer has no ``sessionId``.
        """
        self._require(self.can_fork, "session/fork")
        params = {"sessionId": session_id, "cwd": cwd, "mcpServers": list(mcp_servers)}
        result = await self._handshake("session/fork", params)
        return _with_session_id(result, "session/fork")

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        """``session/list``: one page of the agent's own sessions (``sessions``,
        ``nextCursor``), of ``cwd`` only when given.

        Raises:
            NotAdvertised: the agent does not advertise ``sessionCapabilities.list``.
        """
        self._require(self.can_list, "session/list")
        params: dict[str, Any] = {}
        if cwd is not None:
            params["cwd"] = cwd
        if cursor is not None:
            params["cursor"] = cursor
        result = await self._handshake("session/list", params)
        if not isinstance(result, dict) or not isinstance(result.get("sessions"), list):
            raise RemoteProtocolError("session/list returned no sessions array")
        return result

    async def delete_session(self, session_id: str) -> None:
        """``session/delete``: the agent forgets the session (its stored conversation).

        Raises:
            NotAdvertised: the agent does not advertise ``sessionCapabilities.delete``.
        """
        self._require(self.can_delete, "session/delete")
        await self._handshake("session/delete", {"sessionId": session_id})

    async def logout(self) -> None:
        """``logout``: the agent ends its authenticated state (its stored credentials).

        Raises:
            NotAdvertised: the agent does not advertise ``auth.logout``.
        """
        self._require(self.can_logout, "logout")
        await self._handshake("logout", {})

    async def new_session(
        self, cwd: str, mcp_servers: Sequence[Any] = (), extras: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``session/new``; ``extras`` are further params (``systemPrompt``, ``_meta``)."""
        params = {"cwd": cwd, "mcpServers": list(mcp_servers), **(extras or {})}
        result = await self._handshake("session/new", params)
        return _with_session_id(result, "session/new")

    async def load_session(
        self,
        session_id: str,
        cwd: str,
        listener: Callable[[dict[str, Any]], None] | None = None,
        mcp_servers: Sequence[Any] = (),
        extras: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``session/resume`` when advertised, else ``session/load`` (which replays the
        history as updates, to ``listener`` when given); the session's MCP servers and
        ``extras`` (``systemPrompt``, ``_meta``) are handed over again, as on
        ``session/new`` (claude-agent-acp rebuilds a resumed session from them)."""
        method = "session/resume" if self.can_resume else "session/load"
        params: dict[str, Any] = {
            "sessionId": session_id,
            "cwd": cwd,
            "mcpServers": list(mcp_servers),
            **(extras or {}),
        }
        if listener is not None:
            self._wire.listen(session_id, listener)
        try:
            result = await self._handshake(method, params)
        finally:
            if listener is not None:
                self._wire.unlisten(session_id)
        return result if isinstance(result, dict) else {}

    async def set_mode(self, session_id: str, mode_id: str) -> Any:
        return await self._handshake(
            "session/set_mode", {"sessionId": session_id, "modeId": mode_id}
        )

    async def set_config_option(self, session_id: str, config_id: str, value: Any) -> Any:
        params: dict[str, Any] = {"sessionId": session_id, "configId": config_id, "value": value}
        if isinstance(value, bool):
            params["type"] = "boolean"
        return await self._handshake("session/set_config_option", params)

    async def close_session(self, session_id: str, timeout: float = 2.0) -> bool:
        """Send ``session/close`` when advertised; True if the agent acknowledged it."""
        if not self.can_close or not self._wire.usable():
            return False
        try:
            await self._wire.request("session/close", {"sessionId": session_id}, timeout=timeout)
        except (AgentRequestError, HandshakeTimeout, BrokenResourceError):
            return False
        return True


def _with_session_id(result: Any, method: str) -> dict[str, Any]:
    """``result``, once it names the agent's session with text Tether can store and send.

    Raises:
        RemoteProtocolError: no ``sessionId`` string, or one that is not Unicode text
            (a lone surrogate escaped: it could not be stored, and the state database
            refused it as an unexpected error).
    """
    session_id = result.get("sessionId") if isinstance(result, dict) else None
    if not isinstance(session_id, str):
        raise RemoteProtocolError(f"{method} returned no sessionId")
    if not _fastjson.is_text(session_id):
        raise RemoteProtocolError(f"{method} returned a sessionId that is not text")
    answer: dict[str, Any] = result  # a dict with a sessionId: the same object, as it came
    return answer
