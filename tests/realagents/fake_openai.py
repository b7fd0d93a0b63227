"""A loopback fake of the OpenAI Responses API, enough to drive codex-acp offline.

codex-acp 2.6.0 (``codex app-server`` underneath) is pointed at it through a custom model
provider in ``$CODEX_HOME/config.toml`` (``base_url = <fake>/v1``, ``wire_api =
"responses"``). Behaviour (canned, deterministic):

- ``POST /v1/responses`` (always ``stream: true`` from codex): the last user text of
  ``input`` decides --
  - ``HANG``: the response headers and ``response.created`` go out, then the stream stalls
    until the client goes away or the server stops (for cancel tests);
  - else a text answer ``fake-codex: <last user text>``, streamed as
    ``response.output_text.delta`` events, then ``response.output_item.done`` and
    ``response.completed`` (with usage).
  - ``RATELIMIT``: a 429 shaped like a ChatGPT-plan usage limit (``usage_limit_reached``
    with ``resets_at``).
- ``GET /v1/models``: a one-model list.
- anything else: 404, recorded in ``unknown_paths``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.realagents.loopback import LoopbackAPI, LoopbackHandler, RecordedRequest

FAKE_MODEL = "gpt-fake-1"


def last_user_text(body: Any) -> str:
    """The text of the last ``role: user`` item of a Responses ``input``."""
    items = body.get("input") if isinstance(body, dict) else None
    if isinstance(items, str):
        return items
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        texts = [
            c.get("text", "")
            for c in content or []
            if isinstance(c, dict) and c.get("type") in ("input_text", "text")
        ]
        # codex prepends environment context blocks; the prompt is the last one.
        plain = [t for t in texts if not t.lstrip().startswith("<")]
        return (plain or texts or [""])[-1]
    return ""


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


class FakeOpenAI(LoopbackAPI):
    rate_limit_reset_in_s = 3 * 3600  # RATELIMIT answers: the usage window resets then

    def response_requests(self) -> list[RecordedRequest]:
        return self.requests_to("/v1/responses")


class _Handler(LoopbackHandler):
    api: FakeOpenAI

    def _error(self, req: RecordedRequest) -> None:
        error = {"message": f"fake: no {req.path}", "type": "invalid_request_error"}
        self._not_found(req, {"error": error})

    def do_GET(self) -> None:
        req = self._record(None)
        if req.path == "/v1/models":
            model = {"id": FAKE_MODEL, "object": "model", "created": 0, "owned_by": "fake"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._error(req)

    def do_POST(self) -> None:
        req = self._record(self._read_body())
        if req.path == "/v1/responses":
            self._responses(req)
        else:
            self._error(req)

    def _responses(self, req: RecordedRequest) -> None:
        body = req.body if isinstance(req.body, dict) else {}
        text = last_user_text(body)
        model = body.get("model") if isinstance(body.get("model"), str) else FAKE_MODEL
        if "RATELIMIT" in text:
            req.reply_kind = "rate_limit"
            self._usage_limit()
            return
        resp_id = self.api._next_id("resp")
        created = {"id": resp_id, "object": "response", "model": model, "status": "in_progress"}
        self._start_sse()
        self.wfile.write(_sse("response.created", {"response": created}))
        self.wfile.flush()
        if "HANG" in text:
            req.reply_kind = "hang"
            self._hang_then_close()
            return
        req.reply_kind = "text"
        answer = f"fake-codex: {text}"
        msg_id = self.api._next_id("msg")
        item: dict[str, Any] = {
            "type": "message",
            "id": msg_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        out = [_sse("response.output_item.added", {"output_index": 0, "item": item})]
        step = max(1, len(answer) // 3)
        for j in range(0, len(answer), step):
            delta = {"item_id": msg_id, "output_index": 0, "content_index": 0}
            out.append(_sse("response.output_text.delta", {**delta, "delta": answer[j : j + step]}))
        done = {
            **item,
            "status": "completed",
            "content": [{"type": "output_text", "text": answer, "annotations": []}],
        }
        out.append(_sse("response.output_item.done", {"output_index": 0, "item": done}))
        n_in = max(1, len(json.dumps(body)) // 4)
        n_out = max(1, len(answer) // 4)
        usage = {
            "input_tokens": n_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": n_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n_in + n_out,
        }
        completed = {**created, "status": "completed", "output": [done], "usage": usage}
        out.append(_sse("response.completed", {"response": completed}))
        for chunk in out:
            self.wfile.write(chunk)
            self.wfile.flush()

    def _usage_limit(self) -> None:
        """A 429 shaped like ChatGPT-plan usage exhaustion (codex's ``usage_limit_reached``)."""
        reset_in = int(self.api.rate_limit_reset_in_s)
        error = {
            "type": "usage_limit_reached",
            "message": "fake: usage limit reached",
            "plan_type": "plus",
            "resets_at": int(time.time()) + reset_in,
            "resets_in_seconds": reset_in,
        }
        data = json.dumps({"error": error}).encode()
        self.send_response(429)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-codex-primary-used-percent", "100")
        self.send_header("x-codex-primary-window-minutes", "300")
        self.send_header("x-codex-primary-reset-after-seconds", str(reset_in))
        self.end_headers()
        self.wfile.write(data)


FakeOpenAI.handler = _Handler


if __name__ == "__main__":  # manual poking: python tests/realagents/fake_openai.py
    with FakeOpenAI(max_lifetime_s=600) as api:
        print(api.base_url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
