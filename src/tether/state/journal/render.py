"""Reading a journal for people: turn summaries and transcripts, with no I/O.

Both are built from the same entries any watcher sees, so ``sessions history`` and
``sessions read`` say exactly what the journal says -- nothing is recorded twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether import _fastjson
from tether.state.journal.entry import parse_line
from tether.state.journal.store import Row

PREVIEW_CHARS = 80


@dataclass
class Turn:
    """One prompt turn as the journal tells it."""

    request_id: str
    queued_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    stop_reason: str | None = None
    error: str | None = None
    prompt: str = ""
    by: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float | None:
        begin = self.started_at or self.queued_at
        if begin is None or self.ended_at is None:
            return None
        return round((self.ended_at - begin) * 1000, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "requestId": self.request_id,
            "queuedAt": self.queued_at,
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "durationMs": self.duration_ms,
            "stopReason": self.stop_reason,
            "error": self.error,
            "preview": preview(self.prompt),
            "by": self.by or None,
        }


def duration(ms: float | None) -> str:
    """``812 ms``, ``4.2 s``, ``3 min 5 s`` (``-`` when unknown)."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{int(ms // 60_000)} min {int(ms % 60_000 // 1000)} s"


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _body(row: Row) -> dict[str, Any]:
    try:
        value = _fastjson.loads(row[4])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def turns(rows: list[Row]) -> list[Turn]:
    """Turn summaries from ``prompt_queued`` / ``turn_started`` / ``turn_ended`` rows."""
    by_id: dict[str, Turn] = {}
    order: list[Turn] = []
    for row in rows:
        _seq, at, kind, rid, _raw = row
        body = _body(row)
        rid = rid or str(body.get("requestId") or "")
        if not rid:
            continue
        turn = by_id.get(rid)
        if turn is None:
            turn = by_id[rid] = Turn(rid)
            order.append(turn)
        if kind == "prompt_queued":
            turn.queued_at = at
            turn.prompt = str(body.get("prompt") or "")
            by = body.get("by")
            turn.by = by if isinstance(by, dict) else {}
        elif kind == "turn_started":
            turn.started_at = at
        elif kind == "turn_ended":
            turn.ended_at = at
            turn.stop_reason = body.get("stopReason")
            turn.error = body.get("error")
            if not turn.prompt:
                turn.prompt = str(body.get("prompt") or "")  # entries migrated from v1
    return order


def describe_by(by: dict[str, Any] | None) -> str:
    """Who prompted, for a person: ``cli pid 4242 uid 1000``."""
    if not by:
        return "unknown"
    parts = [str(by.get("client") or "caller")]
    if by.get("pid") is not None:
        parts.append(f"pid {by['pid']}")
    if by.get("uid") is not None:
        parts.append(f"uid {by['uid']}")
    if by.get("requester"):
        parts.append(f"session {str(by['requester'])[:12]}")
    return " ".join(parts)


def prompt_text(frame: dict[str, Any]) -> str | None:
    """The text of a ``session/prompt`` request frame (None for any other frame)."""
    if frame.get("method") != "session/prompt":
        return None
    params = frame.get("params")
    blocks = params.get("prompt") if isinstance(params, dict) else None
    if not isinstance(blocks, list):
        return ""
    return "".join(
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )


def control_text(entry: dict[str, Any]) -> str | None:
    """One line for a control entry in a text transcript (None: nothing to show)."""
    kind = entry.get("kind")
    rid = entry.get("requestId") or ""
    if kind == "prompt_queued":
        by = entry.get("by")
        return f"[prompt {rid}] by {describe_by(by if isinstance(by, dict) else None)}"
    if kind == "turn_ended":
        if entry.get("error"):
            return f"[failed] {entry.get('error')}"
        cancel = entry.get("cancel")
        if isinstance(cancel, dict) and cancel.get("agentRetired"):  # issue 21 item 8
            return f"[done] {entry.get('stopReason')} (the agent ignored the cancel: restarted)"
        return f"[done] {entry.get('stopReason')}"
    if kind == "session_ended":
        why = entry.get("reason")
        by = entry.get("terminatedBy")
        message = entry.get("message") or ""
        return f"[session ended] {why} (by {by}) {message}".rstrip()
    if kind == "agent_run_ended":
        return (
            f"[agent run ended] {entry.get('reason') or ''} {entry.get('message') or ''}".rstrip()
        )
    if kind == "agent_run_started":
        how = "resumed" if entry.get("resumed") else "new ACP session"
        return f"[agent] started (pid {entry.get('agentPid')}, {how})"
    if kind == "owner_started":
        return f"[owner] started (generation {entry.get('generation')}, pid {entry.get('pid')})"
    if kind == "owner_stopped":
        return f"[owner] stopped ({entry.get('reason')})"
    if kind == "journal_gap":  # a hole in the seqs, and why (tether.state.journal.gaps)
        from tether.state.journal.gaps import gap_text

        return gap_text(entry)
    if kind == "conversation_restarted":  # a fleet rehome: a new agent, never silent
        replayed = " with the transcript replayed" if entry.get("replayed") else ""
        return (
            f"[conversation restarted] from session {str(entry.get('fromSession'))[:12]}"
            f" on host {entry.get('fromHost')} (its journal up to seq {entry.get('durableSeq')});"
            f" the agent starts afresh{replayed}"
        )
    if kind == "owner_takeover":
        return f"[owner] unresponsive owner {entry.get('pid')} replaced"
    if kind == "mode_set":
        return f"[mode] {entry.get('modeId')}"
    if kind == "config_set":
        return f"[config] {entry.get('configId')} = {entry.get('value')}"
    if kind == "interaction_opened":
        tool = entry.get("toolCall") or {}
        what = tool.get("title") if tool else entry.get("message")
        return f"[question {entry.get('id')}] {entry.get('question')}: {what or ''}".rstrip()
    if kind == "interaction_resolved":
        by = entry.get("by") or {}
        who = f" by pid {by.get('pid')}" if by.get("pid") else ""
        return f"[answered {entry.get('id')}] {entry.get('answer')} ({entry.get('how')}{who})"
    if kind == "cancel_result" and entry.get("cancelled"):
        return f"[cancel] {entry.get('requestId') or ''}".rstrip()
    return None


def transcript(lines: Iterable[tuple[int, str]]) -> list[dict[str, Any]]:
    """The conversation as structured turns: prompt, assistant text, tool calls, stop."""
    turns: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for _seq, line in lines:
        entry = parse_line(line)
        kind = entry.get("kind")
        frame = entry.get("frame") if kind == "acp" else None
        if isinstance(frame, dict) and entry.get("direction") == "out":
            text = prompt_text(frame)
            if text is not None:
                current = {
                    "requestId": entry.get("requestId"),
                    "prompt": text,
                    "text": "",
                    "toolCalls": [],
                    "stopReason": None,
                    "at": entry.get("at"),
                }
                turns.append(current)
        elif isinstance(frame, dict) and current is not None:
            params = frame.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            if isinstance(update, dict):
                kind_u = update.get("sessionUpdate")
                content = update.get("content")
                if kind_u == "agent_message_chunk" and isinstance(content, dict):
                    current["text"] += str(content.get("text", ""))
                elif kind_u == "tool_call":
                    current["toolCalls"].append(
                        {
                            "toolCallId": update.get("toolCallId"),
                            "title": update.get("title"),
                            "kind": update.get("kind"),
                        }
                    )
        elif kind == "turn_ended" and current is not None:
            current["stopReason"] = entry.get("stopReason")
            if entry.get("error"):  # a failed turn says why (its stopReason stays None)
                current["error"] = entry.get("error")
    return turns
