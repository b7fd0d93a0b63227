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
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tether import paths

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
    # issue 9 item 5 (unresponsive owner takeover): the proven identity of each
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
)

SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True)
class Lease:
    """One lease row; see the schema for the meaning of each field."""

    lease_id: str
    instance_id: str
    session_key: str | None
    owner_pid: int | None
    owner_starttime: int | None
    keeper_pid: int | None
    keeper_starttime: int | None
    root_pid: int | None
    pgid: int | None
    boot_id: str
    pid_namespace: str | None
    starttime: int | None
    cgroup_path: str | None
    command_hash: str
    cwd: str
    state: str
    created_at: float
    updated_at: float
    last_output_at: float | None
    reason: str | None
    exit_code: int | None
    exit_signal: int | None
    kill_mode: str | None
    note: str | None


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


def _session_from_row(row: sqlite3.Row) -> Session:
    data = dict(row)
    data["agent_command"] = json.loads(data["agent_command"])
    data["desired_config"] = json.loads(data["desired_config"] or "{}")
    data["options"] = json.loads(data["options"] or "{}")
    data["last_end"] = json.loads(data["last_end"]) if data["last_end"] else None
    return Session(**data)


class Registry:
    """A connection to the state database. Not shared between threads."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or paths.state_db()
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so read-modify-write
        # sequences (generation increments) cannot interleave between processes.
        self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        os.chmod(self.path, 0o600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._migrate()
        self.instance_id = self._ensure_instance_id()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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

    # --- leases -------------------------------------------------------------------

    def create_lease(self, **fields: Any) -> None:
        now = time.time()
        fields.setdefault("instance_id", self.instance_id)
        fields.setdefault("state", "open")
        fields.setdefault("created_at", now)
        fields.setdefault("updated_at", now)
        cols = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        with self.transaction() as db:
            db.execute(f"INSERT INTO leases ({cols}) VALUES ({marks})", tuple(fields.values()))  # noqa: S608 -- column names are ours

    def update_lease(self, lease_id: str, **fields: Any) -> None:
        fields["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as db:
            db.execute(f"UPDATE leases SET {sets} WHERE lease_id = ?", (*fields.values(), lease_id))  # noqa: S608 -- column names are ours

    def transition_lease(
        self,
        lease_id: str,
        from_states: tuple[str, ...],
        *,
        event: tuple[str, str, Mapping[str, Any]] | None = None,
        **fields: Any,
    ) -> bool:
        """Update the lease only if its state is one of ``from_states`` (compare-and-set).

        ``event`` -- ``(session_key, kind, payload)`` -- is recorded in the same
        transaction, and only if the update happened. Two reconcilers racing over one
        lease therefore close it once and report its end once; the loser gets ``False``.
        """
        fields["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in fields)
        marks = ", ".join("?" for _ in from_states)
        with self.transaction() as db:
            cur = db.execute(
                f"UPDATE leases SET {sets} WHERE lease_id = ? AND state IN ({marks})",  # noqa: S608 -- column names are ours
                (*fields.values(), lease_id, *from_states),
            )
            changed = cur.rowcount == 1
            if changed and event is not None:
                session_key, kind, payload = event
                db.execute(
                    "INSERT INTO events (session_key, kind, payload, at) VALUES (?, ?, ?, ?)",
                    (session_key, kind, json.dumps(dict(payload)), time.time()),
                )
        return changed

    def lease(self, lease_id: str) -> Lease | None:
        row = self._db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone()
        return Lease(**dict(row)) if row else None

    def leases(
        self,
        *,
        states: tuple[str, ...] | None = None,
        session_key: str | None = None,
        all_instances: bool = False,
    ) -> list[Lease]:
        query = "SELECT * FROM leases WHERE 1=1"
        args: list[Any] = []
        if not all_instances:
            query += " AND instance_id = ?"
            args.append(self.instance_id)
        if states:
            query += f" AND state IN ({', '.join('?' for _ in states)})"
            args.extend(states)
        if session_key is not None:
            query += " AND session_key = ?"
            args.append(session_key)
        query += " ORDER BY created_at"
        return [Lease(**dict(r)) for r in self._db.execute(query, args).fetchall()]

    def delete_lease(self, lease_id: str) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM leases WHERE lease_id = ?", (lease_id,))

    # --- sessions -----------------------------------------------------------------

    def session(self, key: str) -> Session | None:
        row = self._db.execute("SELECT * FROM sessions WHERE key = ?", (key,)).fetchone()
        return _session_from_row(row) if row else None

    def sessions(self, *, include_closed: bool = True) -> list[Session]:
        query = "SELECT * FROM sessions"
        if not include_closed:
            query += " WHERE state != 'closed'"
        query += " ORDER BY created_at"
        return [_session_from_row(r) for r in self._db.execute(query).fetchall()]

    def upsert_session(
        self,
        *,
        key: str,
        name: str,
        agent_command: list[str],
        agent_label: str,
        cwd: str,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[Session, bool]:
        """Create the session (or reopen a closed one); return (session, created)."""
        now = time.time()
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
        session = self.session(key)
        assert session is not None
        return session, created

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
        rows = self._db.execute(query, args).fetchall()
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

    # --- counters -----------------------------------------------------------------

    def incr(self, name: str, by: int = 1, **labels: str) -> None:
        label_text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        with self.transaction() as db:
            db.execute(
                "INSERT INTO counters (name, labels, value) VALUES (?, ?, ?)"
                " ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value",
                (name, label_text, by),
            )

    def counters(self) -> dict[str, int]:
        rows = self._db.execute("SELECT name, labels, value FROM counters ORDER BY name, labels")
        return {(f"{n}{{{lbl}}}" if lbl else n): int(v) for n, lbl, v in rows.fetchall()}
