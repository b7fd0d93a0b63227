"""Typed events of a prompt turn, for the library API.

Every event keeps the raw ACP frame it came from (``raw``), so nothing an agent sends
is lost: kinds Tether does not know become :class:`SessionUpdate` (or
:class:`AgentNotification` for non-``session/update`` notifications) with the raw dict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AgentMessageChunk",
    "AgentNotification",
    "AgentThoughtChunk",
    "ElicitationRequested",
    "Event",
    "JournalRecord",
    "PermissionRequested",
    "Plan",
    "Question",
    "QuestionResolved",
    "SessionEnded",
    "SessionInfoUpdate",
    "SessionUpdate",
    "ToolCall",
    "ToolCallUpdate",
    "TurnEnded",
    "UsageUpdate",
    "event_from_entry",
    "event_from_frame",
    "question_from_entry",
    "question_from_frame",
]


@dataclass(frozen=True)
class Event:
    """Base of all events; ``raw`` is the ACP frame (or IPC event) it was made from.

    ``seq`` is the event's place in the session's journal when it came from one
    (:meth:`tether.Session.watch`), else None.
    """

    raw: dict[str, Any] = field(repr=False)
    seq: int | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class SessionUpdate(Event):
    """A ``session/update`` of any kind; ``kind`` is its ``sessionUpdate`` value."""

    kind: str = ""
    update: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class AgentMessageChunk(SessionUpdate):
    """A piece of the assistant's answer."""

    text: str = ""


@dataclass(frozen=True)
class AgentThoughtChunk(SessionUpdate):
    """A piece of the agent's visible reasoning."""

    text: str = ""


@dataclass(frozen=True)
class ToolCall(SessionUpdate):
    """The agent started a tool call."""

    tool_call_id: str = ""
    title: str = ""
    tool_kind: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class ToolCallUpdate(SessionUpdate):
    """A tool call changed (status, content)."""

    tool_call_id: str = ""
    status: str | None = None


@dataclass(frozen=True)
class Plan(SessionUpdate):
    """The agent's full current plan (replaces the previous one)."""

    entries: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class UsageUpdate(SessionUpdate):
    """The session's context use and cost (``usage_update``): ``used`` tokens in context
    of ``size``; ``cost`` is ``{amount, currency}`` when the agent reports one. Rate-limit
    data an agent attaches (claude-agent-acp's ``_meta["_claude/rateLimit"]``) stays in
    ``update``."""

    used: int | None = None
    size: int | None = None
    cost: dict[str, Any] | None = None


@dataclass(frozen=True)
class SessionInfoUpdate(SessionUpdate):
    """New session metadata (``session_info_update``): a partial update, so a field the
    agent did not send is absent from ``fields`` (``title`` None may mean either)."""

    title: str | None = None
    updated_at: str | None = None
    fields: tuple[str, ...] = ()  # which of title, updatedAt, _meta the update carried


@dataclass(frozen=True)
class AgentNotification(Event):
    """A notification other than ``session/update`` (extensions: ``_vendor/...``)."""

    method: str = ""


@dataclass(frozen=True)
class TurnEnded(Event):
    """The turn is over; always the last event of a prompt."""

    stop_reason: str = ""
    permission_denied: int = 0


@dataclass(frozen=True)
class SessionEnded(Event):
    """The agent run behind the session ended (crash, close, TTL...), reported once."""

    reason: str = ""  # completed | error | terminated
    terminated_by: str = ""  # agent | daemon
    message: str = ""
    exit_code: int | None = None


