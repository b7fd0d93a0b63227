"""Suite-wide fixtures: a private TETHER_HOME per test and a proof that no process survives."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import _proctree

# Owners, keepers and agents shut down asynchronously after a CLI call returns; give them
# this long to finish before a survivor counts as a leak.
LEAK_GRACE_S = 10.0


# Signals whose disposition the tests rely on in the processes they start. A run started
# as a background job of a non-interactive shell inherits SIGINT ignored (and `nohup`
# ignores SIGHUP); an ignored disposition survives exec, so every `tether` child would
# ignore the Ctrl-C a test sends it. The suite sets what it relies on instead of
# inheriting it.
_DEFAULT_DISPOSITIONS = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
    signal.SIGQUIT: signal.SIG_DFL,
}


def pytest_configure(config: pytest.Config) -> None:
    _proctree.become_subreaper()
    for signum, handler in _DEFAULT_DISPOSITIONS.items():
        signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def tether_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own TETHER_HOME and config dir, never the user's."""
    home = tmp_path / "tether-home"
    home.mkdir()
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    return home


@pytest.fixture(autouse=True)
def no_leaked_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test fails if any process it started is still alive after it (and a grace)."""
    before = {(p, s[1]) for p, s in _proctree.live_descendants().items()}
    yield
    survivors = _proctree.wait_for_no_new_descendants(before, LEAK_GRACE_S)
    if survivors:
        _proctree.kill_verified(survivors)
        details = []
        for pid in survivors:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                cmd = "?"
            details.append(f"pid {pid}: {cmd}")
        pytest.fail("processes survived the test:\n  " + "\n  ".join(details))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _proctree.reap_zombie_children()


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A scratch project directory to use as an agent's cwd."""
    d = tmp_path / "project"
    d.mkdir()
    return d


def python_env() -> dict[str, str]:
    """The environment for child Python processes: ours plus an unbuffered stdout."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env
