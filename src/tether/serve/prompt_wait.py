"""``POST /v1/sessions/{id}/prompt?wait=true``: a prompt whose answer is its turn's end.

The ``202`` route answers once the owner has admitted the prompt, and the caller follows
the turn on the events stream. This one holds the request until the turn has ended and
answers ``200`` with what a simple client wants -- the stop reason, the agent's text,
how many updates of each kind, the request id and the journal's seq range of the turn
(a cursor to replay all of it). The turn is the same: queued in the same FIFO, journaled
the same way, and sent to the owner as a prompt nobody waits on (``"wait": false``), so
that **a client that disconnects mid-wait does not cancel the turn** (nor does the
gateway stopping): it runs to its end and stays in the journal. To stop it, ``POST
…/cancel`` (the running turn, or its ``requestId`` while queued).

Where the answer comes from:

* the common case, a live owner the gateway reaches from its loop
  (:class:`tether.serve.submit.Prompter`): the turn's frames on the very connection that
  sent it, to its terminal frame -- no follower, no journal read (the operations layer's
  loop, :class:`tether.operations.AsyncTurn`, told to leave the journal to us);
* otherwise (no warm owner: the thread path starts one), or if that connection let go
  of the turn (``lagged``: the owner does not buffer for a slow reader), the rest of the
  turn from the journal (:class:`tether.operations.TurnRest`), as the ACP door
  does. An owner that died mid-turn leaves no end in the journal: ``OwnerLost`` (502,
  the outcome unknown).

A turn's error (the agent failed, its deadline passed) is the answer's error, as a
problem document, as the CLI exits with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from tether import operations
from tether.errors import OwnerLost, error_from_wire
from tether.operations import TurnRest
from tether.serve import bodies
from tether.serve.submit import Prompter

__all__ = ["TEXT_MAX_CHARS", "TurnSummary", "asked", "wait_for_turn"]

TEXT_MAX_CHARS = 1 << 20  # the answer's text; the journal has the whole turn

Submit = Callable[[str, dict[str, Any], "int | None", int], dict[str, Any]]
WAIT_CHOICES = ("0", "1", "true", "false")


def asked(request: Request) -> bool:
    """Whether the prompt asks to wait (``?wait=true`` or ``1``; ``false``, ``0`` or none:
    the ``202`` route).

    Raises:
        UsageError: ``wait`` is something else (a 422, before any prompt is sent).
    """
    if not request.scope.get("query_string"):
        return False  # the common case: no query to parse
    return bodies.query_choice(request.query_params, "wait", WAIT_CHOICES) in ("1", "true")


class TurnSummary:
    """The wait route's answer, built from the turn's frames as they come."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.ack: dict[str, Any] = {}
        self.parts: list[str] = []
        self.chars = 0
        self.truncated = False
        self.updates: dict[str, int] = {}
        self.last_seq: int | None = None
        self.terminal: dict[str, Any] | None = None  # the owner's result/error/lagged frame

    # --- the owner connection (tether.serve.submit.TurnReader) ---------------------------

    def admitted(self, ack: dict[str, Any]) -> None:
        self.ack = ack

    def frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "update":
            seq = frame.get("seq")
            inner = frame.get("frame")
            if frame.get("direction") == "in" and isinstance(inner, dict):
                self.agent_frame(seq if isinstance(seq, int) else None, inner)
        elif kind in ("result", "error", "lagged"):
            self.terminal = frame

    # --- either source ---------------------------------------------------------------------

    def agent_frame(self, seq: int | None, frame: dict[str, Any]) -> None:
        """One ACP frame from the agent during the turn (journal seq ``seq``)."""
        if seq:
            self.last_seq = seq
        if frame.get("method") != "session/update":
            return
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict):
            return
        name = str(update.get("sessionUpdate") or "unknown")
        self.updates[name] = self.updates.get(name, 0) + 1
        content = update.get("content")
        if name == "agent_message_chunk" and isinstance(content, dict):
            text = content.get("text")
            if isinstance(text, str) and text:
                room = TEXT_MAX_CHARS - self.chars
                if len(text) > room:
                    text, self.truncated = text[:room], True
                self.parts.append(text)
                self.chars += len(text)

    def answer(self, stop_reason: str, result: dict[str, Any]) -> dict[str, Any]:
        ack = self.ack
        from_seq = ack.get("fromSeq")
        out: dict[str, Any] = {
            "requestId": ack.get("requestId"),
            "sessionKey": self.key,
            "stopReason": stop_reason,
            "text": "".join(self.parts),
            "updates": self.updates,
            "fromSeq": from_seq,
            "lastSeq": self.last_seq,
            "events": f"/v1/sessions/{self.key}/events?from={from_seq}",
        }
        if self.truncated:
            out["textTruncated"] = True
        for name in ("permissionDenied", "cancel"):
            if name in result:
                out[name] = result[name]
        return out


async def wait_for_turn(
    prompter: Prompter,
    key: str,
    payload: dict[str, Any],
    deadline_ms: int | None,
    max_bytes: int,
    submit: Submit,
) -> tuple[str, dict[str, Any]]:
    """Submit the prompt and wait for its turn's end; (the path taken, the answer).

    ``submit`` is the thread path's blocking submit (it may start the owner). The path
    is ``loop`` or ``thread``, as the gateway counts its prompts.

    Raises:
        TetherError: the prompt was refused, the turn failed (its own error), the
            session ended during it, or its owner was lost (``OwnerLost``).

    Cancellation: the owner connection is closed; the turn goes on (it was sent as a
    prompt nobody waits on).
    """
    payload = {**payload, "wait": False}
    summary = TurnSummary(key)
    try:
        ack = await prompter.prompt(key, payload, deadline_ms, max_bytes, summary)
    except OwnerLost:
        # Admitted, then the owner died: what the journal holds, no more.
        return "loop", await _from_journal(summary, follow=False)
    if ack is None:
        summary.ack = await asyncio.to_thread(submit, key, payload, deadline_ms, max_bytes)
        return "thread", await _from_journal(summary, follow=True)
    terminal = summary.terminal or {}
    if terminal.get("type") == "result":
        result = terminal.get("result")
        result = result if isinstance(result, dict) else {}
        return "loop", summary.answer(str(result.get("stopReason") or "end_turn"), result)
    if terminal.get("type") == "error":
        raise error_from_wire(terminal.get("error") or {})
    return "loop", await _from_journal(summary, follow=True)  # lagged: the rest is journaled


async def _from_journal(summary: TurnSummary, *, follow: bool) -> dict[str, Any]:
    """The rest of the turn from the journal, after what the summary has seen."""
    ack = summary.ack
    after = summary.last_seq if summary.last_seq is not None else int(ack["fromSeq"]) - 1
    rest = TurnRest(summary.key, str(ack["requestId"]), after, follow=follow)
    async for seq, frame in rest.frames():
        summary.agent_frame(seq, frame)
    result = operations.rest_result(rest)  # the turn's own error, SessionClosed, OwnerLost
    return summary.answer(result["stopReason"], result)
