"""Reading a session's journal: turn history, the transcript, following it. Needs no owner."""

from __future__ import annotations

from tether import access
from tether.errors import NoSession

TYPE_CHECKING = False  # typing (and re) cost ms on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any


def _readable(key: str) -> Any:
    """The open registry, once ``key`` exists and the requester may read its history.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not read this session's history.
    """
    from tether.registry import Registry

    registry = Registry()
    try:
        if registry.session(key) is None:
            raise NoSession("no such session", session_key=key)
        access.authorize(key, "history", registry=registry)
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
    from tether.journal import render

    with _readable(key) as registry:
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
    from tether.journal import render

    with _readable(key) as registry:
        start = max(registry.journal_turns_start(key, tail), first_seq(registry, key))
        return render.transcript(registry.journal_lines(key, start))


def watch(key: str, emit: Any, **kwargs: Any) -> int:
    """Follow the session's journal (:func:`tether.journal.follow.follow_session`, whose
    keyword arguments it takes) once the visibility check allows it.

    The live part is checked again by the owner, against the kernel's view of us.

    Raises:
        NoSession: no such session.
        VisibilityDenied: the requester may not watch this session.
    """
    from tether.journal.follow import follow_session

    access.authorize(key, "watch")
    return int(follow_session(key, emit, **kwargs))
