"""The glue around the check: the thin-path hint and the configured policy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tether.errors import UsageError
from tether.policy import access
from tether.policy.visibility import Visibility


def test_outside_every_tree_is_not_an_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_SESSION_KEY", "TETHER_LEASE_ID"):
        monkeypatch.delenv(name, raising=False)
    assert access.could_be_agent() is False


def test_a_claim_in_the_environment_needs_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_SESSION_KEY", "k")
    assert access.could_be_agent() is True


def test_a_long_lived_process_walks_its_ancestry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its clean ancestors are remembered (they stay clean); a claim in its own
    environment still answers at once."""
    for name in ("TETHER_SESSION_KEY", "TETHER_LEASE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(access, "_SELF_CLEAN", {})
    looked: list[int] = []
    has_marker = access._has_marker

    def counted(pid: int) -> bool:
        looked.append(pid)
        return has_marker(pid)

    monkeypatch.setattr(access, "_has_marker", counted)
    assert access.could_be_agent() is False
    assert looked[0] == os.getpid()
    looked.clear()
    assert access.could_be_agent() is False
    assert looked == []
    monkeypatch.setenv("TETHER_LEASE_ID", "lease-x")
    assert access.could_be_agent() is True


def test_a_process_found_clean_reads_no_proc_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once this process was walked and found clean, asking again reads nothing (its own
    start time cannot change); a claim in its environment still answers at once, and a
    fresh memory (a forked child's pid differs) walks anew."""
    for name in ("TETHER_SESSION_KEY", "TETHER_LEASE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(access, "_SELF_CLEAN", {})
    read: list[int] = []
    stat = access._stat

    def counted(pid: int) -> tuple[int, int]:
        read.append(pid)
        return stat(pid)

    monkeypatch.setattr(access, "_stat", counted)
    assert access.could_be_agent() is False
    assert read[0] == os.getpid()
    read.clear()
    assert access.could_be_agent() is False
    assert read == []
    monkeypatch.setenv("TETHER_LEASE_ID", "lease-x")
    assert access.could_be_agent() is True
    monkeypatch.delenv("TETHER_LEASE_ID")
    monkeypatch.setattr(access, "_SELF_CLEAN", {})
    assert access.could_be_agent() is False
    assert read[0] == os.getpid()  # walked anew


def test_an_ancestor_marker_survives_a_cleared_environment() -> None:
    """A child that clears its environment still sits below a marked ancestor."""
    code = "import sys; from tether.policy import access; print(access.could_be_agent())"
    env = {**os.environ, "TETHER_LEASE_ID": "lease-x"}
    # The marked middle process (sh) runs a child with an empty environment.
    r = subprocess.run(
        ["/bin/sh", "-c", f'env -i PYTHONPATH="$PYTHONPATH" {sys.executable} -c "{code}"; :'],
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert r.stdout.strip() == "True", r.stderr


def test_policy_defaults_and_parsing() -> None:
    level, a2a = access.policy({})
    assert (level, a2a.enabled, tuple(a2a.allow)) == (Visibility.TREE, False, ())
    level, a2a = access.policy(
        {"sessions": {"visibility": "ALL"}, "agentToAgent": {"enabled": True, "allow": ["c*"]}}
    )
    assert (level, a2a.enabled) == (Visibility.ALL, True)
    assert a2a.allows("claude", "codex")
    assert access.close_children_enabled({}) is True


@pytest.mark.parametrize(
    "cfg",
    [
        {"sessions": {"visibility": "everyone"}},
        {"sessions": "tree"},
        {"agentToAgent": {"allow": "claude"}},
        {"agentToAgent": {"enabled": "yes"}},
        {"sessions": {"closeChildren": "no"}},
    ],
)
def test_bad_config_is_a_usage_error(cfg: dict[str, object]) -> None:
    def both() -> None:
        access.policy(cfg)
        access.close_children_enabled(cfg)

    with pytest.raises(UsageError):
        both()
