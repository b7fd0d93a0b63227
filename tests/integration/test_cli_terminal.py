"""Text output on a terminal: bring-up progress, elapsed time in ``[done]``, and a spinner
during a long silent turn that never garbles the streamed text (run under a pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
from pathlib import Path

import pytest
from tests.integration.test_owner import Cli

SPINNER = re.compile(r"\r\x1b\[K(?:[-\\|/] working \d+ s)?")
SILENT_TURN_MS = 4000  # the spinner draws after 1 s without output


def _run_on_pty(argv: list[str], env: dict[str, str], *, stdout_too: bool) -> tuple[int, str, str]:
    """Run with stderr (and stdout when ``stdout_too``) on a terminal; return the exit
    status, what the terminal showed, and stdout when it was a pipe."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave if stdout_too else subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    seen = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            assert ready, f"the command went silent; the terminal showed {bytes(seen)!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        out = proc.stdout.read().decode() if proc.stdout is not None else ""
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        os.close(master)
    return code, bytes(seen).decode(errors="replace").replace("\r\n", "\n"), out


@pytest.mark.parametrize("command", ["exec", "prompt"])
def test_a_silent_stretch_shows_a_spinner_that_never_ends_up_in_the_text(
    cli: object, command: str
) -> None:
    """On a terminal a long silent turn shows `working N s` on stderr; once the spinner's
    erasures are taken out, the terminal holds exactly the text, banners and `[done]`."""
    c: Cli = cli()  # type: ignore[operator]
    if command == "prompt":
        c.run("sessions", "new")
    code, shown, _ = _run_on_pty(
        c.argv(command, f"stream 1 before ; sleep {SILENT_TURN_MS} ; stream 1 after"),
        c.env,
        stdout_too=True,
    )
    assert code == 0, shown
    assert " working " in shown
    clean = SPINNER.sub("", shown)
    assert "\x1b" not in clean
    assert "working" not in clean
    assert re.search(r"^before 0\nafter 0\n\[done\] end_turn \(\d+\.\d s\)$", clean, re.M), clean


def test_no_spinner_over_a_half_written_line(cli: object) -> None:
    """While the text's last line is unfinished on the same terminal, nothing is drawn
    over it; the line is finished intact."""
    c: Cli = cli()  # type: ignore[operator]
    code, shown, _ = _run_on_pty(
        c.argv("exec", f"echo half ; sleep {SILENT_TURN_MS} ; stream 1 -way"),
        c.env,
        stdout_too=True,
    )
    assert code == 0, shown
    assert "working" not in shown
    assert "half-way 0\n[done] end_turn (" in shown


def test_stdout_piped_gets_no_spinner_bytes(cli: object) -> None:
    """With stdout a pipe and stderr a terminal, the spinner stays on stderr: stdout is
    the text alone, and the half-written line does not stop the spinner."""
    c: Cli = cli()  # type: ignore[operator]
    code, shown, out = _run_on_pty(
        c.argv("exec", f"echo half ; sleep {SILENT_TURN_MS} ; stream 1 -way"),
        c.env,
        stdout_too=False,
    )
    assert code == 0, shown
    assert " working " in shown
    assert re.fullmatch(r"half-way 0\n\[done\] end_turn \(\d+\.\d s\)\n", out), out


def test_no_spinner_and_no_progress_when_stderr_is_not_a_terminal(project_dir: Path) -> None:
    """Piped stderr: bring-up progress lines, never a spinner."""
    c = Cli(project_dir)
    r = subprocess.run(
        c.argv("exec", "sleep 1500 ; echo done"),
        env=c.env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    assert "working" not in r.stderr
    assert "\x1b" not in r.stderr
    assert "initialize" in r.stderr
    assert "session/new" in r.stderr


def test_a_cold_owner_tells_its_caller_how_the_agent_comes_up(cli: object) -> None:
    """The first prompt of a session shows the agent's bring-up as [tether] lines."""
    c: Cli = cli()  # type: ignore[operator]
    c.run("sessions", "new")
    first = c.run("prompt", "echo hi")
    assert "[tether] agent started (pid " in first.stderr
    assert "[tether] tether-mock-agent " in first.stderr
    assert "[tether] session/new" in first.stderr
    second = c.run("prompt", "echo again")
    assert "session/new" not in second.stderr  # the warm agent: nothing to bring up
