"""A host's requester assertion and index rows under the one visibility check (no I/O)."""

from __future__ import annotations

import dataclasses

import pytest

from tether.fleet.delegation import (
    Assertion,
    action_of,
    check_assertion,
    parse_assertion,
    requester_may_use,
    requester_of,
    row_of,
    spawn_ownership,
)
from tether.fleet.rows import Ownership, SessionRow
from tether.policy.visibility import A2APolicy, Action, Requester, Visibility, can_see, visible

PARENT, CHILD, OTHER = "p" * 64, "c" * 64, "o" * 64


def session(sid: str, host: str = "h1", agent: str = "mock", **fields: object) -> SessionRow:
    row = SessionRow(
        session_id=sid, scope="default", agent=agent, cwd="/w", name=sid[:4], state="open",
        host_id=host, host_epoch=1, local_key=sid, durable_seq=0,
    )  # fmt: skip
    return dataclasses.replace(row, **fields)  # type: ignore[arg-type]


def test_an_assertion_round_trips_through_its_header() -> None:
    """What a door encodes is what a router parses, clamp and sandbox included."""
    for clamp in (None, Visibility.SELF):
        sent = Assertion("h1", PARENT, "mock", sandboxed=True, clamp=clamp)
        assert parse_assertion(sent.encode()) == sent


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param(b"not json", "not JSON", id="not-json"),
        pytest.param(b"[1]", "not a JSON object", id="array"),
        pytest.param(b'{"host":"h1"}', "needs a host and a session", id="no-session"),
        pytest.param(b'{"host":"","session":"x"}', "needs a host and a session", id="empty"),
        pytest.param(b'{"host":"h","session":"x","agent":3}', "agent must", id="agent"),
        pytest.param(b'{"host":"h","session":"x","sandboxed":"y"}', "sandboxed", id="flag"),
        pytest.param(b'{"host":"h","session":"x","clamp":"most"}', "clamp", id="clamp"),
        pytest.param(b"{" + b" " * 5000 + b"}", "over", id="too-large"),
    ],
)
def test_a_malformed_assertion_is_said_not_raised(raw: bytes, why: str) -> None:
    """Anything that is not an assertion comes back as the sentence saying why."""
    got = parse_assertion(raw)
    assert isinstance(got, str)
    assert why in got


def test_a_host_speaks_only_for_open_sessions_the_index_says_it_owns() -> None:
    """The asserted session must be in the index, open, and owned by the asserting host."""
    asserted = Assertion("h1", PARENT, "mock")
    assert check_assertion(asserted, session(PARENT)).allowed
    assert check_assertion(asserted, None).rule == "assertion.session"
    closed = check_assertion(asserted, session(PARENT, state="closed"))
    assert (closed.allowed, closed.rule) == (False, "assertion.session")
    other = check_assertion(asserted, session(PARENT, host="h2"))
    assert (other.allowed, other.rule) == (False, "assertion.host")
    assert "host h2 owns it" in other.why


def test_index_rows_map_onto_the_one_visibility_check() -> None:
    """A child row names its parent as owner, spawner and parent; ``tree`` sees it and
    not an unrelated row, exactly as on one host."""
    who = requester_of(Assertion("h1", PARENT, "mock"), session(PARENT))
    child = session(CHILD, host="h2", **dataclasses.asdict(spawn_ownership(who)))
    mapped = row_of(child)
    assert (mapped.key, mapped.agent_id) == (CHILD, "mock")
    assert mapped.owner_session_key == mapped.spawned_by == mapped.parent_session_key == PARENT
    rows = [row_of(session(PARENT)), mapped, row_of(session(OTHER))]
    assert [r.key for r in visible(rows, who, Visibility.TREE, A2APolicy())] == [PARENT, CHILD]
    assert [r.key for r in visible(rows, who, Visibility.AGENT, A2APolicy())] == [
        PARENT, CHILD, OTHER,
    ]  # fmt: skip
    denied = can_see(row_of(session(OTHER)), who, Visibility.TREE, A2APolicy(), Action.SEND)
    assert (denied.allowed, denied.rule) == (False, "visibility=tree")


