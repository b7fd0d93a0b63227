"""A follower whose watch meets an owner that began stopping goes back to the journal.

Regression (issue 12): `tether acp` attached to a session, then terminated it at once;
the follower's ``watch`` reached the owner while it was stopping, the owner answered
``QUEUE_OWNER_SHUTTING_DOWN``, and the follower died with that error instead of reading
the rest from the database -- so the client never got ``_tether/session/ended``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

from tether import sessions
from tether.errors import OwnerShuttingDown
from tether.ipc import protocol
from tether.state.journal import store
from tether.state.journal.follow import follow_session
from tether.state.registry import Registry


def _stopping_owner(key: str, listener: socket.socket) -> None:
    """Say hello, take the watch, journal the session's end, refuse: as a stopping owner."""
    conn, _ = listener.accept()
    with conn:
        conn.sendall(protocol.encode({"type": "hello", "v": protocol.VERSION, "generation": 1}))
        request = json.loads(conn.makefile("rb").readline())
        with Registry() as registry:
            store.append_now(registry._db, key, "session_ended", {"reason": "terminated"})
        error = OwnerShuttingDown("the owner is shutting down (terminate)").to_wire()
        conn.sendall(
            protocol.encode({"type": "error", "requestId": request["requestId"], "error": error})
        )


def test_a_watch_refused_by_a_stopping_owner_falls_back_to_the_journal(tmp_path: Path) -> None:
    """The follower delivers the session_ended the stopping owner stored, and ends."""
    key = sessions.session_key("name:mock", str(tmp_path))
    with Registry() as registry:
        registry.upsert_session(
            key=key, name="", agent_command=["mock"], agent_label="mock", cwd=str(tmp_path)
        )
        store.append_now(registry._db, key, "owner_started", {})
    path = sessions.socket_path(key)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    owner = threading.Thread(target=_stopping_owner, args=(key, listener), daemon=True)
    owner.start()
    got: list[str] = []
    try:
        follow_session(key, lambda _seq, line: got.append(json.loads(line)["kind"]), from_seq=1)
    finally:
        owner.join(10)
        listener.close()
        os.unlink(path)
    assert got == ["owner_started", "session_ended"]
