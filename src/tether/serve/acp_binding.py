"""What the gateway needs of the ACP door for ACP over HTTP, handed over by the program.

``/v1/acp/{serverId}`` (:mod:`tether.serve.acp_api`) serves ACP servers that the ACP
door makes (:class:`tether.acp_door.channel.AcpChannel`). The gateway does not import
that door -- no door imports another (``tests/unit/test_import_layers.py``) -- it is
handed an :class:`AcpBinding` by :mod:`tether.program`, which stands above every door.
A gateway built without one (an embedding, a test) serves no ACP routes.

No starlette here: the program builds the binding before ``tether serve`` has checked
that its extra is installed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["AcpBinding", "AcpServer"]


class AcpServer(Protocol):
    """One ACP server reached over HTTP (the door's ``AcpChannel``)."""

    @property
    def closed(self) -> bool: ...

    async def post(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """One JSON-RPC message in: a request's answer, or None."""
        ...

    def events(
        self, after: str | None = None, *, idle: float | None = None, from_start: bool = False
    ) -> AsyncIterator[tuple[str, dict[str, Any]] | None]:
        """(event id, frame) after the event ``after``, else live; None: a heartbeat."""
        ...

    async def aclose(self) -> None:
        """Close the server (idempotent)."""
        ...


@dataclass(frozen=True)
class AcpBinding:
    """The ACP door's two entry points the gateway's ACP routes call."""

    # (the gateway's config, the agent named in the query or None) -> a new server
    open_server: Callable[[dict[str, Any], str | None], AcpServer]
    # Raises UsageError for a Last-Event-ID that is not of the door's form.
    check_event_id: Callable[[str], object]
