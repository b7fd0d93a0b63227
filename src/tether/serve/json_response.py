"""The gateway's JSON response: Starlette's, encoded so that no answer can fail to encode.

What the gateway answers carries text agents and clients sent. JSON lets a peer escape a
lone surrogate (``"\\ud800"``), and the ``str`` a reader decodes from it cannot be
encoded as UTF-8: Starlette's own response raised, and the request became a 500 (one
broken or hostile agent's chunk made its session's ``?wait=true`` answer and transcript
fail). Such a string goes out as the JSON escape it came as (:func:`tether._fastjson.utf8`).
"""

from __future__ import annotations

from typing import Any

from starlette import responses

from tether import _fastjson


class JSONResponse(responses.JSONResponse):
    """Compact JSON, UTF-8, NaN refused, like Starlette's; lone surrogates escaped."""

    def render(self, content: Any) -> bytes:
        return _fastjson.utf8(content)
