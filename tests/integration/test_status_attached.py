"""``status`` names who is attached to a session: each watcher and controller with its
pid and uid (the owner's kernel says, SO_PEERCRED) and the door it came through."""

from __future__ import annotations

import os

import pytest
from tests.integration.test_owner import Cli, finish, wait_for

pytestmark = pytest.mark.integration


def test_status_lists_each_watcher_and_controller_with_pid_uid_and_door(mock: Cli) -> None:
    plain = mock.popen("sessions", "watch", "--tail", "0", fmt="json")
    control = mock.popen("sessions", "watch", "--tail", "0", "--control", fmt="json")
    try:
        parties = wait_for(
            lambda: (a := mock.status()["attached"]) and len(a) == 2 and a,
            "both watchers to be listed",
        )
        by_pid = {p["pid"]: p for p in parties}
        assert set(by_pid) == {plain.pid, control.pid}
        assert by_pid[plain.pid] == {
            "pid": plain.pid,
            "uid": os.getuid(),
            "door": "cli",
            "roles": ["watcher"],
        }
        assert by_pid[control.pid]["roles"] == ["watcher", "controller"]
        assert mock.status()["watchers"] == 2  # the count stays as it was
        text = mock.run("status").stdout
        line = next(x for x in text.splitlines() if x.startswith("attached:"))
        assert f"watcher pid {plain.pid} uid {os.getuid()} (cli)" in line
        assert f"watcher+controller pid {control.pid} uid {os.getuid()} (cli)" in line
    finally:
        for proc in (plain, control):
            proc.kill()  # ours; whatever signal dispositions this run inherited
            finish(proc)
    wait_for(lambda: mock.status()["attached"] == [], "the watchers to leave the list")
