"""Records for people: status snapshots, session rows, history events, and known causes.

``--format json`` prints Tether's records as they are; text mode prints them through
this module, so nobody reads a Python ``dict`` repr. The rules are generic on purpose
-- the records grow keys as Tether grows -- and driven by the key's name:

- ``camelCase`` keys become words (``ownerPid`` → ``owner pid``);
- ``…At`` / ``…Time`` holding epoch seconds become local times with an age;
- ``…S`` / ``…Ms`` become durations (``uptimeS`` → ``uptime: 4 min 3 s``);
- an agent run's end (``lastEnd``, a ``session_ended`` payload) becomes one sentence;
- other tables become ``key=value`` pairs, lists comma-separated, ``None`` a dash.

:func:`add_hint` appends a known cause to an error's message ("IS_SANDBOX=yes as root").

Standard library only, nothing imported at module level beyond ``time``: ``status``
is on the thin path.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_EPOCH_2001 = 1e9  # a float above this under an ...At/...Time key is a wall-clock time


def words(key: str) -> str:
    """``ownerPid`` → ``owner pid``; a trailing unit suffix (``uptimeS``) is dropped."""
    for unit in ("Ms", "S"):
        if key.endswith(unit) and len(key) > len(unit) and key[-len(unit) - 1].islower():
            key = key[: -len(unit)]
            break
    return "".join(f" {c.lower()}" if c.isupper() else c for c in key).strip()


def duration(seconds: float) -> str:
    """``0.15 s``, ``4 min 3 s``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def when(stamp: float, now: float) -> str:
    """A local time with its age: ``2026-11-23 12:24:07 (3 s ago)``."""
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))
    age = now - stamp
    return f"{text} ({duration(age)} ago)" if age >= 0 else text


def agent_end(end: Mapping[str, Any]) -> str:
    """One sentence for an agent run's end (``lastEnd``, a ``session_ended`` payload)."""
    reason = str(end.get("reason") or "ended")
    by = end.get("terminatedBy")
    parts = [f"{reason} by {'the ' if by == 'daemon' else ''}{by}" if by else reason]
    if end.get("message"):
        parts[0] += f": {end['message']}"
    if end.get("exitCode") is not None:
        parts.append(f"exit code {end['exitCode']}")
    if end.get("signal") is not None:
        parts.append(f"signal {end['signal']}")
    survivors = end.get("survivors")
    if isinstance(survivors, list) and survivors:
        parts.append(f"{len(survivors)} survivor(s): {', '.join(map(str, survivors[:5]))}")
    tail = str(end.get("stderrTail") or "").strip()
    if tail:
        parts.append(f"stderr: {tail.splitlines()[-1][:200]}")
    return "; ".join(parts)


def value(key: str, item: Any, now: float) -> str:
    """One field's value for people, chosen by its key's name (see the module docstring)."""
    if item is None or item == "":
        return "-"
    if isinstance(item, bool):
        return "yes" if item else "no"
    if key in ("lastEnd", "ended", "end") and isinstance(item, dict):
        return agent_end(item)
    if key == "interactions" and isinstance(item, list):  # open questions (`status`)
        return ", ".join(_question(q) for q in item if isinstance(q, dict)) or "none"
    if key == "attached" and isinstance(item, list):  # watchers, controllers (`status`)
        return "; ".join(party(p) for p in item if isinstance(p, dict)) or "none"
    is_number = isinstance(item, (int, float))
    if is_number and (key.endswith(("At", "Time"))) and item > _EPOCH_2001:
        return when(float(item), now)
    if is_number and key.endswith("Ms") and key[-3:-2].islower():
        return f"{item:g} ms"
    if is_number and key.endswith("S") and key[-2:-1].islower():
        return duration(float(item))
    if isinstance(item, dict):
        pairs = [f"{k}={value(str(k), v, now)}" for k, v in item.items() if v not in (None, "")]
        return ", ".join(pairs) or "-"
    if isinstance(item, (list, tuple)):
        return (
            " ".join(map(str, item))
            if key.endswith("Command")
            else (", ".join(value(key, v, now) for v in item) or "none")
        )
    return str(item)


def party(p: Mapping[str, Any]) -> str:
    """A watcher or controller: ``watcher+controller pid 4242 uid 1000 (cli)``."""
    roles = "+".join(str(r) for r in p.get("roles") or ()) or "attached"
    return f"{roles} pid {p.get('pid', '?')} uid {p.get('uid', '?')} ({p.get('door') or '?'})"


def _question(q: Mapping[str, Any]) -> str:
    tool = q.get("toolCall") or {}
    what = tool.get("title") if tool else q.get("message")
    return f"{q.get('id')} ({q.get('question')}: {what or '?'})"


def fields(record: Mapping[str, Any], *, now: float | None = None) -> str:
    """A record as aligned ``label: value`` lines (the ``action`` key is left out)."""
    now = time.time() if now is None else now
    from tether.names import escape  # a value from the state never forges a line

    rows = [(words(k), escape(value(k, v, now))) for k, v in record.items() if k != "action"]
    width = max((len(label) for label, _ in rows), default=0) + 1
    return "\n".join(f"{(label + ':').ljust(width)} {text}" for label, text in rows)


def _event_summary(kind: str, payload: Mapping[str, Any], now: float) -> str:
    if kind == "session_ended" or ("reason" in payload and "terminatedBy" in payload):
        return agent_end(payload)
    if kind == "turn":
        prompt = str(payload.get("prompt") or "")
        preview = prompt if len(prompt) <= 60 else prompt[:57] + "..."
        stop = payload.get("stopReason") or payload.get("error") or "?"
        return f"{stop}: {preview!r}" + (
            f" ({payload['requestId']})" if payload.get("requestId") else ""
        )
    return value("payload", dict(payload), now)


# --- known causes -----------------------------------------------------------------------

# (text in the error, environment variable, its value, only as root, the hint)
_KNOWN_CAUSES: tuple[tuple[str, str, str, bool, str], ...] = (
    (
        # tests/realagents/NOTES.md: claude-agent-acp's bundled Claude Code exits 1 at
        # start-up when it runs as root with IS_SANDBOX=yes, and says nothing on stderr.
        "Claude Code process exited with code 1",
        "IS_SANDBOX",
        "yes",
        True,
        "Claude Code exits 1 when it runs as root with IS_SANDBOX=yes in its environment;"
        " unset IS_SANDBOX (or set IS_SANDBOX=1) for the call that starts the agent"
        " (`exec`, or `sessions new` for a session's owner)",
    ),
)


def add_hint(exc: Any, environ: Mapping[str, str], euid: int) -> None:
    """Append the hint of a known cause to ``exc.message`` (so text and JSON carry it)."""
    import json

    seen = f"{exc.message} {json.dumps(getattr(exc, 'acp', None))} {exc.fields}"
    for needle, variable, setting, root_only, hint in _KNOWN_CAUSES:
        if needle not in seen or environ.get(variable) != setting:
            continue
        if root_only and euid != 0:
            continue
        exc.message = f"{exc.message} (hint: {hint})"
        return
