"""docs/acpx-parity.md, run: every row's check, as the page describes it.

The page is the table: each row names an acpx 0.19.1 command or flag, what Tether does,
and a check -- ``tether`` commands run in order in a scratch project (all but the last
must exit 0) -- with the exit status and the text the last one must show. A row added to
the page is a row tested here; a row whose check fails fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import python_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "acpx-parity.md"
STATUSES = ("works", "refused")
RUN_TIMEOUT = 60.0


class Row:
    def __init__(self, acpx: str, status: str, check: str, expect: str) -> None:
        self.acpx = acpx
        self.status = status
        self.check = check
        self.expect = expect

    @property
    def commands(self) -> list[str]:
        return re.findall(r"`(tether [^`]*)`", self.check)

    def expected(self) -> tuple[int, str | None]:
        match = re.fullmatch(r'exit (\d+)(?:, ("(?:[^"\\]|\\.)*"))?', self.expect.strip())
        assert match, f"malformed expect cell: {self.expect!r}"
        return int(match[1]), json.loads(match[2]) if match[2] else None


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\x00", "|") for c in line.replace("\\|", "\x00").split("|")[1:-1]]


def rows() -> list[Row]:
    found = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = _cells(line) if line.startswith("|") else []
        if len(cells) != 5 or cells[0] in ("acpx", "---"):
            continue
        found.append(Row(cells[0], cells[2], cells[3], cells[4]))
    return found


def _config() -> str:
    match = re.search(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match, "the page's .tether.toml block is missing"
    return match[1]


def _fill(text: str, project: Path) -> str:
    return text.replace("{python}", sys.executable).replace("{project}", str(project))


ROWS = rows()


def test_the_page_has_rows_and_every_row_is_checkable() -> None:
    """Every row has a known status and a runnable check."""
    assert len(ROWS) > 50
    for row in ROWS:
        assert row.status.split(" (")[0] in STATUSES, row.acpx
        if row.check == "builtin agent names":
            continue
        assert row.commands, row.acpx
        row.expected()


@pytest.fixture
def parity_project(project_dir: Path) -> Path:
    (project_dir / "notes.txt").write_text("secret-content\n")
    (project_dir / "mcp.json").write_text('{"mcpServers": []}\n')
    (project_dir / ".tether.toml").write_text(_fill(_config(), project_dir))
    return project_dir


def _run(command: str, project: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(_fill(command, project))
    assert argv[0] == "tether"
    stdin = None
    if len(argv) > 2 and argv[-2] == "<":  # `< FILE`: the command's stdin
        stdin = (project / argv[-1]).read_text()
        argv = argv[:-2]
    return subprocess.run(
        [sys.executable, "-m", "tether", *argv[1:]],
        cwd=project,
        env=python_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
    )


def _close_all() -> None:
    from tether import operations

    for session in operations.list_sessions():
        operations.close_session(session["key"])


@pytest.mark.parametrize("row", ROWS, ids=[f"{i:02d}" for i in range(len(ROWS))])
def test_row(row: Row, parity_project: Path) -> None:
    """The row's check does what the row says: works, or is refused naming the way."""
    if row.check == "builtin agent names":
        from tether import agents

        names = re.findall(r"`([a-z-]+)`", row.acpx)
        assert names
        assert [n for n in names if not agents.is_agent_name(n, {})] == []
        return
    code, text = row.expected()
    try:
        *setup, last = row.commands
        for command in setup:
            done = _run(command, parity_project)
            assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        result = _run(last, parity_project)
    finally:
        _close_all()
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown
    assert result.returncode == code, f"{last}: exit {result.returncode}\n{shown}"
    if text is not None:
        assert text in shown, f"{last}: {text!r} not in\n{shown}"
    if row.status == "refused":
        assert code == 2
