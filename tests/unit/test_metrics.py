"""Metrics: counters and histograms persisted in the registry, and their three renderings."""

from __future__ import annotations

import json
import logging

import pytest

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
