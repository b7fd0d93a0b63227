"""A loopback TCP listener that accepts connections and never answers.

codex-acp is pointed at it (through a custom model provider in ``$CODEX_HOME/config.toml``)
so that a prompt hangs deterministically -- offline *and* on a machine with network
access, where the real api.openai.com would answer a dummy key with 401 instead.
"""

from __future__ import annotations

import socket
import threading
import time


class BlackHole:
    def __init__(self, max_lifetime_s: float = 300.0) -> None:
        self.max_lifetime_s = max_lifetime_s
        self.connections = 0
        self.first_connection_at: float | None = None
        self._sock: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    @property
    def port(self) -> int:
        assert self._sock is not None
        return int(self._sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> BlackHole:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        s.settimeout(0.1)
        self._sock = s
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _accept(self) -> None:
        while True:
            s = self._sock
            if s is None:
                return
            try:
                c, _ = s.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._conns.append(c)
                self.connections += 1
                if self.first_connection_at is None:
                    self.first_connection_at = time.monotonic()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        s, self._sock = self._sock, None
        if s is not None:
            s.close()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for c in self._conns:
                c.close()
            self._conns.clear()

    def __enter__(self) -> BlackHole:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_for_connection(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.connections:
                return True
            time.sleep(0.02)
        return bool(self.connections)
