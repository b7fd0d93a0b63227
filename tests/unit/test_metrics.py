"""Metrics: counters and histograms persisted in the registry, and their three renderings."""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import _log, metrics
from tether.cli import main
from tether.state.registry import Registry


@pytest.fixture
def reg() -> object:
    with Registry() as registry:
        metrics.attach(registry)
        try:
            yield registry
        finally:
            metrics.attach(None)


def test_counters_and_labels_persist_in_the_registry(reg: Registry) -> None:
    """incr() with labels lands in the registry as one series per label set."""
    metrics.incr("run_exit_total", reason="exit")
    metrics.incr("run_exit_total", reason="exit")
    metrics.incr("run_timeout_total", type="overall")
    metrics.incr("run_spawn_total", by=3)
    assert reg.counters() == {
        "run_exit_total{reason=exit}": 2,
        "run_spawn_total": 3,
        "run_timeout_total{type=overall}": 1,
    }


def test_histogram_counts_sums_and_quantiles(reg: Registry) -> None:
    """observe() fills one bucket per value; p50/p99 are the bucket edges that hold them."""
    for seconds in (0.004, 0.2, 0.2, 0.2, 7.0):
        metrics.observe("prompt_turn_seconds", seconds)
    (hist,) = metrics.read(reg).histograms
    assert hist.count == 5
    assert hist.sum == pytest.approx(7.604)
    assert hist.quantile(0.5) == 0.25
    assert hist.quantile(0.99) == 10.0
    assert sum(hist.buckets) == 5


def test_prometheus_text_format(reg: Registry) -> None:
    """The Prometheus rendering has HELP/TYPE lines, quoted labels and cumulative buckets."""
    metrics.incr("run_exit_total", reason="no-output-timeout")
    metrics.observe("request_enqueue_seconds", 0.02, session="a")
    text = metrics.render_prometheus(metrics.read(reg))
    lines = text.splitlines()
    assert "# TYPE run_exit_total counter" in lines
    assert 'run_exit_total{reason="no-output-timeout"} 1' in lines
    assert "# TYPE request_enqueue_seconds histogram" in lines
    assert 'request_enqueue_seconds_bucket{session="a",le="0.01"} 0' in lines
    assert 'request_enqueue_seconds_bucket{session="a",le="0.025"} 1' in lines
    assert 'request_enqueue_seconds_bucket{session="a",le="+Inf"} 1' in lines
    assert 'request_enqueue_seconds_count{session="a"} 1' in lines
    assert "owners_active 0" in lines
    assert text.endswith("\n")


def test_gauges_come_from_the_sessions_table(reg: Registry) -> None:
    """owners_active and queue depth per session are read from the registry, no owner asked."""
    reg.upsert_session(key="k1", name="one", agent_command=["a"], agent_label="a", cwd="/p")
    reg.upsert_session(key="k2", name="two", agent_command=["a"], agent_label="a", cwd="/p")
    reg.begin_owner("k1", pid=4242, starttime=1, socket="/s")
    reg.update_session("k1", owner_status="running", queue_depth=2)
    snap = metrics.read(reg)
    assert snap.owners_active == 1
    assert snap.queue_depth == {"k1": 2}


def test_issue21_item13_queue_depth_is_one_series_per_session_not_per_name(
    reg: Registry,
) -> None:
    """Two sessions named `work` in different directories are two queue_depth series,
    labelled by their keys."""
    for key, cwd, depth in (("k1", "/a", 1), ("k2", "/b", 3)):
        reg.upsert_session(key=key, name="work", agent_command=["a"], agent_label="a", cwd=cwd)
        reg.begin_owner(key, pid=4242, starttime=1, socket="/s" + key)
        reg.update_session(key, owner_status="running", queue_depth=depth)
    snap = metrics.read(reg)
    assert snap.queue_depth == {"k1": 1, "k2": 3}
    lines = metrics.render_prometheus(snap).splitlines()
    assert 'queue_depth{session="k1"} 1' in lines
    assert 'queue_depth{session="k2"} 3' in lines


SEED_COUNTERS = (
    "run_timeout_total",
    "run_cleanup_kill_total",
    "run_reconcile_orphans_total",
    "run_lease_steal_total",
    "run_ownership_escape_total",
    "owner_spawn_failure_total",
    "owner_takeover_total",
    "cancel_total",
    "run_exit_total",
    "run_spawn_total",
)


