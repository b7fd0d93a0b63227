"""The SSE event ids of ``/v1/acp/{serverId}``: journal positions a stream resumes from.

No I/O. Everything an ACP server over HTTP sends on its event stream is one of two
things:

* a *journal relay* -- a ``session/update`` or ``_tether/session/ended`` that stands
  for a journal entry of one of the server's sessions (its own turns, other parties'
  turns, a ``session/load`` replay);
* a *live-only* event -- a request to the client (``session/request_permission``, a
  relayed ``fs/*`` or ``terminal/*``) or an unsolicited error: no journal entry is it.

An id is the server's **journal cursor** after the event: for every session the
server relays, in the order it first relayed each, the journal ``seq`` of the last
entry delivered, joined by ``.`` -- with one session, the id *is* the journal seq
(``41``); with two, ``41.7``. One entry may stand for several updates (a prompt's
content blocks): until its last one is out its element reads ``seq/parts-delivered``
(``41/1``). An event that does not move the cursor (a live-only event, or a replay of
entries delivered before) gets ``~n`` appended, the server's event number, so every
id names one event (``41~97``).

``Last-Event-ID`` resumes exactly from the server's ring of recent events when it
still holds that id; otherwise from the journal: for each session, the entries after
the id's element (a session the id does not name: from where the server began relaying
it) up to what the server has relayed since, then live. What the journal cannot
replay is said in :mod:`tether.acp_door.channel`: the live-only events a stream missed
once the ring no longer holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Cursors", "Position", "parse_id"]

Position = tuple[int, int]  # (seq, parts of that entry delivered; 0 = all of it)


@dataclass
class Cursors:
    """The server's journal cursor: what it has relayed of each session."""

    order: list[str] = field(default_factory=list)  # sessions, first relayed first
    at: dict[str, Position] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)  # the first seq relayed of each

    def advance(self, key: str, seq: int, part: int, parts: int) -> bool:
        """Note the relay of part ``part`` (1-based) of ``parts`` of entry ``seq`` of
        session ``key``; whether the cursor moved forward."""
        if key not in self.at:
            self.order.append(key)
            self.first[key] = seq
            self.at[key] = (seq - 1, 0)
        new = (seq, 0 if part >= parts else part)
        if _after(new, self.at[key]):
            self.at[key] = new
            return True
        return False

    def vector(self) -> str:
        return ".".join(_element(self.at[key]) for key in self.order)

    def event_id(self, moved: bool, number: int) -> str:
        """The id of an event: the cursor, plus ``~number`` when it did not move."""
        return self.vector() if moved else f"{self.vector()}~{number}"

    def plan(self, positions: list[Position]) -> list[tuple[str, Position, Position]]:
        """For an id's ``positions``: (session, from after, up to) to replay from the
        journal, for every session with entries the id had not reached."""
        out = []
        for index, key in enumerate(self.order):
            floor = (self.first[key] - 1, 0)  # before the first entry relayed of it
            start = positions[index] if index < len(positions) else floor
            if not _after(start, floor):
                start = floor
            if _after(self.at[key], start):
                out.append((key, start, self.at[key]))
        return out

    def before_all(self, positions: list[Position]) -> bool:
        """Whether ``positions`` precede everything relayed (``0``, a stream's start)."""
        return all(
            not _after(pos, (self.first[key] - 1, 0))
            for key, pos in zip(self.order, positions, strict=False)
        )


def parse_id(text: str) -> list[Position]:
    """The positions an event id names (its ``~n`` ignored).

    Raises:
        ValueError: not an id of this form.
    """
    vector = text.strip().split("~", 1)[0]
    if not vector:
        return []
    positions = []
    for element in vector.split("."):
        seq, _, part = element.partition("/")
        value = (int(seq), int(part) if part else 0)
        if value[0] < 0 or value[1] < 0:
            raise ValueError("negative position")
        positions.append(value)
    return positions


def _element(pos: Position) -> str:
    return f"{pos[0]}/{pos[1]}" if pos[1] else str(pos[0])


def _after(a: Position, b: Position) -> bool:
    """Whether position ``a`` is past ``b`` (a whole entry is past any part of it)."""
    if a[0] != b[0]:
        return a[0] > b[0]
    return (a[1] == 0 and b[1] != 0) or (a[1] != 0 and b[1] != 0 and a[1] > b[1])
