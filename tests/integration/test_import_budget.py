"""The thin CLI paths stay thin: `python -X importtime` proves what they import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

FORBIDDEN_ALWAYS = ("pydantic", "acp")
FORBIDDEN_WARM = ("asyncio", "sqlite3", "_sqlite3", "pydantic", "acp")


def imported_modules(*args: str, cwd: Path) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tether", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=os.environ,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    modules = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name.split(".")[0])
    # Positive control: the listing was parsed (else every "not imported" would pass).
    assert {"tether", "encodings"} <= modules, sorted(modules)[:20]
    return modules


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_nothing_heavy(project_dir: Path, flag: str) -> None:
    """`--version` and `--help` import neither asyncio, sqlite3, pydantic nor the ACP SDK."""
    modules = imported_modules(flag, cwd=project_dir)
    assert not modules & set(FORBIDDEN_WARM), sorted(modules & set(FORBIDDEN_WARM))


def test_warm_paths_import_no_asyncio_or_sqlite(project_dir: Path) -> None:
    """prompt, cancel and status against a live owner import no asyncio, sqlite3 or pydantic."""
    base = [sys.executable, "-m", "tether", "--cwd", str(project_dir), "mock"]
    subprocess.run([*base, "sessions", "new"], check=True, capture_output=True, timeout=60)
    try:
        for args in (["prompt", "echo hi"], ["cancel"], ["status"]):
            modules = imported_modules("--cwd", str(project_dir), "mock", *args, cwd=project_dir)
            bad = modules & set(FORBIDDEN_WARM)
            assert not bad, (args, sorted(bad))
            if args[0] == "prompt":  # the hottest CLI path: not even typing (issue 23)
                assert "typing" not in modules, "a warm prompt imports typing"
    finally:
        subprocess.run([*base, "sessions", "close"], capture_output=True, timeout=60)


def test_close_of_a_live_session_imports_no_asyncio_logging_or_dataclasses(
    project_dir: Path,
) -> None:
    """`sessions close` through a live owner imports neither asyncio, logging (the owner
    fence's: it waits through tether.ipc.peer) nor dataclasses (the registry's: the
    family is read with sqlite3 alone, tether.state.family; issue 23)."""
    base = [sys.executable, "-m", "tether", "--cwd", str(project_dir), "mock"]
    subprocess.run([*base, "sessions", "new"], check=True, capture_output=True, timeout=60)
    try:
        modules = imported_modules(
            "--cwd", str(project_dir), "mock", "sessions", "close", cwd=project_dir
        )
    finally:
        subprocess.run([*base, "sessions", "close"], capture_output=True, timeout=60)
    bad = modules & {"asyncio", "logging", "dataclasses", "pydantic", "acp"}
    assert not bad, sorted(bad)


def test_library_import_is_lazy() -> None:
    """`import tether` alone loads no asyncio; the API appears on first use."""
    code = "import sys, tether; assert 'asyncio' not in sys.modules; tether.Client; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


def test_the_installed_tether_script_imports_no_re_before_tether(project_dir: Path) -> None:
    """The ``tether`` script is our own launcher (scripts/tether), not a generated console
    script importing ``re`` (and ``enum``) before any of Tether: `--version` through it
    imports neither (issue 23: ~5 ms of every CLI call)."""
    script = Path(sys.executable).parent / "tether"
    r = subprocess.run(
        [str(script), "--version"],
        capture_output=True,
        text=True,
        cwd=project_dir,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("tether "), r.stdout
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in r.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "tether.program" in modules, sorted(modules)[:20]  # the listing was read
    assert not modules & {"re", "enum"}, sorted(modules & {"re", "enum"})
