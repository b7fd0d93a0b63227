"""The door's requests to a session's owner: a prompt turn relayed, and queued controls.

A turn is an IPC ``prompt`` on a connection of its own (the owner started on demand by
:func:`tether.operations.connect_or_start`, the socket then moved into asyncio, as the
library does). The owner relays the turn's agent frames as they arrive; each
``session/update`` goes to the client at once, with the agent's session id replaced by
the door's, so the client sees them in order and before the turn's answer. The payload,
the submit, the loop and leaving the turn early (the client went away, the door is
cancelled: the turn is cancelled in its owner) are the operations layer's
(:mod:`tether.operations.prompting`); this module presents them in ACP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from tether import operations
from tether.acp_door import translate
from tether.acp_door.attach import Attachment
from tether.errors import OwnerLost
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.ipc.client import new_request_id

__all__ = ["Relayer", "answer_relay", "connect", "control", "prompt_payload", "run_prompt"]

Notify = Callable[[str, dict[str, Any], tuple[str, int, int, int] | None], None]
OnQuestion = Callable[[str, dict[str, Any]], None]


class Relayer(Protocol):
    """Who serves a turn's relayed requests (:class:`tether.acp_door.relays.ClientRequests`)."""

    def on_owner_frame(self, key: str, conn: AsyncOwnerConnection, frame: dict[str, Any]) -> None:
        """A ``client_request`` or ``relay_expired`` frame of session ``key``'s turn."""

    def turn_ended(self, conn: AsyncOwnerConnection) -> None:
        """The turn on ``conn`` ended: its relays can no longer be answered."""


async def connect(key: str) -> AsyncOwnerConnection:
    """An asyncio connection to the session's serving owner (started if none runs)."""
    conn = await asyncio.to_thread(operations.connect_or_start, key)
    try:
        return await AsyncOwnerConnection.adopt(conn)
    except BaseException:
        conn.close()
        raise


async def control(key: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One queued request (``status``, ``start_agent``); returns its result."""
    conn = await connect(key)
    try:
        return await conn.request(kind, payload)
    finally:
        await asyncio.shield(conn.aclose())


async def run_prompt(
    att: Attachment,
    blocks: list[dict[str, Any]],
    notify: Notify,
    on_question: OnQuestion,
    relay: tuple[dict[str, Any], Relayer] | None = None,
) -> dict[str, Any]:
    """Run one turn through the owner, relaying its updates; returns the ACP answer.

    The door is a controller of the turn: the agent's questions the policy leaves open
    (``interaction`` frames) go to ``on_question(session key, interaction)``, and so
    does an ``elicitation_completed`` (``question`` says which). With
    ``relay`` (the prompt's ``relay`` payload: the methods this client serves, the
    door's token; and a handler) the agent's requests for those methods come as
    ``client_request`` frames (``relay_expired`` when the owner stops waiting), to the
    handler -- when the owner understands relays. The turn is read by the operations
    layer's loop (:mod:`tether.operations.prompting`): a turn the owner let go of us in
    is finished from the journal, relayed the same way.

    Raises:
        TetherError subclasses: the owner's error for the turn (re-raised as its class),
        ``OwnerLost`` when its outcome is unknown.

    Cancellation: the caller-leaves rule -- the turn is cancelled in its owner (bounded)
    and the connection closed before the cancellation propagates.
    """
    conn = await connect(att.key)
    journaled = conn.hello.get("journalSeq")
    if isinstance(journaled, int):
        try:  # others' entries before this turn go out first
            await att.caught_up(journaled)
        except BaseException:  # cancelled while waiting: the connection must not linger
            await asyncio.shield(conn.aclose())
            raise
    rid = new_request_id()
    att.own_requests.add(rid)  # before sending: its journal entries must be known ours
    att.running.append(rid)
    payload = prompt_payload(blocks, conn.hello, relay[0] if relay is not None else None)
    turn: operations.AsyncTurn | None = None
    try:
        turn = await operations.asubmit(conn, att.key, payload, request_id=rid)
        async for frame in turn.frames():
            kind = frame.get("type")
            if kind == "update":
                if frame.get("direction") == "in" and isinstance(frame.get("frame"), dict):
                    _relay(att.key, frame.get("seq"), frame["frame"], notify)
            elif (answer := _answer(att, conn, rid, frame, on_question, relay)) is not None:
                return answer
        raise OwnerLost("the owner ended the turn without an answer")  # pragma: no cover
    finally:
        att.running.remove(rid)
        if relay is not None:
            relay[1].turn_ended(conn)
        if turn is not None:
            await turn.aclose()
        else:
            await asyncio.shield(conn.aclose())


def _relay(key: str, seq: object, acp: dict[str, Any], notify: Notify) -> None:
    relayed = translate.relayed_update(acp, key)
    if relayed:
        # seq 0: the owner journals no frames (journalFrames off): no origin
        origin = (key, seq, 1, 1) if isinstance(seq, int) and seq > 0 else None
        notify("session/update", relayed, origin)


def _answer(
    att: Attachment,
    conn: AsyncOwnerConnection,
    rid: str,
    frame: dict[str, Any],
    on_question: OnQuestion,
    relay: tuple[dict[str, Any], Relayer] | None,
) -> dict[str, Any] | None:
    """Handle one frame of the turn other than an update; its ACP answer if it ends it."""
    kind = frame.get("type")
    if kind == "interaction" and isinstance(frame.get("interaction"), dict):
        on_question(att.key, frame["interaction"])
    elif kind == "elicitation_completed" and isinstance(frame.get("elicitationId"), str):
        # a URL elicitation the agent says is done: the question's follow-up
        done = {
            "question": "elicitation_completed",
            "elicitationId": frame["elicitationId"],
        }
        on_question(att.key, done)
    elif kind in ("client_request", "relay_expired") and relay is not None:
        relay[1].on_owner_frame(att.key, conn, frame)
    elif kind == "result":
        result = frame.get("result") or {}
        return {
            "stopReason": str(result.get("stopReason") or "end_turn"),
            "_meta": {"tether": {"requestId": rid}},
        }
    return None


def prompt_payload(
    blocks: list[dict[str, Any]], hello: dict[str, Any], relay: dict[str, Any] | None
) -> dict[str, Any]:
    """The door's IPC prompt (:func:`tether.operations.prompt_payload`): a controller's,
    asking for ``relay`` only of an owner whose hello lists the ``relay`` feature."""
    return operations.prompt_payload(blocks, client="acp", control=True, relay=relay, hello=hello)


async def answer_relay(conn: AsyncOwnerConnection, relay_id: str, answer: dict[str, Any]) -> None:
    """Send the owner the client's answer to one relayed request (``relay_answer``), on
    the turn's own connection: only the connection it was sent to may answer it. Its
    ack and result are this connection's other request's frames: the turn's reader
    passes them by. A connection already closed (the turn ended) answers nothing."""
    with contextlib.suppress(ConnectionError, RuntimeError):
        await conn.send("relay_answer", {"relayId": relay_id, **answer}, None)
