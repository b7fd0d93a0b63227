"""The state layer: everything Tether keeps in SQLite, and the only code that touches it.

* :mod:`tether.state.registry` -- sessions, runs and leases, members, metrics, and the
  journal's reads and appends (``JournalReader``: a connection for worker threads); its
  private parts ``_registry_runs``, ``_registry_members``, ``_registry_journal``,
  ``_registry_prune``; on :mod:`tether.state.schema`;
* :mod:`tether.state.inspect` -- the doctor's read-only looks;
* :mod:`tether.state.journal` -- each session's ordered, durable log, its storage and
  its readers;
* :mod:`tether.state.translate` -- sqlite3's errors translated into the state branch of
  :mod:`tether.errors`, in one place.

Nothing outside this package touches a SQLite connection, imports sqlite3 or imports
its private modules (``tests/unit/test_state_layer_lint.py``); supervision is handed
what it needs (an opener), never the registry. Import the modules themselves: this
package imports nothing.
"""
