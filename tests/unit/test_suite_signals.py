"""The suite sets what its tests rely on (signal dispositions, required tiers) instead of
inheriting it from whoever started it.

Run the suite as a background job of a non-interactive shell (``make test &`` in a
script) and SIGINT arrives ignored; an ignored disposition survives ``exec``, so every
child the tests start would ignore the Ctrl-C a test sends it. These checks fail in such a
run unless the suite resets the dispositions itself (``tests/conftest.py``).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from tests import _tiers


def _ignored_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


def test_the_suite_itself_takes_ctrl_c() -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_child_of_the_suite_does_not_inherit_ignored_signals() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        ignored = _ignored_signals(child.pid)
    finally:
        child.communicate(b"")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        assert not ignored & (1 << (signum - 1)), f"{signum.name} is ignored in a child"


def test_a_required_tier_fails_where_an_optional_one_skips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(_tiers.ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no browser"):
        _tiers.unavailable("browser", "no browser")
    monkeypatch.setenv(_tiers.ENV, "realagents browser")
    with pytest.raises(pytest.fail.Exception, match="requires the browser tier"):
        _tiers.unavailable("browser", "no browser")
