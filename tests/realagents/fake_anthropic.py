"""A loopback fake of the Anthropic Messages API, enough to drive claude-agent-acp offline.

Usage::

    with FakeAnthropic() as api:
        env["ANTHROPIC_BASE_URL"] = api.base_url
        ...
        assert api.requests_to("/v1/messages")

Behaviour (all canned, deterministic):

- ``HEAD /`` (and any ``GET /``) -> 200: the agent's connectivity probe.
- ``POST /v1/messages[?beta=true]``:
  - a request that offers no ``tools`` is a side request (claude-agent-acp 0.101.0 asks
    for a session title that way, quoting the prompt): ``fake-claude side answer``;
  - ``RATELIMIT`` in the last user text: a 429 shaped like an exhausted 5-hour limit
    (``anthropic-ratelimit-unified-status: rejected``, ``...-reset: <epoch>``);
  - when the last user message carries a ``tool_result`` block (and no text typed after
    it): a text answer
    ``fake-claude: tool result <error|ok>: <first 200 chars of the result>``;
  - else when the last user text contains ``TOOL:<Name>:<json-args>`` (the JSON object
    runs to the end of that line): a ``tool_use`` block for ``<Name>`` with those args,
    ``stop_reason: tool_use``;
  - else when it contains ``HANG``: the response headers go out and the stream then
    stalls until the client goes away or the server stops (for cancel-mid-stream tests);
  - else a text answer ``fake-claude: <last user text>``, streamed in a few deltas.
  ``stream: true`` gets SSE (``event: <type>\\ndata: <json>\\n\\n``), otherwise one JSON
  message.
- ``POST /v1/messages/count_tokens`` -> ``{"input_tokens": <bytes/4>}``.
- ``GET /v1/models`` -> a one-model list; ``GET /v1/models/<id>`` -> that model.
- anything else -> 404 with an Anthropic-shaped error, and the path lands in
  ``unknown_paths`` so a test (or a human) can see what else the agent calls.

Every request is recorded in ``requests`` (method, path, query, headers, parsed JSON body).
The server binds 127.0.0.1:0, runs in a daemon thread, and stops by itself after
``max_lifetime_s`` even if nobody exits the context manager.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from tests.realagents.loopback import LoopbackAPI, LoopbackHandler, RecordedRequest

FAKE_MODEL = "claude-fake-1"
TOOL_RE = re.compile(r"TOOL:([A-Za-z_][\w-]*):(\{.*\})")


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def last_user_message(body: Any) -> list[dict[str, Any]]:
    msgs = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(msgs, list):
        return []
    for m in reversed(msgs):
        if isinstance(m, dict) and m.get("role") == "user":
            return _blocks(m.get("content"))
    return []


def _is_plain_text(block: dict[str, Any]) -> bool:
    """A text block the user typed, not one the agent injected."""
    text = block.get("text")
    if block.get("type") != "text" or not isinstance(text, str):
        return False
    t = text.lstrip()
    return not (t.startswith(("<system-reminder>", "[Request interrupted")))


def last_user_text(body: Any) -> str:
    """The last text block of the last user message that the user (not the agent) wrote."""
    blocks = last_user_message(body)
    plain = [b["text"] for b in blocks if _is_plain_text(b)]
    texts = [
        b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return (plain or texts or [""])[-1]


def _tool_result_text(block: dict[str, Any]) -> str:
    c = block.get("content")
    if isinstance(c, str):
        return c
    return " ".join(b.get("text", "") for b in _blocks(c) if b.get("type") == "text")


class FakeAnthropic(LoopbackAPI):
    def __init__(self, max_lifetime_s: float = 300.0, hang_limit_s: float = 60.0) -> None:
        super().__init__(max_lifetime_s, hang_limit_s)
        self.rate_limit_reset_in_s = 3 * 3600.0  # RATELIMIT answers: the window resets then
        # Extra headers on every successful /v1/messages answer (e.g. a unified rate-limit
        # warning), set by a test.
        self.extra_headers: dict[str, str] = {}

    def message_requests(self) -> list[RecordedRequest]:
        """The agent's turns: /v1/messages requests offering tools (not side requests)."""
        return [r for r in self.requests_to("/v1/messages") if r.reply_kind != "side"]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    data = {"type": event, **data}
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def plan_reply(body: Any) -> tuple[str, list[dict[str, Any]], str]:
    """Decide the reply: (kind, content blocks, stop_reason)."""
    if isinstance(body, dict) and not body.get("tools"):
        # A side request (0.101.0 titles each session with one, quoting the prompt): a
        # plain answer, so a prompt's HANG or TOOL: does not act twice.
        return "side", [{"type": "text", "text": "fake-claude side answer"}], "end_turn"
    last = last_user_message(body)
    results = [b for b in last if b.get("type") == "tool_result"]
    # After a cancelled tool use claude-agent-acp sends the *next* prompt in one user message
    # with a synthetic "rejected" tool_result, "[Request interrupted by user for tool use]"
    # and the new text: a typed text after the results makes it a new prompt.
    typed_after = bool(results) and any(
        _is_plain_text(b) for b in last[last.index(results[-1]) + 1 :]
    )
    if results and not typed_after:
        r = results[-1]
        status = "error" if r.get("is_error") else "ok"
        text = f"fake-claude: tool result {status}: {_tool_result_text(r)[:200]}"
        return "tool_result_text", [{"type": "text", "text": text}], "end_turn"
    text = last_user_text(body)
    m = TOOL_RE.search(text)
    if m:
        try:
            args = json.loads(m[2])
        except ValueError:
            args = None
        if isinstance(args, dict):
            block = {"type": "tool_use", "id": "", "name": m[1], "input": args}
            return "tool_use", [block], "tool_use"
    if "HANG" in text:
        return "hang", [], ""
    if "RATELIMIT" in text:
        return "rate_limit", [], ""
    return "text", [{"type": "text", "text": f"fake-claude: {text}"}], "end_turn"


