"""Server-Sent Events, without I/O: ``text/event-stream`` bytes in, events out.

:class:`SseDecoder` takes bytes as they arrive (:meth:`~SseDecoder.receive_data`) and
gives :class:`Event` values (:meth:`~SseDecoder.next_events`). It remembers the last
``id:`` it saw -- a journal seq on Tether's streams -- so a stream cut off mid-turn is
resumed by sending it as ``Last-Event-ID``: the journal replays what was missed, no gap
and no duplicate (:meth:`tether.remote.client.RemoteClient.follow`).
"""

from __future__ import annotations

from tether import _fastjson
from tether.errors import RemoteProtocolError

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

LINE_MAX_BYTES = 64 * 1024 * 1024  # one SSE event (a journal entry: bounded by the journal)


class Event:
    """One SSE event: ``event`` (``message`` unless named), its ``id`` (a journal seq, or
    None) and its ``data`` (the text, lines joined)."""

    __slots__ = ("data", "event", "id")

    def __init__(self, event: str, id_: int | None, data: str) -> None:
        self.event = event
        self.id = id_
        self.data = data

    def json(self) -> Any:
        """The data decoded.

        Raises:
            RemoteProtocolError: it is not JSON.
        """
        try:
            return _fastjson.loads(self.data)
        except ValueError:
            raise RemoteProtocolError(
                f"an event's data is not JSON: {self.data[:80]!r}", event=self.event
            ) from None


class SseDecoder:
    """``text/event-stream`` bytes in, :class:`Event` values out; remembers the last id.

    Lines end with ``\\n`` (the gateway never sends ``\\r``; a ``\\r\\n`` is accepted).
    A line longer than ``max_line`` is the peer's fault: :class:`RemoteProtocolError`.
    """

    def __init__(self, max_line: int = LINE_MAX_BYTES) -> None:
        self.last_id: int | None = None
        self._buffer = bytearray()
        self._max_line = max_line
        self._event = "message"
        self._id: int | None = None
        self._data: list[str] = []
        self._ready: list[Event] = []

    def receive_data(self, data: bytes) -> None:
        """Feed bytes as they arrive.

        Raises:
            RemoteProtocolError: a line past the limit, or an id that is not a seq.
        """
        self._buffer += data
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end < 0:
                break
            self._line(bytes(self._buffer[start:end]).rstrip(b"\r"))
            start = end + 1
        del self._buffer[:start]
        if len(self._buffer) > self._max_line:
            raise RemoteProtocolError(
                "an event-stream line is over the limit", limit=self._max_line
            )

    def next_events(self) -> list[Event]:
        """The events completed so far (each returned once)."""
        ready, self._ready = self._ready, []
        return ready

    def _line(self, line: bytes) -> None:
        if not line:
            if self._data:
                self._ready.append(Event(self._event, self._id, "\n".join(self._data)))
                if self._id is not None:
                    self.last_id = self._id
            self._event, self._id, self._data = "message", None, []
            return
        if line.startswith(b":"):
            return  # a comment: the heartbeat
        name, _, value = line.partition(b":")
        text = value[1:] if value.startswith(b" ") else value
        if name == b"data":
            self._data.append(text.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = text.decode("utf-8", "replace")
        elif name == b"id":
            if not text.isdigit():
                raise RemoteProtocolError(f"an event id is not a journal seq: {text[:40]!r}")
            self._id = int(text)
        # `retry:` and unknown fields are ignored, as the SSE standard says
