"""``tether metrics``: every counter, latency histogram and gauge, read from the registry."""

from __future__ import annotations

from typing import Any


def run_metrics(ctx: Any) -> int:
    """Print the metrics (text, ``--format json``, or ``--format quiet``: the samples in
    Prometheus' form); the registry is the only source."""
    from tether import metrics
    from tether.state.registry import Registry

    with Registry() as registry:
        snap = metrics.read(registry)
    ctx.output.control(
        {"action": "metrics", **metrics.render_json(snap)},
        text=metrics.render_text(snap),
        # quiet: the samples alone, one `name{labels} value` a line (Prometheus' form
        # without its comments): for scripts, never a bare sum of unrelated counters.
        quiet="\n".join(
            line
            for line in metrics.render_prometheus(snap).splitlines()
            if not line.startswith("#")
        ),
    )
    return 0
