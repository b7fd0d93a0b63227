"""The HTTP API of a remote Tether, without I/O: URLs, requests, answers, event streams.

Theory of operation
-------------------
A :class:`Target` says where a server is: a TCP host and port (``http``, ``https``) or
a Unix socket (``unix:/abs/path.sock``, what a fleet host hands its agents), with a path
prefix when the API sits under one (``https://proxy/tether``). Each call of the API is a
function returning a :class:`Request` -- method, path with its query, headers, body --
that any transport can send. What comes back goes through :func:`outcome`: a 2xx JSON
body is the result; anything else is the error the server raised, rebuilt from its
problem document by :func:`tether.errors.error_from_wire` (the same function the IPC hop
uses: one mapping, not one per door), and a body that is not what the API promises is a
:class:`~tether.errors.RemoteProtocolError`.

An event stream (``GET /v1/sessions/{id}/events``, :func:`events`) is decoded by
:class:`tether.remote.sse.SseDecoder`.

Standard library only, and lightly: this is on the remote CLI's path.
"""

from __future__ import annotations

from tether import _fastjson
from tether.errors import RemoteProtocolError, UsageError, error_from_wire

TYPE_CHECKING = False  # typing costs milliseconds on the thin path; mypy reads the name
if TYPE_CHECKING:
    from typing import Any

RESPONSE_MAX_BYTES = 64 * 1024 * 1024  # a JSON answer past this is refused, not buffered
SCHEMES = ("http", "https", "unix")


class Target:
    """Where a remote Tether listens (a plain class: ``dataclasses`` costs ~10 ms)."""

    def __init__(
        self, url: str, scheme: str, host: str, port: int, socket_path: str, prefix: str
    ) -> None:
        self.url = url
        self.scheme = scheme  # http | https | unix
        self.host = host
        self.port = port
        self.socket_path = socket_path  # unix only
        self.prefix = prefix  # a path the API sits under ("" for none)

    def __repr__(self) -> str:
        return f"Target({self.url!r})"


def parse_url(url: str) -> Target:
    """``http://host[:port][/prefix]``, ``https://…`` or ``unix:/abs/path.sock``.

    Raises:
        UsageError: any other form (a relative socket path, a query, credentials).
    """
    raw = url.strip()
    scheme, sep, rest = raw.partition(":")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise UsageError(
            f"--server {url!r}: use http://HOST[:PORT], https://HOST[:PORT] or unix:/PATH.sock"
        )
    if scheme == "unix":
        path = rest[2:] if rest.startswith("//") else rest  # unix:///abs and unix:/abs
        if not path.startswith("/"):
            raise UsageError(f"--server {url!r}: a Unix socket is given by its absolute path")
        return Target(raw, "unix", "localhost", 0, path, "")
    if not rest.startswith("//"):
        raise UsageError(f"--server {url!r}: expected {scheme}://HOST[:PORT]")
    netloc, slash, path = rest[2:].partition("/")
    if "@" in netloc or "?" in path or "#" in path:
        raise UsageError(
            f"--server {url!r}: no credentials, query or fragment in the URL"
            " (the token comes from --token-file or TETHER_TOKEN)"
        )
    host, port = _host_port(url, netloc, 443 if scheme == "https" else 80)
    prefix = ("/" + path.strip("/")) if slash and path.strip("/") else ""
    return Target(raw, scheme, host, port, "", prefix)


def _host_port(url: str, netloc: str, default: int) -> tuple[str, int]:
    if netloc.startswith("["):  # [::1]:8787
        host, _, after = netloc[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else ""
    else:
        host, _, port_text = netloc.rpartition(":") if ":" in netloc else (netloc, "", "")
    if not host:
        raise UsageError(f"--server {url!r}: no host")
    if not port_text:
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--server {url!r}: bad port {port_text!r}")
    return host, int(port_text)


class Request:
    """One HTTP request of the API, ready for a transport."""

    def __init__(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> None:
        self.method = method
        self.path = path  # with its query
        self.headers = headers
        self.body = body

    @property
    def is_read(self) -> bool:
        """Whether sending it twice changes nothing (a lost answer may be asked again)."""
        return self.method == "GET"

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path})"


_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _quote(text: str) -> str:
    """Percent-encoded for a path segment or a query value (``urllib.parse.quote`` with
    ``safe=""``, without importing ``urllib``: ~10 ms on the thin path)."""
    if all(c in _UNRESERVED for c in text):
        return text
    return "".join(
        c if c in _UNRESERVED else "".join(f"%{b:02X}" for b in c.encode()) for c in text
    )


def _query(pairs: dict[str, Any]) -> str:
    given = [(k, v) for k, v in pairs.items() if v is not None]
    if not given:
        return ""
    return "?" + "&".join(f"{k}={_quote(str(v))}" for k, v in given)


