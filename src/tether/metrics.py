"""Tether's metrics: counters and latency histograms, kept in the registry.

The names are part of Tether's contract. Seed 003 (process supervision)::

    run_spawn_total                     run_exit_total{reason}
    run_timeout_total{type=no_output|overall}
    run_cleanup_kill_total{mode}        run_reconcile_orphans_total
    run_lease_steal_total               run_ownership_escape_total
    run_lease_lost_total                (leases marked lost; not in the seed)

Seed 001 (warm owners)::

    owner_spawn_total                   owner_spawn_failure_total
    owner_takeover_total                cancel_total{outcome=success|timeout|not-honoured}
    request_enqueue_seconds{kind}       (histogram: enqueue -> turn start)
    prompt_turn_seconds                 (histogram: turn start -> terminal frame)
    owners_active, queue_depth{session} (gauges, read from the sessions table;
                                         session: the session key, unique)

How it works: :func:`incr` and :func:`observe` count in this process and, once a
process has called :func:`attach` with its open registry, persist each change there
too, so every process's counts add up in one place (``tether metrics``). They are
called on lifecycle decisions (a spawn, an exit, a steal, a turn's end), never per
update, so one small write each costs nothing that matters. A metrics failure never
breaks the lifecycle path that reported it.

Reading: :func:`read` gathers one :class:`Snapshot` from a registry; :func:`render_text`,
:func:`render_json` and :func:`render_prometheus` print it (the last is the Prometheus
text exposition format 0.0.4, for the HTTP gateway).
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from typing import Any, Final, Protocol

#: Histogram bucket upper edges, in seconds (a turn can take minutes).
BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

#: Every metric Tether reports, with its type and help text (the Prometheus HELP line).
METRICS: Final[dict[str, tuple[str, str]]] = {
    "run_spawn_total": ("counter", "Agent runs spawned under a keeper."),
    "run_exit_total": ("counter", "Agent runs ended, by termination reason."),
    "run_timeout_total": ("counter", "Runs ended by a timeout, by type (no_output|overall)."),
    "run_cleanup_kill_total": ("counter", "Teardowns that needed SIGKILL, by kill mode."),
    "run_reconcile_orphans_total": ("counter", "Orphaned processes reaped by reconcile."),
    "run_lease_steal_total": ("counter", "Expired run leases taken over from another supervisor."),
    "run_ownership_escape_total": ("counter", "Runs with a descendant outside their boundary."),
    "run_lease_lost_total": ("counter", "Run leases marked lost by reconcile."),
    "owner_spawn_total": ("counter", "Session owner daemons started."),
    "owner_spawn_failure_total": ("counter", "Session owner daemons that failed to start."),
    "owner_takeover_total": ("counter", "Unresponsive or stale owners replaced."),
    "cancel_total": ("counter", "Turn cancellations, by outcome (success|timeout|not-honoured)."),
    "request_enqueue_seconds": ("histogram", "Time from a request's enqueue to its turn start."),
    "prompt_turn_seconds": ("histogram", "Time from a turn's start to its terminal frame."),
    "owners_active": ("gauge", "Sessions with a live owner daemon."),
    "queue_depth": ("gauge", "Requests queued per session (labelled by session key)."),
}

#: The label values each labelled counter is shown with at 0 before it first moves
#: (``None``: ``run_exit_total``'s reasons, every termination reason there is).
#: An unlabelled counter is shown at 0 as is: every counter is present from the start.
ZERO_LABELS: Final[dict[str, tuple[str, tuple[str, ...] | None]]] = {
    "run_exit_total": ("reason", None),
    "run_timeout_total": ("type", ("no_output", "overall")),
    "run_cleanup_kill_total": ("mode", ("cgroup", "pgid", "pidfd")),
    "cancel_total": ("outcome", ("success", "timeout", "not-honoured")),
}


class _Sink(Protocol):
    def incr(self, name: str, by: int = 1, **labels: str) -> None: ...

    def observe(
        self, name: str, value: float, bounds: tuple[float, ...], **labels: str
    ) -> None: ...


_lock = threading.Lock()
_local: Counter[str] = Counter()
_sink: _Sink | None = None


def _key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


# One change kept for later: ("incr", name, by, None, labels) or
# ("observe", name, seconds, bucket edges, labels).
MetricOp = tuple[str, str, float, "tuple[float, ...] | None", dict[str, str]]


class Deferred:
    """A sink that keeps changes until they are taken, for a process whose event loop
    must not wait on a database write per change (an owner: its status writer takes them
    into its next write, one transaction for all)."""

    def __init__(self) -> None:
        self._ops: list[MetricOp] = []
        self._lock = threading.Lock()

    def incr(self, name: str, by: int = 1, **labels: str) -> None:
        self._add(("incr", name, by, None, labels))

    def observe(self, name: str, value: float, bounds: tuple[float, ...], **labels: str) -> None:
        self._add(("observe", name, value, bounds, labels))

    def _add(self, op: MetricOp) -> None:
        with self._lock:
            self._ops.append(op)

    def take(self) -> list[MetricOp]:
        """Everything kept so far (the caller writes it, or gives it back)."""
        with self._lock:
            ops, self._ops = self._ops, []
        return ops

    def give_back(self, ops: list[MetricOp]) -> None:
        """A write failed: keep ``ops`` (first) for the next one."""
        with self._lock:
            self._ops[:0] = ops


def kept() -> Deferred | None:
    """The attached sink if it keeps changes for later (an owner's), else None."""
    sink = _sink
    return sink if isinstance(sink, Deferred) else None


def attach(sink: _Sink | None) -> None:
    """Persist every later change to ``sink`` (a Registry) as well; ``None`` detaches."""
    global _sink
    _sink = sink


def attached() -> bool:
    """Whether changes are persisted to a sink (:func:`attach`) as well."""
    return _sink is not None


def incr(name: str, by: int = 1, **labels: str) -> None:
    """Add ``by`` to a counter (``labels`` select one series, e.g. ``reason="exit"``)."""
    with _lock:
        _local[_key(name, labels)] += by
    sink = _sink
    if sink is not None:
        try:
            sink.incr(name, by, **labels)
        except Exception:
            pass


def observe(name: str, seconds: float, **labels: str) -> None:
    """Record one latency (seconds) in a histogram."""
    with _lock:
        _local[_key(name + "_count", labels)] += 1
    sink = _sink
    if sink is not None:
        try:
            sink.observe(name, seconds, BUCKETS, **labels)
        except Exception:
            pass


def snapshot() -> dict[str, int]:
    """This process's own counts (histograms as ``<name>_count``)."""
    with _lock:
        return dict(_local)


class Histogram:
    """One histogram series as read back: count, sum and per-bucket counts."""

    def __init__(
        self, name: str, labels: str, count: int, total: float, buckets: list[int]
    ) -> None:
        self.name = name
        self.labels = labels
        self.count = count
        self.sum = total
        self.buckets = buckets

    def quantile(self, q: float) -> float | None:
        """The upper edge of the bucket holding quantile ``q`` (``None`` if empty)."""
        if self.count == 0:
            return None
        rank = math.ceil(q * self.count)
        seen = 0
        for edge, n in zip((*BUCKETS, math.inf), self.buckets, strict=False):
            seen += n
            if seen >= rank:
                return edge
        return math.inf

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "sum": round(self.sum, 6),
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
            "buckets": {
                ("+Inf" if math.isinf(e) else str(e)): n
                for e, n in zip((*BUCKETS, math.inf), self.buckets, strict=False)
            },
        }


