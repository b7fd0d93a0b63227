"""The owner's door check: the operator's path reads no registry, a peer the kernel
cannot name is refused, a marked peer is proven, and the cascade's authority is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tether import _os
from tether.errors import VisibilityDenied
from tether.ipc import protocol
from tether.owner.gate import ACTIONS, PeerGate
from tether.policy import access
from tether.policy.requester import Resolved, peer_environ
from tether.policy.visibility import Requester
from tether.state.registry import Registry


def request(kind: str, payload: dict[str, Any] | None = None) -> protocol.Envelope:
    line = protocol.encode(
        {"v": protocol.VERSION, "requestId": "r1", "kind": kind, "payload": payload or {}}
    )
    return protocol.parse_request(line)


class NoRegistry:
    """Any use of the registry fails the test: the operator's path must not read it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the registry was read ({name})")


@pytest.fixture
def outside_every_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_SESSION_KEY", "TETHER_LEASE_ID"):
        monkeypatch.delenv(name, raising=False)
    if access.could_be_agent():
        pytest.skip("the test run itself sits inside an agent tree")


@pytest.mark.usefixtures("outside_every_tree")
@pytest.mark.parametrize("kind", sorted(k for k in ACTIONS if k in protocol.KINDS))
def test_the_operator_is_let_through_without_a_registry_read(kind: str) -> None:
    gate = PeerGate("k", NoRegistry(), "/")  # type: ignore[arg-type]
    payload = {
        "prompt": {"prompt": [{"type": "text", "text": "hi"}]},
        "set_mode": {"modeId": "plan"},
        "set_config_option": {"configId": "model", "value": "x"},
        "answer": {"interactionId": "i", "answer": "allow"},
        "relay_answer": {"relayId": "x-1", "result": {}},
    }.get(kind, {})
    gate.check(request(kind, payload), {"pid": os.getpid(), "uid": os.getuid()})


def test_a_peer_the_kernel_does_not_name_is_refused() -> None:
    gate = PeerGate("k", NoRegistry(), "/")  # type: ignore[arg-type]
    with pytest.raises(VisibilityDenied) as info:
        gate.check(request("status"), {})
    assert info.value.fields["rule"] == "peer-unknown"


@pytest.fixture
def marked_peer() -> Iterator[int]:
    """A process outside every tree whose environment claims session `claimed`."""
    env = {**os.environ, "TETHER_SESSION_KEY": "claimed"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env=env,
        stdin=subprocess.PIPE,
    )
    try:
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # it exits on EOF: no signal needed
        proc.wait(timeout=30)


def _session(reg: Registry, key: str, **owner: object) -> None:
    reg.upsert_session(
        key=key, name=key, agent_command=["x"], agent_label="mock", cwd="/", owner=owner
    )


def test_a_marked_peer_is_proven_and_an_unproven_claim_gets_self(marked_peer: int) -> None:
    assert peer_environ(marked_peer)["TETHER_SESSION_KEY"] == "claimed"
    with Registry() as reg:
        _session(reg, "claimed")
        _session(reg, "other")
        PeerGate("claimed", reg, "/").check(request("status"), {"pid": marked_peer})
        with pytest.raises(VisibilityDenied) as info:
            PeerGate("other", reg, "/").check(request("status"), {"pid": marked_peer})
    assert info.value.fields["rule"] == "visibility=self"
    assert "unproven" in info.value.message
    assert info.value.message.startswith("status of session other denied")


def test_a_kind_added_later_is_checked_as_send(marked_peer: int) -> None:
    """No request goes unchecked: a kind the gate does not list counts as driving."""
    future = protocol.Envelope("r1", "a_kind_from_the_future", {}, None, None)
    with Registry() as reg:
        _session(reg, "other")
        with pytest.raises(VisibilityDenied) as info:
            PeerGate("other", reg, "/").check(future, {"pid": marked_peer})
    assert info.value.message.startswith("send of session other denied")


