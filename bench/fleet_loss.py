"""Host loss as a router's client sees it (``bench/fleet.py``): a host SIGKILLed or
SIGSTOPped by the pid we started, timed from the signal to the host's exit (its pidfd),
to the first ``503`` a router answers for the host's session, and to ``event:
host_lost`` on a stream of that session open through the router. Every wait is bounded
(TTL + 5 s); a frozen host is resumed (SIGCONT) before we return.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import rawhttp
from fleet_procs import USER_TOKEN, Fleet

ROUTER_TTL_S = 5.0  # tether serve --router's default (tether.fleet.router.DEFAULT_TTL_S)
USER = {"Authorization": f"Bearer {USER_TOKEN}"}


async def open_stream(url: str, sid: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET /v1/sessions/{sid}/events?tail=0 HTTP/1.1\r\nHost: {host}:{port}\r\n"
                 f"Authorization: Bearer {USER_TOKEN}\r\n\r\n".encode())  # fmt: skip
    async with asyncio.timeout(30):
        head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"the stream was refused: {head[:200]!r}")
    return reader, writer


async def until_host_lost(reader: asyncio.StreamReader, t0: float, bound_s: float) -> float | None:
    tail = b""
    try:
        async with asyncio.timeout(bound_s):
            while data := await reader.read(65536):
                tail = tail[-64:] + data
                if b"event: host_lost" in tail:
                    return time.perf_counter() - t0
    except (TimeoutError, OSError):
        pass
    return None


async def first_503(
    url: str, sid: str, t0: float, every_s: float, bound_s: float
) -> dict[str, Any]:
    """A GET of the session's status every ``every_s`` (each with its own connection,
    none waited for before the next); seconds from ``t0`` to the first 503 answer."""
    first: float | None = None
    statuses: dict[str, int] = {}
    got = asyncio.Event()

    async def probe() -> None:
        nonlocal first
        try:
            status, _ = await rawhttp.request(url, "GET", f"/v1/sessions/{sid}", USER)
        except (OSError, asyncio.IncompleteReadError) as e:
            statuses[type(e).__name__] = statuses.get(type(e).__name__, 0) + 1
            return
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status == 503 and first is None:
            first = time.perf_counter() - t0
            got.set()

    async with asyncio.TaskGroup() as tg:
        probes = []
        for _ in range(int(bound_s / every_s) + 1):
            probes.append(tg.create_task(probe()))
            try:
                async with asyncio.timeout(every_s):
                    await got.wait()
                break
            except TimeoutError:
                pass
        for p in probes:
            p.cancel()  # a probe still waiting on the frozen host: we have our answer
    return {"first_503_s": None if first is None else round(first, 4), "probes": len(probes),
            "answers": statuses}  # fmt: skip


async def host_loss(fleet: Fleet, kind: str, probe_s: float) -> dict[str, Any]:
    victim = fleet.host(f"victim-{kind}", f"role={kind}")
    fleet.wait_available(victim.name)
    router = fleet.routers[0]
    body = {"agent": "mock", "cwd": str(fleet.project), "name": kind, "labels": {"role": kind}}
    status, doc = await rawhttp.request(router.url, "POST", "/v1/sessions", USER, body)
    if status not in (200, 201):
        raise RuntimeError(f"the victim's session was refused: {status} {doc}")
    sid = str(doc["id"])
    await rawhttp.tether_prompt(router.url, USER, sid)  # a live session, agent started
    reader, writer = await open_stream(router.url, sid)
    sig = signal.SIGKILL if kind == "kill" else signal.SIGSTOP
    bound = ROUTER_TTL_S + 5.0
    # The host's exit, as the kernel reports it (its pidfd turns readable), to tell the
    # time the process took to die from the time the router took to notice.
    pidfd = os.pidfd_open(victim.proc.pid)
    exited: list[float] = []
    loop = asyncio.get_running_loop()
    loop.add_reader(pidfd, lambda: exited or exited.append(time.perf_counter()))
    try:
        t0 = time.perf_counter()
        victim.proc.send_signal(sig)  # the host process we started, by its pid
        lost, probes = await asyncio.gather(
            until_host_lost(reader, t0, bound), first_503(router.url, sid, t0, probe_s, bound)
        )
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        writer.close()
        if kind == "stop":
            victim.proc.send_signal(signal.SIGCONT)
    return {"signal": sig.name, **probes,
            "host_exited_s": round(exited[0] - t0, 4) if exited else None,
            "host_lost_s": None if lost is None else round(lost, 4), "bound_s": bound}  # fmt: skip
