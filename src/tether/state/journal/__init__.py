"""The session journal: an ordered, durable, append-only log of everything a session did.

Theory of operation
-------------------
Every session has one journal. Each entry has a ``seq`` that increases by one and is
never reused, across owner restarts (where it jumps -- an owner lost, entries dropped,
retention -- the first entry after the hole is a ``journal_gap`` record saying where it
continues and why: :mod:`tether.state.journal.gaps`); a wall-clock timestamp ``at``; a
``kind``; the IPC ``requestId`` where there is one; and a body. The kinds:

* ``acp`` -- one ACP frame, either direction (``direction`` ``in``: agent → Tether,
  ``out``: Tether → agent), embedded byte for byte as ``frame``: exactly the
  ``--format json`` contract;
* Tether's control records: ``prompt_queued``, ``turn_started``, ``turn_ended``,
  ``cancel_result``, ``mode_set``, ``config_set``, ``owner_started``, ``owner_stopped``,
  ``agent_run_started``, ``agent_run_ended``, ``owner_takeover``, ``journal_gap``;
* ``session_ended``, once per session end.

**Who writes.** Whoever holds the session's lock (the flock the owner keeps for life)
is the journal's only writer, so it can hand out ``seq`` numbers in memory, relay an
entry to every attached party at once, and store it right after: the owner appends to
an in-memory batch and a writer thread commits each batch in one transaction
(:mod:`tether.state.journal.writer`). A caller never waits on a commit. A process that ends a
session with no owner running (an offline close) takes the lock first and appends in a
transaction of its own (:func:`tether.state.journal.store.append_now`).

**How it is stored.** A writer batch is stored as chunks: one row holds a run of
consecutive entries' public lines (zlib-compressed when large), so a streamed turn of
10,000 updates is a few dozen rows, and replay sends lines on unchanged. Control records
are also kept one per row (``journal_marks``) for the indexed reads of turn summaries.

**The high-water mark.** ``journal_heads.last_seq`` is the last ``seq`` stored, updated in
the same transaction as the entries: retention may delete every entry, and the next
owner still continues the sequence. An owner killed mid-turn loses at most the batch
not yet committed; SQLite's WAL keeps the database whole.

**Readers need no owner.** History, transcripts, exports and followers read the
database directly (:mod:`tether.state.journal.store`, :mod:`tether.state.journal.follow`); a
follower attaches to the live owner only to receive new entries the moment they
happen, and falls back to the database when the owner retires.

**Retention** is bounded per session by entries, bytes and age
(:class:`tether.state.journal.entry.Retention`), applied by the writer as it goes and by
``tether sessions prune``.
"""

from __future__ import annotations