def test_clean_ancestors_are_remembered_and_marked_peers_never(marked_peer: int) -> None:
    """The walk stops at a process known clean; a marked process is not remembered."""
    me = os.getpid()
    with open(f"/proc/{me}/stat", "rb") as f:
        raw = f.read()
    start = int(raw[raw.rfind(b")") + 2 :].split()[19])
    clean = {me: start}
    assert access.could_be_agent(marked_peer, clean=clean) is True
    assert marked_peer not in clean
    quiet = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_SESSION")},
        stdin=subprocess.PIPE,
    )
    try:
        if access.could_be_agent():
            pytest.skip("the test run itself sits inside an agent tree")
        assert access.could_be_agent(quiet.pid, clean=clean) is False
        # Only the new process was walked: the walk stopped at us.
        assert set(clean) == {me, quiet.pid}
    finally:
        assert quiet.stdin is not None
        quiet.stdin.close()
        quiet.wait(timeout=30)


def test_the_cascade_reaches_descendants_of_what_the_requester_may_close() -> None:
    """Under tree, the grandchild is out of view -- but closing it as part of closing the
    child (which the requester owns) is allowed; naming an unrelated root is not."""
    with Registry() as reg:
        _session(reg, "me")
        _session(reg, "kid", spawned_by="me", parent_session_key="me")
        _session(reg, "grand", spawned_by="kid", parent_session_key="kid")
        _session(reg, "stranger")
        _session(reg, "strangers-kid", spawned_by="stranger", parent_session_key="stranger")
        grand = reg.session("grand")
        theirs = reg.session("strangers-kid")
        assert grand is not None
        assert theirs is not None
        me = Resolved(Requester(session_key="me", agent_id="mock"), "test")

        def check(session: Any, action: str, root: str | None) -> None:
            access.check_session(reg, session, me, action, cfg={}, cascade_from=root)

        with pytest.raises(VisibilityDenied):
            check(grand, "close", None)
        check(grand, "close", "kid")
        check(grand, "terminate", "me")
        with pytest.raises(VisibilityDenied):
            check(grand, "send", "kid")  # the cascade is about ending, nothing else
        with pytest.raises(VisibilityDenied):
            check(theirs, "close", "stranger")  # a root the requester may not close
        with pytest.raises(VisibilityDenied):
            check(theirs, "close", "me")  # not a descendant of the named root


def test_spawn_owner_marks_sandboxed_sessions_and_their_children() -> None:
    op = Resolved(None, "operator")
    assert access.spawn_owner(op, "mock")["sandboxed"] is False
    assert access.spawn_owner(op, "mock", sandboxed=True)["sandboxed"] is True
    boxed = Resolved(Requester(session_key="box", agent_id="mock", sandboxed=True), "t")
    fields = access.spawn_owner(boxed, "mock")
    assert (fields["sandboxed"], fields["spawned_by"]) == (True, "box")


def test_authorize_spawn_names_the_rule() -> None:
    me = Resolved(Requester(session_key="me", agent_id="claude"), "t")
    access.authorize_spawn(me, "claude", cfg={})
    with pytest.raises(VisibilityDenied) as info:
        access.authorize_spawn(me, "codex", cfg={})
    assert info.value.fields["rule"] == "agentToAgent.enabled"
    access.authorize_spawn(
        me, "codex", cfg={"agentToAgent": {"enabled": True, "allow": ["claude", "codex"]}}
    )


def test_a_recorded_member_that_moved_away_cannot_answer_its_own_session() -> None:
    """Issue 20: a process Tether recorded inside the session's run -- now outside every
    tree, no marker, no claim -- may read its own session but never answer for it."""
    quiet = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_")},
        stdin=subprocess.PIPE,
    )
    try:
        with open(f"/proc/{quiet.pid}/stat", "rb") as f:
            raw = f.read()
        start = int(raw[raw.rfind(b")") + 2 :].split()[19])
        with Registry() as reg:
            _session(reg, "k")
            reg.record_members(
                "lease-k", "k", _os.current().boot_id(), [(quiet.pid, start)], "adopted"
            )
            gate = PeerGate("k", reg, "/")
            gate.check(request("status"), {"pid": quiet.pid})
            answer = request("answer", {"interactionId": "i", "answer": "allow"})
            with pytest.raises(VisibilityDenied) as info:
                gate.check(answer, {"pid": quiet.pid})
        assert info.value.fields["rule"] == "own-agent-tree"
    finally:
        assert quiet.stdin is not None
        quiet.stdin.close()
        quiet.wait(timeout=30)
