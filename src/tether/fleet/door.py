"""A fleet host's agents' door: how an agent running on a host reaches the fleet.

A host's gateway accepts only the fleet credential, and an agent has none: so an agent
that wants to list, read, prompt, close or spawn sessions across the fleet asks its own
host, on a Unix socket under the host's state (``fleet-agents.sock`` in the 0700 socket
directory, 0600). Agents this host starts find it in their environment as
``TETHER_SERVER=unix:<path>`` -- an address, not a claim: nothing said on the
connection is believed about who is asking.

For each request the door asks the kernel who is at the other end (``SO_PEERCRED``) and
resolves that pid as every local check does (:func:`tether.policy.requester.resolve`, against
this host's registry and ``/proc``). Only a process proven to be in one of this host's
agent trees is served; the operator (outside every tree) and an unproven claim get a
``403 REQUESTER_UNPROVEN`` saying what the proof found. A proven request goes on to the
router (``TETHER_FLEET_ROUTER``) byte for byte, with the fleet credential in place of
whatever the agent sent and the host's assertion of the requester
(:mod:`tether.fleet.delegation`); the router checks the assertion against the index and
applies the visibility rules. The answer comes back byte for byte, streams included.

The door runs on a thread of its own with its own event loop, beside the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from typing import Final
from urllib.parse import urlsplit

from tether import paths
from tether.errors import TetherError
from tether.fleet import http1
from tether.fleet.delegation import ASSERTION_HEADER, Assertion
from tether.fleet.relay import ClientLink, HostConnections, HostRefused, HostSilent, exchange
from tether.fleet.requests import (
    Queue,
    RequestBody,
    ServeOne,
    serve_connection,
    serve_listener,
)
from tether.policy.requester import Resolved, peer_environ, peer_pid, resolve
from tether.unix_listener import bind_private

__all__ = ["DOOR_ENV", "DOOR_FILE", "FleetDoor", "door_path"]

DOOR_FILE: Final = "fleet-agents.sock"
# In a fleet host's environment (so its owners', whose keepers hand agents
# TETHER_SERVER=unix:<it>): where the door is.
DOOR_ENV: Final = "TETHER_FLEET_DOOR"
FIRST_BYTE_TIMEOUT_S: Final = 10.0  # the router answers within its own (TTL + 1 s) bound
_STOP_WAIT_S: Final = 10.0


def door_path() -> str:
    """Where this host's door listens (in the 0700 socket directory, short enough)."""
    return os.path.join(paths.socket_dir(), DOOR_FILE)


def _bind(path: str) -> socket.socket:
    return bind_private(path, backlog=256, what="the agents' door")


def _unlink_if_ours(path: str, ours: os.stat_result | None) -> None:
    with contextlib.suppress(OSError):
        now = os.lstat(path)
        if ours is not None and (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino):
            os.unlink(path)


def _unproven(resolved: Resolved) -> bytes:
    return http1.problem(
        403,
        "Forbidden",
        "this door serves the agents of this host's sessions, proven by the kernel;"
        f" {resolved.proof}",
        code="REQUESTER_UNPROVEN",
        retryable=False,
    )


class FleetDoor:
    """The agents' door of host ``host_id``, forwarding to the router at ``router_url``."""

    def __init__(self, host_id: str, router_url: str, fleet_token: str) -> None:
        url = urlsplit(router_url)
        self.host_id = host_id
        self._address = (url.hostname or "127.0.0.1", url.port or 80)
        self._netloc = url.netloc.encode()
        self._auth = b"Bearer " + fleet_token.encode()
        self.path = door_path()
        self._sock: socket.socket | None = None
        self._ours: os.stat_result | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        """Open the socket (raising :class:`UsageError` if it cannot be) and serve."""
        self._sock = _bind(self.path)
        self._ours = os.lstat(self.path)
        self._thread = threading.Thread(target=self._run, name="fleet-door", daemon=True)
        self._thread.start()
        self._ready.wait(_STOP_WAIT_S)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout=_STOP_WAIT_S)
        if self._sock is not None:
            self._sock.close()
        _unlink_if_ours(self.path, self._ours)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        pool = HostConnections()
        try:
            await serve_listener(
                lambda r, w: serve_connection(r, w, self._serve_one_with(pool)), self._sock,
                self._stop,
            )  # fmt: skip
        finally:
            await pool.aclose()

    def _serve_one_with(self, pool: HostConnections) -> ServeOne:
        async def serve_one(
            head: http1.RequestHead, queue: Queue, out: asyncio.StreamWriter, link: ClientLink
        ) -> bool:
            return await self._serve_one(pool, head, queue, out, link)

        return serve_one

    def _prove(self, pid: int) -> Resolved:
        """Who ``pid`` is, by this host's registry and ``/proc`` (blocking)."""
        from tether.state.registry import Registry

        with Registry() as registry:
            return resolve(registry, pid=pid, environ=peer_environ(pid), record=True)

    async def _serve_one(
        self,
        pool: HostConnections,
        head: http1.RequestHead,
        queue: Queue,
        out: asyncio.StreamWriter,
        link: ClientLink,
    ) -> bool:
        body = RequestBody(queue)
        sock = out.get_extra_info("socket")
        try:
            resolved = await asyncio.to_thread(self._prove, peer_pid(sock))
        except (TetherError, OSError) as e:
            await body.drain()
            out.write(http1.problem(503, "Service Unavailable", f"cannot prove the caller: {e}",
                                    code="STATE_ERROR", retryable=True))  # fmt: skip
            return True
        who = resolved.requester
        if who is None or not resolved.agent_side:
            await body.drain()
            out.write(_unproven(resolved))
            return True
        assertion = Assertion(self.host_id, who.session_key, who.agent_id, who.sandboxed, who.clamp)
        # Whatever the agent sent as credentials or assertions is not passed on
        # (http1.HOP_BY_HOP); the door's own follow.
        extra = [(b"authorization", self._auth), (ASSERTION_HEADER, assertion.encode())]
        request = http1.encode_request_head(head, self._netloc, extra)
        host, port = self._address
        try:
            outcome = await exchange(
                pool, host, port, request, body.relayed(head), out,
                first_byte_timeout=FIRST_BYTE_TIMEOUT_S, link=link,
            )  # fmt: skip
        except HostRefused as e:
            pool.forget(host, port)
            await body.drain()
            out.write(http1.problem(503, "Service Unavailable", f"the router is unreachable: {e}",
                                    code="ROUTER_UNAVAILABLE", retryable=True))  # fmt: skip
            return True
        except HostSilent as e:
            out.write(http1.problem(504, "Gateway Timeout", f"the router did not answer: {e}",
                                    code="ROUTER_TIMEOUT", retryable=head.method == b"GET",
                                    keep_alive=False))  # fmt: skip
            return False
        return outcome.client_whole
