"""What the agent says about its session between the lines: usage and session info.

Sans-IO. Two ``session/update`` kinds of stable ACP v1 are kept for ``status``:

- ``usage_update`` -- ``{used, size, cost?: {amount, currency}}``: tokens in context, the
  context window, the cumulative cost (claude-agent-acp sends it once or twice per turn
  with a cost, codex-acp once per turn without);
- ``session_info_update`` -- ``{title?, updatedAt?, _meta?}``: a partial update of the
  session's metadata (claude titles the session after its first turn; codex also sends
  its thread status in ``_meta.codex.threadStatus``). A field absent from an update is
  left as it was; ``null`` clears it.

The owner's agent slot feeds every line the agent sends (in a turn or not: titles often
come after the answer), so a cheap byte test comes before any decoding.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SessionInfoWatch"]

_KINDS = (b"usage_update", b"session_info_update")


class SessionInfoWatch:
    """The last usage and the merged session info the agent reported."""

    def __init__(self) -> None:
        self.usage: dict[str, Any] | None = None
        self.info: dict[str, Any] = {}
        self.updates = 0  # how many of the two kinds were seen

    def note_line(self, line: bytes) -> None:
        """Look at one line from the agent (any frame; most are ignored undecoded)."""
        if _KINDS[0] not in line and _KINDS[1] not in line:  # a generator costs a µs here
            return
        try:
            frame = json.loads(line)
        except ValueError:
            return
        self.note_frame(frame)

    def note_frame(self, frame: Any) -> None:
        """Look at one decoded frame."""
        if not isinstance(frame, dict) or frame.get("method") != "session/update":
            return
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        if kind == "usage_update":
            self.updates += 1
            cost = update.get("cost")
            self.usage = {
                "used": update.get("used"),
                "size": update.get("size"),
                "cost": dict(cost) if isinstance(cost, dict) else None,
            }
        elif kind == "session_info_update":
            self.updates += 1
            for key in ("title", "updatedAt", "_meta"):
                if key in update:
                    self.info[key] = update[key]

    def snapshot(self) -> dict[str, Any]:
        """``{usage: {used, size, cost} | None, title, updatedAt, meta}`` for ``status``."""
        return {
            "usage": self.usage,
            "title": self.info.get("title"),
            "updatedAt": self.info.get("updatedAt"),
            "meta": self.info.get("_meta"),
        }
