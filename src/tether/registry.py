"""The durable registry: one SQLite database (WAL) per state directory.

It is the one source of truth for the instance id, sessions, owner generations,
leases, session events and counters. Every process that touches a session -- callers,
owners, ``tether exec``, ``tether reap`` -- opens it; WAL mode lets readers proceed
while an owner writes, and ``busy_timeout`` turns the rare writer collision into a
short wait instead of an error.

Schema changes are migrations keyed by ``PRAGMA user_version``: each entry of
``_MIGRATIONS`` moves the schema one version forward, inside one transaction.

The instance id is generated once per state directory and kept: leases carry it, and
reconciliation only ever acts on leases of its own instance, so two Tether installs
(two state directories) on one machine never touch each other's processes.

``sqlite3`` costs ~10 ms to import, so the thin CLI path (a prompt against a live owner)
never imports this module; owners, ``exec`` and the session commands do.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from tether import paths
from tether._registry_runs import ANY_OWNER, Lease, RunStore
from tether._state_errors import translate_error

__all__ = ["ANY_OWNER", "Lease", "Registry", "Session"]

_MIGRATIONS: tuple[str, ...] = (
    # v1: the first schema.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE sessions (
        key               TEXT PRIMARY KEY,     -- sha256 of (agent command, cwd, name)
        name              TEXT NOT NULL,
        agent_command     TEXT NOT NULL,        -- the argv as JSON
        agent_label       TEXT NOT NULL,        -- what the user typed (registry name or command)
        cwd               TEXT NOT NULL,
        acp_session_id    TEXT,
        state             TEXT NOT NULL,        -- open | closed
        created_at        REAL NOT NULL,
        updated_at        REAL NOT NULL,
        closed_at         REAL,
        last_prompt_at    REAL,
        owner_pid         INTEGER,
        owner_starttime   INTEGER,
        owner_generation  INTEGER NOT NULL DEFAULT 0,
        owner_socket      TEXT,
        owner_started_at  REAL,
        owner_heartbeat_at REAL,
        owner_status      TEXT,                 -- starting | idle | running | stopping | stopped
        queue_depth       INTEGER NOT NULL DEFAULT 0,
        current_request   TEXT,
        desired_mode      TEXT,
        desired_config    TEXT NOT NULL DEFAULT '{}',
        options           TEXT NOT NULL DEFAULT '{}',
        last_end          TEXT                  -- the last session-ended payload, JSON
    );
    CREATE INDEX sessions_cwd ON sessions (cwd);
    CREATE TABLE leases (
        lease_id          TEXT PRIMARY KEY,
        instance_id       TEXT NOT NULL,
        session_key       TEXT,
        owner_pid         INTEGER,
        owner_starttime   INTEGER,
        keeper_pid        INTEGER,
        keeper_starttime  INTEGER,
        root_pid          INTEGER,
        pgid              INTEGER,
        boot_id           TEXT NOT NULL,
        pid_namespace     TEXT,
        starttime         INTEGER,
        cgroup_path       TEXT,
        command_hash      TEXT NOT NULL,
        cwd               TEXT NOT NULL,
        state             TEXT NOT NULL,        -- open | closing | closed | lost
        created_at        REAL NOT NULL,
        updated_at        REAL NOT NULL,
        last_output_at    REAL,
        reason            TEXT,
        exit_code         INTEGER,
        exit_signal       INTEGER,
        kill_mode         TEXT,
        note              TEXT
    );
    CREATE INDEX leases_open ON leases (instance_id, state);
    CREATE INDEX leases_session ON leases (session_key);
    CREATE TABLE events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_key TEXT,
        kind        TEXT NOT NULL,
        payload     TEXT NOT NULL,
        at          REAL NOT NULL
    );
    CREATE INDEX events_session ON events (session_key, id);
    CREATE TABLE counters (
        name   TEXT NOT NULL,
        labels TEXT NOT NULL DEFAULT '',
        value  INTEGER NOT NULL,
        PRIMARY KEY (name, labels)
    );
    """,
    # v2 (journal): the session journal. Entries are keyed (session, seq); the
    # high-water mark lives apart from the entries so that retention may delete every
    # entry and the next owner still continues the sequence; `reserved` is how far a
    # live owner may have handed out seqs before storing them (see journal.store). The
    # partial index covers exactly the rows turn summaries are built from. Sessions'
    # existing turn and session-ended events become their first journal entries.
    """
    CREATE TABLE journal (
        session_key TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        at          REAL NOT NULL,
        kind        TEXT NOT NULL,
        request_id  TEXT,
        body        TEXT NOT NULL,          -- JSON object: the entry's other fields
        PRIMARY KEY (session_key, seq)
    ) WITHOUT ROWID;
    CREATE INDEX journal_turns ON journal (session_key, kind, seq)
        WHERE kind IN ('prompt_queued', 'turn_started', 'turn_ended');
    CREATE TABLE journal_heads (
        session_key TEXT PRIMARY KEY,
        last_seq    INTEGER NOT NULL,       -- the last seq stored
        reserved    INTEGER NOT NULL DEFAULT 0  -- seqs up to here may have been handed out
    );
    INSERT INTO journal (session_key, seq, at, kind, request_id, body)
        SELECT session_key,
               row_number() OVER (PARTITION BY session_key ORDER BY id),
               at,
               CASE kind WHEN 'turn' THEN 'turn_ended' ELSE kind END,
               json_extract(payload, '$.requestId'),
               payload
        FROM events
        WHERE session_key IS NOT NULL AND kind IN ('turn', 'session_ended');
    INSERT INTO journal_heads (session_key, last_seq)
        SELECT session_key, max(seq) FROM journal GROUP BY session_key
    """,
    # v3 (ownership, issue 10, seed 000): who owns, spawned and parents each session.
    # Old rows get their agent id from agent_label and no owner: they are operator-owned.
    # The instance id is not a column: it is this database's (meta.instance_id).
    """
    ALTER TABLE sessions ADD COLUMN agent_id TEXT;
    ALTER TABLE sessions ADD COLUMN owner_session_key TEXT;
    ALTER TABLE sessions ADD COLUMN spawned_by TEXT;
    ALTER TABLE sessions ADD COLUMN parent_session_key TEXT;
    ALTER TABLE sessions ADD COLUMN sandboxed INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET agent_id = agent_label WHERE agent_id IS NULL;
    CREATE INDEX sessions_owner ON sessions (owner_session_key);
    CREATE INDEX sessions_parent ON sessions (parent_session_key);
    """,
    # v4 (supervision, issue 16): run records as seed 003 names them, lease expiry and
    # owner for the steal, the failure reason, and latency histograms for metrics.
    """
    ALTER TABLE leases ADD COLUMN run_state TEXT;          -- starting | running | exiting | exited
    ALTER TABLE leases ADD COLUMN backend_id TEXT;         -- agent registry name or command label
    ALTER TABLE leases ADD COLUMN owner_instance_id TEXT;  -- the supervisor holding the lease
    ALTER TABLE leases ADD COLUMN lease_expires_at REAL;   -- renewed by the holder's heartbeat
    ALTER TABLE leases ADD COLUMN heartbeat_at REAL;
    ALTER TABLE leases ADD COLUMN stolen_from TEXT;        -- the holder a steal took it from
    ALTER TABLE leases ADD COLUMN failure TEXT;            -- e.g. ownership-escape
    CREATE TABLE histograms (
        name    TEXT NOT NULL,
        labels  TEXT NOT NULL DEFAULT '',
        count   INTEGER NOT NULL,
        sum     REAL NOT NULL,
        buckets TEXT NOT NULL,                             -- JSON: per-bucket counts
        PRIMARY KEY (name, labels)
    );
    """,
    # v5 (issue 9 item 5, unresponsive owner takeover): the proven identity of each
    # session's current owner, boot id included, so that a caller can verify it before
    # fencing a silent owner. A table of its own: the sessions row stays as it is.
    """
    CREATE TABLE owner_identity (
        session_key  TEXT PRIMARY KEY,
        pid          INTEGER NOT NULL,
        starttime    INTEGER,
        boot_id      TEXT NOT NULL,
        generation   INTEGER NOT NULL,
        recorded_at  REAL NOT NULL
    );
    """,
    # v6 (journal speed, issue 15): entries are stored in chunks -- one row per writer
    # batch holding the entries' public lines (zlib-compressed when large) -- because a
    # row per entry cost the owner more than relaying it. The control records (every
    # kind but `acp`) are also kept one per row in `journal_marks`, so that turn
    # summaries and "how did it end" are indexed reads. v2's rows become one-entry chunks
    # (codec 0, plain), their lines built here the way `journal.entry.entry_line` does.
    """
    CREATE TABLE journal_chunks (
        session_key TEXT NOT NULL,
        first_seq   INTEGER NOT NULL,
        last_seq    INTEGER NOT NULL,
        entries     INTEGER NOT NULL,
        last_at     REAL NOT NULL,          -- the newest entry's time (age retention)
        codec       INTEGER NOT NULL,       -- 0: plain, 1: zlib
        data        BLOB NOT NULL,          -- the entries' public lines, each ending in LF
        PRIMARY KEY (session_key, first_seq)
    ) WITHOUT ROWID;
    CREATE TABLE journal_marks (
        session_key TEXT NOT NULL,
        seq         INTEGER NOT NULL,
        at          REAL NOT NULL,
        kind        TEXT NOT NULL,
        request_id  TEXT,
        body        TEXT NOT NULL,          -- JSON object: the entry's other fields
        PRIMARY KEY (session_key, seq)
    ) WITHOUT ROWID;
    INSERT INTO journal_chunks (session_key, first_seq, last_seq, entries, last_at, codec, data)
        SELECT session_key, seq, seq, 1, at, 0, CAST(
            '{"seq":' || seq || ',"at":' || at || ',"kind":' || json_quote(kind)
            || CASE WHEN request_id IS NULL THEN ''
                    ELSE ',"requestId":' || json_quote(request_id) END
            || CASE WHEN length(body) <= 2 THEN '}' ELSE ',' || substr(body, 2) END
            || char(10) AS BLOB)
        FROM journal;
    INSERT INTO journal_marks (session_key, seq, at, kind, request_id, body)
        SELECT session_key, seq, at, kind, request_id, body FROM journal WHERE kind <> 'acp';
    DROP TABLE journal
    """,
)

SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True)
class Session:
    """One session row."""

    key: str
    name: str
    agent_command: list[str]
    agent_label: str
    cwd: str
    acp_session_id: str | None
    state: str
    created_at: float
    updated_at: float
    closed_at: float | None
    last_prompt_at: float | None
    owner_pid: int | None
    owner_starttime: int | None
    owner_generation: int
    owner_socket: str | None
    owner_started_at: float | None
    owner_heartbeat_at: float | None
    owner_status: str | None
    queue_depth: int
    current_request: str | None
    desired_mode: str | None
    desired_config: dict[str, Any]
    options: dict[str, Any]
    last_end: dict[str, Any] | None
    # Ownership (issue 10): None = operator-owned.
    agent_id: str = ""
    owner_session_key: str | None = None
    spawned_by: str | None = None
    parent_session_key: str | None = None
    sandboxed: bool = False


def _session_from_row(row: sqlite3.Row) -> Session:
    data = dict(row)
    data["agent_command"] = json.loads(data["agent_command"])
    data["desired_config"] = json.loads(data["desired_config"] or "{}")
    data["options"] = json.loads(data["options"] or "{}")
    data["last_end"] = json.loads(data["last_end"]) if data["last_end"] else None
    data["agent_id"] = data.get("agent_id") or data["agent_label"]
    data["sandboxed"] = bool(data.get("sandboxed"))
    return Session(**data)


