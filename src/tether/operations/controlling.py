"""Controlling a session: its mode and its config options, the one implementation under
every door (``tether set-mode`` / ``set``, ``Session.set_mode`` /
``set_config_option``, the ACP door's ``session/set_mode`` /
``session/set_config_option``, the gateway's ``POST …/mode`` / ``…/config``).

A control is one request queued behind the session's turns (``set_mode``,
``set_config_option``): the owner applies it to the agent and replays it on the agent's
next start. It is authorized as the ``set`` action -- the owner's own gate checks these
two requests as ``set`` (``tether.owner.gate.ACTIONS``), so the caller's check asks the
same question the owner will, and a refusal names the action the rules name (every
visibility rule treats ``set`` like ``send``: only the wording differs).

Blocking, like the rest of the operations layer; an asyncio door runs it in a thread.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing costs ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.ipc.client import OwnerConnection

__all__ = ["CONTROL_ACTION", "control", "set_config_option", "set_mode"]

CONTROL_ACTION = "set"  # the visibility action of a control (see the module docstring)


def control(
    key: str,
    kind: str,
    payload: dict[str, Any],
    *,
    deadline: float | None = None,
    options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    conn: OwnerConnection | None = None,
) -> dict[str, Any]:
    """Send control request ``kind`` (``set_mode``, ``set_config_option``) to the
    session's owner (started if none serves) and return its result.

    Args:
        deadline: the caller's deadline (``time.monotonic()``): reaching the owner and
            the answer end by it.
        options / env: for an owner started now (:func:`tether.operations.connect_or_start`).
        conn: an open connection to use (and leave open) instead.

    Raises:
        NoSession, VisibilityDenied, CallTimeout, TetherError subclasses: the owner's.
    """
    if conn is not None:
        return conn.request(kind, payload, deadline_ms=_remaining_ms(deadline, time.monotonic()))
    from tether.operations.connecting import connect_or_start

    with connect_or_start(
        key, env=env, options=options, deadline=deadline, action=CONTROL_ACTION
    ) as owner:
        return owner.request(kind, payload, deadline_ms=_remaining_ms(deadline, time.monotonic()))


def set_mode(key: str, mode_id: str, **how: Any) -> dict[str, Any]:
    """``session/set_mode`` through the owner (replayed on the agent's next start).

    Takes :func:`control`'s keyword arguments.
    """
    return control(key, "set_mode", {"modeId": mode_id}, **how)


def set_config_option(key: str, config_id: str, value: str | bool, **how: Any) -> dict[str, Any]:
    """``session/set_config_option`` through the owner (``value`` as given: the owner
    knows the option's type from the agent). Takes :func:`control`'s keyword arguments."""
    return control(key, "set_config_option", {"configId": config_id, "value": value}, **how)


def _remaining_ms(deadline: float | None, now: float) -> int | None:
    """What is left of ``deadline`` for the owner to enforce (at least 1 ms)."""
    return None if deadline is None else max(1, int((deadline - now) * 1000))
