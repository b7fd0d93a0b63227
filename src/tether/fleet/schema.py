"""The fleet index's schema, as its migrations (PostgreSQL).

Each entry of :data:`MIGRATIONS` moves the schema one version forward, inside one
transaction under an advisory lock (:func:`tether.fleet.index.migrate`), so two hosts
or routers starting at once against an empty database migrate it exactly once. The
version is the row count of ``fleet_migrations``. Entries are never edited once
released: append a migration at the end, with a comment saying why.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # v1: hosts, sessions, shipped journal chunks.
    #
    # hosts: one row per host id. `epoch` is bumped on every (re-)registration and by a
    # fence; a write carrying an older epoch changes nothing (compare-and-set), so a
    # host that comes back after being superseded cannot overwrite its successor.
    #
    # sessions: `session_id` is fleet-global and random (a host-local key is
    # sha256(agent, cwd, name), which collides when two hosts serve the same cwd).
    # The partial unique index over open sessions' identity is what makes `ensure`
    # idempotent fleet-wide: two routers racing for one (scope, agent, cwd, name) insert
    # one row, whatever they hold in memory. The ownership columns are seed 000's.
    #
    # journal_chunks: what hosts ship, keyed (session, first seq) so a retried ship is a
    # no-op; `durable_seq` on the session row is the highest seq shipped without a gap.
    """
    CREATE TABLE hosts (
        host_id             TEXT PRIMARY KEY,
        url                 TEXT NOT NULL,
        epoch               BIGINT NOT NULL,
        state               TEXT NOT NULL CHECK (state IN ('up', 'draining', 'down')),
        labels              JSONB NOT NULL DEFAULT '{}'::jsonb,
        sessions            INTEGER NOT NULL DEFAULT 0,
        max_sessions        INTEGER,
        memory_total        BIGINT,
        memory_available    BIGINT,
        registered_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
        heartbeat_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
        down_reason         TEXT
    );
    CREATE TABLE sessions (
        session_id          TEXT PRIMARY KEY,
        scope               TEXT NOT NULL,
        agent               TEXT NOT NULL,
        cwd                 TEXT NOT NULL,
        name                TEXT NOT NULL,
        state               TEXT NOT NULL CHECK (state IN ('open', 'closed', 'lost')),
        host_id             TEXT NOT NULL REFERENCES hosts (host_id),
        host_epoch          BIGINT NOT NULL,
        local_key           TEXT,
        owner_session_id    TEXT,
        spawned_by          TEXT,
        parent_session_id   TEXT,
        sandboxed           BOOLEAN NOT NULL DEFAULT false,
        durable_seq         BIGINT NOT NULL DEFAULT 0,
        created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
        updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
        closed_at           TIMESTAMPTZ,
        end_reason          TEXT
    );
    CREATE UNIQUE INDEX sessions_open_identity
        ON sessions (scope, agent, cwd, name) WHERE state = 'open';
    CREATE INDEX sessions_host ON sessions (host_id) WHERE state = 'open';
    CREATE INDEX sessions_parent ON sessions (parent_session_id);
    CREATE TABLE journal_chunks (
        session_id          TEXT NOT NULL REFERENCES sessions (session_id),
        first_seq           BIGINT NOT NULL,
        last_seq            BIGINT NOT NULL CHECK (last_seq >= first_seq),
        entries             INTEGER NOT NULL,
        host_id             TEXT NOT NULL,
        host_epoch          BIGINT NOT NULL,
        data                BYTEA NOT NULL,
        shipped_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (session_id, first_seq)
    );
    """,
    # v2: re-homing. A session whose host is gone for good is moved explicitly: its row
    # ends `lost` naming the session that continues it (`rehomed_to`), and the new row
    # names where it came from (`restarted_from`) -- never a silent restart.
    """
    ALTER TABLE sessions ADD COLUMN restarted_from TEXT;
    ALTER TABLE sessions ADD COLUMN rehomed_to TEXT;
    """,
    # v3: ACP over HTTP through routers (`/v1/acp/{serverId}`). The client names its
    # server id (sandbox-agent's client picks its path), so a router cannot hand out a
    # host-qualified id it could parse: which host serves an id is a row, written once by
    # the first router to see the id (the primary key decides between racing routers)
    # and never changed, so every router may cache it for good.
    """
    CREATE TABLE acp_servers (
        scope               TEXT NOT NULL,
        server_id           TEXT NOT NULL,
        host_id             TEXT NOT NULL REFERENCES hosts (host_id),
        host_epoch          BIGINT NOT NULL,
        created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (scope, server_id)
    );
    """,
)
