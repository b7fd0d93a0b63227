"""``tether metrics``: every counter, latency histogram and gauge, read from the registry."""

from __future__ import annotations

from typing import Any


def run_metrics(ctx: Any) -> int:
    """Print the metrics (text, or ``--format json``); the registry is the only source."""
    from tether import metrics
    from tether.registry import Registry

    with Registry() as registry:
        snap = metrics.read(registry)
    ctx.output.control(
        {"action": "metrics", **metrics.render_json(snap)},
        text=metrics.render_text(snap),
        quiet=str(sum(snap.counters.values())),
    )
    return 0
