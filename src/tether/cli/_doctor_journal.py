"""``tether doctor``'s journal check: every stored chunk decoded, damaged ones set aside.

A reader skips a damaged chunk as it meets it (and says so); the doctor finds them all
ahead of time: every chunk of every session, every line decoded
(:func:`tether.state.journal.damage.damaged_chunks`). ``--repair`` sets each aside: its stored
bytes go to ``TETHER_HOME/damaged/`` (``<session key>-<first seq>-<last seq>.chunk``,
the codec in the name's suffix: ``.zlib`` or ``.txt``), then its row is removed, so
readers no longer meet it. Nothing is deleted that was not saved first; the entries'
seqs are never handed out again (the high-water mark stays).
"""

from __future__ import annotations

import os
from typing import Any

from tether.errors import StateError

_MAX_NAMED = 3  # damaged chunks named in the report line; the count says the rest


def check_journal(report: Any, path: str, *, repair: bool) -> None:
    """Add the ``journal`` check to ``report`` (and, with ``repair``, set damage aside)."""
    from tether.state.inspect import damaged_journal_chunks

    try:
        found = damaged_journal_chunks(path)
    except StateError as exc:
        report.add("journal", "fail", str(exc))
        return
    if found is None:  # an empty or older database: nothing to decode
        report.add("journal", "ok", "no journal stored yet")
        return
    if not found:
        report.add("journal", "ok", "every stored chunk decodes")
        return
    if repair:
        from tether.state.registry import Registry

        failed: tuple[type[Exception], ...] = (OSError, *Registry.ERRORS)
        try:
            report.repaired.extend(_set_aside(path, found))
        except failed as exc:
            report.add("journal", "fail", f"damaged chunks could not be set aside: {exc}")
            return
        report.add("journal", "ok", f"{len(found)} damaged chunk(s) set aside")
        return
    named = "; ".join(
        f"session {key[:12]} entries {first}-{last} ({why})"
        for key, (first, last, why) in found[:_MAX_NAMED]
    )
    more = f" and {len(found) - _MAX_NAMED} more" if len(found) > _MAX_NAMED else ""
    report.add(
        "journal",
        "fail",
        f"{len(found)} damaged chunk(s): {named}{more}; readers skip them"
        " (`tether doctor --repair` sets them aside)",
    )


def _set_aside(path: str, found: list[tuple[str, tuple[int, int, str]]]) -> list[str]:
    """Save each damaged chunk's bytes under ``damaged/``, then remove its row."""
    from tether.state.journal.chunks import ZLIB
    from tether.state.registry import Registry

    aside = os.path.join(os.path.dirname(path), "damaged")
    os.makedirs(aside, mode=0o700, exist_ok=True)
    done = []
    with Registry(path) as registry:
        for key, (first, last, _why) in found:
            stored = registry.journal_stored_chunk(key, first)
            if stored is None:
                continue  # retention removed it meanwhile
            codec, data = stored
            target = os.path.join(
                aside, f"{key}-{first}-{last}.chunk.{'zlib' if codec == ZLIB else 'txt'}"
            )
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            registry.journal_take_chunk(key, first)
            done.append(
                f"set journal entries {first}-{last} of session {key[:12]} aside to {target}"
            )
    return done
