"""ACP's newer methods (:mod:`tether.operations._acp_calls`, imported only when used: it loads
asyncio, which the thin CLI paths never do)."""

from __future__ import annotations

from tether.ipc.client import OwnerConnection

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def fork_session(parent_key: str, key: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether.operations._acp_calls.fork_session` (``sessions fork``)."""
    from tether.operations import _acp_calls

    return _acp_calls.fork_session(parent_key, key, **kwargs)


def resume_agent_session(key: str, conn: OwnerConnection) -> dict[str, Any]:
    """See :func:`tether.operations._acp_calls.resume_agent_session` (``--resume-session``)."""
    from tether.operations import _acp_calls

    return _acp_calls.resume_agent_session(key, conn)


def agent_sessions(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether.operations._acp_calls.agent_sessions` (``--agent-sessions``)."""
    from tether.operations import _acp_calls

    return _acp_calls.agent_sessions(argv, cwd, **kwargs)


def logout(argv: list[str], cwd: str, **kwargs: Any) -> dict[str, Any]:
    """See :func:`tether.operations._acp_calls.logout` (``tether logout``)."""
    from tether.operations import _acp_calls

    return _acp_calls.logout(argv, cwd, **kwargs)
