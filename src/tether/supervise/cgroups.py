"""cgroup v2 for runs: probed once per process; a fresh cgroup per run when it works."""

from __future__ import annotations

import os

from tether import _log, _os

__all__ = ["CgroupProbe", "new_cgroup", "probe_cgroup"]


def probe_cgroup() -> tuple[str | None, str]:
    """``(mount, reason)``: the cgroup v2 mount runs' cgroups go under, or None, and why.

    The probe creates and removes one cgroup; it never raises. ``tether doctor`` reports
    the same verdict a run gets.
    """
    if os.environ.get("TETHER_NO_CGROUP"):
        return None, "disabled by TETHER_NO_CGROUP"
    mount = _os.find_cgroup2_mount()
    if mount is None:
        return None, "no cgroup2 mount"
    ok, why = _os.cgroup_writable(mount)
    return (mount if ok else None), why


class CgroupProbe:
    """cgroup v2 support, probed once per process and recorded in each lease."""

    _probed = False
    mount: str | None = None
    reason = "not probed"

    @classmethod
    def base(cls) -> str | None:
        if not cls._probed:
            cls._probed = True
            cls.mount, cls.reason = probe_cgroup()
            if cls.mount is None and not os.environ.get("TETHER_NO_CGROUP"):
                _log.event("cgroup_unavailable", reason=cls.reason)
        return cls.mount

    @classmethod
    def reset(cls) -> None:
        """Forget the probe, so the next spawn probes again (tests toggle TETHER_NO_CGROUP)."""
        cls._probed = False
        cls.mount = None
        cls.reason = "not probed"


def new_cgroup(table: _os.ProcessTable, lease_id: str) -> str | None:
    base = CgroupProbe.base()
    if base is None:
        return None
    try:
        return table.cgroup_create(os.path.join(base, "tether"), lease_id)
    except OSError as exc:
        _log.event("cgroup_unavailable", reason=str(exc), runId=lease_id)
        return None
