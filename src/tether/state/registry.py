"""The durable registry: one SQLite database (WAL) per state directory.

It is the one source of truth for the instance id, sessions, owner generations,
leases, session events and counters. Every process that touches a session -- callers,
owners, ``tether exec``, ``tether reap`` -- opens it; WAL mode lets readers proceed
while an owner writes, and ``busy_timeout`` turns the rare writer collision into a
short wait instead of an error.

Schema changes are migrations keyed by ``PRAGMA user_version``: each entry of
:data:`tether.state.schema.MIGRATIONS` moves the schema one version forward, inside one
transaction.

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
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, ClassVar

from tether import paths
from tether.errors import StateError, StateLost
from tether.state._registry_journal import JournalAppends, JournalReader, JournalReads
from tether.state._registry_members import Member, MemberStore
from tether.state._registry_owners import OwnerStore
from tether.state._registry_prune import PruneStore
from tether.state._registry_runs import ANY_OWNER, Lease, RunStore
from tether.state._session_row import Session, ownership_fields, session_from_row
from tether.state.metric_rows import apply_metric_ops
from tether.state.schema import MIGRATIONS
from tether.state.session_fields import write_session_fields
from tether.state.translate import translate_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.metrics import MetricOp

__all__ = [
    "ANY_OWNER",
    "JournalReader",
    "JournalReads",
    "Lease",
    "Member",
    "Registry",
    "Session",
]

SCHEMA_VERSION = len(MIGRATIONS)


# Set once this process finds the state database removed or replaced under it
# (owner.state_watch -> Registry.lose): see keep_if_lost.
_LOST: str | None = None
_KEPT_OPEN: list[sqlite3.Connection] = []

BUSY_TIMEOUT_MS = 10_000
# After one write in this process waited out the whole busy timeout (another process
# holds the write lock and is not letting go: stopped, frozen), the next ones wait this
# long until one gets in: a command failing on a held database says so in ~10 s, not
# once per write of its cleanup (an `exec` took 58 s).
BUSY_AGAIN_MS = 1_000
_busy_streak = False
_BUSY_NAMES = ("SQLITE_BUSY", "SQLITE_LOCKED")


def state_lost() -> str | None:
    """Why this process's state database was lost, or None."""
    return _LOST


def keep_if_lost(db: sqlite3.Connection) -> bool:
    """After a loss, a connection is never closed: SQLite's last close checkpoints its
    write-ahead log into the file at the path -- no longer ours, and damaged by pages of
    the old database. It is kept open until the process ends without closing it
    (``os._exit``, as a lost owner does). True if ``db`` was kept."""
    if _LOST is None:
        return False
    _KEPT_OPEN.append(db)
    return True


