"""Reading a session's journal: turn history, the transcript (following it: :mod:`.watching`).
Needs no owner."""

from __future__ import annotations

from tether.errors import NoSession
from tether.policy import access

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

    from tether.state.registry import Registry


def open_journal(
    key: str, action: str = "history", *, missing: BaseException | None = None
) -> Registry:
    """The open registry (a context manager: the caller closes it), once ``key`` exists
    and the requester may ``action`` it (``history``, ``watch``); a killed owner's
    unfinished records are corrected first (they read owner-lost, not running). Its
    journal API (``journal_lines``, ``journal_turn_rows``...) reads the session.

    Raises:
        NoSession: no such session (``missing``, when given, instead).
        VisibilityDenied: the requester may not ``action`` this session.
    """
    from tether.state.registry import Registry

    registry = Registry()
    try:
        if registry.session(key) is None:
            raise missing or NoSession("no such session", session_key=key)
        access.authorize(key, action, registry=registry)
        from tether.owner_lost import correct_if_dead

        correct_if_dead(registry, key)  # a killed owner's turn reads owner-lost, not running
    except BaseException:
        registry.close()
        raise
    return registry


def first_seq(registry: Any, key: str) -> int:
    """The session's first seq as it is now: a session that ``sessions new`` replaced
    left its turns under the same key, before this one's creation."""
    session = registry.session(key)
    if session is None:
        return 1
    return int(registry.journal_incarnation_start(key, session.created_at))


def history(key: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """One summary per turn (request id, times, duration, stop reason, preview), oldest
    first; the last ``limit`` when given. Reads the journal; needs no owner.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not read this session's history.
    """
    from tether.state.journal import render

    with open_journal(key) as registry:
        first = first_seq(registry, key)
        turns = render.turns([r for r in registry.journal_turn_rows(key) if r[0] >= first])
    if limit is not None:
        turns = turns[-limit:] if limit > 0 else []
    return [t.to_json() for t in turns]


def transcript(key: str, *, tail: int | None = None) -> list[dict[str, Any]]:
    """The conversation as turns (prompt, assistant text, tool calls, stop reason); the
    last ``tail`` turns when given. Reads the journal; needs no owner.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not read this session's history.
    """
    from tether.state.journal import render

    with open_journal(key) as registry:
        start = max(registry.journal_turns_start(key, tail), first_seq(registry, key))
        return render.transcript(registry.journal_lines(key, start))


def last_seq(key: str, action: str, *, open_only: bool = False) -> int:
    """The journal's last stored seq (0 if none), once the requester may ``action``
    the session (``history`` for a load, ``watch`` for a resume). Needs no owner.

    Raises:
        NoSession: no such session (or, ``open_only``, it was closed).
        VisibilityDenied: the requester may not ``action`` this session.
    """
    from tether.state.registry import Registry

    with Registry() as registry:
        access.authorize(key, action, registry=registry)
        session = registry.session(key)
        if session is None or (open_only and session.state == "closed"):
            raise NoSession(
                "no open session with this id" if open_only else "no such session",
                session_key=key,
            )
        return registry.journal_last_seq(key)


def read_lines(key: str, from_seq: int, *, upto: int | None = None) -> list[tuple[int, str]]:
    """One bounded chunk of stored entries from ``from_seq`` (to ``upto``): ``(seq,
    public JSON line)``. No visibility check: for a caller that checked with
    :func:`last_seq` (or :func:`open_journal`) first."""
    from tether.state.registry import Registry

    with Registry() as registry:
        rows = registry.journal_read(key, from_seq, upto=upto)
    return [(seq, line.decode()) for seq, line in rows]
