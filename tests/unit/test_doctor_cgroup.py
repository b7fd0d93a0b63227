"""``tether doctor`` says whether runs get a cgroup of their own (issue 25: in a pod, the
cgroup v2 tree is usually read-only, and the operator must be able to see that)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.cli._doctor import diagnose
from tether.supervise.cgroups import probe_cgroup


def _cgroup_check(cwd: Path) -> dict[str, str]:
    checks = [c for c in diagnose(str(cwd)).checks if c["name"] == "cgroup supervision"]
    assert len(checks) == 1
    return checks[0]


def test_doctor_warns_when_runs_get_no_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a usable cgroup the check warns (never fails) and names why."""
    monkeypatch.setenv("TETHER_NO_CGROUP", "1")
    check = _cgroup_check(tmp_path)
    assert check["status"] == "warn"
    assert check["detail"].startswith("disabled by TETHER_NO_CGROUP: runs are bounded by")
    assert not diagnose(str(tmp_path)).failed


def test_doctor_reports_the_verdict_a_run_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On this machine, whatever it allows: ok with the mount when a run would get a
    cgroup, a warning with the probe's reason when it would not."""
    monkeypatch.delenv("TETHER_NO_CGROUP", raising=False)
    mount, reason = probe_cgroup()
    check = _cgroup_check(tmp_path)
    assert check["status"] == ("ok" if mount else "warn")
    assert check["detail"].startswith(reason)