_OWNERSHIP_KEYS = ("owner_session_key", "spawned_by", "parent_session_key")


def _ownership_fields(agent_label: str, owner: Mapping[str, Any] | None) -> dict[str, Any]:
    owner = owner or {}
    fields: dict[str, Any] = {k: owner.get(k) or None for k in _OWNERSHIP_KEYS}
    fields["agent_id"] = owner.get("agent_id") or agent_label
    fields["sandboxed"] = 1 if owner.get("sandboxed") else 0
    return fields


class Registry(RunStore):
    """A connection to the state database. Not shared between threads.

    Raises (from the constructor and every method):
        StateCorrupt, StateFull, StatePermission, StateError: see
        :func:`tether._state_errors.translate_error`, the one place where sqlite3's
        and the OS's errors about the database become Tether's.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path or paths.state_db()
        with self._translated():
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so read-modify-write
            # sequences (generation increments) cannot interleave between processes.
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            try:
                self._db.row_factory = sqlite3.Row
                os.chmod(self.path, 0o600)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("PRAGMA busy_timeout=10000")
                self._migrate()
                self.instance_id = self._ensure_instance_id()
            except BaseException:
                self._db.close()
                raise

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            raise translate_error(exc, self.path) from exc

    def _rows(self, query: str, args: Any = ()) -> list[sqlite3.Row]:
        with self._translated():
            return list(self._db.execute(query, args).fetchall())

    def _row(self, query: str, args: Any = ()) -> sqlite3.Row | None:
        with self._translated():
            row: sqlite3.Row | None = self._db.execute(query, args).fetchone()
            return row

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; any failure rolls back (nothing half-written)."""
        with self._translated():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):  # a full disk may fail the rollback too
                        self._db.execute("ROLLBACK")
                raise

    def _migrate(self) -> None:
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for index in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[index].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {index + 1}")

    def _ensure_instance_id(self) -> str:
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()
            if row:
                return str(row[0])
            instance_id = os.urandom(16).hex()  # 128 random bits; `uuid` costs ms to import
            db.execute("INSERT INTO meta (key, value) VALUES ('instance_id', ?)", (instance_id,))
            return instance_id

    # --- leases, counters and histograms: tether._registry_runs.RunStore -------------

    # --- sessions -----------------------------------------------------------------

    def session(self, key: str) -> Session | None:
        row = self._row("SELECT * FROM sessions WHERE key = ?", (key,))
        return _session_from_row(row) if row else None

    def sessions(self, *, include_closed: bool = True) -> list[Session]:
        query = "SELECT * FROM sessions"
        if not include_closed:
            query += " WHERE state != 'closed'"
        query += " ORDER BY created_at"
        return [_session_from_row(r) for r in self._rows(query)]

    def upsert_session(
        self,
        *,
        key: str,
        name: str,
        agent_command: list[str],
        agent_label: str,
        cwd: str,
        options: Mapping[str, Any] | None = None,
        owner: Mapping[str, Any] | None = None,
    ) -> tuple[Session, bool]:
        """Create the session (or reopen a closed one); return (session, created).

        ``owner`` -- ``agent_id``, ``owner_session_key``, ``spawned_by``,
        ``parent_session_key``, ``sandboxed`` -- is recorded when the row is created or
        reopened (a reopened session is a new one, so its creator owns it); an open
        session keeps the ownership it was created with.
        """
        now = time.time()
        ownership = _ownership_fields(agent_label, owner)
        with self.transaction() as db:
            row = db.execute("SELECT state FROM sessions WHERE key = ?", (key,)).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO sessions (key, name, agent_command, agent_label, cwd, state,"
                    " created_at, updated_at, options) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, ?)",
                    (
                        key,
                        name,
                        json.dumps(agent_command),
                        agent_label,
                        cwd,
                        now,
                        now,
                        json.dumps(dict(options or {})),
                    ),
                )
                created = True
            elif row[0] == "closed":
                # A closed session is final (openclaw/acpx#283): reopening starts afresh,
                # never resuming the closed agent session.
                db.execute(
                    "UPDATE sessions SET state = 'open', created_at = ?, updated_at = ?,"
                    " closed_at = NULL, acp_session_id = NULL, last_end = NULL, options = ?,"
                    " desired_mode = NULL, desired_config = '{}' WHERE key = ?",
                    (now, now, json.dumps(dict(options or {})), key),
                )
                created = True
            else:
                created = False
            if created:
                sets = ", ".join(f"{k} = ?" for k in ownership)
                db.execute(
                    f"UPDATE sessions SET {sets} WHERE key = ?",  # noqa: S608 -- column names are ours
                    (*ownership.values(), key),
                )
        session = self.session(key)
        assert session is not None
        return session, created

    def children(self, key: str, *, include_closed: bool = False) -> list[Session]:
        """The sessions whose row names ``key`` as owner, spawner or parent."""
        query = (
            "SELECT * FROM sessions WHERE (owner_session_key = ? OR spawned_by = ?"
            " OR parent_session_key = ?) AND key != ?"
        )
        if not include_closed:
            query += " AND state != 'closed'"
        query += " ORDER BY created_at"
        rows = self._db.execute(query, (key, key, key, key)).fetchall()
        return [_session_from_row(r) for r in rows]

    def update_session(self, key: str, **fields: Any) -> None:
        for name in ("desired_config", "options", "last_end"):
            if name in fields and not isinstance(fields[name], str) and fields[name] is not None:
                fields[name] = json.dumps(fields[name])
        fields["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE sessions SET {sets} WHERE key = ?", (*fields.values(), key))  # noqa: S608 -- column names are ours

    def begin_owner(
        self,
        key: str,
        *,
        pid: int,
        starttime: int | None,
        socket: str,
        boot_id: str | None = None,
    ) -> int:
        """Record a new owner for the session and return its generation (previous + 1).

        Called by an owner right after it acquired the session's flock, so increments are
        serialised by the lock as well as by the transaction.
        """
        now = time.time()
        with self.transaction() as db:
            row = db.execute(
                "SELECT owner_generation FROM sessions WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                raise KeyError(key)
            generation = int(row[0]) + 1
            db.execute(
                "UPDATE sessions SET owner_pid = ?, owner_starttime = ?, owner_generation = ?,"
                " owner_socket = ?, owner_started_at = ?, owner_heartbeat_at = ?,"
                " owner_status = 'starting', queue_depth = 0, current_request = NULL,"
                " updated_at = ? WHERE key = ?",
                (pid, starttime, generation, socket, now, now, now, key),
            )
            if boot_id is not None:
                db.execute(
                    "INSERT OR REPLACE INTO owner_identity"
                    " (session_key, pid, starttime, boot_id, generation, recorded_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, pid, starttime, boot_id, generation, now),
                )
        return generation

    def owner_identity(self, key: str) -> dict[str, Any] | None:
        """The identity recorded by the session's latest owner: pid, starttime, boot_id,
        generation (None if no owner recorded one)."""
        row = self._db.execute(
            "SELECT pid, starttime, boot_id, generation FROM owner_identity WHERE session_key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return {"pid": row[0], "starttime": row[1], "boot_id": row[2], "generation": row[3]}

    # --- events -------------------------------------------------------------------

    def add_event(self, session_key: str | None, kind: str, payload: Mapping[str, Any]) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO events (session_key, kind, payload, at) VALUES (?, ?, ?, ?)",
                (session_key, kind, json.dumps(dict(payload)), time.time()),
            )

    def events(
        self, session_key: str | None = None, *, kind: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        query = "SELECT id, session_key, kind, payload, at FROM events WHERE 1=1"
        args: list[Any] = []
        if session_key is not None:
            query += " AND session_key = ?"
            args.append(session_key)
        if kind is not None:
            query += " AND kind = ?"
            args.append(kind)
        query += " ORDER BY id DESC LIMIT ?"
        args.append(limit)
        rows = self._rows(query, args)
        return [
            {
                "id": r["id"],
                "sessionKey": r["session_key"],
                "kind": r["kind"],
                "payload": json.loads(r["payload"]),
                "at": r["at"],
            }
            for r in reversed(rows)
        ]

    # --- pruning ------------------------------------------------------------------

    def prune(self, *, older_than: float | None = None, closed: bool = False) -> dict[str, Any]:
        """Remove old journal entries and events, and (``closed``) closed sessions whole.

        ``older_than`` is a wall-clock time: entries and events before it go (sequence
        numbers are never reused: the high-water marks stay). ``closed`` removes every
        closed session with its journal, events and finished leases. Returns what went.
        """
        from tether.journal import store as journal_store

        entries = events = 0
        removed: list[str] = []
        with self.transaction() as db:
            if older_than is not None:
                for (key,) in db.execute("SELECT session_key FROM journal_heads").fetchall():
                    entries += journal_store.drop_older(db, str(key), older_than)
                events += db.execute("DELETE FROM events WHERE at < ?", (older_than,)).rowcount
            if closed:
                removed = [
                    str(r[0]) for r in db.execute("SELECT key FROM sessions WHERE state = 'closed'")
                ]
                for key in removed:
                    entries += journal_store.stats(db, key).entries
                    events += db.execute(
                        "DELETE FROM events WHERE session_key = ?", (key,)
                    ).rowcount
                    db.execute(
                        "DELETE FROM leases WHERE session_key = ? AND state IN ('closed', 'lost')",
                        (key,),
                    )
                    db.execute("DELETE FROM sessions WHERE key = ?", (key,))
                journal_store.forget_session(db, removed)
        return {"entriesRemoved": entries, "eventsRemoved": events, "sessionsRemoved": removed}
