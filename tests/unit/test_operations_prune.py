"""``operations.prune``: the one prune every door calls -- scoped to an agent's sessions
(or every agent's), a dry run that changes nothing, removed sessions' run files gone."""

from __future__ import annotations

import os

from tether import operations, sessions
from tether.state.registry import Registry


def _closed(reg: Registry, scope: str, name: str) -> str:
    key = sessions.session_key(scope, "/", name)
    reg.upsert_session(key=key, name=name, agent_command=["a"], agent_label=scope, cwd="/")
    reg.journal_append(key, "owner_started", {})
    reg.update_session(key, state="closed")
    return key


def test_prune_is_an_operation_scoped_to_one_agent_and_dry_runs() -> None:
    """Only the named agent's closed sessions go; a dry run reports the same, removes none."""
    with Registry() as reg:
        mine, theirs = _closed(reg, "agent-a", "x"), _closed(reg, "agent-b", "y")
    os.makedirs(os.path.dirname(sessions.lock_path(mine)), exist_ok=True)
    with open(sessions.lock_path(mine), "w"):
        pass
    dry = operations.prune(closed=True, agent_scope="agent-a", dry_run=True)
    assert dry == {
        "entriesRemoved": 1,
        "eventsRemoved": 0,
        "sessionsRemoved": [mine],
        "dryRun": True,
    }
    assert os.path.exists(sessions.lock_path(mine))
    report = operations.prune(closed=True, agent_scope="agent-a")
    assert {**report, "dryRun": True} == dry
    assert not os.path.exists(sessions.lock_path(mine))  # its run files went with it
    with Registry() as reg:
        assert reg.session(mine) is None
        assert reg.session(theirs) is not None
        assert reg.journal_last_seq(theirs) == 1
    assert operations.prune(closed=True)["sessionsRemoved"] == [theirs]  # every agent's


def test_prune_is_exported_like_the_other_operations() -> None:
    assert "prune" in operations.__all__
    from tether.operations.pruning import prune

    assert operations.prune is prune
