"""The door's requests to a session's owner: a prompt turn relayed, and queued controls.

A turn is an IPC ``prompt`` on a connection of its own (the owner started on demand by
:func:`tether.operations.connect_or_start`, the socket then moved into asyncio, as the
library does). The owner relays the turn's agent frames as they arrive; each
``session/update`` goes to the client at once, with the agent's session id replaced by
the door's, so the client sees them in order and before the turn's answer. Leaving the
turn early (the client went away, the door is cancelled) closes the connection, which
the owner treats as the caller leaving: the turn gets ``session/cancel``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from tether import _aio, operations
from tether.acp_door import translate
from tether.acp_door.attach import Attachment
from tether.errors import OwnerLost, error_from_wire
from tether.ipc import protocol
from tether.ipc.aio_client import AsyncOwnerConnection
from tether.ipc.client import new_request_id
from tether.operations import TurnRest

__all__ = ["Relayer", "answer_relay", "connect", "control", "prompt_payload", "run_prompt"]

CLEANUP_S = 5.0  # how long a cancelled turn waits for its cancel to reach the owner
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
    """One queued request (``set_mode``, ``set_config_option``); returns its result."""
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
    handler -- when the owner understands relays.

    Raises:
        TetherError subclasses: the owner's error for the turn (re-raised as its class),
        ``OwnerLost`` when the owner went away mid-turn.

    Cancellation: the connection is closed (shielded), so the owner cancels the turn.
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
    generation = conn.hello.get("generation")
    payload = prompt_payload(blocks, conn.hello, relay[0] if relay is not None else None)
    try:
        conn.writer.write(
            protocol.request_frame(
                rid,
                "prompt",
                payload,
                owner_generation=generation if isinstance(generation, int) else None,
            )
        )
        await conn.writer.drain()
        # The journal seq of the last frame relayed to us: where the journal takes over
        # if the owner lets go of us mid-turn.
        seen = journaled if isinstance(journaled, int) else 0
        frames = conn.frames(rid)
        while True:
            try:
                frame = await anext(frames)
            except StopAsyncIteration:
                break
            except OwnerLost:
                # Cut off (a lagged frame lost with its buffer), or the owner died: the
                # journal knows which -- the turn's end, if it was recorded.
                serving = await asyncio.to_thread(operations.serving_generation, att.key)
                follow = serving is not None and serving == generation
                return await _finish_from_journal(att.key, rid, seen, notify, follow=follow)
            kind = frame.get("type")
            if kind == "update":
                seq = frame.get("seq")
                seen = max(seen, seq) if isinstance(seq, int) else seen
                if frame.get("direction") == "in" and isinstance(frame.get("frame"), dict):
                    _relay(att.key, seq, frame["frame"], notify)
            elif kind == "lagged":
                # We read too slowly and the owner let go of us; the turn goes on, and its
                # frames are all in the journal: the rest of it comes from there.
                last = frame.get("lastSeq")
                seen = max(seen, last) if isinstance(last, int) else seen
                return await _finish_from_journal(att.key, rid, seen, notify, follow=True)
            elif (answer := _answer(att, conn, rid, frame, on_question, relay)) is not None:
                return answer
        raise OwnerLost("the owner ended the turn without an answer")
    finally:
        att.running.remove(rid)
        if relay is not None:
            relay[1].turn_ended(conn)
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
    elif kind == "error":
        raise error_from_wire(frame.get("error") or {})
    return None


async def _finish_from_journal(
    key: str, rid: str, after: int, notify: Notify, *, follow: bool
) -> dict[str, Any]:
    """The rest of turn ``rid`` after seq ``after`` from the session's journal, relayed
    as if it came from the owner, and its ACP answer (or its error, raised). ``follow``:
    its owner still runs it, so wait for its end.

    Cancellation: the journal follower is stopped and (``follow``) the turn cancelled in
    its owner -- it no longer hears from our connection -- before the cancellation
    propagates.
    """
    rest = TurnRest(key, rid, after, follow=follow)
    try:
        async for seq, acp in rest.frames():
            _relay(key, seq, acp, notify)
    except asyncio.CancelledError:
        if follow:  # the owner let go of our connection, so it cannot tell we left
            cancel = _aio.spawn(asyncio.to_thread(operations.cancel, key, rid))
            # Bounded, and not cut short by a second cancellation: a thread cannot be.
            # A cancel that finds nothing is no failure (settle drops its error).
            await _aio.settle(cancel, CLEANUP_S)
        raise
    return {"stopReason": rest.stop_reason(), "_meta": {"tether": {"requestId": rid}}}


def prompt_payload(
    blocks: list[dict[str, Any]], hello: dict[str, Any], relay: dict[str, Any] | None
) -> dict[str, Any]:
    """The door's IPC prompt: a controller's, asking for ``relay`` only of an owner
    whose hello lists the ``relay`` feature (an older owner serves fs and terminals
    itself, as it would anyway: it ignores a payload field it does not know)."""
    payload: dict[str, Any] = {"prompt": blocks, "wait": True, "client": "acp", "control": True}
    features = hello.get("features")
    if relay is not None and isinstance(features, list) and "relay" in features:
        payload["relay"] = relay
    return payload


async def answer_relay(conn: AsyncOwnerConnection, relay_id: str, answer: dict[str, Any]) -> None:
    """Send the owner the client's answer to one relayed request (``relay_answer``), on
    the turn's own connection: only the connection it was sent to may answer it. Its
    ack and result are this connection's other request's frames: the turn's reader
    passes them by. A connection already closed (the turn ended) answers nothing."""
    with contextlib.suppress(ConnectionError, RuntimeError):
        await conn.send("relay_answer", {"relayId": relay_id, **answer}, None)
