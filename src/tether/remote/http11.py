"""HTTP/1.1 framing for the remote client, without I/O: request bytes out, a response in.

Why not ``http.client``: it imports ``email`` (for header parsing), ``ssl`` and
``urllib.parse`` -- about 20 ms of a CLI command whose local warm path costs about 40.
The client needs a small, strict subset, and needs it on the thin path:

* requests: ``METHOD path HTTP/1.1``, ``Host``, the caller's headers, ``Content-Length``
  (always, so a proxy never waits for a body);
* responses (:class:`ResponseReader`): a status line and headers (at most
  ``HEAD_MAX_BYTES``), then the body framed as RFC 9112 §6.3 says, in this order: none
  (a ``1xx``, ``204``, ``304``, or the answer to ``HEAD``), ``Transfer-Encoding:
  chunked``, ``Content-Length``, else everything until the server closes. Interim
  ``1xx`` answers are skipped.

Bytes go in with :meth:`ResponseReader.receive_data` (``b""``: the peer closed); the
head, once complete, is in ``status`` and ``headers``; the body comes out with
:meth:`~ResponseReader.take_body` as it is decoded; ``done`` says the response is whole.
Anything malformed is the peer's fault: :class:`~tether.errors.RemoteProtocolError`.
A connection that closes before the response is whole leaves ``done`` false and
``closed_early`` true: the transport says the connection broke.
"""

from __future__ import annotations

from tether.errors import RemoteProtocolError

HEAD_MAX_BYTES = 64 * 1024  # a status line and headers past this are refused
CHUNK_LINE_MAX = 4096  # a chunk-size line (with extensions) past this is refused


def request_bytes(
    method: str, path: str, host: str, headers: dict[str, str], body: bytes | None
) -> bytes:
    """One request's bytes (``Content-Length`` always, ``0`` without a body)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body or b"")


class ResponseReader:
    """One response to a request of ``method``, read from bytes as they arrive."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.status: int | None = None
        self.headers: dict[str, str] = {}  # names lower-cased; repeated ones joined by ", "
        self.keep_alive = False
        self.done = False
        self.closed_early = False
        self._buffer = bytearray()
        self._body = bytearray()
        self._mode = ""  # none | chunked | length | close
        self._left = 0  # bytes left of the body (length) or of the chunk (chunked)
        self._chunk_state = "size"  # size | data | data_end | trailer

    def receive_data(self, data: bytes) -> None:
        """Feed bytes (``b""``: the server closed the connection).

        Raises:
            RemoteProtocolError: not an HTTP/1.1 response, or badly framed.
        """
        if not data:
            if self._mode == "close":
                self.done = True
            elif not self.done:
                self.closed_early = True
            return
        if self.done:
            return  # bytes after a whole response: not ours to read (we never pipeline)
        self._buffer += data
        while self.status is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > HEAD_MAX_BYTES:
                    raise RemoteProtocolError("the response's head is over the limit")
                return
            head = bytes(self._buffer[:end])
            del self._buffer[: end + 4]
            self._head(head)
        self._read_body()

    def take_body(self) -> bytes:
        """The body decoded since the last call."""
        body = bytes(self._body)
        self._body.clear()
        return body

    def _head(self, head: bytes) -> None:
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise RemoteProtocolError(f"not an HTTP/1.1 response: {status_line[:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            return  # an interim answer (100 Continue...): the real one follows
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
            key = name.lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        self.status, self.headers = status, headers
        self._framing(version)

    def _framing(self, version: str) -> None:
        headers = self.headers
        assert self.status is not None
        if self.method == "HEAD" or self.status in (204, 304):
            self._mode = "none"
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in headers:
            raw = headers["content-length"].split(",")[0].strip()
            if not raw.isdigit():
                raise RemoteProtocolError(f"a bad Content-Length: {raw[:40]!r}")
            self._mode, self._left = "length", int(raw)
        else:
            self._mode = "close"
        connection = headers.get("connection", "").lower()
        self.keep_alive = version == "HTTP/1.1" and "close" not in connection
        self.keep_alive = self.keep_alive and self._mode != "close"
        if self._mode == "none" or (self._mode == "length" and self._left == 0):
            self.done = True

    def _read_body(self) -> None:
        buffer = self._buffer
        if self._mode == "close":
            self._body += buffer
            buffer.clear()
        elif self._mode == "length":
            take = min(self._left, len(buffer))
            self._body += buffer[:take]
            del buffer[:take]
            self._left -= take
            self.done = self._left == 0
        elif self._mode == "chunked":
            self._read_chunks()

    def _read_chunks(self) -> None:
        buffer = self._buffer
        while buffer and not self.done:
            if self._chunk_state == "data":
                take = min(self._left, len(buffer))
                self._body += buffer[:take]
                del buffer[:take]
                self._left -= take
                if self._left:
                    return
                self._chunk_state = "data_end"
                continue
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > CHUNK_LINE_MAX:
                    raise RemoteProtocolError("a chunk line is over the limit")
                return
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self._chunk_state == "data_end":
                if line:
                    raise RemoteProtocolError("a chunk does not end where its size says")
                self._chunk_state = "size"
            elif self._chunk_state == "size":
                size = line.split(b";")[0].strip()
                if not size or size.strip(b"0123456789abcdefABCDEF"):
                    raise RemoteProtocolError(f"a bad chunk size: {size[:20]!r}")
                self._left = int(size, 16)
                self._chunk_state = "data" if self._left else "trailer"
            elif not line:  # the empty line after the trailers: the body is whole
                self.done = True
