"""The library's journal readers, used from wherever this runs (an agent's tree, say).

Usage: ``lib_reader.py KEY``. Calls ``Session.history``, ``Session.read`` and
``Session.watch(tail=5, follow=False)`` on session KEY and prints one JSON object:
for each, ``"ok"`` or the name of the error raised and its rule.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tether.client import Client, Session
from tether.errors import TetherError


async def main(key: str) -> dict[str, Any]:
    session = Session(Client(), key, "", "mock", "/")

    async def watch() -> None:
        async for _event in session.watch(tail=5, follow=False):
            pass

    out: dict[str, Any] = {}
    for name, call in (
        ("history", session.history),
        ("read", session.read),
        ("watch", watch),
    ):
        try:
            await call()
        except TetherError as exc:
            out[name] = [type(exc).__name__, exc.fields.get("rule")]
        else:
            out[name] = "ok"
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
