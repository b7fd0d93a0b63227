"""ACP's newer methods (:mod:`tether._operations_acp`, imported only when used: it loads
asyncio, which the thin CLI paths never do)."""

from __future__ import annotations

from tether.ipc.client import OwnerConnection

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def fork_session(parent_key: str, key: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.fork_session` (``sessions fork``)."""
    from tether import _operations_acp

    return _operations_acp.fork_session(parent_key, key, **kwargs)


def resume_agent_session(key: str, conn: OwnerConnection) -> dict[str, Any]:
    """See :func:`tether._operations_acp.resume_agent_session` (``--resume-session``)."""
    from tether import _operations_acp

    return _operations_acp.resume_agent_session(key, conn)


def agent_sessions(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.agent_sessions` (``sessions list --agent-sessions``)."""
    from tether import _operations_acp

    return _operations_acp.agent_sessions(argv, cwd, **kwargs)


def logout(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether._operations_acp.logout` (``tether logout``)."""
    from tether import _operations_acp

    return _operations_acp.logout(argv, cwd, **kwargs)
