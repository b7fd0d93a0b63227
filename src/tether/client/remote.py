"""The remote backend: a Tether gateway or fleet router, over its HTTP API and SSE.

Imported only when a :class:`~tether.client.Client` is given ``url=`` (it needs the
``remote`` extra: httpx). Each method is one route of ``tether serve``
(:mod:`tether.serve.sessions_api`, :mod:`~tether.serve.events_api`,
:mod:`~tether.serve.questions_api`); a turn is ``POST …/prompt`` followed on the
session's event stream (:mod:`tether.client.remote_stream`, resumed with
``Last-Event-ID`` when cut) until its ``turn_ended``.

Errors come back as the classes of :mod:`tether.errors`: a problem document through
:func:`tether.errors.error_from_wire` (the one mapping, shared with the CLI), and the
transport's own failures through :class:`Boundary`, this backend's one translation
point. What only a local home can do (``fork``, ``discard``, ``resume_session``, an
argv agent, ``agent_sessions``, ``logout``) raises :class:`~tether.errors.UsageError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any, Final

import httpx

from tether import _aio
from tether.client.backend import SessionRef, session_summary
from tether.client.remote_stream import EventStream
from tether.errors import (
    HostUnavailable,
    OwnerLost,
    SessionClosed,
    TetherError,
    UsageError,
    error_from_wire,
)
from tether.events import (
    Answerer,
    Event,
    JournalRecord,
    TurnEnded,
    event_from_entry,
    question_from_entry,
)

__all__ = ["Boundary", "RemoteBackend"]

CONNECT_S: Final = 10.0
CANCEL_SETTLE_S: Final = 3.0  # as the local backend: a left turn's cancel, bounded
ATTACH_S: Final = 10.0  # how long a controlling prompt waits for its stream to attach
ATTACH_POLL_S: Final = 0.02
_CONTROLS: Final = {"set_mode": "mode", "set_config_option": "config"}


class Boundary:
    """Where ``httpx`` meets the tree: transport errors and problem responses.

    ``with boundary():`` turns a connection that could not be made into
    :class:`~tether.errors.HostUnavailable` (retryable: nothing was sent) and one cut
    after the request went out into :class:`~tether.errors.OwnerLost` (the outcome is
    unknown); :meth:`problem` rebuilds a problem response's error.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise HostUnavailable(
                f"cannot reach the Tether at {self.url}: {exc}", url=self.url
            ) from exc
        except httpx.TimeoutException as exc:
            raise OwnerLost(f"the Tether at {self.url} stopped answering: {exc}") from exc
        except (httpx.TransportError, httpx.StreamError) as exc:
            raise OwnerLost(
                f"the connection to {self.url} broke mid-request; the outcome is unknown: {exc}"
            ) from exc

    def problem(self, response: httpx.Response) -> TetherError:
        """The error a non-success response carries (its problem document)."""
        try:
            doc = response.json()
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            doc = {"type": "about:blank", "title": response.reason_phrase}
        doc.setdefault("status", response.status_code)
        doc.setdefault("title", response.reason_phrase)
        return error_from_wire(doc)


def endpoint(url: str) -> tuple[str, httpx.AsyncBaseTransport | None]:
    """``(base URL, transport)`` for ``http://…``, ``https://…`` or ``unix:/abs/path``.

    Raises:
        UsageError: any other form, or a relative socket path.
    """
    if url.startswith("unix:"):
        path = url[len("unix:") :]
        if not os.path.isabs(path):
            raise UsageError(f"url {url!r}: a unix socket URL is unix:/absolute/path")
        return "http://localhost", httpx.AsyncHTTPTransport(uds=path)
    if url.startswith(("http://", "https://")):
        return url.rstrip("/"), None
    raise UsageError(f"url {url!r}: give http://HOST:PORT, https://HOST:PORT or unix:/PATH")


def _local_only(what: str) -> UsageError:
    return UsageError(f"{what} is not served by a remote Tether: use a local Client")


