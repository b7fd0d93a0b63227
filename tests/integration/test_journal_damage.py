"""A damaged journal chunk (issue 21 item 4), on a real state database written by a real
owner: readers skip it, name its seq range and exit 1; ``doctor`` finds it and
``doctor --repair`` sets it aside, after which reading is clean again."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests._cli import run_tether
from tests.integration.test_owner import Cli

pytestmark = pytest.mark.integration


def _damage_a_plain_chunk(db: Path, how: str) -> tuple[int, int, bytes]:
    """Damage a plain (uncompressed) chunk with entries after it; its (first, last, bytes)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT session_key, first_seq, last_seq, codec, data FROM journal_chunks"
            " ORDER BY first_seq"
        ).fetchall()
        plain = [r for r in rows[:-1] if r[3] == 0]
        assert plain, "the owner stored no plain chunk to damage"
        key, first, last, _codec, data = plain[len(plain) // 2]
        if how == "flip":  # one byte flipped in the middle: no longer UTF-8
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        else:  # one line's JSON broken, still UTF-8, every head intact
            data = data.replace(b'"kind":', b'"kind";', 1)
        conn.execute(
            "UPDATE journal_chunks SET data = ? WHERE session_key = ? AND first_seq = ?",
            (data, key, first),
        )
    return first, last, data


def _entries(stdout: str) -> list[dict[str, object]]:
    """NDJSON entries (a trailing JSON-RPC error envelope is not one)."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [e for e in lines if "seq" in e]


@pytest.mark.parametrize("how", ["flip", "json"])
def test_issue21_item4_a_damaged_chunk_is_skipped_named_and_set_aside(
    cli: Callable[..., Cli], tether_home: Path, project_dir: Path, how: str
) -> None:
    """Readers skip the damaged chunk with a warning naming its seqs and exit 1; the
    rest is all there; `doctor` fails naming it; `--repair` saves its bytes aside."""
    c = cli()
    c.run("sessions", "new")
    for turn in range(6):
        c.run("prompt", f"echo turn {turn}")
    c.run("sessions", "close")
    whole = _entries(c.run("sessions", "export").stdout)
    first, last, damaged = _damage_a_plain_chunk(tether_home / "state.db", how)
    named = f"entries {first}-{last}"
    rest = [e for e in whole if not first <= int(str(e["seq"])) <= last]

    export = c.run("sessions", "export", rc=1)
    assert _entries(export.stdout) == rest
    assert named in export.stderr
    assert "Traceback" not in export.stderr
    watch = c.run("sessions", "watch", "--from", "1", "--no-follow", fmt="json", rc=1)
    assert _entries(watch.stdout) == rest
    assert named in watch.stderr
    read = c.run("sessions", "read", rc=1)
    assert named in read.stderr
    assert "Traceback" not in read.stderr
    assert "[done] end_turn" in read.stdout  # the other turns are still shown

    doctor = run_tether("doctor", cwd=project_dir)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "FAIL journal" in doctor.stdout
    assert named in doctor.stdout
    repair = run_tether("--format", "json", "doctor", "--repair", cwd=project_dir)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    (aside,) = (tether_home / "damaged").iterdir()
    assert aside.read_bytes() == damaged
    assert run_tether("doctor", cwd=project_dir).returncode == 0
    assert _entries(c.run("sessions", "export").stdout) == rest
    c.run("sessions", "read")