class _Handler(LoopbackHandler):
    api: FakeAnthropic

    def _not_found_error(self, req: RecordedRequest) -> None:
        error = {"type": "not_found_error", "message": f"fake: no {req.path}"}
        self._not_found(req, {"type": "error", "error": error})

    # -- verbs -----------------------------------------------------------------------------

    def do_HEAD(self) -> None:
        self._record(None)
        self._send(200, b"", "text/plain")

    def do_GET(self) -> None:
        req = self._record(None)
        if req.path in ("/", ""):
            self._send(200, b"ok", "text/plain")
        elif req.path == "/v1/models":
            self._send(
                200,
                {"data": [_model()], "has_more": False, "first_id": FAKE_MODEL},
            )
        elif req.path.startswith("/v1/models/"):
            self._send(200, _model(req.path.rsplit("/", 1)[1]))
        else:
            self._not_found_error(req)

    def do_POST(self) -> None:
        req = self._record(self._read_body())
        if req.path == "/v1/messages":
            self._messages(req)
        elif req.path == "/v1/messages/count_tokens":
            size = len(json.dumps(req.body)) if req.body is not None else 0
            self._send(200, {"input_tokens": max(1, size // 4)})
        else:
            self._not_found_error(req)

    # -- /v1/messages ----------------------------------------------------------------------

    def _messages(self, req: RecordedRequest) -> None:
        body = req.body if isinstance(req.body, dict) else {}
        kind, blocks, stop_reason = plan_reply(body)
        req.reply_kind = kind
        if kind == "rate_limit":
            self._rate_limited()
            return
        for b in blocks:
            if b["type"] == "tool_use":
                b["id"] = self.api._next_id("toolu")
        model = body.get("model") if isinstance(body.get("model"), str) else FAKE_MODEL
        msg_id = self.api._next_id("msg")
        in_tokens = max(1, len(json.dumps(body)) // 4)
        out_tokens = sum(len(json.dumps(b)) // 4 for b in blocks) + 1
        if not body.get("stream"):
            if kind == "hang":
                self._hang_then_close()
                return
            self._send(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {"input_tokens": in_tokens, "output_tokens": out_tokens},
                },
            )
            return
        self._start_sse(self.api.extra_headers)
        out = [
            _sse(
                "message_start",
                {
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": in_tokens, "output_tokens": 1},
                    }
                },
            )
        ]
        if kind == "hang":
            self.wfile.write(out[0])
            self.wfile.flush()
            self._hang_then_close()
            return
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                out.append(
                    _sse(
                        "content_block_start",
                        {"index": i, "content_block": {"type": "text", "text": ""}},
                    )
                )
                text = b["text"]
                step = max(1, len(text) // 3)
                for j in range(0, len(text), step):
                    out.append(
                        _sse(
                            "content_block_delta",
                            {
                                "index": i,
                                "delta": {"type": "text_delta", "text": text[j : j + step]},
                            },
                        )
                    )
            else:
                start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
                out.append(_sse("content_block_start", {"index": i, "content_block": start}))
                out.append(
                    _sse(
                        "content_block_delta",
                        {
                            "index": i,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": json.dumps(b["input"]),
                            },
                        },
                    )
                )
            out.append(_sse("content_block_stop", {"index": i}))
        out.append(
            _sse(
                "message_delta",
                {
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": out_tokens},
                },
            )
        )
        out.append(_sse("message_stop", {}))
        for chunk in out:
            self.wfile.write(chunk)
            self.wfile.flush()

    def _rate_limited(self) -> None:
        """A 429 shaped like the API's answer to an exhausted 5-hour ("session") limit."""
        reset = int(time.time() + self.api.rate_limit_reset_in_s)
        data = json.dumps(
            {
                "type": "error",
                "error": {"type": "rate_limit_error", "message": "fake: rate limit reached"},
            }
        ).encode()
        self.send_response(429)
        for key, value in (
            ("content-type", "application/json"),
            ("content-length", str(len(data))),
            ("request-id", self.api._next_id("req")),
            ("retry-after", str(max(0, reset - int(time.time())))),
            ("anthropic-ratelimit-unified-status", "rejected"),
            ("anthropic-ratelimit-unified-reset", str(reset)),
            ("anthropic-ratelimit-unified-representative-claim", "five_hour"),
            ("anthropic-ratelimit-unified-5h-status", "rejected"),
            ("anthropic-ratelimit-unified-5h-reset", str(reset)),
            ("anthropic-ratelimit-unified-5h-utilization", "1.0"),
        ):
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


FakeAnthropic.handler = _Handler


def _model(model_id: str = FAKE_MODEL) -> dict[str, Any]:
    return {
        "type": "model",
        "id": model_id,
        "display_name": "Fake Claude",
        "created_at": "2026-01-01T00:00:00Z",
    }


if __name__ == "__main__":  # manual poking: python tests/realagents/fake_anthropic.py
    with FakeAnthropic(max_lifetime_s=600) as api:
        print(api.base_url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
