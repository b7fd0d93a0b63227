"""A blocking client of a remote Tether: calls, and event streams that survive drops.

:meth:`RemoteClient.call` sends one of :mod:`tether.remote.core`'s calls and returns its
JSON, or raises the error the server raised. :meth:`RemoteClient.follow` reads a
session's events and, when the connection drops (or the gateway drops a client that fell
behind: ``event: lagged``), opens the stream again with ``Last-Event-ID``: the journal
replays what was missed, so the caller sees every entry once. Reconnections are bounded
(``RECONNECTS`` in a row without an entry between them).
"""

from __future__ import annotations

import time

from tether.errors import ServerUnreachable, error_from_wire
from tether.remote import core, sse
from tether.remote.transport import Transport

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

HEARTBEAT_S = 5.0  # asked of the server; a stream silent for STREAM_SILENCE_S is dropped
STREAM_SILENCE_S = 30.0
# In a row, with no entry between them: ~10 s in all, enough for a gateway's restart.
RECONNECTS = 8
RECONNECT_DELAY_S = (0.05, 0.2, 0.5, 1.0, 2.0)


class RemoteClient:
    """One remote Tether, reached at ``url`` with ``token``."""

    def __init__(self, url: str, token: str | None) -> None:
        self.target = core.parse_url(url)
        self.token = token
        self.transport = Transport(self.target)

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.transport.close()

    def call(self, spec: tuple[str, str, dict[str, Any] | None]) -> Any:
        """Send ``spec`` (a :mod:`tether.remote.core` call); its JSON result.

        Raises:
            TetherError: the subclass the server raised, ServerUnreachable, ...
        """
        method, path, body = spec
        req = core.request(self.target, self.token, method, path, body)
        return core.outcome(*self.transport.send(req))

    def stream_lines(self, spec: tuple[str, str, dict[str, Any] | None]) -> Any:
        """The body of a streamed answer (an NDJSON export) as lines, as they come."""
        method, path, body = spec
        req = core.request(self.target, self.token, method, path, body)
        stream = self.transport.open_stream(req, STREAM_SILENCE_S)
        try:
            if stream.status != 200:
                core.outcome(stream.status, stream.content_type, stream.read_all())
                return
            rest = b""
            for chunk in stream.chunks():
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    yield line.decode("utf-8")
            if rest:
                yield rest.decode("utf-8")
        finally:
            stream.close()

    def follow(
        self,
        sid: str,
        on_event: Callable[[sse.Event], bool],
        *,
        from_seq: int | None = None,
        tail: int | None = None,
        deadline: float | None = None,
    ) -> bool:
        """Deliver session ``sid``'s events to ``on_event`` until it returns True (True),
        or the stream ends for good: the session's end, or a closed session replayed
        to its end (False), or ``deadline`` (monotonic) passes (False).

        Raises:
            ServerUnreachable: the stream could not be (re)opened ``RECONNECTS`` times.
            TetherError: the server refused it (NoSession...), or said ``event: error``.
        """
        decoder = sse.SseDecoder()
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if decoder.last_id is not None:
                headers["Last-Event-ID"] = str(decoder.last_id)
                spec = core.events(sid, heartbeat=HEARTBEAT_S)
            else:
                spec = core.events(sid, from_seq=from_seq, tail=tail, heartbeat=HEARTBEAT_S)
            method, path, _ = spec
            req = core.request(self.target, self.token, method, path, None, headers)
            before = decoder.last_id
            silence = STREAM_SILENCE_S
            if deadline is not None:
                silence = min(silence, deadline - time.monotonic())
                if silence <= 0:
                    return False
            try:
                done = self._one_stream(req, decoder, on_event, silence)
            except ServerUnreachable:
                done = None
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                if failures >= RECONNECTS - 1:
                    raise
            if done is not None:
                return done
            failures = 0 if decoder.last_id != before else failures + 1
            if failures >= RECONNECTS:
                raise ServerUnreachable(
                    f"the event stream of {sid[:12]} from {self.target.url} kept breaking",
                    url=self.target.url,
                )
            time.sleep(RECONNECT_DELAY_S[min(failures, len(RECONNECT_DELAY_S) - 1)])

    def _one_stream(
        self,
        req: core.Request,
        decoder: sse.SseDecoder,
        on_event: Callable[[sse.Event], bool],
        silence: float,
    ) -> bool | None:
        """One connection's worth: True/False as :meth:`follow`, None to reconnect."""
        stream = self.transport.open_stream(req, silence)
        try:
            if stream.status == 204:
                return False  # a closed session, nothing past the cursor
            if stream.status != 200:
                core.outcome(stream.status, stream.content_type, stream.read_all())
                return False
            for chunk in stream.chunks():
                decoder.receive_data(chunk)
                for event in decoder.next_events():
                    if event.event == "lagged":
                        decoder.last_id = int(event.json().get("lastSeq", decoder.last_id or 0))
                        return None  # dropped for falling behind: resume from the journal
                    if event.event in ("error", "host_lost"):
                        raise _stream_error(event)
                    if on_event(event):
                        return True
            return None  # the connection ended: the session's end, or a drop
        finally:
            stream.close()


def _stream_error(event: sse.Event) -> Exception:
    data = event.json()
    doc = data if isinstance(data, dict) else {}
    if event.event == "host_lost":
        return error_from_wire(
            {
                "status": 503,
                "title": "HostUnavailable",
                "detail": "the session's host was lost while its stream was open",
                "fields": doc,
            }
        )
    return error_from_wire({"status": 500, "detail": doc.get("detail") or "the stream failed"})
