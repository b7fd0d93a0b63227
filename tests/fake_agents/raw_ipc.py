"""A raw IPC client: one request to a session's owner, with no visibility check of ours.

The CLI and the library check visibility before they connect; this client does not --
it is what a process inside an agent tree could write for itself. So whatever it is
allowed, the owner allowed (:mod:`tether.owner.gate`).

Usage: ``raw_ipc.py KEY KIND [PAYLOAD_JSON]``. Prints one JSON line,
``{"result": ...}`` or ``{"error": <the error's wire form>}``, and exits 0.
"""

from __future__ import annotations

import json
import sys

from tether import sessions
from tether.errors import TetherError
from tether.ipc.client import OwnerConnection


def main() -> int:
    key, kind = sys.argv[1], sys.argv[2]
    payload = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    try:
        with OwnerConnection.connect(sessions.socket_path(key)) as conn:
            result = conn.request(kind, payload)
    except TetherError as exc:
        print(json.dumps({"error": exc.to_wire()}))
        return 0
    print(json.dumps({"result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