# (interaction id, answer, content) -> the resolution; bound by the session that saw it.
Answerer = Callable[[str, str, "dict[str, Any] | None"], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Question(Event):
    """A question the agent asked, offered to this caller as a controller.

    The first valid answer from any controller wins (this one, another process,
    ``tether answer``); :meth:`answer` raises :class:`tether.errors.AlreadyAnswered`
    when someone else was first. ``id`` is the interaction's id.
    """

    id: str = ""
    deadline: float | None = None  # wall-clock time after which the policy decides
    _answerer: Answerer | None = field(default=None, repr=False, compare=False)

    async def answer(self, answer: str, content: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer it: ``allow``, ``always``, ``deny``, ``deny-always`` or an option id
        (permissions); ``accept`` (with ``content``), ``decline``, ``cancel`` (elicitations).

        Returns:
            The resolution (``{"action": "interaction_resolved", "interaction": {...}}``).

        Raises:
            AlreadyAnswered: someone answered first; this answer was not sent.
            UsageError: the answer names nothing the agent offered.
        """
        if self._answerer is None:
            raise RuntimeError("this question was not offered to a controller")
        return await self._answerer(self.id, answer, content)


@dataclass(frozen=True)
class PermissionRequested(Question):
    """The agent asks permission for a tool call (``session/request_permission``)."""

    title: str = ""
    tool_kind: str | None = None
    raw_input: Any = None
    options: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ElicitationRequested(Question):
    """The agent asks for input (``elicitation/create``): a form or a URL to visit."""

    message: str = ""
    mode: str = ""  # form | url
    requested_schema: dict[str, Any] | None = field(default=None, repr=False)
    url: str | None = None


@dataclass(frozen=True)
class QuestionResolved(Event):
    """A question was resolved: its ``answer``, ``how`` (controller, policy, deadline,
    cancelled, remembered) and who answered (``by``: pid and uid, when a controller)."""

    id: str = ""
    answer: str = ""
    how: str = ""
    by: dict[str, int] | None = None


def question_from_frame(frame: dict[str, Any], answerer: Answerer | None) -> Event | None:
    """An owner's ``interaction`` / ``interaction_resolved`` frame as a typed event."""
    q = frame.get("interaction")
    if not isinstance(q, dict):
        return None
    qid = str(q.get("id", ""))
    if frame.get("type") == "interaction_resolved":
        by = q.get("by")
        return QuestionResolved(
            raw=frame,
            id=qid,
            answer=str(q.get("answer", "")),
            how=str(q.get("how", "")),
            by=by if isinstance(by, dict) else None,
        )
    deadline = q.get("deadline")
    common: dict[str, Any] = {
        "raw": frame,
        "id": qid,
        "deadline": float(deadline) if isinstance(deadline, int | float) else None,
        "_answerer": answerer,
    }
    if q.get("question") == "elicitation":
        schema = q.get("requestedSchema")
        return ElicitationRequested(
            **common,
            message=str(q.get("message", "")),
            mode=str(q.get("mode", "")),
            requested_schema=schema if isinstance(schema, dict) else None,
            url=q.get("url") if isinstance(q.get("url"), str) else None,
        )
    raw_tool, raw_options = q.get("toolCall"), q.get("options")
    tool: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
    options: list[Any] = raw_options if isinstance(raw_options, list) else []
    return PermissionRequested(
        **common,
        title=str(tool.get("title", "")),
        tool_kind=tool.get("kind"),
        raw_input=tool.get("rawInput"),
        options=tuple(o for o in options if isinstance(o, dict)),
    )


def question_from_entry(entry: dict[str, Any], answerer: Answerer | None) -> Event | None:
    """A journal's ``interaction_opened`` / ``interaction_resolved`` entry as the typed
    event :func:`question_from_frame` makes of the owner's frame (``seq`` set)."""
    kind = entry.get("kind")
    if kind not in ("interaction_opened", "interaction_resolved"):
        return None
    body = {k: v for k, v in entry.items() if k not in ("seq", "at", "kind", "requestId")}
    frame_type = "interaction" if kind == "interaction_opened" else "interaction_resolved"
    event = question_from_frame({"type": frame_type, "interaction": body}, answerer)
    seq = entry.get("seq")
    if event is None or not isinstance(seq, int):
        return event
    import dataclasses

    return dataclasses.replace(event, raw=entry, seq=seq)


def _text(content: Any) -> str:
    if isinstance(content, dict) and content.get("type") == "text":
        return str(content.get("text", ""))
    return ""


def event_from_frame(frame: dict[str, Any]) -> Event | None:
    """Turn a raw agent->client ACP notification into a typed event (None if not one)."""
    method = frame.get("method")
    if not isinstance(method, str) or "id" in frame:
        return None
    if method != "session/update":
        return AgentNotification(raw=frame, method=method)
    params = frame.get("params")
    update = params.get("update") if isinstance(params, dict) else None
    if not isinstance(update, dict):
        return SessionUpdate(raw=frame, kind="")
    kind = str(update.get("sessionUpdate", ""))
    common: dict[str, Any] = {"raw": frame, "kind": kind, "update": update}
    if kind == "agent_message_chunk":
        return AgentMessageChunk(**common, text=_text(update.get("content")))
    if kind == "agent_thought_chunk":
        return AgentThoughtChunk(**common, text=_text(update.get("content")))
    if kind == "tool_call":
        return ToolCall(
            **common,
            tool_call_id=str(update.get("toolCallId", "")),
            title=str(update.get("title", "")),
            tool_kind=update.get("kind"),
            status=update.get("status"),
        )
    if kind == "tool_call_update":
        return ToolCallUpdate(
            **common, tool_call_id=str(update.get("toolCallId", "")), status=update.get("status")
        )
    if kind == "plan":
        entries = update.get("entries")
        return Plan(**common, entries=tuple(e for e in entries or () if isinstance(e, dict)))
    if kind == "usage_update":
        cost = update.get("cost")
        return UsageUpdate(
            **common,
            used=_int(update.get("used")),
            size=_int(update.get("size")),
            cost=dict(cost) if isinstance(cost, dict) else None,
        )
    if kind == "session_info_update":
        title, at = update.get("title"), update.get("updatedAt")
        return SessionInfoUpdate(
            **common,
            title=title if isinstance(title, str) else None,
            updated_at=at if isinstance(at, str) else None,
            fields=tuple(k for k in ("title", "updatedAt", "_meta") if k in update),
        )
    return SessionUpdate(**common)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class JournalRecord(Event):
    """A journal entry with no more specific event: Tether's control records (prompt
    queued, turn started, owner started, ...) and ACP frames other than the agent's
    notifications. ``data`` holds the entry's fields besides ``seq``/``at``/``kind``."""

    kind: str = ""
    at: float = 0.0
    request_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict, repr=False)


def event_from_entry(entry: dict[str, Any]) -> Event:
    """Turn one journal entry (its public JSON form, decoded) into a typed event."""
    import dataclasses

    seq = entry.get("seq")
    seq = seq if isinstance(seq, int) else None
    kind = str(entry.get("kind", ""))
    if kind == "acp" and entry.get("direction") == "in":
        frame = entry.get("frame")
        event = event_from_frame(frame) if isinstance(frame, dict) else None
        if event is not None:
            return dataclasses.replace(event, seq=seq)
    elif kind == "turn_ended" and not entry.get("error"):
        return TurnEnded(raw=entry, seq=seq, stop_reason=str(entry.get("stopReason", "")))
    elif kind == "session_ended":
        code = entry.get("exitCode")
        return SessionEnded(
            raw=entry,
            seq=seq,
            reason=str(entry.get("reason", "")),
            terminated_by=str(entry.get("terminatedBy", "")),
            message=str(entry.get("message", "")),
            exit_code=code if isinstance(code, int) else None,
        )
    data = {k: v for k, v in entry.items() if k not in ("seq", "at", "kind", "requestId")}
    at = entry.get("at")
    rid = entry.get("requestId")
    return JournalRecord(
        raw=entry,
        seq=seq,
        kind=kind,
        at=float(at) if isinstance(at, int | float) else 0.0,
        request_id=rid if isinstance(rid, str) else None,
        data=data,
    )
