"""``Session.watch``: the session's journal as asyncio events.

The follow bridge is :func:`tether.operations.watch_async` (the follower in a thread of
its own, entries handed over through a bounded hand-over, so a consumer that falls
behind holds the thread back, never an unbounded buffer); this module only presents its
entries as typed events. Leaving the loop stops the follower.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether import operations
from tether.events import Event

__all__ = ["watch_journal"]

BOUND = 256  # entries handed over and not yet read before the follower waits


async def watch_journal(
    home: str | None,
    key: str,
    *,
    from_seq: int | None,
    tail: int | None,
    follow: bool,
) -> AsyncIterator[Event]:
    """Session ``key``'s journal as typed events (see :meth:`tether.client.Session.watch`),
    followed in the client's ``home``."""
    from tether.events import event_from_entry
    from tether.state.journal.entry import parse_line

    entries = operations.watch_async(
        key, bound=BOUND, home=home, from_seq=from_seq, tail=tail, follow=follow, door="library"
    )
    try:
        async for _seq, line in entries:
            yield event_from_entry(parse_line(line))
    finally:
        await entries.aclose()
