"""Delegation across hosts, every part a real process (issue 24, item 5).

An agent running on host h1 reaches the fleet through h1's agents' door: h1 proves the
caller by its pid and asserts it to a router, which applies the visibility rules over
the index. The agent is the mock agent, running a small HTTP client from inside its own
tree (its ``run`` verb)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import python_env
from tests.fleet import _pidns
from tests.fleet.test_fleet_e2e import FLEET_TOKEN, USER_TOKEN, Processes, create, turn_text
from tests.integration._serve import spawn_gateway
from tether import paths
from tether.fleet.door import DOOR_FILE
from tether.fleet.index import FleetIndex

pytest.importorskip("starlette", reason="tether serve needs the serve extra")
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

# What the agent runs inside its tree: one HTTP request to $TETHER_SERVER (a Unix
# socket), standard library only; prints the status and the body.
CLIENT = """
import http.client, os, socket, sys

class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)

address = os.environ.get("TETHER_SERVER", "")
if not address.startswith("unix:"):
    print("STATUS none")
    print("BODY " + repr(address))
    sys.exit(0)
method, target = sys.argv[1], sys.argv[2]
body = sys.argv[3].encode() if len(sys.argv) > 3 else None
conn = Unix(address[len("unix:"):])
headers = {"content-type": "application/json"} if body else {}
conn.request(method, target, body=body, headers=headers)
answer = conn.getresponse()
print("STATUS", answer.status)
print("BODY", answer.read().decode())
"""


@pytest.fixture
def procs(fleet_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    base = tmp_path / "fleet"
    base.mkdir()
    p = Processes(fleet_dsn, base)
    try:
        yield p
    finally:
        p.stop()


def _answer(output: str) -> tuple[int | None, Any]:
    status = re.search(r"^STATUS (\S+)$", output, re.MULTILINE)
    body = re.search(r"^BODY (.*)$", output, re.MULTILINE)
    assert status is not None, output
    assert body is not None, output
    code = int(status.group(1)) if status.group(1).isdigit() else None
    try:
        return code, json.loads(body.group(1))
    except ValueError:
        return code, body.group(1)


def agent_calls(
    router: Any, sid: str, script: Path, method: str, target: str, body: Any = None
) -> tuple[int | None, Any]:
    """Have session ``sid``'s agent make one request to its door; (status, JSON body)."""
    words = f"run {sys.executable} {script} {method} {target}"
    if body is not None:
        words += " '" + json.dumps(body, separators=(",", ":")) + "'"
    return _answer(turn_text(router, sid, words))


def door_of(home: Path) -> str:
    token = paths.use_home(str(home))
    try:
        return os.path.join(paths.socket_dir_path(), DOOR_FILE)
    finally:
        paths.reset_home(token)


def test_an_agent_spawns_on_another_host_through_its_door_and_sees_only_its_tree(
    procs: Processes, project_dir: Path, tmp_path: Path
) -> None:
    script = tmp_path / "door_client.py"
    script.write_text(CLIENT)
    router = procs.router()
    procs.env = {**procs.env, "TETHER_FLEET_ROUTER": router.url}
    h1 = procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    parent = create(router, project_dir, "parent", labels={"zone": "a"})["id"]
    unrelated = create(router, project_dir, "unrelated", labels={"zone": "a"})["id"]

    # The agent spawns a session that the labels send to the other host.
    status, child = agent_calls(
        router, parent, script, "POST", "/v1/sessions",
        {"agent": "mock", "cwd": str(project_dir), "name": "child", "labels": {"zone": "b"}},
    )  # fmt: skip
    assert status == 201, child
    with FleetIndex.connect(procs.dsn) as index:
        row = index.session(child["id"])
    assert row is not None
    assert (row.host_id, row.parent_session_id, row.spawned_by, row.owner_session_id) == (
        "h2", parent, parent, parent,
    )  # fmt: skip
    assert procs.hosts["h2"].http.get(f"/v1/sessions/{child['id']}").status_code == 200

    # It sees and drives its child; it lists its own tree only.
    status, sent = agent_calls(
        router, parent, script, "POST", f"/v1/sessions/{child['id']}/prompt",
        {"prompt": "echo from the parent"},
    )  # fmt: skip
    assert status == 202, sent
    status, listed = agent_calls(router, parent, script, "GET", "/v1/sessions")
    assert status == 200, listed
    assert {s["id"] for s in listed["sessions"]} == {parent, child["id"]}

    # An unrelated session is out of reach, and the answer names the rule.
    status, refused = agent_calls(
        router, parent, script, "POST", f"/v1/sessions/{unrelated}/prompt", {"prompt": "echo x"}
    )
    assert status == 403, refused
    assert (refused["code"], refused["rule"]) == ("VISIBILITY_DENIED", "visibility=tree")
    status, refused = agent_calls(router, parent, script, "GET", f"/v1/sessions/{unrelated}")
    assert (status, refused["rule"]) == (403, "visibility=tree")
    status, refused = agent_calls(router, parent, script, "DELETE", f"/v1/sessions/{unrelated}")
    assert (status, refused["rule"]) == (403, "visibility=tree")
    assert "close of session" in refused["detail"]
    # Ensuring a session that exists already is reaching it: the same rule.
    status, refused = agent_calls(
        router, parent, script, "POST", "/v1/sessions",
        {"agent": "mock", "cwd": str(project_dir), "name": "unrelated"},
    )  # fmt: skip
    assert (status, refused["rule"]) == (403, "visibility=tree")

    # Closing the parent through the router closes the child on its own host.
    assert router.http.delete(f"/v1/sessions/{parent}").status_code == 200
    record = procs.hosts["h2"].http.get(f"/v1/sessions/{child['id']}").json()
    assert record["state"] == "closed", record
    assert h1.http.get(f"/v1/sessions/{parent}").json()["state"] == "closed"


