"""The visibility check: the seed's matrix, the monotonic chain, and the wildcard rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.policy.visibility import (
    A2APolicy,
    Action,
    Requester,
    Row,
    Visibility,
    can_see,
    can_spawn,
    effective_visibility,
    glob_match,
    visible,
)

ME = "s-claude-planner"
ROWS = {
    "own": Row(key=ME, agent_id="claude"),
    "same-agent": Row(key="s-claude-other", agent_id="claude"),
    "cross-agent": Row(key="s-codex-other", agent_id="codex"),
    "owned-cross-agent": Row(key="s-codex-child", agent_id="codex", spawned_by=ME),
    "unrelated": Row(key="s-gemini-far", agent_id="gemini"),
}
# "cross-agent" is an agent the allow list admits; "unrelated" one it does not.
A2A = {
    "on": A2APolicy(enabled=True, allow=("claude", "codex")),
    "off": A2APolicy(enabled=False, allow=("claude", "codex")),
}
Y, N = True, False
# (visibility, a2a) -> row kind -> (allowed, allowed when the requester is sandboxed)
MATRIX: dict[tuple[str, str], dict[str, tuple[bool, bool]]] = {
    ("self", "off"): {
        "own": (Y, Y),
        "same-agent": (N, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (N, N),
        "unrelated": (N, N),
    },
    ("self", "on"): {
        "own": (Y, Y),
        "same-agent": (N, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (N, N),
        "unrelated": (N, N),
    },
    ("tree", "off"): {
        "own": (Y, Y),
        "same-agent": (N, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
    ("tree", "on"): {
        "own": (Y, Y),
        "same-agent": (N, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
    ("agent", "off"): {
        "own": (Y, Y),
        "same-agent": (Y, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
    ("agent", "on"): {
        "own": (Y, Y),
        "same-agent": (Y, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
    ("all", "off"): {
        "own": (Y, Y),
        "same-agent": (Y, N),
        "cross-agent": (N, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
    ("all", "on"): {
        "own": (Y, Y),
        "same-agent": (Y, N),
        "cross-agent": (Y, N),
        "owned-cross-agent": (Y, Y),
        "unrelated": (N, N),
    },
}
ACTIONS = [Action.LIST, Action.HISTORY, Action.SEND, Action.STATUS, Action.WATCH, Action.CLOSE]
CASES = [
    (vis, a2a, kind, sandboxed, action)
    for (vis, a2a), kinds in MATRIX.items()
    for kind in kinds
    for sandboxed in (False, True)
    for action in ACTIONS
]


@pytest.mark.parametrize(("vis", "a2a", "kind", "sandboxed", "action"), CASES)
def test_matrix(vis: str, a2a: str, kind: str, sandboxed: bool, action: Action) -> None:
    """Each cell of the seed's matrix: every action gets the same answer."""
    requester = Requester(session_key=ME, agent_id="claude", sandboxed=sandboxed)
    decision = can_see(ROWS[kind], requester, Visibility(vis), A2A[a2a], action)
    assert decision.allowed is MATRIX[(vis, a2a)][kind][sandboxed], decision
    if not decision.allowed:
        assert decision.why.startswith(f"{action.value} of session {ROWS[kind].key} denied")


def test_matrix_covers_the_seed() -> None:
    """The table has every level x a2a x row kind; the parametrisation runs them all."""
    assert set(MATRIX) == set(itertools.product([v.value for v in Visibility], ["off", "on"]))
    assert len(CASES) == 4 * 2 * 5 * 2 * 6


def test_operator_sees_everything() -> None:
    for row in ROWS.values():
        decision = can_see(row, None, Visibility.SELF, A2APolicy())
        assert decision.allowed
        assert decision.rule == "operator"


@pytest.mark.parametrize(
    ("kind", "rule"),
    [
        ("same-agent", "visibility=tree"),
        ("cross-agent", "visibility=tree"),
    ],
)
def test_denials_name_their_rule_under_tree(kind: str, rule: str) -> None:
    decision = can_see(ROWS[kind], Requester(ME, "claude"), Visibility.TREE, A2A["on"])
    assert (decision.allowed, decision.rule) == (False, rule)
    assert "visibility is tree" in decision.why


