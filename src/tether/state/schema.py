"""The state database's schema, as its migrations: the history of every table.

Each entry of :data:`MIGRATIONS` moves the schema one version forward (``PRAGMA
user_version``), inside one transaction (:meth:`tether.state.registry.Registry._migrate`).
Entries are never edited once released: a database written by any earlier Tether opens
by running the entries after its version. Statements are split on ``;``, so no
statement may contain one. Append a migration at the end, with a comment saying why.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
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
    # v7 (issue 20 item 1): the processes Tether has observed as members of a run --
    # identity (boot, pid, start time) seen while provably inside it: in its cgroup, below
    # its keeper, or adopted by its owner when its keeper died. A member stays its run's
    # agent for every requester check wherever it moves, and close, terminate and reap
    # report (and end, by that identity) any member still alive after its run ended.
    """
    CREATE TABLE run_members (
        boot_id     TEXT NOT NULL,
        pid         INTEGER NOT NULL,
        starttime   INTEGER NOT NULL,
        lease_id    TEXT NOT NULL,
        session_key TEXT,
        how         TEXT NOT NULL,          -- root | requester | adopted | scan
        seen_at     REAL NOT NULL,
        PRIMARY KEY (boot_id, pid, starttime)
    ) WITHOUT ROWID;
    CREATE INDEX run_members_lease ON run_members (lease_id);
    CREATE INDEX run_members_session ON run_members (session_key)
    """,
)