class Snapshot:
    """Everything ``tether metrics`` shows, read from one registry."""

    def __init__(
        self,
        counters: dict[str, int],
        histograms: list[Histogram],
        owners_active: int,
        queue_depth: dict[str, int],
    ) -> None:
        self.counters = counters
        self.histograms = histograms
        self.owners_active = owners_active
        self.queue_depth = queue_depth


def zero_counters() -> dict[str, int]:
    """Every counter series at 0: what ``tether metrics`` shows before anything moved."""
    from tether.termination import TerminationReason

    zero: dict[str, int] = {}
    for name, (kind, _help) in METRICS.items():
        if kind != "counter":
            continue
        label, values = ZERO_LABELS.get(name, ("", ()))
        if not label:
            zero[name] = 0
            continue
        for value in values if values is not None else tuple(r.value for r in TerminationReason):
            zero[_key(name, {label: value})] = 0
    return zero


def read(registry: Any, *, owner_alive: Any = None) -> Snapshot:
    """Gather a :class:`Snapshot` from ``registry``.

    ``owner_alive(session) -> bool`` decides which recorded owners still run (default:
    any session whose ``owner_status`` is not ``stopped`` and that records an owner
    pid); the gauges come from the sessions table, so no owner needs to answer.
    Every counter is present, at 0 until it first moves (:func:`zero_counters`);
    ``queue_depth`` is keyed by session key (names repeat across directories).
    """
    hists = [Histogram(*row) for row in registry.histograms()]
    active = 0
    depth: dict[str, int] = {}
    for session in registry.sessions(include_closed=False):
        alive = (
            owner_alive(session)
            if owner_alive is not None
            else session.owner_pid is not None and session.owner_status not in (None, "stopped")
        )
        if alive:
            active += 1
            depth[session.key] = int(session.queue_depth)
    counters = zero_counters()
    counters.update(registry.counters())
    return Snapshot(counters, hists, active, depth)