def test_the_index_may_only_narrow_what_a_host_asserts() -> None:
    """A row that says sandboxed makes the requester sandboxed; a clamp is kept; an
    assertion without an agent takes the row's."""
    who = requester_of(
        Assertion("h1", PARENT, "", clamp=Visibility.SELF), session(PARENT, sandboxed=True)
    )
    assert who == Requester(PARENT, "mock", sandboxed=True, clamp=Visibility.SELF)
    assert requester_of(Assertion("h1", PARENT, "mock"), session(PARENT)).sandboxed is False


def test_a_requesters_spawn_is_its_own_and_keeps_its_sandbox() -> None:
    """The operator's sessions name no owner; a requester's name it thrice, and a
    sandboxed requester cannot shed the clamp by spawning."""
    assert spawn_ownership(None) == Ownership()
    boxed = spawn_ownership(Requester(PARENT, "mock", sandboxed=True))
    assert boxed == Ownership(PARENT, PARENT, PARENT, sandboxed=True)


@pytest.mark.parametrize(
    ("method", "path", "action"),
    [
        (b"GET", "/v1/sessions/x", Action.STATUS),
        (b"DELETE", "/v1/sessions/x", Action.CLOSE),
        (b"POST", "/v1/sessions/x/prompt", Action.SEND),
        (b"POST", "/v1/sessions/x/cancel", Action.CANCEL),
        (b"POST", "/v1/sessions/x/terminate", Action.TERMINATE),
        (b"POST", "/v1/sessions/x/mode", Action.SET),
        (b"POST", "/v1/sessions/x/config", Action.SET),
        (b"GET", "/v1/sessions/x/events", Action.WATCH),
        (b"GET", "/v1/sessions/x/history", Action.HISTORY),
        (b"GET", "/v1/sessions/x/export", Action.HISTORY),
        (b"POST", "/v1/sessions/x/questions/q1", Action.ANSWER),
        (b"POST", "/v1/sessions/x/rehome", Action.CLOSE),
        (b"POST", "/v1/sessions", Action.SEND),
    ],
)
def test_each_route_names_its_action(method: bytes, path: str, action: Action) -> None:
    assert action_of(method, path) is action


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/sessions", True),
        ("/v1/sessions/x/prompt", True),
        ("/v1/fleet/hosts", True),
        ("/v1/health", True),
        ("/v1/acp/server-1", False),
        ("/v1/metrics", False),
        ("/v1/sessionsX", False),
    ],
)
def test_requesters_reach_only_the_routes_that_are_checked(path: str, allowed: bool) -> None:
    """A route the router gains later is the operator's until it checks requesters."""
    assert requester_may_use(path) is allowed


def test_a_host_learns_its_router_from_the_environment_and_a_router_ignores_it() -> None:
    """``TETHER_FLEET_ROUTER`` opens a host's agents' door; a router has none to open."""
    from tether.cli._parse import parse
    from tether.errors import UsageError
    from tether.fleet.command import fleet_args

    env = {
        "TETHER_FLEET_INDEX": "postgresql://tether@db/tether",
        "TETHER_FLEET_TOKEN": "fleet-credential-0123456789abcdef",
        "TETHER_FLEET_ROUTER": "http://router:8787",
    }
    host = fleet_args(parse(["serve", "--host-id", "h1"]), env)
    assert host is not None
    assert host.router_url == "http://router:8787"
    router = fleet_args(parse(["serve", "--router"]), env)
    assert router is not None
    assert router.router_url is None
    with pytest.raises(UsageError, match="http://"):
        fleet_args(parse(["serve"]), {**env, "TETHER_FLEET_ROUTER": "router:8787"})
    plain = fleet_args(parse(["serve"]), {k: v for k, v in env.items() if "ROUTER" not in k})
    assert plain is not None
    assert plain.router_url is None


def test_an_assertion_a_caller_sent_is_never_passed_on() -> None:
    """Only a door writes the header (after the caller's are dropped), only a router reads
    it: a relayed head carries the door's own assertion, or none."""
    from tether.fleet import http1
    from tether.fleet.delegation import ASSERTION_HEADER

    forged = Assertion("h9", OTHER, "mock").encode()
    head = http1.RequestHead(b"GET", b"/v1/sessions", [(ASSERTION_HEADER, forged)])
    assert forged not in http1.encode_request_head(head, b"router")
    own = Assertion("h1", PARENT, "mock").encode()
    sent = http1.encode_request_head(head, b"router", [(ASSERTION_HEADER, own)])
    assert sent.count(ASSERTION_HEADER) == 1
    assert own in sent
