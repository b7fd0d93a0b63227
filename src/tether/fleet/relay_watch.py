"""What a host's answer becomes for the router's client, as httptools parses it (no I/O):
the head written back as it came, a body passed on as it arrives, an event stream cut
at its last complete event. :mod:`tether.fleet.relay` feeds it and writes ``out``.
"""

from __future__ import annotations

import httptools

from tether.fleet import http1


class ResponseWatch:
    """httptools callbacks that turn a host's answer into what the client is sent.

    The head is written back as it came (status, headers in order); a body is passed on
    as it arrives -- re-framed chunk by chunk when chunked, and for an event stream only
    up to its last complete event, so that whatever happens to the host the client's
    stream is always well formed and a ``host_lost`` event can follow it.
    """

    def __init__(self, *, head_only: bool = False) -> None:
        # The answer to a HEAD: its head says how long a body would be, and none comes.
        # httptools cannot be told (it parses responses without their requests).
        self.head_only = head_only
        self.out: list[bytes] = []
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.chunked = False
        self.sse = False
        self.last_seq: int | None = None
        self.keep_alive = False
        self.parser: httptools.HttpResponseParser | None = None
        self._head: list[bytes] = []
        self._pending = b""  # an event stream's incomplete last event
        self._interim = 0  # the status of an interim (1xx) answer being parsed
        # Bytes came after the answer ended (a host answering twice): the connection
        # is out of step with its requests and must not serve another.
        self.trailing = False

    def on_message_begin(self) -> None:
        if self.complete:
            self.trailing = True

    def on_status(self, status: bytes) -> None:
        if self.trailing:
            return  # not this answer's: nothing of it is passed on
        self._head.append(status)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.trailing:
            return
        low = name.lower()
        if low == b"transfer-encoding" and b"chunked" in value.lower():
            self.chunked = True
        elif low == b"content-type" and value.startswith(b"text/event-stream"):
            self.sse = True
        self._head += [name, b": ", value, b"\r\n"]

    def head_bytes(self, status: int) -> bytes:
        reason = self._head[0] if self._head else b""
        return b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason, b"".join(self._head[1:]))

    def on_headers_complete(self) -> None:
        if self.trailing:
            return
        status = self.parser.get_status_code() if self.parser is not None else 0
        if 100 <= status < 200 and status != 101:
            # An interim answer (100 Continue, 103 Early Hints): passed on whole when it
            # ends, and the final answer is parsed after it (on_message_complete).
            self._interim = status
            return
        self.headers_done = True
        if self.head_only:
            self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
            self.complete = True

    def on_body(self, body: bytes) -> None:
        if self.trailing:
            return
        if self.sse:
            data = self._pending + body
            cut = data.rfind(b"\n\n") + 2
            self._pending = data[cut:] if cut >= 2 else data
            if cut < 2:
                return
            body = data[:cut]
            seq = http1.last_event_id(body)
            if seq is not None:
                self.last_seq = seq
        self.out.append(http1.chunk(body) if self.chunked else body)

    def on_message_complete(self) -> None:
        if self.trailing:
            return
        if self._interim:
            self.out.append(self.head_bytes(self._interim))
            self._interim = 0
            self._head = []
            return
        # Only here: once the message is over, httptools no longer answers it.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()
        if self._pending:
            self.out.append(http1.chunk(self._pending) if self.chunked else self._pending)
            self._pending = b""
        if self.chunked:
            self.out.append(http1.LAST_CHUNK)
        self.complete = True
