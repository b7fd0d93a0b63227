"""A minimal HTTP/1.1 client on asyncio streams, for the concurrent-prompts figures.

``httpx`` spends several milliseconds of CPU per request and per streamed response; with
100 requests at once from one Python process the client, not the server, set the
latency (its CPU was more than the gateway's, the owners' and the agents' together).
So both servers are measured with this client, which does as little as possible: a
request written in one piece, the response read until a known marker, no parsing
beyond the headers' ``Content-Length``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Iterable
from typing import Any


class Conn:
    """One keep-alive connection to ``host:port``."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str = "bench"
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.host = host  # the Host header (tether serve answers only its own names)

    @classmethod
    async def open(cls, url: str) -> Conn:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    def _send(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)

    async def json(
        self, method: str, path: str, headers: dict[str, str], payload: Any
    ) -> tuple[int, Any]:
        """A request with a JSON body; (status, the decoded JSON answer)."""
        self._send(method, path, headers, json.dumps(payload).encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await self.reader.readexactly(length)
        return status, json.loads(body) if body else None

    async def stream_until(self, path: str, headers: dict[str, str], marker: bytes) -> None:
        """GET ``path`` and read its (streamed) answer until ``marker`` has arrived."""
        self._send("GET", path, headers, b"")
        seen = b""
        while marker not in seen:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError(f"the stream ended before {marker!r}")
            seen = seen[-len(marker) :] + data

    def close(self) -> None:
        self.writer.close()


async def request(
    url: str, method: str, path: str, headers: dict[str, str], payload: Any = None
) -> tuple[int, Any]:
    """One request on its own connection; (status, the JSON answer, or None without a
    payload: then only the status line is read)."""
    conn = await Conn.open(url)
    try:
        if payload is not None:
            return await conn.json(method, path, headers, payload)
        head = f"{method} {path} HTTP/1.1\r\nHost: {conn.host}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        conn.writer.write(head.encode() + b"\r\n")
        status_line = await conn.reader.readuntil(b"\r\n")
        return int(status_line.split(b" ", 2)[1]), None
    finally:
        conn.close()


async def timed(calls: Iterable[Awaitable[None]]) -> list[float]:
    """Run the calls at once; each one's seconds from the start to its end."""
    t0 = time.perf_counter()

    async def one(call: Awaitable[None]) -> float:
        await call
        return time.perf_counter() - t0

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def tether_prompt(url: str, headers: dict[str, str], sid: str) -> None:
    """Tether: POST the prompt, then its SSE stream from ``fromSeq`` until the turn ends."""
    conn = await Conn.open(url)
    try:
        status, r = await conn.json(
            "POST", f"/v1/sessions/{sid}/prompt", headers, {"prompt": "echo hi"}
        )
        if status != 202 or "requestId" not in r:
            raise RuntimeError(f"the prompt was refused: {status} {r}")
        marker = b'"kind":"turn_ended","requestId":"' + r["requestId"].encode()
        await conn.stream_until(f"/v1/sessions/{sid}/events?from={r['fromSeq']}", headers, marker)
    finally:
        conn.close()


async def tether_prompt_wait(url: str, headers: dict[str, str], sid: str) -> None:
    """Tether: ``POST …/prompt?wait=true``, answered at the turn's end."""
    conn = await Conn.open(url)
    try:
        status, r = await conn.json(
            "POST", f"/v1/sessions/{sid}/prompt?wait=true", headers, {"prompt": "echo hi"}
        )
        if status != 200 or r.get("stopReason") != "end_turn":
            raise RuntimeError(f"the waiting prompt failed: {status} {r}")
    finally:
        conn.close()


async def peer_prompt(url: str, server: str, session: str, rid: int) -> None:
    """sandbox-agent: POST ``session/prompt`` over ACP-over-HTTP; it answers at the turn's end."""
    conn = await Conn.open(url)
    try:
        body = {
            "jsonrpc": "2.0",
            "id": rid,  # unique: sandbox-agent keys pending requests by the client's id
            "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "echo hi"}]},
        }
        status, answer = await conn.json("POST", f"/v1/acp/{server}", {}, body)
        if status != 200 or "result" not in answer:
            raise RuntimeError(f"sandbox-agent answered {status}: {answer!r:.200}")
    finally:
        conn.close()


async def sequential(calls: Iterable[Awaitable[None]]) -> list[float]:
    """Run the calls one after the other; each one's seconds."""
    out = []
    for call in calls:
        t0 = time.perf_counter()
        await call
        out.append(time.perf_counter() - t0)
    return out
