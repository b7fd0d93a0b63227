"""The gateway's SSE stream across an owner lost mid-turn (issue 21 item 3): it sends
the journal_gap record that names the hole, in seq order, with no duplicate."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from tests.integration._serve import Gateway, gateway
from tests.integration.test_owner import alive, signal_descendant, wait_for

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def test_the_sse_stream_sends_the_gap_after_an_owner_was_lost(
    gateway: Gateway, project_dir: Path
) -> None:
    sid = gateway.ensure(project_dir)
    first = gateway.prompt(sid, "stream 2000 x ; sleep 30000")
    wait_for(
        lambda: len(gateway.http.get(f"/v1/sessions/{sid}/export").text.splitlines()) > 2000,
        "the stream to be stored",
    )
    owner = gateway.http.get(f"/v1/sessions/{sid}").json()["ownerPid"]
    signal_descendant(owner, signal.SIGKILL)
    wait_for(lambda: not alive(owner), "the owner to die")
    second = gateway.prompt(sid, "echo after")  # a new owner
    seen = gateway.until_turn_end(sid, second["requestId"], query="?from=1")
    seqs = [e["seq"] for e in seen]
    assert seqs == sorted(set(seqs))  # in order, none twice
    gaps = [e for e in seen if e["kind"] == "journal_gap"]
    assert [g["reason"] for g in gaps] == ["owner-lost"]
    before = seen[seen.index(gaps[0]) - 1]
    assert gaps[0]["after"] == before["seq"]
    ended = {e["requestId"]: e.get("stopReason") for e in seen if e["kind"] == "turn_ended"}
    assert ended == {first["requestId"]: "owner-lost", second["requestId"]: "end_turn"}