class Registry(RunStore, MemberStore, JournalAppends, PruneStore, OwnerStore):
    """A connection to the state database. Not shared between threads.

    Raises (from the constructor and every method):
        StateCorrupt, StateFull, StatePermission, StateError: see
        :func:`tether.state.translate.translate_error`, the one place where sqlite3's
        and the OS's errors about the database become Tether's.

    :attr:`ERRORS` names what a caller that must survive a failing database catches
    (besides ``OSError``), so that no module outside the state layer imports sqlite3.
    """

    # A translated StateError, or a sqlite3.Error from a read that reached the database
    # without going through translate_error.
    ERRORS: ClassVar[tuple[type[Exception], ...]] = (StateError, sqlite3.Error)

    def __init__(self, path: str | None = None) -> None:
        self.path = path or paths.state_db()
        if _LOST is not None:
            # This process found the database removed or replaced under it: a new
            # connection would write a schema into whatever is at the path now, and an
            # old one's final checkpoint would then damage it. No new connections.
            raise StateLost(_LOST, path=self.path)
        self.lost: str | None = None  # see lose()
        with self._translated():
            # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so read-modify-write
            # sequences (generation increments) cannot interleave between processes.
            self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            try:
                self._db.row_factory = sqlite3.Row
                os.chmod(self.path, 0o600)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                self._migrate()
                self.instance_id = self._ensure_instance_id()
            except BaseException:
                self._db.close()
                raise

    @contextmanager
    def _translated(self) -> Iterator[None]:
        if self.lost is not None:
            raise StateLost(self.lost, path=self.path)
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            if self.lost is not None:  # interrupted by lose(): say why, not "interrupted"
                raise StateLost(self.lost, path=self.path) from exc
            raise translate_error(exc, self.path) from exc

    def lose(self, why: str) -> None:
        """The database file was removed or replaced under us: every call from now on
        raises ``StateLost(why)`` at once, and one waiting on a lock is interrupted.

        Thread-safe (the owner's state watch calls it from its own thread).
        """
        self.lost = why
        global _LOST
        _LOST = why
        with suppress(sqlite3.Error):
            self._db.interrupt()

    def _rows(self, query: str, args: Any = ()) -> list[sqlite3.Row]:
        with self._translated():
            return list(self._db.execute(query, args).fetchall())

    def _row(self, query: str, args: Any = ()) -> sqlite3.Row | None:
        with self._translated():
            row: sqlite3.Row | None = self._db.execute(query, args).fetchone()
            return row

    def close(self) -> None:
        if keep_if_lost(self._db):
            return
        self._db.close()

    def reopener(self) -> Callable[[], Registry]:
        """Opens a fresh connection to this database (for another thread: a connection
        is never shared between threads), e.g. the lease heartbeat's."""
        return partial(Registry, self.path)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; any failure rolls back (nothing half-written)."""
        with self._translated():
            self._begin()
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):  # a full disk may fail the rollback too
                        self._db.execute("ROLLBACK")
                raise

    # Opening writes nothing once the schema is current and the instance id exists: a
    # reader (status, a silent owner's fence, doctor) must get in while another process
    # holds the write lock -- above all one stopped while holding it, which only a
    # fence (a reader first) can end.

    def _begin(self) -> None:
        global _busy_streak
        streak = _busy_streak
        if streak:
            self._db.execute(f"PRAGMA busy_timeout={BUSY_AGAIN_MS}")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if str(getattr(exc, "sqlite_errorname", "")).startswith(_BUSY_NAMES):
                _busy_streak = True
            raise
        finally:
            if streak:
                self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _busy_streak = False

    def _migrate(self) -> None:
        if self._db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
            return
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for index in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[index].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {index + 1}")

    def _ensure_instance_id(self) -> str:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()
        if row:
            return str(row[0])
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()
            if row:
                return str(row[0])
            instance_id = os.urandom(16).hex()  # 128 random bits; `uuid` costs ms to import
            db.execute("INSERT INTO meta (key, value) VALUES ('instance_id', ?)", (instance_id,))
            return instance_id

    # --- leases, counters and histograms: tether.state._registry_runs.RunStore -------------

    # --- sessions -----------------------------------------------------------------

    def session(self, key: str) -> Session | None:
        row = self._row("SELECT * FROM sessions WHERE key = ?", (key,))
        return session_from_row(row) if row else None

    def sessions(self, *, include_closed: bool = True) -> list[Session]:
        query = "SELECT * FROM sessions"
        if not include_closed:
            query += " WHERE state != 'closed'"
        query += " ORDER BY created_at"
        return [session_from_row(r) for r in self._rows(query)]

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

        Raises:
            InvalidName: ``name`` would forge output (:func:`tether.names.check_name`).
        """
        from tether.names import check_name

        check_name(name)  # under every door, including those that write the row first
        now = time.time()
        ownership = ownership_fields(agent_label, owner)
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
        return [session_from_row(r) for r in rows]

    def update_session(
        self, key: str, *, metric_ops: Iterable[MetricOp] = (), **fields: Any
    ) -> None:
        """Set columns of a session's row; ``metric_ops`` (kept metric changes) are
        written in the same transaction."""
        with self.transaction() as db:
            write_session_fields(db, key, fields, metric_ops)

    def record_metrics(self, ops: Iterable[MetricOp]) -> None:
        """Write kept metric changes (:class:`tether.metrics.Deferred`), in one
        transaction."""
        with self.transaction() as db:
            apply_metric_ops(db, ops)

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
