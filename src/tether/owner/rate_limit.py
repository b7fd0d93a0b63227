"""The session's rate-limit state, as the agent reports it: shown in ``status``.

Sans-IO (time passed in). Two sources:

- a ``usage_update`` carrying claude-agent-acp's ``_meta["_claude/rateLimit"]``
  (``{status: allowed | allowed_warning | rejected, resetsAt: <unix s>, rateLimitType:
  five_hour | seven_day..., utilization}``), sent during a turn;
- a turn that failed with :class:`~tether.errors.RateLimited` (any adapter).

A refused turn makes the session ``limited`` until a later turn succeeds; the error the
caller gets carries ``resets_at`` and ``limit_type`` from the usage data when the agent
gave them. While limited with a known reset time, the owner holds the next turns until
then (``holding`` names the held request; see ``RequestRunner``).
"""

from __future__ import annotations

from typing import Any

from tether.errors import RateLimited

__all__ = ["RateLimitWatch"]

RATE_LIMIT_META = "_claude/rateLimit"


class RateLimitWatch:
    def __init__(self) -> None:
        self.reported: dict[str, Any] | None = None  # the agent's last rate-limit data
        self.limited: dict[str, Any] | None = None  # set by a refused turn
        self.holding: str | None = None  # the request held until the reset, if any

    def note_frame(self, frame: dict[str, Any]) -> None:
        """Look at one ``session/update`` frame of a turn."""
        params = frame.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or update.get("sessionUpdate") != "usage_update":
            return
        meta = update.get("_meta")
        info = meta.get(RATE_LIMIT_META) if isinstance(meta, dict) else None
        if isinstance(info, dict):
            self.reported = {
                "status": info.get("status"),
                "resetsAt": _int_or_none(info.get("resetsAt")),
                "limitType": info.get("rateLimitType"),
                "utilization": info.get("utilization"),
            }

    def note_refused(self, exc: RateLimited, now: float) -> None:
        """A turn was refused: complete ``exc`` from the usage data, enter ``limited``."""
        rep = self.reported
        if rep is not None and rep.get("status") == "rejected":
            if rep.get("resetsAt") is not None:
                exc.fields.setdefault("resets_at", rep["resetsAt"])
            if rep.get("limitType"):
                exc.fields.setdefault("limit_type", rep["limitType"])
        self.limited = {
            "since": round(now, 3),
            "resetsAt": exc.fields.get("resets_at"),
            "resets": exc.fields.get("resets"),
            "limitType": exc.fields.get("limit_type"),
            "message": exc.message,
        }

    def note_turn_ok(self) -> None:
        self.limited = None

    def hold_for(self, now: float) -> float:
        """Seconds until a known reset of the current limit (0: nothing to wait for)."""
        resets_at = (self.limited or {}).get("resetsAt")
        if not isinstance(resets_at, int | float):
            return 0.0
        return max(0.0, float(resets_at) - now)

    def snapshot(self) -> dict[str, Any]:
        """``{limited, resetsAt, resets, limitType, since, message, holding, reported}``."""
        limited = self.limited or {}
        return {
            "limited": self.limited is not None,
            "resetsAt": limited.get("resetsAt"),
            "resets": limited.get("resets"),
            "limitType": limited.get("limitType"),
            "since": limited.get("since"),
            "message": limited.get("message"),
            "holding": self.holding,
            "reported": self.reported,
        }


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