def test_issue21_item13_counters_that_never_moved_are_present_at_zero(
    reg: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before anything happened, every counter the seeds name has a sample at 0 and a
    `# TYPE` line in /metrics, and is in `tether metrics` and its JSON."""
    snap = metrics.read(reg)
    text = metrics.render_prometheus(snap)
    lines = text.splitlines()
    for name in SEED_COUNTERS:
        assert f"# TYPE {name} counter" in lines, name
        samples = [line for line in lines if line.startswith((name + " ", name + "{"))]
        assert samples, name
        assert all(line.endswith(" 0") for line in samples), samples
    assert 'run_timeout_total{type="overall"} 0' in lines
    assert 'cancel_total{outcome="not-honoured"} 0' in lines
    assert main(["--format", "json", "metrics"]) == 0
    counters = json.loads(capsys.readouterr().out)["counters"]
    assert counters["owner_takeover_total"] == 0
    assert counters["run_cleanup_kill_total{mode=cgroup}"] == 0
    assert main(["metrics"]) == 0
    shown = capsys.readouterr().out
    for name in SEED_COUNTERS:
        assert name in shown, name


def test_metrics_command_text_and_json(reg: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    """`tether metrics` prints every series for people, and the same as JSON."""
    metrics.incr("run_lease_steal_total")
    metrics.observe("prompt_turn_seconds", 1.5)
    assert main(["metrics"]) == 0
    text = capsys.readouterr().out
    assert "run_lease_steal_total" in text
    assert "prompt_turn_seconds" in text
    assert "p50<=2.5s" in text
    assert main(["--format", "json", "metrics"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["counters"]["run_lease_steal_total"] == 1
    assert {k: v for k, v in data["counters"].items() if v} == {"run_lease_steal_total": 1}
    assert data["histograms"]["prompt_turn_seconds"]["count"] == 1
    assert data["gauges"] == {"owners_active": 0, "queue_depth": {}}


def test_a_failing_sink_never_breaks_the_caller() -> None:
    """A registry error while counting is swallowed: metrics never break a lifecycle path."""

    class Broken:
        def incr(self, name: str, by: int = 1, **labels: str) -> None:
            raise OSError("disk full")

        def observe(
            self, name: str, value: float, bounds: tuple[float, ...], **labels: str
        ) -> None:
            raise OSError("disk full")

    metrics.attach(Broken())
    try:
        metrics.incr("run_spawn_total")
        metrics.observe("prompt_turn_seconds", 1.0)
    finally:
        metrics.attach(None)
    assert metrics.snapshot()["run_spawn_total"] >= 1


def test_bound_logger_carries_owner_context(caplog: pytest.LogCaptureFixture) -> None:
    """Owner lines carry sessionId, requestId, ownerPid and ownerGeneration (seed 001)."""
    log = _log.owner_context(session_id="s1", owner_pid=42, owner_generation=3)
    with caplog.at_level(logging.INFO, logger="tether"):
        log.event("owner_started")
        log.bind(requestId="r9").event("cancel", sent=True)
    first, second = (r.tether_fields for r in caplog.records)  # type: ignore[attr-defined]
    assert first == {"sessionId": "s1", "requestId": None, "ownerPid": 42, "ownerGeneration": 3}
    assert second == {
        "sessionId": "s1",
        "requestId": "r9",
        "ownerPid": 42,
        "ownerGeneration": 3,
        "sent": True,
    }
    formatted = json.loads(_log.JsonFormatter().format(caplog.records[1]))
    assert formatted["event"] == "cancel"
    assert formatted["requestId"] == "r9"


_BOUNDS = (0.01, 0.1, 1.0)


_OPS = st.one_of(
    st.tuples(
        st.just("observe"),
        st.sampled_from(["a", "b"]),
        st.floats(0, 3, allow_nan=False),
        st.sampled_from(["", "x"]),
    ),
    st.tuples(
        st.just("incr"), st.sampled_from(["c", "d"]), st.integers(1, 5), st.sampled_from(["", "x"])
    ),
)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.lists(_OPS, max_size=12), max_size=6))
def test_kept_metric_changes_written_in_batches_add_up_as_one_by_one(
    batches: list[list[tuple[str, str, float, str]]],
) -> None:
    """An owner's status writer hands its kept changes over in batches (merged per
    series, buckets added to in SQL): whatever the batches, the rows say what applying
    each change alone would -- count, sum, every bucket, every counter."""
    from tether.state.metric_rows import apply_metric_ops

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE counters (name TEXT, labels TEXT, value INTEGER,"
               " PRIMARY KEY (name, labels))")  # fmt: skip
    db.execute("CREATE TABLE histograms (name TEXT, labels TEXT, count INTEGER, sum REAL,"
               " buckets TEXT, PRIMARY KEY (name, labels))")  # fmt: skip
    want_hist: dict[tuple[str, str], list[float]] = {}
    want_count: dict[tuple[str, str], int] = {}
    for batch in batches:
        ops: list[metrics.MetricOp] = []
        for kind, name, value, label in batch:
            labels = {"k": label} if label else {}
            key = (name, "k=" + label if label else "")
            if kind == "observe":
                ops.append(("observe", name, value, _BOUNDS, labels))
                want_hist.setdefault(key, []).append(value)
            else:
                ops.append(("incr", name, int(value), None, labels))
                want_count[key] = want_count.get(key, 0) + int(value)
        apply_metric_ops(db, ops)
    got_count = {(n, lbl): v for n, lbl, v in db.execute("SELECT * FROM counters")}
    assert got_count == want_count
    rows = db.execute("SELECT name, labels, count, sum, buckets FROM histograms").fetchall()
    assert {(n, lbl) for n, lbl, *_ in rows} == set(want_hist)
    for name, labels, count, total, buckets in rows:
        values = want_hist[(name, labels)]
        assert count == len(values)
        assert total == pytest.approx(sum(values))
        expected = [0] * (len(_BOUNDS) + 1)
        for v in values:
            expected[next((i for i, e in enumerate(_BOUNDS) if v <= e), len(_BOUNDS))] += 1
        assert json.loads(buckets) == expected


def test_a_histogram_whose_buckets_changed_starts_its_buckets_over(reg: Registry) -> None:
    """A stored row with another number of buckets (its bounds changed between
    versions) is not added to bucket by bucket: its buckets start over, count and sum
    go on."""
    reg.observe("h", 0.5, (1.0,))  # two buckets
    reg.observe("h", 0.05, (0.01, 0.1, 1.0))  # four
    [(name, _labels, count, total, buckets)] = reg.histograms()
    assert (name, count, buckets) == ("h", 2, [0, 1, 0, 0])
    assert total == pytest.approx(0.55)
