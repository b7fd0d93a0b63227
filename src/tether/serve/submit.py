"""Submitting a prompt from the event loop: the warm path of ``POST …/prompt``.

The operations layer's ``connect_or_start`` is blocking (it may start an owner, fence a
silent one, wait for a lock), so the gateway runs it in a worker thread. But the common
case -- the operator's gateway, a live owner that says hello at once -- needs none of
that: connect, read the hello, send the request, read the ack. Done here, on the loop,
it costs no thread hop and holds no worker thread while the owner admits the prompt,
so a hundred prompts at once queue for nothing in the gateway.

Anything else returns None before the request is sent, and the caller takes the
thread path, which handles every case (and raises the proper error): a caller that
may be inside an agent tree (its visibility needs the proof), no owner or one that is
stopping or slow to greet, a request over the size limit. Once the request is sent,
the outcome is the owner's: its ack, its error, or ``OwnerUnavailable`` if it went away
first (nothing was admitted: safe to retry).
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether import access, sessions
from tether.client import _Connection
from tether.errors import OwnerUnavailable, TetherError, error_from_wire
from tether.ipc import protocol
from tether.ipc.client import new_request_id
from tether.ipc.lines import LineReader
from tether.serve import lookups
from tether.serve.stream import Hubs

HELLO_S = 1.0  # slower than this, the thread path decides (it may fence the owner)


async def prompt(
    hubs: Hubs, key: str, payload: dict[str, Any], deadline_ms: int | None, max_bytes: int
) -> dict[str, Any] | None:
    """The owner's admission of the prompt, or None: take the thread path."""
    if access.could_be_agent():
        return None
    conn: _Connection | None = None
    try:
        async with asyncio.timeout(HELLO_S):
            reader, writer = await asyncio.open_unix_connection(sessions.socket_path(key))
            conn = _Connection(reader, writer, LineReader(), {})
            hello = await conn.read()
    except (OSError, TimeoutError, TetherError):
        if conn is not None:
            await conn.aclose()
        return None
    try:
        if (
            hello is None
            or hello.get("type") != "hello"
            or hello.get("v") != protocol.VERSION
            or hello.get("stopping")
        ):
            return None
        conn.hello = hello
        generation = hello.get("generation")
        rid = new_request_id()
        data = protocol.request_frame(
            rid,
            "prompt",
            payload,
            deadline_ms=deadline_ms,
            owner_generation=generation if isinstance(generation, int) else None,
        )
        if len(data) > max_bytes:
            return None  # the thread path says so, in the one wording
        from_seq = await _from_seq(hubs, key)
        conn.writer.write(data)
        await conn.writer.drain()
        async for frame in conn.frames(rid):
            if frame.get("type") == "ack":
                return {
                    "requestId": rid,
                    "sessionKey": key,
                    "queuePosition": frame.get("queuePosition"),
                    "fromSeq": from_seq,
                }
            if frame.get("type") == "error":
                raise error_from_wire(frame.get("error") or {})
        raise OwnerUnavailable("the owner ended the request before acknowledging it")
    finally:
        await conn.aclose()


async def _from_seq(hubs: Hubs, key: str) -> int:
    """A cursor before every entry of a prompt not yet sent.

    A hub following the session has received every entry up to ``next_seq - 1``, some
    maybe a moment before they are stored: all of them precede the prompt's. Without
    one, the last stored seq (which the owner may already have passed with entries not
    yet committed: a stream from there shows them too).
    """
    hub = hubs.warm(key)
    if hub is not None:
        return hub.next_seq
    return await asyncio.to_thread(lookups.last_seq, key) + 1
