"""A loopback fake of the Gemini API (``generativelanguage``), enough to drive gemini-cli.

gemini-cli is pointed at it with ``GOOGLE_GEMINI_BASE_URL`` (plain http is allowed for
127.0.0.1) and ``GEMINI_API_KEY``. Behaviour (canned, deterministic):

- ``POST /<version>/models/<model>:streamGenerateContent`` (SSE with ``alt=sse``): the last
  user text of ``contents`` decides --
  - ``HANG``: the headers go out, then the stream stalls until the client goes away or
    the server stops;
  - else ``fake-gemini: <last user text>`` in a few chunks, the last with
    ``finishReason: STOP`` and ``usageMetadata``.
- ``POST /<version>/models/<model>:generateContent``: side requests (gemini-cli's model
  router, next-speaker and loop checks): a JSON answer when JSON is asked for, else text.
- ``POST ...:countTokens``: a token count. Anything else: 404, recorded in
  ``unknown_paths``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.realagents.loopback import LoopbackAPI, LoopbackHandler, RecordedRequest


def last_user_text(body: Any) -> str:
    contents = body.get("contents") if isinstance(body, dict) else None
    if not isinstance(contents, list):
        return ""
    for item in reversed(contents):
        if isinstance(item, dict) and item.get("role", "user") == "user":
            texts = [
                p["text"]
                for p in item.get("parts") or []
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            ]
            if texts:
                return texts[-1]
    return ""


def _fill(schema: Any) -> Any:
    """The smallest value that satisfies a (Gemini or JSON) schema: gemini-cli validates
    its router's answer ({complexity_reasoning, complexity_score}) and logs a stack trace
    for anything else."""
    if not isinstance(schema, dict):
        return {}
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _fill(v) for k, v in props.items()} if isinstance(props, dict) else {}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    enum = schema.get("enum")
    return enum[0] if isinstance(enum, list) and enum else "fake"


def _candidate(text: str, finish: str | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    return cand


class FakeGemini(LoopbackAPI):
    def stream_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith(":streamGenerateContent")]


class _Handler(LoopbackHandler):
    api: FakeGemini

    def _error(self, req: RecordedRequest) -> None:
        error = {"code": 404, "message": f"fake: no {req.path}", "status": "NOT_FOUND"}
        self._not_found(req, {"error": error})

    def do_GET(self) -> None:
        self._error(self._record(None))

    def do_POST(self) -> None:
        req = self._record(self._read_body())
        body = req.body if isinstance(req.body, dict) else {}
        if req.path.endswith(":streamGenerateContent"):
            self._stream(req, body)
        elif req.path.endswith(":generateContent"):
            self._side(req, body)
        elif req.path.endswith(":countTokens"):
            self._send(200, {"totalTokens": max(1, len(json.dumps(body)) // 4)})
        else:
            self._error(req)

    def _usage(self, body: dict[str, Any], text: str) -> dict[str, int]:
        n_in, n_out = max(1, len(json.dumps(body)) // 4), max(1, len(text) // 4)
        return {
            "promptTokenCount": n_in,
            "candidatesTokenCount": n_out,
            "totalTokenCount": n_in + n_out,
        }

    def _side(self, req: RecordedRequest, body: dict[str, Any]) -> None:
        req.reply_kind = "side"
        config = body.get("generationConfig") or {}
        wants_json = isinstance(config, dict) and "json" in str(config.get("responseMimeType"))
        schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
        text = json.dumps(_fill(schema)) if wants_json else "fake-gemini side answer"
        payload = {
            "candidates": [_candidate(text, "STOP")],
            "usageMetadata": self._usage(body, text),
        }
        self._send(200, payload)

    def _stream(self, req: RecordedRequest, body: dict[str, Any]) -> None:
        text = last_user_text(body)
        self._start_sse()
        if "HANG" in text:
            req.reply_kind = "hang"
            self._hang_then_close()
            return
        req.reply_kind = "text"
        answer = f"fake-gemini: {text}"
        step = max(1, len(answer) // 3)
        pieces = [answer[j : j + step] for j in range(0, len(answer), step)]
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            chunk: dict[str, Any] = {"candidates": [_candidate(piece, "STOP" if last else None)]}
            if last:
                chunk["usageMetadata"] = self._usage(body, answer)
            self.wfile.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
            self.wfile.flush()


FakeGemini.handler = _Handler


if __name__ == "__main__":  # manual poking: python tests/realagents/fake_gemini.py
    with FakeGemini(max_lifetime_s=600) as api:
        print(api.base_url, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
