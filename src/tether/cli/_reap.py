"""``tether reap [--dry-run]``: reconcile this instance's leases and print every decision."""

from __future__ import annotations

from typing import Any


def run_reap(ctx: Any) -> int:
    from tether import metrics
    from tether.state.registry import Registry
    from tether.supervise.reconcile import reconcile

    with Registry() as registry:
        metrics.attach(registry)
        decisions = reconcile(registry, dry_run=ctx.inv.dry_run)
        metrics.attach(None)
        counters = registry.counters()
    lines = [
        f"{d['kind']:<11} {d['lease_id']} {d.get('pids', '') or ''} {d['why']}".rstrip()
        for d in decisions
    ]
    ctx.output.control(
        {"action": "reap", "dryRun": ctx.inv.dry_run, "decisions": decisions, "counters": counters},
        text="\n".join(lines) if lines else "nothing to reconcile",
        quiet=str(len(decisions)),
    )
    return 0