def test_denial_rules_under_all() -> None:
    """Under all, each cross-agent denial says which a2a setting refused it."""
    req = Requester(ME, "claude")
    off = can_see(ROWS["cross-agent"], req, Visibility.ALL, A2A["off"])
    assert (off.allowed, off.rule) == (False, "agentToAgent.enabled")
    far = can_see(ROWS["unrelated"], req, Visibility.ALL, A2A["on"])
    assert (far.allowed, far.rule) == (False, "agentToAgent.allow")


def test_owned_by_each_relationship() -> None:
    """ownerSessionKey, spawnedBy and parentSessionKey each make a row the requester's."""
    req = Requester(ME, "claude")
    for field in ("owner_session_key", "spawned_by", "parent_session_key"):
        row = Row(key="k", agent_id="codex", **{field: ME})
        assert can_see(row, req, Visibility.TREE, A2APolicy()).rule == "owned"


def test_tree_is_not_transitive() -> None:
    """A grandchild belongs to the child's tree, not the grandparent's (module doc)."""
    grandchild = Row(key="g", agent_id="claude", spawned_by="s-codex-child")
    assert not can_see(grandchild, Requester(ME, "claude"), Visibility.TREE, A2APolicy()).allowed


def test_clamp_to_self_for_unproven_identity() -> None:
    req = Requester(ME, "claude", clamp=Visibility.SELF)
    assert effective_visibility(Visibility.ALL, req) is Visibility.SELF
    decision = can_see(ROWS["owned-cross-agent"], req, Visibility.ALL, A2A["on"])
    assert not decision.allowed
    assert "unproven" in decision.why
    assert can_see(ROWS["own"], req, Visibility.ALL, A2A["on"]).allowed


def test_sandbox_clamp_never_widens_self() -> None:
    req = Requester(ME, "claude", sandboxed=True)
    assert effective_visibility(Visibility.SELF, req) is Visibility.SELF
    assert effective_visibility(Visibility.ALL, req) is Visibility.TREE


def test_visible_filters_in_order() -> None:
    rows = list(ROWS.values())
    keys = [r.key for r in visible(rows, Requester(ME, "claude"), Visibility.TREE, A2APolicy())]
    assert keys == [ME, "s-codex-child"]


# --- the invariant ------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])
AGENTS = st.sampled_from(["claude", "Claude", "codex", "gemini", ""])
ROW_ST = st.builds(
    Row,
    key=KEYS,
    agent_id=AGENTS,
    owner_session_key=st.none() | KEYS,
    spawned_by=st.none() | KEYS,
    parent_session_key=st.none() | KEYS,
)
REQ_ST = st.none() | st.builds(
    Requester,
    session_key=KEYS,
    agent_id=AGENTS,
    sandboxed=st.booleans(),
    clamp=st.none() | st.sampled_from(Visibility),
)
POLICY_ST = st.builds(
    A2APolicy,
    enabled=st.booleans(),
    allow=st.lists(st.sampled_from(["", "*", "claude", "c*", "*ex", "GEM*"]), max_size=3),
)


@given(ROW_ST, REQ_ST, POLICY_ST, st.sampled_from(Action))
def test_levels_form_a_chain(row: Row, req: Requester | None, a2a: A2APolicy, act: Action) -> None:
    """self ⊆ tree ⊆ agent ⊆ all: in particular all is never less capable than tree."""
    allowed = [can_see(row, req, v, a2a, act).allowed for v in Visibility]
    assert allowed == sorted(allowed), allowed  # False... then True...
    assert can_see(row, req, Visibility.ALL, a2a, act).allowed >= (
        can_see(row, req, Visibility.TREE, a2a, act).allowed
    )


@given(ROW_ST, REQ_ST, POLICY_ST)
def test_action_never_changes_the_outcome(row: Row, req: Requester | None, a2a: A2APolicy) -> None:
    for vis in Visibility:
        outcomes = {can_see(row, req, vis, a2a, act).allowed for act in Action}
        assert len(outcomes) == 1


# --- agent-to-agent patterns --------------------------------------------------------------


def test_exact_patterns_are_case_sensitive() -> None:
    policy = A2APolicy(enabled=True, allow=("Codex", "claude"))
    assert policy.allows("claude", "Codex")
    assert not policy.allows("claude", "codex")


def test_wildcards_are_case_insensitive() -> None:
    policy = A2APolicy(enabled=True, allow=("cl*", "*EX"))
    assert policy.allows("CLAUDE", "codex")
    assert not policy.allows("claude", "gemini")


