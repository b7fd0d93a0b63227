"""A live owner's ``entry`` frames taken as they came, for a journal follower.

A follower of a 10,000-update turn is on a hot path: an entry frame's seq is read off
its head and its entry passed on as bytes, with no JSON decoded or encoded, and a run of
them is cut apart with one ``split``. Pure functions over received bytes (no I/O):
both flavours of the follower (:mod:`tether.state.journal.follow` in its thread, the
asyncio one on the loop) read a watch's answer through them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tether.state.journal.entry import ENTRY_HEAD, FRAME_END

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.state.journal.follow import Follower

SESSION_END = b'"kind":"session_ended"'


def entry_taker(follower: Follower, prefix: bytes) -> Callable[[bytes], bool]:
    """Take an ``entry`` frame's line as it came: its seq read off its head, no JSON
    decoded or encoded (a follower of a 10,000-update turn is on a hot path)."""
    start = len(prefix)
    past_head = start + len(ENTRY_HEAD)

    def take(line: bytes) -> bool:
        # {"type":"entry","requestId":"R","entry":{"seq":N,...}}
        if not line.startswith(prefix) or line[start:past_head] != ENTRY_HEAD:
            return False
        comma = line.find(b",", past_head)
        try:
            seq = int(line[past_head:comma])
        except ValueError:
            return False
        follower.deliver(seq, line[start:-1].decode())
        return True

    return take


def block_taker(follower: Follower, prefix: bytes) -> Callable[[bytes], int]:
    """Take the leading run of ``entry`` frames of a block of received lines.

    The common case -- every line an entry, seqs consecutive from the cursor -- is
    cut into its entries by one ``split`` (at a frame's closing brace, newline and
    the next frame's head) and handed to ``emit_block`` whole: no work per entry in
    Python. Anything else goes line by line, as :func:`entry_taker` does.
    """
    head = prefix + ENTRY_HEAD
    joint = FRAME_END + prefix
    start = len(prefix)
    take_line = entry_taker(follower, prefix)
    run: list[Callable[[bytes], re.Match[bytes] | None]] = []

    def take(block: bytes) -> int:
        if not block.startswith(head):
            return 0
        entries = block.split(joint)
        # All entries: the splits took every newline but the block's last one.
        if block.count(b"\n") != len(entries) or not block.endswith(b"\n"):
            # Other frames follow the entries (or an entry lacks its seq): the
            # leading run of entries only.
            if not run:
                run.append(re.compile(b"(?:" + re.escape(head) + rb"[^\n]*\n)+").match)
            found = run[0](block)
            block = found.group() if found is not None else b""
            entries = block.split(joint)
        count = len(entries)
        last_at = block.rfind(b"\n", 0, -1) + 1
        first = _seq_at(block, start)
        last = _seq_at(block, last_at + start)
        if first is None or last is None or first < follower.cursor or last - first + 1 != count:
            return _line_by_line(block, take_line)
        entries[0] = entries[0][start:]
        entries[-1] = entries[-1][: -len(FRAME_END)]
        follower.cursor = last + 1
        follower.ended = SESSION_END in block[last_at : last_at + start + 120]
        assert follower.emit_block is not None
        follower.emit_block(first, last, entries)
        return len(block)

    return take


def _seq_at(block: bytes, at: int) -> int | None:
    """The seq of the entry whose JSON starts at ``at`` (``{"seq":N,``), or None."""
    comma = block.find(b",", at + 7, at + 40)
    try:
        return int(block[at + 7 : comma]) if comma > 0 else None
    except ValueError:
        return None


def _line_by_line(block: bytes, take_line: Callable[[bytes], bool]) -> int:
    """Feed ``block``'s lines to ``take_line`` until one is refused; the bytes used."""
    used = 0
    while used < len(block):
        end = block.index(b"\n", used)
        if not take_line(block[used:end]):
            break
        used = end + 1
    return used
