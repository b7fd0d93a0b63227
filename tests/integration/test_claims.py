"""Issue 20, items 2, 5 and 6: a claim is not a proof; an exec'd agent can be verified;
one end, one TERM.

Real processes throughout. Every process a test here signals itself is its own child
(through ``Popen``) or a descendant whose parent and starttime were checked after
pinning it with a pidfd; the suite's subreaper catches anything left behind.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.integration.test_supervise_real import (
    Lines,
    cgroup_mode,
    spec,
)

from tether.registry import Registry
from tether.supervise.run_state import TerminationReason
from tether.supervise.runner import spawn_agent

__all__ = ["cgroup_mode"]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process ownership is Linux"),
]

FAKES = Path(__file__).parents[1] / "fake_agents"
TERM_COUNTER = [sys.executable, str(FAKES / "term_counter.py")]


def _terms(log: Path) -> Counter[int]:
    """How many SIGTERMs each pid recorded."""
    if not log.exists():
        return Counter()
    return Counter(int(x) for x in log.read_text().split())


# --- item 6: one TERM per process -------------------------------------------------------


def test_close_sends_each_member_one_term(cgroup_mode: str, project_dir: Path) -> None:
    """A plain close: the keeper's TERM reaches the root, a same-group child and a setsid
    child exactly once each (group, walk and cgroup no longer add up), then KILL."""
    log = project_dir / "terms.log"

    async def main() -> dict[str, int]:
        with Registry() as reg:
            proc = await spawn_agent(spec([*TERM_COUNTER, str(log)], project_dir), reg)
            tree: dict[str, int] = await Lines(proc).wait_ready()
            report = await proc.aclose(TerminationReason.CLOSE)
            assert report.survivors == ()
            assert report.escalated  # they all ignore TERM: KILL after the grace
            return tree

    tree = asyncio.run(main())
    counts = _terms(log)
    assert {kind: counts[pid] for kind, pid in tree.items()} == {
        "root": 1,
        "same": 1,
        "setsid": 1,
    }
