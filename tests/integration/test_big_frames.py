"""Big agent messages (issue 21 item 1): carried whole up to ``frameMaxBytes`` (never
below the prompt limit), and over it the turn fails naming the limit -- never a turn
that ends ``end_turn`` with its output missing. Real CLI, real owners, the mock agent."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.integration.test_owner import RUN_TIMEOUT, Cli

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


def _chunk_texts(stdout: str) -> list[str]:
    """The text of every agent_message_chunk among ``--format json``'s ACP frames."""
    out = []
    for line in stdout.splitlines():
        frame = json.loads(line)
        update = frame.get("params", {}).get("update", {}) if "method" in frame else {}
        if update.get("sessionUpdate") == "agent_message_chunk":
            out.append(update["content"]["text"])
    return out


def test_a_17_mib_agent_message_reaches_the_output_and_the_journal(
    mock: Cli,
) -> None:
    proc = mock.run("prompt", "big 17000000", fmt="json")
    assert _chunk_texts(proc.stdout) == ["x" * 17_000_000]
    assert json.loads(proc.stdout.splitlines()[-1])["result"]["stopReason"] == "end_turn"
    read = mock.run("sessions", "read", fmt="json").stdout
    assert read.count("x" * 17_000_000) == 1


def test_the_echo_of_a_20_mib_prompt_is_not_lost(mock: Cli) -> None:
    text = "y" * (20 * MIB)
    proc = subprocess.run(
        mock.argv("prompt", fmt="json"),
        input=text,
        env=mock.env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert _chunk_texts(proc.stdout) == [text]


def test_an_agent_message_over_frame_max_bytes_fails_the_turn_naming_the_limit(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    (tether_home / "config.toml").write_text(f"promptMaxBytes = {MIB}\nframeMaxBytes = {MIB}\n")
    mock = cli()
    mock.run("sessions", "new")
    proc = mock.run("prompt", "big 2000000", rc=1)
    assert "frameMaxBytes" in proc.stderr
    assert f"limit of {MIB} bytes" in proc.stderr
    assert "end_turn" not in proc.stdout
    as_json = mock.json("prompt", "big 2000000", rc=1)
    assert as_json["error"]["data"]["detailCode"] == "FRAME_TOO_LARGE"
    # the session goes on serving, and the failed turn is recorded as failed
    assert "hello" in mock.run("prompt", "echo hello").stdout
    turns = mock.history("turn")
    assert ["frameMaxBytes" in str(t["payload"].get("error")) for t in turns] == [
        True,
        True,
        False,
    ]
    assert turns[2]["payload"]["stopReason"] == "end_turn"


def test_frame_max_bytes_is_never_below_the_prompt_limit(
    cli: Callable[..., Cli], tether_home: Path
) -> None:
    """A smaller frameMaxBytes does not cut what an accepted prompt may bring back."""
    (tether_home / "config.toml").write_text(f"promptMaxBytes = {4 * MIB}\nframeMaxBytes = {MIB}\n")
    mock = cli()
    mock.run("sessions", "new")
    proc = mock.run("prompt", "big 3000000", fmt="json")
    assert _chunk_texts(proc.stdout) == ["x" * 3_000_000]
