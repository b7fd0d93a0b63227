"""An ACP agent that misbehaves in one chosen way, after answering ``initialize``.

``python misbehaving.py close-stdout``
    closes its stdout and stays alive (sleeps 60 s): "closed its stdout but is
    still running", not "exited (exit_code=None)".
``python misbehaving.py claude-sandbox``
    fails ``session/new`` exactly as claude-agent-acp does when its bundled Claude
    Code exits 1 (as root with IS_SANDBOX=yes; tests/realagents/NOTES.md).
"""

from __future__ import annotations

import json
import os
import sys
import time


def _send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        request = json.loads(line)
        method, rid = request.get("method"), request.get("id")
        if method == "initialize":
            _send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 1}})
            if mode == "close-stdout":
                os.close(1)
                time.sleep(60)
                return
        elif method == "session/new" and mode == "claude-sandbox":
            _send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {
                        "code": -32603,
                        "message": "Internal error",
                        "data": {"details": "Claude Code process exited with code 1"},
                    },
                }
            )


if __name__ == "__main__":
    main()
