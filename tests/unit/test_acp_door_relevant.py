"""What the ACP door's journal follower decodes: the session's end, and other parties'
ACP frames; the door's own turns (relayed from their IPC stream) pass undecoded."""

from __future__ import annotations

from tether.acp_door.attach import Attachment
from tether.state.journal.entry import entry_line


def _acp(seq: int, rid: str | None) -> str:
    return entry_line(seq, 1.5, "acp", rid, '{"direction":"in","frame":{"method":"x"}}')


def test_own_turns_pass_undecoded_and_other_parties_are_decoded() -> None:
    att = Attachment("k" * 32)
    att.own_requests.add("mine-1")
    assert att._relevant(1, _acp(1, "mine-1")) == (1, None)
    seq, other = att._relevant(2, _acp(2, "theirs-1"))
    assert seq == 2
    assert other is not None
    assert other["requestId"] == "theirs-1"
    seq, no_rid = att._relevant(3, _acp(3, None))
    assert no_rid is not None
    assert no_rid["kind"] == "acp"
    # An id that merely starts like ours is not ours.
    assert att._relevant(4, _acp(4, "mine-10"))[1] is not None


def test_the_sessions_end_is_decoded_whoever_asked_for_it() -> None:
    att = Attachment("k" * 32)
    att.own_requests.add("mine-1")
    ended = entry_line(9, 2.0, "session_ended", "mine-1", '{"reason":"closed"}')
    assert att._relevant(9, ended)[1] == {
        "seq": 9,
        "at": 2.0,
        "kind": "session_ended",
        "requestId": "mine-1",
        "reason": "closed",
    }
    queued = entry_line(5, 1.0, "prompt_queued", "theirs", '{"text":"hi"}')
    assert att._relevant(5, queued) == (5, None)  # nothing the client is sent