def test_assertions_are_refused_from_users_for_other_hosts_and_at_the_door_unproven(
    procs: Processes, project_dir: Path, tmp_path: Path
) -> None:
    router = procs.router()
    procs.env = {**procs.env, "TETHER_FLEET_ROUTER": router.url}
    h1 = procs.host("h1", "zone=a")
    procs.host("h2", "zone=b")
    mine = create(router, project_dir, "mine", labels={"zone": "a"})["id"]
    theirs = create(router, project_dir, "theirs", labels={"zone": "b"})["id"]

    def assertion(host: str, sid: str) -> str:
        return json.dumps({"host": host, "session": sid, "agent": "mock"})

    # A user's token never carries an assertion: refused, not ignored.
    forged = httpx.get(
        f"{router.url}/v1/sessions",
        headers={"Authorization": f"Bearer {USER_TOKEN}",
                 "x-tether-requester": assertion("h1", mine)},
    )  # fmt: skip
    assert forged.status_code == 403, forged.text
    assert (forged.json()["code"], forged.json()["rule"]) == (
        "ASSERTION_REFUSED", "assertion.credential",
    )  # fmt: skip
    # With the fleet credential, host h1 cannot speak for h2's session.
    fleet = {"Authorization": f"Bearer {FLEET_TOKEN}"}
    other = httpx.get(
        f"{router.url}/v1/sessions",
        headers={**fleet, "x-tether-requester": assertion("h1", theirs)},
    )
    assert other.status_code == 403, other.text
    assert other.json()["rule"] == "assertion.host"
    # ...nor can the fleet credential speak without naming a requester.
    bare = httpx.get(f"{router.url}/v1/sessions", headers=fleet)
    assert (bare.status_code, bare.json()["rule"]) == (403, "assertion.missing")
    # The same host speaking for its own session is believed, and the rules apply.
    own = httpx.get(
        f"{router.url}/v1/sessions", headers={**fleet, "x-tether-requester": assertion("h1", mine)}
    )
    assert own.status_code == 200, own.text
    assert [s["id"] for s in own.json()["sessions"]] == [mine]
    # A requester reaches only the routes that check it.
    acp = httpx.post(
        f"{router.url}/v1/acp/x", headers={**fleet, "x-tether-requester": assertion("h1", mine)}
    )
    assert (acp.status_code, acp.json()["rule"]) == (403, "route")
    # The visibility level is the router's configuration: under `agent`, every mock
    # session is within reach.
    wide = procs.router()
    (wide.home / "config.toml").write_text('[sessions]\nvisibility = "agent"\n')
    wide.stop()
    procs.routers.remove(wide)
    wide = spawn_gateway(wide.home, "--router", "--token", USER_TOKEN, env=procs.env)
    procs.routers.append(wide)
    seen = httpx.get(
        f"{wide.url}/v1/sessions", headers={**fleet, "x-tether-requester": assertion("h1", mine)}
    )
    assert {s["id"] for s in seen.json()["sessions"]} == {mine, theirs}

    # At the door: this test process is the operator (outside every agent tree) ...
    door = door_of(h1.home)
    assert (os.stat(door).st_mode & 0o777, os.stat(os.path.dirname(door)).st_mode & 0o777) == (
        0o600, 0o700,
    )  # fmt: skip
    with httpx.Client(transport=httpx.HTTPTransport(uds=door), base_url="http://door") as c:
        r = c.get("/v1/sessions")
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "REQUESTER_UNPROVEN"
    assert "operator" in r.json()["detail"]
    # ... and a process outside every tree claiming a session proves nothing either.
    script = tmp_path / "door_client.py"
    script.write_text(CLIENT)
    env = {**python_env(), "TETHER_SERVER": f"unix:{door}", "TETHER_SESSION_KEY": mine}
    argv = [sys.executable, str(script), "GET", "/v1/sessions"]
    if isinstance(h1.proc, _pidns.NamespacedHost):
        # Where the host sees it: inside its pid namespace (from outside, its door would
        # see pid 0 -- a process it cannot name, refused as the operator above).
        argv = ["nsenter", f"--target={h1.proc.pid}", "--pid", "--mount", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=True)
    status, body = _answer(done.stdout)
    assert (status, body["code"]) == (403, "REQUESTER_UNPROVEN")
    assert "unproven" in body["detail"]