class RemoteBackend:
    """Sessions of a remote Tether (see :class:`tether.Client`, ``url=``)."""

    def __init__(
        self, url: str, token: str | None, *, permissions: str | None, ttl: float | None
    ) -> None:
        base, transport = endpoint(url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url
        self.permissions = permissions
        self.ttl = ttl
        self.errors = Boundary(url)
        # No read timeout on plain requests: a close waits for the tree to be proven
        # gone, an ensure for the agent to start. Streams set their own (heartbeats).
        self.http = httpx.AsyncClient(
            base_url=base,
            transport=transport,
            headers=headers,
            timeout=httpx.Timeout(CONNECT_S, read=None),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; its JSON answer, or its problem raised as the tree's class."""
        with self.errors():
            response = await self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise self.errors.problem(response)
        return response.json()

    # --- sessions ---------------------------------------------------------------------

    async def ensure_session(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        name: str,
        fresh: bool,
        resume_session: str | None,
    ) -> SessionRef:
        if not isinstance(agent, str):
            raise _local_only("an agent given as a command line")
        if resume_session:
            raise _local_only("resume_session")
        if cwd is None:
            raise UsageError("a remote session needs cwd= (an absolute path on its machine)")
        body: dict[str, Any] = {"agent": agent, "cwd": os.fspath(cwd), "name": name}
        if fresh:
            body["fresh"] = True
        if self.permissions:
            body["permissions"] = self.permissions
        if self.ttl is not None:
            body["ttl"] = self.ttl
        made = await self.call("POST", "/v1/sessions", json=body)
        return SessionRef(made["id"], made["name"], made["agent"], made["cwd"])

    async def fork(self, parent: SessionRef, name: str) -> SessionRef:
        raise _local_only("fork")

    async def sessions(self) -> list[dict[str, Any]]:
        items = (await self.call("GET", "/v1/sessions"))["sessions"]
        return [session_summary(item) for item in items]

    async def agent_sessions(
        self,
        agent: str | Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None,
        cursor: str | None,
        any_cwd: bool,
    ) -> dict[str, Any]:
        raise _local_only("agent_sessions")

    async def logout(
        self, agent: str | Sequence[str], *, cwd: str | os.PathLike[str] | None
    ) -> None:
        raise _local_only("logout")

    # --- one session ------------------------------------------------------------------

    async def turn(
        self,
        session: SessionRef,
        blocks: list[dict[str, Any]],
        *,
        deadline: float | None,
        control: bool,
        answerer: Answerer,
    ) -> AsyncGenerator[Event, None]:
        key = session.key
        body: dict[str, Any] = {"prompt": blocks}
        if self.permissions:
            body["permissions"] = self.permissions
        stream: EventStream | None = None
        rid = ""
        finished = False
        try:
            if control:
                # A question waits for an answer only while a controller is attached:
                # attach (this stream) before the turn can ask anything.
                stream = EventStream(self.http, key, tail=0, control=True, errors=self.errors)
                await stream.open()
                await self._attached(session)
            if deadline is not None:
                body["timeoutMs"] = max(1, int((deadline - time.monotonic()) * 1000))
            submitted = await self.call("POST", f"/v1/sessions/{key}/prompt", json=body)
            rid, from_seq = str(submitted["requestId"]), int(submitted["fromSeq"])
            if stream is None:
                stream = EventStream(self.http, key, cursor=from_seq, errors=self.errors)
            stream.resume_after(from_seq - 1)  # the turn's entries all come after
            async for entry in stream:
                kind = entry.get("kind")
                if kind == "session_ended":
                    finished = True
                    yield event_from_entry(entry)
                    raise SessionClosed("the session ended during the turn", session_key=key)
                if entry.get("requestId") != rid:
                    continue
                if kind == "turn_ended":
                    finished = True
                    yield _turn_end(entry)
                    return
                if kind in ("interaction_opened", "interaction_resolved"):
                    question = question_from_entry(entry, answerer) if control else None
                    if question is not None:
                        yield question
                    continue
                event = event_from_entry(entry)
                if kind == "acp" and not isinstance(event, JournalRecord):
                    yield event
            raise OwnerLost("the turn's events ended before the turn did", request_id=rid)
        finally:
            if rid and not finished:
                # The consumer left early (cancelled, or broke out of the loop): cancel
                # this turn, never leave it running for nobody.
                await _aio.cleanup(self._cancel_request(key, rid), what="cancel")
            if stream is not None:
                await _aio.cleanup(stream.aclose(), what="stream")

    async def _attached(self, session: SessionRef) -> None:
        """Wait (bounded) until the session's owner lists a controller (our stream's
        hub); no owner runs: ensure it (the hub attaches once it serves)."""
        path = f"/v1/sessions/{session.key}"
        ensured = False
        deadline = time.monotonic() + ATTACH_S
        while time.monotonic() < deadline:
            status = (await self.call("GET", path)).get("status") or {}
            if status.get("status") in ("closed", "no-session"):
                return  # the prompt says so, as the tree's class
            if status.get("ownerPid") is None and not ensured:  # no live owner
                ensured = True
                body = {"agent": session.agent, "cwd": session.cwd, "name": session.name}
                await self.call("POST", "/v1/sessions", json=body)
                continue
            if any("controller" in p.get("roles", ()) for p in status.get("attached") or ()):
                return
            await asyncio.sleep(ATTACH_POLL_S)

    async def _cancel_request(self, key: str, rid: str) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_SETTLE_S):
                await self.call("POST", f"/v1/sessions/{key}/cancel", json={"requestId": rid})

    async def answer(
        self, key: str, interaction_id: str, answer: str, content: dict[str, Any] | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"answer": answer}
        if content is not None:
            body["content"] = content
        result: dict[str, Any] = await self.call(
            "POST", f"/v1/sessions/{key}/questions/{interaction_id}", json=body
        )
        return result

    async def cancel(self, key: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("POST", f"/v1/sessions/{key}/cancel", json={})
        return result

    async def control(self, key: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.call(
            "POST", f"/v1/sessions/{key}/{_CONTROLS[kind]}", json=payload
        )
        return result

    async def status(self, key: str) -> dict[str, Any]:
        status: dict[str, Any] = (await self.call("GET", f"/v1/sessions/{key}"))["status"]
        return status

    async def close(self, key: str, *, discard: bool) -> dict[str, Any]:
        if discard:
            raise _local_only("close(discard=True)")
        result: dict[str, Any] = await self.call("DELETE", f"/v1/sessions/{key}")
        return result

    async def terminate(self, key: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.call("POST", f"/v1/sessions/{key}/terminate", json={})
        return result

    async def history(self, key: str, limit: int | None) -> list[dict[str, Any]]:
        params = {"limit": limit} if limit is not None else {}
        turns = (await self.call("GET", f"/v1/sessions/{key}/history", params=params))["turns"]
        return list(turns)

    async def transcript(self, key: str, tail: int | None) -> list[dict[str, Any]]:
        params = {"tail": tail} if tail is not None else {}
        path = f"/v1/sessions/{key}/transcript"
        return list((await self.call("GET", path, params=params))["turns"])

    async def watch(
        self, key: str, *, from_seq: int | None, tail: int | None, follow: bool
    ) -> AsyncIterator[Event]:
        if not follow:
            async for entry in self._stored(key, from_seq, tail):
                yield event_from_entry(entry)
            return
        stream = EventStream(self.http, key, cursor=from_seq, tail=tail, errors=self.errors)
        async with stream:
            async for entry in stream:
                yield event_from_entry(entry)

    async def _stored(
        self, key: str, from_seq: int | None, tail: int | None
    ) -> AsyncIterator[dict[str, Any]]:
        """The stored entries (``…/export``), from ``from_seq`` or the last ``tail``."""
        import json

        with self.errors():
            response = await self.http.get(f"/v1/sessions/{key}/export")
        if response.status_code >= 400:
            raise self.errors.problem(response)
        entries = [json.loads(line) for line in response.text.splitlines() if line]
        if tail is not None:
            entries = entries[-tail:] if tail else []
        elif from_seq is not None:
            entries = [e for e in entries if e.get("seq", 0) >= from_seq]
        else:
            entries = []  # live entries only, and no following: nothing
        for entry in entries:
            yield entry


def _turn_end(entry: dict[str, Any]) -> TurnEnded:
    """The ``TurnEnded`` of a turn's ``turn_ended`` entry, or its error raised."""
    if entry.get("error"):
        raise error_from_wire({"message": str(entry["error"]), "type": entry.get("errorType")})
    return TurnEnded(
        raw=entry, seq=entry.get("seq"), stop_reason=str(entry.get("stopReason") or "end_turn")
    )
