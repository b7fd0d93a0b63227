"""The gateway's warm paths, against a real gateway and real owners: a prompt submitted
from the event loop to a live owner, a session's hub kept warm between streams, and the
full path taken when no owner is running. Whichever path, ``fromSeq`` is a cursor
before every entry of the turn, and the stream from it shows each entry once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration._serve import Gateway, gateway, spawn_gateway

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = pytest.mark.integration
__all__ = ["gateway"]


def stored(gw: Gateway, sid: str, upto: int) -> list[dict[str, Any]]:
    """The stored journal once it holds seq ``upto`` (an owner commits right after it
    relays)."""
    deadline = time.monotonic() + 10
    while True:
        lines = gw.http.get(f"/v1/sessions/{sid}/export").text.splitlines()
        entries = [json.loads(line) for line in lines]
        if (entries and entries[-1]["seq"] >= upto) or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)


def check_turn(gw: Gateway, sid: str, text: str) -> None:
    """Prompt, stream from ``fromSeq``: the whole turn, gapless, as stored."""
    turn = gw.prompt(sid, text)
    rid = turn["requestId"]
    seen = gw.until_turn_end(sid, rid, query=f"?from={turn['fromSeq']}")
    seqs = [e["seq"] for e in seen]
    assert seqs == list(range(turn["fromSeq"], turn["fromSeq"] + len(seqs)))
    journal = stored(gw, sid, seqs[-1])
    mine = [e for e in journal if e.get("requestId") == rid]
    assert mine
    assert mine[0]["seq"] >= turn["fromSeq"]  # no entry of the turn before the cursor
    assert [e for e in seen if e.get("requestId") == rid] == mine


def metric(gw: Gateway, name: str) -> int:
    for line in gw.http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"no metric {name}")


def test_prompts_on_a_live_owner_stream_each_turn_whole(
    gateway: Gateway, project_dir: Path
) -> None:
    """Back-to-back prompts (submitted from the loop, the session's hub warm after the
    first stream): every turn from its fromSeq, once; the hub outlives its stream."""
    sid = gateway.ensure(project_dir)
    for i in range(5):
        check_turn(gateway, sid, f"echo round {i}")
    assert metric(gateway, "tether_serve_sse_clients") == 0
    assert metric(gateway, "tether_serve_sse_sessions") == 1  # warm for the next stream
    assert metric(gateway, 'tether_serve_prompts_total{path="loop"}') == 5
    check_turn(gateway, sid, "stream 300 warm")


def test_a_prompt_with_no_owner_running_starts_one(tether_home: Path, project_dir: Path) -> None:
    """An owner that retired on its idle TTL: the prompt takes the full path (which
    starts a new owner), and the warm hub follows the session onto the new owner."""
    gw = spawn_gateway(tether_home)
    try:
        sid = gw.ensure(project_dir, ttl=1)
        check_turn(gw, sid, "echo first")
        before = gw.http.get(f"/v1/sessions/{sid}").json()["status"]
        deadline = time.monotonic() + 30
        while gw.http.get(f"/v1/sessions/{sid}").json()["status"].get("ownerPid"):
            assert time.monotonic() < deadline, "the owner did not retire"
            time.sleep(0.2)
        threads = metric(gw, 'tether_serve_prompts_total{path="thread"}')
        check_turn(gw, sid, "echo after the owner retired")
        assert metric(gw, 'tether_serve_prompts_total{path="thread"}') == threads + 1
        after = gw.http.get(f"/v1/sessions/{sid}").json()["status"]
        assert after["ownerPid"] != before["ownerPid"]
    finally:
        gw.close_all()
        gw.stop()
