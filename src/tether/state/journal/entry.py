"""Journal entries and the journal's policies, with no I/O.

An entry is stored as columns (``seq``, ``at``, ``kind``, ``request_id``) plus ``body``,
the JSON text of its other fields. Its public form -- one line of ``sessions export``,
``sessions watch --format json`` and the IPC ``entry`` frame -- is one JSON object::

    {"seq":12,"at":1763900000.123,"kind":"acp","requestId":"r-…","direction":"in","frame":{…}}

It is built by splicing the stored body into the header, never by decoding and
re-encoding it: an ACP frame is embedded byte for byte, and a 10,000-update turn costs
string concatenation, not JSON work. A body is always a JSON object (``{…}``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from tether import _fastjson

# Control kinds; ``acp`` is the raw-frame kind. Readers keep unknown kinds (a newer
# Tether may write more), so this set documents, it does not police.
ACP: Final = "acp"
CONTROL_KINDS: Final = frozenset(
    {
        "prompt_queued",
        "turn_started",
        "turn_ended",
        "cancel_result",
        "mode_set",
        "config_set",
        "owner_started",
        "owner_stopped",
        "owner_takeover",
        "agent_run_started",
        "agent_run_ended",
        "session_ended",
        "interaction_opened",
        "interaction_resolved",
        "journal_gap",
        "conversation_restarted",
    }
)
# The kinds a turn summary is built from; the database indexes exactly these.
TURN_KINDS: Final = ("prompt_queued", "turn_started", "turn_ended")


def body_of(payload: dict[str, Any]) -> str:
    """The stored body of a control entry: its payload as compact JSON."""
    return _fastjson.dumps(payload)


def acp_body(direction: str, line: bytes) -> str:
    """The stored body of an ACP frame: the frame's own bytes, embedded unchanged.

    ``line`` is a JSON object the JSON-RPC core has already decoded, so the result is
    valid JSON. (Invalid UTF-8 would not have decoded; ``replace`` is belt and braces.)
    """
    return '{"direction":"' + direction + '","frame":' + line.decode("utf-8", "replace") + "}"


# The JSON of the kinds and request ids seen lately: a streamed turn journals thousands
# of entries of one kind and one request id, and this is on the owner's hot path.
_json_of: dict[str, str] = {}


def _quoted(text: str) -> str:
    quoted = _json_of.get(text)
    if quoted is None:
        if len(_json_of) > 1024:
            _json_of.clear()
        quoted = _json_of[text] = _fastjson.dumps(text)
    return quoted


def entry_line(seq: int, at: float, kind: str, request_id: str | None, body: str) -> str:
    """The public JSON text of one entry (no newline)."""
    rid = "" if request_id is None else ',"requestId":' + _quoted(request_id)
    if len(body) <= 2:  # "{}"
        return f'{{"seq":{seq},"at":{at!r},"kind":{_quoted(kind)}{rid}}}'
    return f'{{"seq":{seq},"at":{at!r},"kind":{_quoted(kind)}{rid},' + body[1:]


# The IPC ``entry`` frame that carries one public line to a watcher, spliced rather than
# encoded (the owner's watchers build it; a follower reads the seq off it undecoded):
#     {"type":"entry","requestId":"R","entry":{"seq":N,...}}\n
ENTRY_HEAD: Final = b'{"seq":'  # how every public line starts
FRAME_END: Final = b"}\n"  # what follows the line in its frame


def entry_frame_prefix(request_id: str) -> bytes:
    """The bytes of a watch's ``entry`` frames before the entry's line; the line, then
    :data:`FRAME_END`, complete a frame."""
    return b'{"type":"entry","requestId":' + _fastjson.dumps(request_id).encode() + b',"entry":'


def parse_line(line: str) -> dict[str, Any]:
    """An entry's public JSON text back to a dict (for renderers and the library)."""
    value = _fastjson.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a journal entry is a JSON object")
    return value


# --- cursors -------------------------------------------------------------------------


def start_seq(last_seq: int, *, from_seq: int | None = None, tail: int | None = None) -> int:
    """The first ``seq`` a reader wants, given the journal's last ``seq``.

    ``from_seq`` wins; ``tail`` N starts N entries before the end; neither means "live
    only": the next entry to be written.
    """
    if from_seq is not None:
        return max(1, from_seq)
    if tail is not None:
        return max(1, last_seq - max(0, tail) + 1)
    return last_seq + 1


# --- retention -------------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """How much journal one session keeps. Zero means "no bound" for that dimension."""

    max_entries: int = 200_000
    max_bytes: int = 256 * 1024 * 1024
    max_age_s: float = 30 * 24 * 3600.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Retention:
        """Read ``journalMaxEntries``, ``journalMaxBytes``, ``journalMaxAge`` (seconds)."""
        default = cls()
        return cls(
            max_entries=int(cfg.get("journalMaxEntries", default.max_entries)),
            max_bytes=int(cfg.get("journalMaxBytes", default.max_bytes)),
            max_age_s=float(cfg.get("journalMaxAge", default.max_age_s)),
        )


@dataclass(frozen=True)
class JournalStats:
    """What retention needs to know about one session's stored journal."""

    first_seq: int | None  # None: no entries stored
    last_seq: int
    entries: int
    bytes: int
    oldest_at: float | None


def entries_over(stats: JournalStats, retention: Retention) -> int:
    """How many of the oldest entries to delete under the entry bound (0: none).

    Pruning goes a tenth below the bound so that a busy session does not prune on every
    batch (hysteresis). Entries are counted, not seqs: a journal has holes.
    """
    if retention.max_entries <= 0 or stats.entries <= retention.max_entries:
        return 0
    keep = max(1, math.floor(retention.max_entries * 0.9))
    return stats.entries - keep


def bytes_over(stats: JournalStats, retention: Retention) -> int:
    """How many bytes of oldest entries to delete under the byte bound (0: none)."""
    if retention.max_bytes <= 0 or stats.bytes <= retention.max_bytes:
        return 0
    return stats.bytes - math.floor(retention.max_bytes * 0.9)


def age_cutoff(now: float, retention: Retention) -> float | None:
    """Entries older than this wall-clock time go (None: no age bound)."""
    if retention.max_age_s <= 0:
        return None
    return now - retention.max_age_s


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` → seconds.

    Raises:
        ValueError: not a non-negative duration.
    """
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    raw = text.strip().lower()
    scale = 1.0
    if raw and raw[-1] in units:
        scale = units[raw[-1]]
        raw = raw[:-1]
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (examples: 90s, 15m, 12h, 7d)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a duration: {text!r} (must be a non-negative number)")
    return value * scale
