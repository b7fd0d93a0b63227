"""Tether past one machine: the fleet's shared index (PostgreSQL), host registration and
placement.

Ownership stays local: a host only ever signals its own processes, with its own proof
(seed 001). What the fleet adds is routing, placement, a shared index of sessions and
hosts, and history shipped off-host. Fencing is by epoch and storage, never by a signal
sent across hosts.

Modules:

- :mod:`tether.fleet.schema` -- the index's versioned migrations (PostgreSQL);
- :mod:`tether.fleet.index` -- the index itself: hosts with epochs and heartbeats,
  fleet-wide idempotent ``ensure``, shipped journal chunks and ``durableSeq``
  (its SQL by concept: ``index_sql``, ``index_hosts``, ``index_sessions``,
  ``index_journal``);
- :mod:`tether.fleet.placement` -- a sans-IO choice of host for a new session.

Everything here needs the ``fleet`` extra (``psycopg`` 3); nothing on the single-host
paths imports it.
"""
