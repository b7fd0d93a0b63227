"""Questions for a human over HTTP: the agent's pending interactions, listed and answered.

The owner decides who may answer and which answer wins (:mod:`tether.owner.questions`):
the first valid answer reaches the agent; a later one is ``409`` (``ALREADY_ANSWERED``),
an unknown id ``404``, an answer naming nothing the agent offered ``422`` (the question
stays open). A question waits for an answer only while a controller is attached: an
event stream opened with ``?control=1`` (the dashboard does this) or any other
controller (``tether sessions watch --control``, a prompting terminal, a library
callback); with none, the non-interactive policy decides at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tether import operations
from tether.serve import bodies
from tether.serve.app import endpoint
from tether.serve.json_response import JSONResponse
from tether.serve.sessions_api import parse_body, require_session, session_key


def _pending(key: str) -> list[dict[str, Any]]:
    require_session(key)
    snapshot = operations.status(key)
    items = snapshot.get("interactions")
    return list(items) if isinstance(items, list) else []


@endpoint
async def list_questions(request: Request) -> Response:
    """The session's open questions (none when no owner runs)."""
    key = session_key(request)
    bodies.check_query(request.query_params, ())
    return JSONResponse({"sessionKey": key, "questions": await asyncio.to_thread(_pending, key)})


@endpoint
async def answer_question(request: Request) -> Response:
    """Answer one question: ``{answer, content?}``."""
    key = session_key(request)
    qid = str(request.path_params["qid"])
    body = await parse_body(request, bodies.ANSWER)
    if not body["answer"]:
        raise bodies.bad_value("answer", "answer must not be empty")
    result = await asyncio.to_thread(
        operations.answer, key, qid, body["answer"], content=body.get("content")
    )
    return JSONResponse(result)


def question_routes() -> list[BaseRoute]:
    return [
        Route("/v1/sessions/{id}/questions", list_questions, methods=["GET"]),
        Route("/v1/sessions/{id}/questions/{qid}", answer_question, methods=["POST"]),
    ]