def request(
    target: Target,
    token: str | None,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Request:
    """``method path`` with the bearer token, a JSON body when given, and ``headers``."""
    sent = {"Accept": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = _fastjson.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    return Request(method, target.prefix + path, sent, data)


# --- the API's calls ----------------------------------------------------------------


def _session(sid: str, tail: str = "") -> str:
    return f"/v1/sessions/{_quote(sid)}{tail}"


def list_sessions(state: str = "all") -> tuple[str, str, dict[str, Any] | None]:
    return "GET", "/v1/sessions" + _query({"state": state}), None


def ensure(
    agent: str,
    cwd: str,
    name: str,
    *,
    fresh: bool,
    permissions: str | None = None,
    ttl: float | None = None,
) -> tuple[str, str, dict[str, Any] | None]:
    body: dict[str, Any] = {"agent": agent, "cwd": cwd, "name": name, "fresh": fresh}
    if permissions:
        body["permissions"] = permissions
    if ttl is not None:
        body["ttl"] = ttl
    return "POST", "/v1/sessions", body


def get_session(sid: str) -> tuple[str, str, dict[str, Any] | None]:
    return "GET", _session(sid), None


def close(sid: str) -> tuple[str, str, dict[str, Any] | None]:
    return "DELETE", _session(sid), None


def terminate(sid: str) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", _session(sid, "/terminate"), {}


def prompt(
    sid: str, text: str, *, timeout_ms: int | None = None, permissions: str | None = None
) -> tuple[str, str, dict[str, Any] | None]:
    body: dict[str, Any] = {"prompt": text}
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if permissions:
        body["permissions"] = permissions
    return "POST", _session(sid, "/prompt"), body


def cancel(
    sid: str, request_id: str | None = None, *, wait: bool = False
) -> tuple[str, str, dict[str, Any] | None]:
    body: dict[str, Any] = {"requestId": request_id} if request_id else {}
    if wait:
        body["wait"] = True
    return "POST", _session(sid, "/cancel"), body


def set_mode(sid: str, mode: str) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", _session(sid, "/mode"), {"modeId": mode}


def set_config(sid: str, config_id: str, value: str) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", _session(sid, "/config"), {"configId": config_id, "value": value}


def history(sid: str, limit: int | None) -> tuple[str, str, dict[str, Any] | None]:
    return "GET", _session(sid, "/history") + _query({"limit": limit}), None


def transcript(sid: str, tail: int | None) -> tuple[str, str, dict[str, Any] | None]:
    return "GET", _session(sid, "/transcript") + _query({"tail": tail}), None


def export(sid: str) -> tuple[str, str, dict[str, Any] | None]:
    return "GET", _session(sid, "/export"), None


def answer(
    sid: str, qid: str, word: str, content: dict[str, Any] | None
) -> tuple[str, str, dict[str, Any] | None]:
    body: dict[str, Any] = {"answer": word}
    if content is not None:
        body["content"] = content
    return "POST", _session(sid, f"/questions/{_quote(qid)}"), body


def rehome(sid: str, host_id: str | None, replay: bool) -> tuple[str, str, dict[str, Any] | None]:
    body: dict[str, Any] = {"replay": replay}
    if host_id:
        body["hostId"] = host_id
    return "POST", _session(sid, "/rehome"), body


def events(
    sid: str,
    *,
    from_seq: int | None = None,
    tail: int | None = None,
    heartbeat: float | None = None,
) -> tuple[str, str, dict[str, Any] | None]:
    query = {"from": from_seq, "tail": tail, "heartbeat": heartbeat}
    return "GET", _session(sid, "/events") + _query(query), None


# --- answers --------------------------------------------------------------------------


def outcome(status: int, content_type: str, body: bytes) -> Any:
    """The result of a 2xx answer (its JSON; None when empty), else the error it carries.

    Raises:
        TetherError: the subclass the server raised (``error_from_wire``).
        RemoteProtocolError: a body that is not the JSON the API promises.
    """
    media = content_type.partition(";")[0].strip().lower()
    doc: Any = None
    if body and (media.endswith("json") or media == ""):
        try:
            doc = _fastjson.loads(body.decode("utf-8"))
        except ValueError:
            doc = None
    if 200 <= status < 300:
        if not body or status == 204:
            return None
        if doc is None:
            raise RemoteProtocolError(
                f"the server answered {status} with a body that is not JSON ({media or 'untyped'})",
                status=status,
            )
        return doc
    if not isinstance(doc, dict):
        text = body[:200].decode("utf-8", "replace").strip()
        doc = {"status": status, "title": f"HTTP {status}", "detail": text or f"HTTP {status}"}
    doc.setdefault("status", status)
    raise error_from_wire(doc)


def pick_session(
    records: list[dict[str, Any]], agent: str, cwd: str, name: str
) -> dict[str, Any] | None:
    """The session of ``(agent, cwd, name)`` among listed records: the open one, else the
    newest listed (a router lists re-homed and closed incarnations too)."""
    same = [
        r
        for r in records
        if r.get("agent") == agent and r.get("cwd") == cwd and (r.get("name") or "") == name
    ]
    open_ = [r for r in same if r.get("state") not in ("closed", "lost")]
    chosen = open_ or same
    return chosen[-1] if chosen else None