def render_json(snap: Snapshot) -> dict[str, Any]:
    """The snapshot as a JSON-ready dict (``tether metrics --format json``)."""
    return {
        "counters": snap.counters,
        "histograms": {_series(h.name, h.labels): h.to_json() for h in snap.histograms},
        "gauges": {"owners_active": snap.owners_active, "queue_depth": snap.queue_depth},
    }


def render_text(snap: Snapshot) -> str:
    """The snapshot for people: one metric per line."""
    lines = [f"{name:<48} {value}" for name, value in sorted(snap.counters.items())]
    for h in snap.histograms:
        p50, p99 = h.quantile(0.5), h.quantile(0.99)
        lines.append(
            f"{_series(h.name, h.labels):<48} count={h.count} sum={h.sum:.3f}s"
            f" p50<={_edge(p50)} p99<={_edge(p99)}"
        )
    lines.append(f"{'owners_active':<48} {snap.owners_active}")
    for session, depth in sorted(snap.queue_depth.items()):
        lines.append(f"{_series('queue_depth', 'session=' + session):<48} {depth}")
    return "\n".join(lines)


def render_prometheus(snap: Snapshot) -> str:
    """The snapshot in the Prometheus text exposition format (version 0.0.4)."""
    out: list[str] = []
    by_name: dict[str, list[tuple[str, int]]] = {}
    for series, value in snap.counters.items():
        name, _, rest = series.partition("{")
        by_name.setdefault(name, []).append((rest.rstrip("}"), value))
    for name in sorted(by_name):
        _header(out, name, "counter")
        for labels, value in sorted(by_name[name]):
            out.append(f"{name}{_prom_labels(labels)} {value}")
    seen: set[str] = set()
    for h in snap.histograms:
        if h.name not in seen:
            seen.add(h.name)
            _header(out, h.name, "histogram")
        cumulative = 0
        for edge, n in zip((*BUCKETS, math.inf), h.buckets, strict=False):
            cumulative += n
            le = "+Inf" if math.isinf(edge) else repr(edge)
            out.append(f"{h.name}_bucket{_prom_labels(h.labels, le=le)} {cumulative}")
        out.append(f"{h.name}_sum{_prom_labels(h.labels)} {h.sum!r}")
        out.append(f"{h.name}_count{_prom_labels(h.labels)} {h.count}")
    _header(out, "owners_active", "gauge")
    out.append(f"owners_active {snap.owners_active}")
    _header(out, "queue_depth", "gauge")
    for session, depth in sorted(snap.queue_depth.items()):
        out.append(f'queue_depth{{session="{_escape(session)}"}} {depth}')
    return "\n".join(out) + "\n"


def _header(out: list[str], name: str, kind: str) -> None:
    help_text = METRICS.get(name, (kind, name))[1]
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _prom_labels(labels: str, **extra: str) -> str:
    pairs = [p.partition("=") for p in labels.split(",") if p]
    parts = [f'{k}="{_escape(v)}"' for k, _, v in pairs]
    parts += [f'{k}="{_escape(v)}"' for k, v in extra.items()]
    return "{" + ",".join(parts) + "}" if parts else ""


def _series(name: str, labels: str) -> str:
    return f"{name}{{{labels}}}" if labels else name


def _edge(value: float | None) -> str:
    if value is None:
        return "-"
    return "+Inf" if math.isinf(value) else f"{value:g}s"


def dumps(snap: Snapshot) -> str:
    """The JSON rendering as one line of text."""
    return json.dumps(render_json(snap), separators=(",", ":"))


__all__ = [
    "BUCKETS",
    "METRICS",
    "Histogram",
    "Snapshot",
    "attach",
    "dumps",
    "incr",
    "observe",
    "read",
    "render_json",
    "render_prometheus",
    "render_text",
    "snapshot",
    "zero_counters",
]
