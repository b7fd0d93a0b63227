"""Text that is not Unicode: a lone surrogate a broken or hostile agent's JSON escapes, and
bytes a user typed that are not UTF-8.

JSON lets a peer escape a lone surrogate (``"\\ud800"``); what a reader decodes from it
cannot be encoded as UTF-8. Before, one such chunk from an agent ended ``prompt``,
``read`` and ``watch`` with an unexpected error and made the gateway's ``?wait=true``
answer and transcript a 500; one in a client's prompt killed the owner's journal writer,
leaving every later entry of the session unstored. Each reader now writes it as the
escape it came as; an HTTP body holding one is a 400, an argument that is not UTF-8 a
usage error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests._cli import run_tether
from tests.integration._acp_peer import AcpPeer, peer
from tests.integration._journal import count, journal_when
from tests.integration._serve import Gateway, gateway

from tether import operations

__all__ = ["gateway", "peer"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.integration

ESCAPE = "\\ud800"  # as the agent sent it, and as every reader writes it back


@pytest.fixture(autouse=True)
def _close_everything() -> Iterator[None]:
    yield
    for record in operations.list_sessions():
        operations.close_session(record["key"])


def test_an_agents_lone_surrogate_reaches_the_cli_as_its_escape(project_dir: Path) -> None:
    """``prompt`` (text and JSON), ``sessions read`` and ``sessions watch`` print the
    chunk with its escape and exit 0; each JSON line still parses."""
    assert run_tether("mock", "sessions", "new", cwd=project_dir).returncode == 0
    text = run_tether("mock", "prompt", "surrogate ; echo after", cwd=project_dir)
    assert text.returncode == 0, text.stderr
    assert f"lone {ESCAPE} surrogate" in text.stdout
    assert "after" in text.stdout
    as_json = run_tether("--format", "json", "mock", "prompt", "surrogate", cwd=project_dir)
    assert as_json.returncode == 0, as_json.stderr
    decoded = [json.loads(line) for line in as_json.stdout.splitlines() if line]
    chunks = [
        d["params"]["update"]["content"]["text"]
        for d in decoded
        if d.get("method") == "session/update"
        and d["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    assert chunks == ["lone \ud800 surrogate"]  # the JSON escape, decoded as it was sent
    for argv in (
        ("sessions", "read", "--tail", "2"),
        ("sessions", "watch", "--from", "1", "--no-follow"),
    ):
        shown = run_tether("mock", *argv, cwd=project_dir)
        assert shown.returncode == 0, (argv, shown.stderr)
        assert f"lone {ESCAPE} surrogate" in shown.stdout, argv
        assert "unexpected error" not in shown.stderr
    status = run_tether("--format", "json", "mock", "status", cwd=project_dir)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["sessionInfo"]["title"] == "title \ud800"
    assert "tool \\udfff" in text.stdout  # the tool call's title, as the agent escaped it
    later = run_tether("mock", "prompt", "echo later", cwd=project_dir)
    assert later.returncode == 0, later.stderr
    key = operations.list_sessions()[0]["key"]
    assert (
        len([e for e in journal_when(key, count("turn_ended", 3)) if e["kind"] == "turn_ended"])
        == 3
    )


def test_an_argument_that_is_not_utf8_is_a_usage_error(project_dir: Path) -> None:
    """Bytes that are not UTF-8 (Python keeps them as lone surrogates) can be neither
    stored nor sent to an agent: exit 2, the argument named as typed, nothing started."""
    result = run_tether("mock", "prompt", "echo a\udcffb", cwd=project_dir)
    assert result.returncode == 2, result.stderr
    assert "argument 5 (echo a\\xffb)" in result.stderr  # after --cwd DIR
    assert "is not valid UTF-8 text" in result.stderr
    assert "unexpected error" not in result.stderr
    assert operations.list_sessions() == []


def test_a_working_directory_whose_path_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    """ACP names an agent's cwd as text: a directory whose name is not UTF-8 is refused
    with a usage error naming it (it was an unexpected error from the database)."""
    bad = os.path.join(os.fsencode(tmp_path), b"bad\xffdir")
    os.mkdir(bad)
    result = subprocess.run(
        [sys.executable, "-m", "tether", "mock", "sessions", "new"],
        cwd=bad,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "bad\\xffdir is not valid UTF-8" in result.stderr
    assert "unexpected error" not in result.stderr
    assert operations.list_sessions() == []


def test_a_clients_lone_surrogate_never_costs_the_journal_its_writer(
    peer: Callable[..., AcpPeer],
) -> None:
    """An ACP client's prompt holding a lone surrogate is journaled with the escape, and
    the session's later turns are stored too (the writer thread died on it before)."""
    p = peer()
    p.initialize()
    sid = p.new_session()
    answer, _ = p.wait(p.start_prompt(sid, "hello \ud800 there"))
    del answer  # the mock agent's own encoder may refuse to echo it: the agent's business
    result, _ = p.prompt(sid, "echo still stored")
    assert result["stopReason"] == "end_turn"
    entries = journal_when(sid, count("turn_ended", 2))
    queued = [e for e in entries if e["kind"] == "prompt_queued"]
    assert [q["prompt"] for q in queued] == ["hello \ud800 there", "echo still stored"]
    assert [e["kind"] for e in entries].count("turn_ended") == 2
    p.disconnect()


def test_the_gateway_answers_an_agents_lone_surrogate_and_refuses_a_clients(
    gateway: Gateway, project_dir: Path
) -> None:
    """The wait route and the transcript answer 200 with the escape; a body holding a
    lone surrogate, or nested past any use, is a 400 ``BAD_JSON`` naming why."""
    sid = gateway.ensure(project_dir)
    r = gateway.http.post(f"/v1/sessions/{sid}/prompt?wait=true", json={"prompt": "surrogate"})
    assert r.status_code == 200, r.text
    assert ESCAPE in r.text
    assert r.json()["text"] == "lone \ud800 surrogate"
    transcript = gateway.http.get(f"/v1/sessions/{sid}/transcript")
    assert transcript.status_code == 200, transcript.text
    assert ESCAPE in transcript.text
    headers = {"content-type": "application/json"}
    lone = gateway.http.post(
        f"/v1/sessions/{sid}/prompt", content=b'{"prompt":"echo \\ud800"}', headers=headers
    )
    assert lone.status_code == 400, lone.text
    assert lone.json()["detailCode"] == "BAD_JSON"
    assert "lone surrogate" in lone.json()["detail"]
    named = gateway.http.post(
        "/v1/sessions",
        content=b'{"agent":"mock","cwd":"%s","name":"a\\udfff"}' % str(project_dir).encode(),
        headers=headers,
    )
    assert named.status_code == 400, named.text
    deep = b'{"prompt":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    nested = gateway.http.post(f"/v1/sessions/{sid}/prompt", content=deep, headers=headers)
    assert nested.status_code == 400, nested.text
    assert "nested too deeply" in nested.json()["detail"]
    pair = gateway.http.post(
        f"/v1/sessions/{sid}/prompt?wait=true",
        content=b'{"prompt":"echo \\ud83d\\ude00"}',
        headers=headers,
    )
    assert pair.status_code == 200, pair.text  # a surrogate pair is text: one emoji
    assert pair.json()["text"] == "\U0001f600"
