"""Permission policies: the three modes as presets, policy files by kind and title."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.acp.policy import (
    Decision,
    PermissionMode,
    PermissionPolicy,
    PolicyInvalid,
    decide,
    load_policy,
)

POLICY = """
default = "ask"

[[rule]]
kind = ["read", "search"]
decision = "allow"

[[rule]]
title = "git push*"
decision = "deny"

[[rule]]
kind = "execute"
title = "make *"
decision = "allow"
"""


@pytest.mark.parametrize("mode", list(PermissionMode))
@pytest.mark.parametrize("kind", ["read", "search", "edit", "execute", None])
def test_the_modes_are_presets(mode: PermissionMode, kind: str | None) -> None:
    """Each mode decides exactly as its preset policy does."""
    call = {"kind": kind, "title": "t"} if kind else {}
    assert decide(mode, call) is decide(PermissionPolicy.preset(mode), call)


def test_a_policy_file_first_match_wins(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    policy = load_policy(str(path))
    cases = {
        ("read", "cat x"): Decision.ALLOW,
        ("execute", "git push origin main"): Decision.REJECT,
        ("execute", "make test"): Decision.ALLOW,
        ("execute", "make"): Decision.ASK,  # "make *" needs the space
        ("edit", "deploy.yaml"): Decision.ASK,
    }
    for (kind, title), expected in cases.items():
        assert policy.decide({"kind": kind, "title": title}) is expected, (kind, title)
    assert load_policy("deny-all").decide({"kind": "read"}) is Decision.REJECT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param('default = "maybe"', "default must be allow, deny or ask", id="bad-default"),
        pytest.param("[[rule]]\nkind = 'x'", "needs a decision", id="no-decision"),
        pytest.param("[[rule]]\ndecision='allow'\ncolour=1", "unknown key 'colour'", id="key"),
        pytest.param("[[rule]]\ndecision='allow'\nkind=3", "kind must be", id="kind-type"),
        pytest.param("rules = 1", "unknown key 'rules'", id="top-level-key"),
        pytest.param("default = ", "not valid TOML", id="toml"),
    ],
)
def test_a_bad_policy_file_is_refused_with_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(PolicyInvalid, match=message):
        load_policy(str(path))


def test_a_missing_file() -> None:
    with pytest.raises(PolicyInvalid, match="cannot read"):
        load_policy("/nonexistent/policy.toml")
