"""Process-local counters, optionally persisted to the registry.

The names are part of Tether's contract (issue: supervision observability)::

    run_spawn_total                   run_exit_total{reason}
    run_timeout_total{type}           run_cleanup_kill_total{mode=pidfd|pgid|cgroup}
    run_reconcile_orphans_total       run_lease_lost_total
    run_ownership_escape_total

Counters are incremented only on lifecycle decisions (spawn, exit, reconcile), never on
the per-update hot path, so persisting each increment costs nothing that matters.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol


class _Sink(Protocol):
    def incr(self, name: str, by: int = 1, **labels: str) -> None: ...


_local: Counter[str] = Counter()
_sink: _Sink | None = None


def attach(sink: _Sink | None) -> None:
    """Persist every later increment to ``sink`` (a Registry) as well."""
    global _sink
    _sink = sink


def incr(name: str, by: int = 1, **labels: str) -> None:
    key = name + (
        "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else ""
    )
    _local[key] += by
    if _sink is not None:
        try:
            _sink.incr(name, by, **labels)
        except Exception:
            pass  # metrics must never break a lifecycle path


def snapshot() -> dict[str, int]:
    """This process's counters."""
    return dict(_local)