def test_blank_pattern_denies_and_empty_list_allows() -> None:
    assert not A2APolicy(enabled=True, allow=("  ",)).allows("claude", "codex")
    assert A2APolicy(enabled=True, allow=()).allows("claude", "codex")


def test_same_agent_always_allowed() -> None:
    assert A2APolicy(enabled=False, allow=("",)).allows("claude", "claude")


def test_disabled_denies_cross_agent_even_if_listed() -> None:
    assert not A2APolicy(enabled=False, allow=("*",)).allows("claude", "codex")


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("*", "", True),
        ("a*", "abc", True),
        ("*c", "abc", True),
        ("a*c", "ac", True),
        ("a*c", "abbbc", True),
        ("ab*ba", "aba", False),  # prefix and suffix may not overlap
        ("*b*b*", "abab", True),
        ("*b*b*", "ab", False),
        ("a**b", "ab", True),
        ("*x*y*", "yx", False),
        ("Co*EX", "codex", True),
        ("abc", "ABC", True),  # glob_match itself is always case-insensitive
    ],
)
def test_glob_match(pattern: str, text: str, expected: bool) -> None:
    assert glob_match(pattern, text) is expected


@given(st.text(alphabet="ab*", max_size=8), st.text(alphabet="abAB", max_size=10))
def test_glob_agrees_with_fnmatch(pattern: str, text: str) -> None:
    """An independent oracle: fnmatch (regex-based) on lower-cased, metachar-free input."""
    import fnmatch

    assert glob_match(pattern, text) is fnmatch.fnmatchcase(text.lower(), pattern.lower())


def test_backtracking_guard() -> None:
    """A pattern that makes a backtracking matcher exponential costs linear steps here."""
    text = "a" * 20_000
    pattern = "*a" * 40 + "*b*"  # a backtracking matcher tries every placement of the as
    steps: list[int] = []
    assert glob_match(pattern, text, steps) is False
    assert steps[0] <= 3 * (len(text) + len(pattern))
    near_miss = "a" * 5_000 + "c"
    steps.clear()
    assert glob_match("*aaaaaaaaaaaaaaaaaaab*", near_miss, steps) is False
    assert steps[0] <= 3 * (len(near_miss) + 22)


# --- spawning: the agent-to-agent policy limits it ---------------------------------------


@pytest.mark.parametrize(
    ("requester_agent", "target", "a2a", "expected"),
    [
        pytest.param("claude", "claude", A2APolicy(enabled=False), (Y, "same-agent"), id="same"),
        pytest.param(
            "claude", "codex", A2APolicy(enabled=False), (N, "agentToAgent.enabled"), id="off"
        ),
        pytest.param("claude", "codex", A2A["on"], (Y, "agentToAgent"), id="on-both-allowed"),
        pytest.param(
            "claude", "gemini", A2A["on"], (N, "agentToAgent.allow"), id="on-target-not-allowed"
        ),
        pytest.param(
            "gemini", "codex", A2A["on"], (N, "agentToAgent.allow"), id="on-requester-not-allowed"
        ),
        pytest.param(
            "", "codex", A2APolicy(enabled=True), (N, "agentToAgent.allow"), id="unknown-agent"
        ),
        pytest.param(
            "claude",
            "codex",
            A2APolicy(enabled=True, allow=("",)),
            (N, "agentToAgent.allow"),
            id="blank-pattern-denies",
        ),
    ],
)
def test_can_spawn(
    requester_agent: str, target: str, a2a: A2APolicy, expected: tuple[bool, str]
) -> None:
    req = Requester(session_key=ME, agent_id=requester_agent)
    decision = can_spawn(req, target, a2a)
    assert (decision.allowed, decision.rule) == expected
    if not decision.allowed:
        assert target in decision.why


def test_the_operator_spawns_anything() -> None:
    assert can_spawn(None, "codex", A2APolicy(enabled=False)).allowed


@given(
    st.sampled_from(["claude", "codex", "gemini"]),
    st.sampled_from(["claude", "codex", "gemini"]),
    st.sampled_from(list(A2A.values())),
    st.booleans(),
)
def test_spawn_follows_the_policy_whatever_the_sandbox(
    mine: str, target: str, a2a: A2APolicy, sandboxed: bool
) -> None:
    """Spawning is allowed exactly when the agent-to-agent policy allows the pair."""
    req = Requester(session_key=ME, agent_id=mine, sandboxed=sandboxed)
    assert can_spawn(req, target, a2a).allowed is a2a.allows(mine, target)
